"""The runner: the sandbox port of a `local` backend, served over HTTP, one request per
coarse operation (routes and shapes in `codeexec.sandbox.runner.protocol`).

It is what the `runner` backend leases sandboxes from when the service itself cannot run
bubblewrap: a Lambda function under `sam local`, or the API function in the cloud talking
to a MicroVM. It adds nothing to the port: each request is answered by the `local`
backend's own coarse operation, which takes the session's lease, use and hold and lets go
of them before the answer ends, so no state outlives a request and a caller that dies
holds nothing. The caller's access travels as data and is checked here, by the same rule.
What the runner adds is what HTTP needs: a key, and bodies streamed both ways.

Every request but /health carries the runner's own key (X-Runner-Key), compared in
constant time; with no key configured every such request is a 401.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar, cast

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..answers import error_handlers, error_response
from ..errors import BadRequest, Unauthorized
from ..sandbox.local import LocalSandboxes
from ..sandbox.port import Carried, Input, Opened
from ..sandbox.runner import protocol
from ..streams import request_body

T = TypeVar("T")


class Runner:
    """The runner's state: the backend, and its key."""

    def __init__(self, sandboxes: LocalSandboxes, key: str | None) -> None:
        self.sandboxes = sandboxes
        self.key = key  # settable: a MicroVM learns its key from its run hook

    def authorized(self, presented: str | None) -> bool:
        key = self.key
        return bool(key) and presented is not None and hmac.compare_digest(presented.encode(), str(key).encode())


class KeyRequired:
    """Every route but /health needs the runner's key: fail closed, before any body is read."""

    def __init__(self, app: ASGIApp, runner: Runner) -> None:
        self.app = app
        self.runner = runner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            presented = dict(scope["headers"]).get(protocol.KEY_HEADER.lower().encode())
            if not self.runner.authorized(presented.decode("latin-1") if presented else None):
                await error_response(Unauthorized("missing or wrong runner key"))(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_runner_app(runner: Runner) -> Starlette:
    routes = [
        Route("/health", _health, methods=["GET"]),
        Route("/sessions", _leases, methods=["GET"]),
        Route("/sessions/{sid}", _lease, methods=["GET"]),
        Route("/sessions/{sid}", _end, methods=["DELETE"]),
        Route("/cancels/{run_key}", _cancel, methods=["POST"]),
        Route("/runs", _run, methods=["POST"]),
        Route("/writes", _write, methods=["POST"]),
        Route("/sessions/{sid}/files", _list, methods=["GET"]),
        Route("/sessions/{sid}/file", _read, methods=["GET"]),
        Route("/sessions/{sid}/file", _remove, methods=["DELETE"]),
        Route("/sessions/{sid}/stat", _stat, methods=["GET"]),
        Route("/sessions/{sid}/reads", _read_inputs, methods=["POST"]),
        Route("/sessions/{sid}/records/{key}", _record, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(KeyRequired, runner=runner)],
        exception_handlers=dict(error_handlers()),
    )
    app.state.runner = runner
    return app


def _sandboxes(request: Request) -> LocalSandboxes:
    return request.app.state.runner.sandboxes  # type: ignore[no-any-return]


def _file_id(request: Request) -> str:
    """The client's id for a file, as it came (a query parameter: a raw path id may hold
    `..`, which a URL's path would have resolved away)."""
    if "id" not in request.query_params:
        raise BadRequest("the request names no file (?id=)")
    return request.query_params["id"]


def _number(request: Request, name: str) -> float:
    try:
        return float(request.query_params[name])
    except (KeyError, ValueError):
        raise BadRequest(f"{name} must be a number") from None


async def _health(request: Request) -> Response:
    sandboxes = _sandboxes(request)
    return JSONResponse({"languages": sorted(sandboxes.languages), "named_sessions": sandboxes.named_sessions})


async def _leases(request: Request) -> Response:
    def lines() -> Iterator[bytes]:
        for lease in _sandboxes(request).leases():
            yield json.dumps(protocol.lease_json(lease)).encode() + b"\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")


async def _lease(request: Request) -> Response:
    """The lease as it is, untouched: what a reaper on the other side looks at."""
    lease = await run_in_threadpool(_sandboxes(request).lease, request.path_params["sid"])
    return JSONResponse(protocol.lease_json(lease))


async def _end(request: Request) -> Response:
    sandboxes, session_id = _sandboxes(request), request.path_params["sid"]
    if "if_touched_at" not in request.query_params:
        await run_in_threadpool(sandboxes.end, session_id)
        return JSONResponse({"ended": True})
    # For a reaper on the other side: end only if nobody touched it since it looked, and
    # never while a call holds it (the backend's end_if does not wait for a busy session).
    seen = _number(request, "if_touched_at")
    ended = await run_in_threadpool(sandboxes.end_if, session_id, lambda lease: lease.touched_at <= seen)
    return JSONResponse({"ended": ended})


async def _cancel(request: Request) -> Response:
    await run_in_threadpool(_sandboxes(request).cancel, request.path_params["run_key"])
    return JSONResponse({"cancelled": True})


async def _run(request: Request) -> Response:
    def run(body: BinaryIO) -> dict[str, Any]:
        frames = protocol.frames_of(body.read)
        spec, _ = next(frames, (None, None))
        if spec is None:
            raise BadRequest("a run starts with its JSON frame")
        carried = (Carried(int(h["index"]), str(h["found"]), bool(h["read_only"]), reader) for h, reader in frames)
        return protocol.ran_json(_sandboxes(request).execute(protocol.run_of(spec), carried))

    return JSONResponse(await _with_body(request, run))


async def _write(request: Request) -> Response:
    def write(body: BinaryIO) -> dict[str, Any]:
        frames = protocol.frames_of(body.read)
        spec, _ = next(frames, (None, None))
        if spec is None or "placement" not in spec:
            raise BadRequest("a write starts with its JSON frame")
        files = ((str(header["path"]), reader) for header, reader in frames)
        limit = int(spec.get("limit", 0))
        return {"session_id": _sandboxes(request).write_files(protocol.placement_of(spec["placement"]), files, limit)}

    return JSONResponse(await _with_body(request, write))


async def _list(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    listing = await run_in_threadpool(_sandboxes(request).list_files, request.path_params["sid"], access)
    return JSONResponse([protocol.file_json(info) for info in listing])


async def _read(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    sid, file_id = request.path_params["sid"], _file_id(request)
    opened: Opened = await run_in_threadpool(_sandboxes(request).read_file, sid, access, file_id)
    info, reader = opened.info, opened.reader
    assert reader is not None  # the local backend always answers the bytes

    headers = {
        "Content-Length": str(info.size),
        protocol.SIZE_HEADER: str(info.size),
        protocol.MTIME_HEADER: str(info.mtime_ns),
        protocol.PATH_HEADER: json.dumps(info.path),
    }
    return StreamingResponse(_chunks(reader), headers=headers, media_type="application/octet-stream")


async def _remove(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    sid, file_id = request.path_params["sid"], _file_id(request)
    return JSONResponse({"path": await run_in_threadpool(_sandboxes(request).remove_file, sid, access, file_id)})


async def _stat(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    sid, file_id = request.path_params["sid"], _file_id(request)
    info = await run_in_threadpool(_sandboxes(request).stat_file, sid, access, file_id)
    return JSONResponse(protocol.file_json(info))


async def _read_inputs(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    try:
        wanted = [Input(str(i["file_id"]), i.get("name")) for i in json.loads(await request.body())]
    except (ValueError, TypeError, KeyError):
        raise BadRequest("a read names its inputs: [{file_id, name}]") from None
    found = _sandboxes(request).read_inputs(request.path_params["sid"], access, wanted)
    # Opened here, so a session that is not found is a 404 rather than an empty answer.
    first = await run_in_threadpool(next, found, None)

    def carried() -> Iterator[tuple[dict[str, Any], BinaryIO | None]]:
        item = first
        while item is not None:
            yield {"index": item.index, "found": item.found, "read_only": item.read_only}, item.reader
            item = next(found, None)

    return StreamingResponse(protocol.frames(carried()), media_type="application/octet-stream")


async def _record(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    sid, key = request.path_params["sid"], request.path_params["key"]
    record = await run_in_threadpool(_sandboxes(request).read_record, sid, access, key)
    return Response(record, media_type="application/octet-stream")


def _chunks(reader: BinaryIO) -> Iterator[bytes]:
    with reader:
        while chunk := reader.read(protocol.CHUNK):
            yield chunk


async def _with_body(request: Request, work: Callable[[BinaryIO], T]) -> T:
    """`work` on the request's body, in a worker thread that pulls it from the event loop
    chunk by chunk as it writes: never held whole. Work refused before the body's end
    (a session that does not admit the caller) reads the rest first: a caller still
    sending would otherwise find its connection closed, and not hear why."""
    body = request_body(request.stream())

    def done() -> T:
        try:
            return work(cast(BinaryIO, body))
        except BaseException:
            while body.read(protocol.CHUNK):
                pass
            raise

    return await run_in_threadpool(done)
