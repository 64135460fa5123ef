"""What the embedded servers (the service's and the runner's) allow a connection before
its request has begun: uvicorn's own protocol, with a deadline on the headers.

uvicorn times a connection out only between requests (its keep-alive); one that sends a
request's headers slowly, or nothing at all, it keeps open for good, and a thousand such
connections take a thousand descriptors. Here a request's headers must be complete
within HEADER_SECONDS of its first byte (of the connection, for a new one), and no more
than HALF_OPEN connections of a server wait for their headers at once: past that, the one
waiting longest is dropped (a real client sends its headers at once, so it is never that one).

    uvicorn.Config(app, http=HeaderDeadline, ...)
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_SECONDS = 5.0
HALF_OPEN = 512


# The connections of each event loop that wait for their headers, oldest first (a dict
# keeps its order). Per loop: one loop's connections are touched only from its thread.
_WAITING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[HeaderDeadline, None]] = (
    weakref.WeakKeyDictionary()
)


class HeaderDeadline(H11Protocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headers_due: asyncio.TimerHandle | None = None
        self._waiting = _WAITING.setdefault(self.loop, {})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        if self._headers_due is None and self.conn.their_state is h11.IDLE:
            self._await_headers()  # the first bytes of the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._headers_in()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_in()
        super().connection_lost(exc)

    def _await_headers(self) -> None:
        while len(self._waiting) >= HALF_OPEN:
            next(iter(self._waiting))._drop()
        self._waiting[self] = None
        self._headers_due = self.loop.call_later(HEADER_SECONDS, self._drop)

    def _headers_in(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None
        self._waiting.pop(self, None)

    def _drop(self) -> None:
        self._headers_in()
        self.transport.close()
