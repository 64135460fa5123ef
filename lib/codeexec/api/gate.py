"""The gate every request passes before its body is read: who is calling, and how much it
may send.

FastAPI reads and parses a route's body before its dependencies run, so a check of the
credentials in a dependency comes after an unauthenticated caller's 300 MB has been
taken in. Here, as plain ASGI in front of the app, the caller is authenticated from the
headers alone, a declared length over the route's limit (each route declares its own:
body_limits.py) is refused before a byte of the body, and a body without a declared length
is counted as it arrives and cut at the limit.
A body that stops arriving (no byte for BODY_IDLE_SECONDS) is cut as well, and so is one
that drips: after BODY_GRACE_SECONDS it must have kept BODY_MIN_RATE bytes a second on
average. A stalled client holds no slot and no thread for long.

A connection is kept alive between requests only for a caller with credentials: the
answer to a call without them (/health, or a refusal) closes it, so that no one without a
key can hold idle connections, and their descriptors, open.

The operator's console (/admin) has a key of its own (CODE_EXEC_ADMIN_KEY, X-Admin-Key): the
service key opens nothing there. Its page and its scripts carry no data and need no key (a
browser loads them before the operator gives it); its API does. Unset, all of it is a 404.
"""

from __future__ import annotations

import hmac

import anyio
from fastapi.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..answers import error_response
from ..auth import Caller
from ..errors import BadRequest, NotFound, RequestTimeout, ServiceError, Unauthorized
from ..telemetry import calls
from .body_limits import BodyLimit, RouteLimits
from .dependencies import Service

# Paths anyone may call: they say whether the service answers and what it accepts.
OPEN_PATHS = frozenset({"/health", "/v1/health"})
ADMIN_PATH = "/admin"
ADMIN_API_PATH = "/admin/api/"
ADMIN_KEY_HEADER = "x-admin-key"
BODY_IDLE_SECONDS = 15.0
BODY_GRACE_SECONDS = 15.0
BODY_MIN_RATE = 64 << 10  # bytes a second, on average, once the grace is over
_CLOSE = (b"connection", b"close")


class Gate:
    def __init__(self, app: ASGIApp, limits: RouteLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, _closing(send))
        service: Service = scope["app"].state.service
        if scope["path"] == ADMIN_PATH or scope["path"].startswith(ADMIN_PATH + "/"):
            return await _admin(self.app, service, scope, receive, send)
        headers = Headers(scope=scope)
        try:
            scope.setdefault("state", {})["caller"] = await _caller(service, headers)
            limit = self.limits.of(scope)
            if int(headers.get("content-length") or 0) > limit.bytes_of(service):
                raise limit.too_large(service)
        except ServiceError as refused:
            response = error_response(refused)
            return await response(scope, receive, _closing(send))
        await _bounded(self.app, scope, receive, send, service, limit)


async def _admin(app: ASGIApp, service: Service, scope: Scope, receive: Receive, send: Send) -> None:
    key = service.settings.code_exec_admin_key
    headers = Headers(scope=scope)
    refused: ServiceError | None = None
    if key is None:
        refused = NotFound("there is no console here (CODE_EXEC_ADMIN_KEY is not set)")
    elif scope["path"].startswith(ADMIN_API_PATH) and not _admin_key_matches(key.get_secret_value(), headers):
        refused = Unauthorized("missing or wrong X-Admin-Key", reason="admin_key")
    elif int(headers.get("content-length") or 0) or "transfer-encoding" in headers:
        refused = BadRequest("the console takes no request body")
    if refused is not None:
        return await error_response(refused)(scope, receive, _closing(send))
    await app(scope, receive, _closing(send))


def _admin_key_matches(expected: str, headers: Headers) -> bool:
    given = headers.get(ADMIN_KEY_HEADER, "")
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def _closing(send: Send) -> Send:
    """`send`, its answer closing the connection after it (uvicorn honours the header)."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
        await send(message)

    return closing


async def _caller(service: Service, headers: Headers) -> Caller:
    if "authorization" in headers:  # verifying a token may fetch the key set
        caller = await run_in_threadpool(service.auth.caller, headers)
    else:
        caller = service.auth.caller(headers)
    calls.note_key(caller.key.name if caller.key else None)
    return caller


async def _bounded(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, service: Service, limit: BodyLimit
) -> None:
    """Run the app on a body counted as it arrives, and given BODY_IDLE_SECONDS for each
    next piece, and no more than its minimum rate allows. Past the limit or a deadline the
    gate answers itself (413, 408) and
    tells the app the client left: an app that meets an error while it reads a body
    (FastAPI) would otherwise answer it with its own 400."""
    most = limit.bytes_of(service)
    received = 0
    cut = False
    more = True  # the body is still arriving; after it, receive waits for the client to leave
    started = anyio.current_time()

    async def refuse(refused: ServiceError) -> Message:
        nonlocal cut
        cut = True
        await error_response(refused)(scope, receive, send)
        return {"type": "http.disconnect"}

    async def counted_receive() -> Message:
        nonlocal received, more
        if cut:
            return {"type": "http.disconnect"}
        if not more:
            return await receive()
        # By then it must have sent more than it has: BODY_MIN_RATE a second, after the grace.
        due = started + BODY_GRACE_SECONDS + received / BODY_MIN_RATE - anyio.current_time()
        try:
            with anyio.fail_after(max(min(BODY_IDLE_SECONDS, due), 0)):
                message = await receive()
        except TimeoutError:
            if due < BODY_IDLE_SECONDS:
                slow = f"the body arrives slower than {BODY_MIN_RATE} bytes a second"
                return await refuse(RequestTimeout(slow))
            return await refuse(RequestTimeout(f"no byte of the body arrived for {BODY_IDLE_SECONDS:g} s"))
        more = message["type"] == "http.request" and message.get("more_body", False)
        received += len(message.get("body", b""))
        if received > most:
            return await refuse(limit.too_large(service))
        return message

    async def guarded_send(message: Message) -> None:
        if not cut:  # once the gate has answered, the app's own answer comes too late
            await send(message)

    await app(scope, counted_receive, guarded_send)
