"""Bodies read as files from a worker thread, a chunk at a time, never held whole: a request
body pulled from the event loop as the thread asks for it (the runner writes bodies into
sessions so; the service parses uploads so), and the parts of a multipart upload."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio.from_thread


class ChunkReader:
    """The chunks `pull` hands out (b"" at the end), as a file-like object's `read`."""

    def __init__(self, pull: Callable[[], bytes]) -> None:
        self._pull = pull
        self._buffer = b""
        self._done = False

    def read(self, size: int = -1) -> bytes:
        while not self._done and (size < 0 or len(self._buffer) < size):
            chunk = self._pull()
            self._done = not chunk
            self._buffer += chunk
        if size < 0:
            size = len(self._buffer)
        chunk, self._buffer = self._buffer[:size], self._buffer[size:]
        return chunk


def request_body(stream: AsyncIterator[bytes]) -> ChunkReader:
    """A request body (Starlette's `request.stream()`), for a worker thread that anyio
    started (`run_in_threadpool`) to read."""

    async def next_chunk() -> bytes:
        async for chunk in stream:
            if chunk:
                return chunk
        return b""

    return ChunkReader(lambda: anyio.from_thread.run(next_chunk))
