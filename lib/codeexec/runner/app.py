"""The runner: the sandbox port of a `local` backend, served over HTTP (routes in `codeexec.sandbox.runner.protocol`).

It is what the `runner` backend leases sandboxes from when the service itself cannot run
bubblewrap: a Lambda function under `sam local`, or the API function in the cloud talking
to a MicroVM. It adds nothing to the port: the sandboxes, their limits and isolation are
the `local` backend's, and its leases, files and locks stay on this host. What it adds is
what HTTP needs: a key, bodies streamed both ways, and holds that span several requests.

Every request but /health carries the runner's own key (X-Runner-Key), compared in
constant time; with no key configured every such request is a 401.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, BinaryIO, TypeVar, cast

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .. import ids
from ..errors import BackendUnavailable, BadRequest, ServiceError, SessionNotFound, UnsupportedLanguage
from ..sandbox.local import LocalSandbox, LocalSandboxes
from ..sandbox.port import Lease, OwnerTag
from ..sandbox.runner import protocol
from ..streams import request_body
from .holds import Holds, acquire_or_abandon

log = logging.getLogger("codeexec.runner")
CHUNK = 1 << 16
T = TypeVar("T")
# How long the runner waits for a session's exclusive hold before answering "busy".
MAX_HOLD_WAIT_SECONDS = 300.0


class Runner:
    """The runner's state: the backend, its key, and the holds callers keep."""

    def __init__(self, sandboxes: LocalSandboxes, key: str | None, max_hold_seconds: float) -> None:
        self.sandboxes = sandboxes
        self.key = key  # settable: a MicroVM learns its key from its run hook
        self.holds = Holds(max_hold_seconds)

    def authorized(self, presented: str | None) -> bool:
        key = self.key
        return bool(key) and presented is not None and hmac.compare_digest(presented.encode(), str(key).encode())

    @contextlib.contextmanager
    def opened(self, session_id: str) -> Iterator[LocalSandbox]:
        """The session for one request: the caller admitted itself when it opened it."""
        with self.sandboxes.open(session_id, lambda lease: True) as sandbox:
            yield sandbox

    def peek(self, session_id: str) -> Lease:
        """The lease as it is, without touching it: a caller that its lease does not admit
        must not keep the session alive. `open` touches only after admitting."""
        seen: list[Lease] = []

        def look(lease: Lease) -> bool:
            seen.append(lease)
            return False

        with contextlib.suppress(ServiceError), self.sandboxes.open(session_id, look):
            pass
        if not seen:
            raise SessionNotFound()
        return seen[0]


def create_runner_app(runner: Runner, sweep_seconds: float = 1.0) -> Starlette:
    routes = [
        Route("/health", _health, methods=["GET"]),
        Route("/sessions", _leases, methods=["GET"]),
        Route("/sessions", _create, methods=["POST"]),
        Route("/sessions/{sid}", _lease, methods=["GET"]),
        Route("/sessions/{sid}", _end, methods=["DELETE"]),
        Route("/sessions/{sid}/uses", _use, methods=["POST"]),
        Route("/sessions/{sid}/uses/{token}", _release, methods=["DELETE"]),
        Route("/sessions/{sid}/holds", _hold, methods=["POST"]),
        Route("/sessions/{sid}/holds/{token}", _release, methods=["DELETE"]),
        Route("/sessions/{sid}/files", _list, methods=["GET"]),
        Route("/sessions/{sid}/files/{path:path}", _write, methods=["PUT"]),
        Route("/sessions/{sid}/files/{path:path}", _read, methods=["GET"]),
        Route("/sessions/{sid}/files/{path:path}", _remove, methods=["DELETE"]),
        Route("/sessions/{sid}/stat/{path:path}", _stat, methods=["GET"]),
        Route("/sessions/{sid}/run", _run, methods=["POST"]),
        Route("/cancels/{run_key}", _cancel, methods=["POST"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = threading.Event()

        def sweep() -> None:  # a caller that died must not hold a session past its hold's expiry
            while not stop.wait(sweep_seconds):
                runner.holds.sweep()

        threading.Thread(target=sweep, name="holds", daemon=True).start()
        yield
        stop.set()
        runner.holds.release_all()

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={ServiceError: _service_error, ValueError: _bad_request, Exception: _internal_error},
    )
    app.state.runner = runner
    return _KeyRequired(app, runner)  # type: ignore[return-value]


class _KeyRequired:
    """Every route but /health needs the runner's key: fail closed, before any body is read."""

    def __init__(self, app: Starlette, runner: Runner) -> None:
        self.app = app
        self.runner = runner
        self.state = app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            presented = dict(scope["headers"]).get(protocol.KEY_HEADER.lower().encode())
            if not self.runner.authorized(presented.decode("latin-1") if presented else None):
                body = {"error": "Unauthorized", "details": "missing or wrong runner key"}
                await JSONResponse(body, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _runner(request: Request) -> Runner:
    return request.app.state.runner  # type: ignore[no-any-return]


def _path(request: Request) -> str:
    return ids.port_path(request.path_params["path"])


def _number(request: Request, name: str, default: float) -> float:
    try:
        return float(request.query_params.get(name, default))
    except ValueError:
        raise BadRequest(f"{name} must be a number") from None


async def _json(request: Request) -> dict[str, Any]:
    try:
        data = json.loads(await request.body())
    except ValueError:
        raise BadRequest("the body is not JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("the body is not a JSON object")
    return data


async def _health(request: Request) -> Response:
    sandboxes = _runner(request).sandboxes
    return JSONResponse({"languages": sorted(sandboxes.languages), "named_sessions": sandboxes.named_sessions})


async def _leases(request: Request) -> Response:
    def lines() -> Iterator[bytes]:
        for lease in _runner(request).sandboxes.leases():
            yield json.dumps(protocol.lease_json(lease)).encode() + b"\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")


async def _create(request: Request) -> Response:
    runner, data = _runner(request), await _json(request)
    try:
        owner = OwnerTag(str(data["owner"]["org"]), str(data["owner"]["user"]))
    except (KeyError, TypeError):
        raise BadRequest("create needs an owner") from None
    session_id = data.get("session_id")
    hold_seconds = _number(request, "seconds", runner.holds.max_seconds)

    def create() -> dict[str, Any]:
        stack = contextlib.ExitStack()
        try:
            sandbox = stack.enter_context(
                runner.sandboxes.create(owner, bool(data.get("shared")), bool(data.get("read_only")), session_id)
            )
        except BaseException:
            stack.close()
            raise
        token = runner.holds.keep(sandbox.id, stack, hold_seconds)
        return {"lease": protocol.lease_json(sandbox.lease), "use": token}

    return JSONResponse(await run_in_threadpool(create), status_code=201)


async def _lease(request: Request) -> Response:
    runner = _runner(request)
    lease = await run_in_threadpool(runner.peek, request.path_params["sid"])
    return JSONResponse(protocol.lease_json(lease))


async def _use(request: Request) -> Response:
    runner, session_id = _runner(request), request.path_params["sid"]
    seconds = _number(request, "seconds", runner.holds.max_seconds)

    def use() -> dict[str, Any]:
        stack = contextlib.ExitStack()
        try:
            sandbox = stack.enter_context(runner.opened(session_id))  # touches: a call has begun
        except BaseException:
            stack.close()
            raise
        return {"lease": protocol.lease_json(sandbox.lease), "use": runner.holds.keep(session_id, stack, seconds)}

    return JSONResponse(await run_in_threadpool(use))


async def _hold(request: Request) -> Response:
    runner, session_id = _runner(request), request.path_params["sid"]
    seconds = _number(request, "seconds", runner.holds.max_seconds)
    wait = min(_number(request, "wait", MAX_HOLD_WAIT_SECONDS), MAX_HOLD_WAIT_SECONDS)

    def enter(stack: contextlib.ExitStack) -> None:
        sandbox = stack.enter_context(runner.opened(session_id))
        stack.enter_context(sandbox.exclusive())

    stack = await run_in_threadpool(acquire_or_abandon, enter, wait)
    if stack is None:
        raise BackendUnavailable("the session is busy with another call", retry_after=2)
    return JSONResponse({"hold": runner.holds.keep(session_id, stack, seconds)})


async def _release(request: Request) -> Response:
    released = await run_in_threadpool(
        _runner(request).holds.release, request.path_params["sid"], request.path_params["token"]
    )
    return JSONResponse({"released": released})


async def _end(request: Request) -> Response:
    runner, session_id = _runner(request), request.path_params["sid"]
    if "if_touched_at" not in request.query_params:
        await run_in_threadpool(runner.sandboxes.end, session_id)
        return JSONResponse({"ended": True})
    # For a reaper on the other side: end only if nobody touched it since it looked, and
    # never while a call holds it (the backend's end_if does not wait for a busy session).
    seen = _number(request, "if_touched_at", 0.0)
    ended = await run_in_threadpool(runner.sandboxes.end_if, session_id, lambda lease: lease.touched_at <= seen)
    return JSONResponse({"ended": ended})


async def _in_session(request: Request, action: Callable[[LocalSandbox], T]) -> T:
    """`action` on the request's session, in a worker thread (it blocks on files and runs)."""
    runner, session_id = _runner(request), request.path_params["sid"]

    def work() -> T:
        with runner.opened(session_id) as sandbox:
            return action(sandbox)

    return await run_in_threadpool(work)


async def _list(request: Request) -> Response:
    listing = await _in_session(request, lambda sandbox: sandbox.list_files())
    return JSONResponse([protocol.file_json(info) for info in listing])


async def _write(request: Request) -> Response:
    path = _path(request)
    if "limit" not in request.query_params:
        raise BadRequest("a write names its size limit")
    limit = int(_number(request, "limit", 0))
    body = cast(BinaryIO, request_body(request.stream()))
    await _in_session(request, lambda sandbox: sandbox.write_file(path, body, limit))
    return JSONResponse({"written": path})


async def _read(request: Request) -> Response:
    path = _path(request)
    reader, info = await _in_session(request, lambda sandbox: sandbox.open_file(path))

    def chunks() -> Iterator[bytes]:
        with reader:
            while chunk := reader.read(CHUNK):
                yield chunk

    headers = {
        "Content-Length": str(info.size),
        protocol.SIZE_HEADER: str(info.size),
        protocol.MTIME_HEADER: str(info.mtime_ns),
    }
    return StreamingResponse(chunks(), headers=headers, media_type="application/octet-stream")


async def _remove(request: Request) -> Response:
    path = _path(request)
    await _in_session(request, lambda sandbox: sandbox.remove_file(path))
    return JSONResponse({"removed": path})


async def _stat(request: Request) -> Response:
    path = _path(request)
    return JSONResponse(protocol.file_json(await _in_session(request, lambda sandbox: sandbox.stat(path))))


async def _run(request: Request) -> Response:
    program = protocol.program_of(await _json(request))
    if program.lang not in _runner(request).sandboxes.languages:
        raise UnsupportedLanguage(f"lang '{program.lang}' is not available on this runner")
    result = await _in_session(request, lambda sandbox: sandbox.run(program))
    return JSONResponse(protocol.result_json(result))


async def _cancel(request: Request) -> Response:
    await run_in_threadpool(_runner(request).sandboxes.cancel, request.path_params["run_key"])
    return JSONResponse({"cancelled": True})


def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return JSONResponse(protocol.error_json(exc), status_code=exc.status, headers=exc.headers())


def _bad_request(request: Request, exc: Exception) -> Response:
    # The backend's own refusals of a malformed id or run key.
    return _service_error(request, BadRequest(str(exc)))


def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"error": "Internal error", "details": "the runner failed; the failure is logged"}, 500)
