"""Where a call enters and leaves a process, for both apps (the service's and the runner's):
it gets its request id and its record here (calls.py), its answer carries the id back, and
when the answer has ended the process tells it once (`Telemetry.called`): a log line, its
metrics, the console's history.

Plain ASGI, outermost: it sees every call, those the gate refuses before any route as well,
and the whole answer, a long run's kept-alive body included (its duration is the call's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.datastructures import Headers
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .calls import REQUEST_ID_HEADER, Call, begin, end, request_id

if TYPE_CHECKING:
    from . import Telemetry

_ID_HEADER = REQUEST_ID_HEADER.lower().encode()


class Observed:
    def __init__(self, app: ASGIApp, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        call = Call(_request_id(scope), scope["method"])
        token = begin(call)

        async def counted(message: Message | None = None) -> Message:
            message = await receive()
            call.received += len(message.get("body", b""))
            return message

        async def answered(message: Message) -> None:
            if message["type"] == "http.response.start":
                call.status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (_ID_HEADER, call.request_id.encode())]}
            elif message["type"] == "http.response.body":
                call.sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counted, answered)
        finally:
            call.route = route_of(scope)
            call.status = call.status or 500  # the app failed before it answered
            end(token)
            self.telemetry.called(call)


def _request_id(scope: Scope) -> str:
    """The caller's X-Request-Id when it is a well-formed one; else API Gateway's id of the
    request, where there is one (on Lambda); else a new one."""
    given = Headers(scope=scope).get(REQUEST_ID_HEADER)
    if given is None:
        context: Any = scope.get("aws.event", {}).get("requestContext", {})
        given = context.get("requestId")
    return request_id(given)


def route_of(scope: Scope) -> str:
    """The template of the route the call took (never its path, which names sessions and
    files): the one the router matched, else the first that would have (a call the gate
    refused reached no router); "" for none."""
    route = scope.get("route")
    if route is None:
        routes = getattr(scope.get("app"), "routes", ())
        route = next((r for r in routes if r.matches(scope)[0] is Match.FULL), None)
    return str(getattr(route, "path", ""))
