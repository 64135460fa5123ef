"""A request body as the blocking file-like object a worker thread reads: pulled from the
event loop chunk by chunk as the thread asks, never held whole. (The runner writes
bodies into sessions this way; the service parses uploads so.)"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio.from_thread


class StreamReader:
    def __init__(self, stream: AsyncIterator[bytes]) -> None:
        self._stream = stream
        self._buffer = b""
        self._done = False

    def read(self, size: int = -1) -> bytes:
        """At most `size` bytes (all that is left when negative); b"" at the end. Only
        from a worker thread that anyio started (Starlette's `run_in_threadpool`)."""
        while not self._done and (size < 0 or len(self._buffer) < size):
            try:
                self._buffer += anyio.from_thread.run(self._next)
            except StopAsyncIteration:
                self._done = True
        if size < 0:
            size = len(self._buffer)
        chunk, self._buffer = self._buffer[:size], self._buffer[size:]
        return chunk

    async def _next(self) -> bytes:
        return await self._stream.__anext__()
