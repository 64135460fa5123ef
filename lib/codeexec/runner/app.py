"""The runner: the sandbox port of a `local` backend, served over HTTP, one request per
coarse operation (routes and shapes in `codeexec.sandbox.remote.protocol`).

It is what the `runner` backend leases sandboxes from when the service itself cannot run
bubblewrap: a Lambda function under `sam local`, or the API function in the cloud talking
to a MicroVM. It adds nothing to the port: each request is answered by the `local`
backend's own coarse operation, which takes the session's lease, use and hold and lets go
of them before the answer ends, so no state outlives a request and a caller that dies
holds nothing. The caller's access travels as data and is checked here, by the same rule.
What the runner adds is what HTTP needs: a key, and bodies streamed both ways.

Every request but /health carries the runner's own key (X-Runner-Key), compared in
constant time; with no key configured every such request is a 401.

No answer is silent for long (`_answer`): one not ready within a heartbeat is kept alive
with spaces ahead of it, so a caller tells a runner at work from a frozen one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import io
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any, BinaryIO, TypeVar, cast

from starlette.applications import Starlette
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..answers import error_handlers, error_response
from ..errors import BadRequest, ServiceError, SessionNotFound, Unauthorized
from ..reaper import ReapReport, reap
from ..sandbox.local import LocalSandboxes
from ..sandbox.port import Access, Carried, Input
from ..sandbox.remote import protocol
from ..streams import request_body
from ..telemetry import Telemetry, calls
from ..telemetry.edge import Observed
from ..timers import Every

T = TypeVar("T")
log = logging.getLogger("codeexec.runner")


class Runner:
    """The runner process's owner: the backend, its key, the runs it has under way (its
    load, which a fleet's service places new sessions by) and its reaper's timer, started
    and closed by the app's lifespan as the service's are (api/service.py)."""

    def __init__(self, sandboxes: LocalSandboxes, key: str | None, idle_timeout: float, reap_interval: float) -> None:
        self.sandboxes = sandboxes
        self.key = key  # settable: a MicroVM learns its key from its run hook
        self.runs = 0
        self._runs_lock = threading.Lock()
        self._idle_timeout = idle_timeout
        self._reaper = Every(reap_interval, self.reap, "reaper")
        self.telemetry = Telemetry.for_server("runner", sandboxes.hosts)

    def start(self) -> Runner:
        self._reaper.start()
        return self

    def reap(self) -> ReapReport:
        report = reap(self.sandboxes, self._idle_timeout)
        self.telemetry.reaped(report)
        return report

    def close(self) -> None:
        self._reaper.stop()
        self.sandboxes.close()

    def __enter__(self) -> Runner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with self._runs_lock:
            self.runs += 1
        try:
            yield
        finally:
            with self._runs_lock:
                self.runs -= 1

    def authorized(self, presented: str | None) -> bool:
        key = self.key
        return bool(key) and presented is not None and hmac.compare_digest(presented.encode(), str(key).encode())


class KeyRequired:
    """Every route but /health needs the runner's key: fail closed, before any body is read."""

    def __init__(self, app: ASGIApp, runner: Runner) -> None:
        self.app = app
        self.runner = runner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != protocol.HEALTH.path:
            presented = dict(scope["headers"]).get(protocol.KEY_HEADER.lower().encode())
            if not self.runner.authorized(presented.decode("latin-1") if presented else None):
                refused = Unauthorized("missing or wrong runner key", reason="runner_key")
                await error_response(refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_runner_app(runner: Runner) -> Starlette:

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        with runner:
            yield

    app = Starlette(
        routes=[Route(route.path, _HANDLERS[route], methods=[route.method]) for route in protocol.ROUTES],
        # Observed outermost: it sees every call, those without the key as well.
        middleware=[Middleware(Observed, telemetry=runner.telemetry), Middleware(KeyRequired, runner=runner)],
        exception_handlers=dict(error_handlers()),
        lifespan=lifespan,
    )
    app.state.runner = runner
    return app


def _runner(request: Request) -> Runner:
    return request.app.state.runner  # type: ignore[no-any-return]


def _sandboxes(request: Request) -> LocalSandboxes:
    return _runner(request).sandboxes


def _file_id(request: Request) -> str:
    """The client's id for a file, as it came (a query parameter: a raw path id may hold
    `..`, which a URL's path would have resolved away)."""
    if "id" not in request.query_params:
        raise BadRequest("the request names no file (?id=)")
    return request.query_params["id"]


async def _health(request: Request) -> Response:
    runner, sandboxes = _runner(request), _sandboxes(request)
    [host] = sandboxes.hosts()
    return JSONResponse(
        {
            "languages": sorted(sandboxes.languages),
            "named_sessions": sandboxes.named_sessions,
            "index": sandboxes.runner_index,
            "runs": runner.runs,
            "sessions": host.sessions,
            "bytes_used": host.bytes_used,
            "bytes_limit": host.bytes_limit,
            "pools": {kind: asdict(pool) for kind, pool in host.pools.items()},
        }
    )


async def _lease(request: Request) -> Response:
    """The lease as it is, untouched: what a reaper on the other side looks at."""

    def peek() -> dict[str, Any]:
        return protocol.lease_json(_sandboxes(request).lease(request.path_params["sid"]))

    return await _answer(peek)


async def _end(request: Request) -> Response:
    sandboxes, session_id = _sandboxes(request), request.path_params["sid"]

    def end() -> dict[str, Any]:
        sandboxes.end(session_id)
        return {"ended": True}

    return await _answer(end)


async def _cancel(request: Request) -> Response:
    sandboxes, run_key = _sandboxes(request), request.path_params["run_key"]

    def cancel() -> dict[str, Any]:
        sandboxes.cancel(run_key)
        return {"cancelled": True}

    return await _answer(cancel)


async def _run(request: Request) -> Response:
    runner = _runner(request)

    def executed(body: BinaryIO) -> dict[str, Any]:
        frames = protocol.frames_of(body.read)
        spec, _ = next(frames, (None, None))
        if spec is None:
            raise BadRequest("a run starts with its JSON frame")
        carried = (Carried(int(h["index"]), str(h["found"]), bool(h["read_only"]), reader) for h, reader in frames)
        run = protocol.run_of(spec)
        calls.note_lang(run.program.lang)
        started = time.perf_counter()
        with runner.running():
            ran = runner.sandboxes.execute(run, carried)
        calls.note_session(ran.session_id, run.placement.access.owner)
        calls.note_run(run.program.lang, ran.result, time.perf_counter() - started)
        return protocol.ran_json(ran)

    return await _answer(*_with_body(request, executed))


async def _write(request: Request) -> Response:
    def write(body: BinaryIO) -> dict[str, Any]:
        frames = protocol.frames_of(body.read)
        spec, _ = next(frames, (None, None))
        if spec is None or "placement" not in spec:
            raise BadRequest("a write starts with its JSON frame")
        files = ((str(header["path"]), reader) for header, reader in frames)
        limit = int(spec.get("limit", 0))
        return {"session_id": _sandboxes(request).write_files(protocol.placement_of(spec["placement"]), files, limit)}

    return await _answer(*_with_body(request, write))


async def _list(request: Request) -> Response:
    access, sid = protocol.access_of(request.query_params), request.path_params["sid"]
    return await _answer(lambda: [protocol.file_json(info) for info in _sandboxes(request).list_files(sid, access)])


async def _read(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    sid, file_id = request.path_params["sid"], _file_id(request)

    def read() -> _Bytes:
        opened = _sandboxes(request).read_file(sid, access, file_id)
        assert opened.reader is not None  # the local backend always answers the bytes
        return _Bytes(protocol.file_json(opened.info), opened.reader)

    return await _answer(read)


async def _remove(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    sid, file_id = request.path_params["sid"], _file_id(request)
    return await _answer(lambda: {"path": _sandboxes(request).remove_file(sid, access, file_id)})


async def _stat(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    sid, file_id = request.path_params["sid"], _file_id(request)
    return await _answer(lambda: protocol.file_json(_sandboxes(request).stat_file(sid, access, file_id)))


async def _read_inputs(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    try:
        wanted = protocol.inputs_of(json.loads(await request.body()))
    except ValueError:
        raise BadRequest("a read names its inputs: [{file_id, name, origin}]") from None
    found = _carry(_sandboxes(request), access, wanted)

    def carried() -> Iterator[tuple[dict[str, Any], BinaryIO | None]]:
        for item in found:
            yield {"index": item.index, "found": item.found, "read_only": item.read_only}, item.reader

    return StreamingResponse(protocol.frames(carried()), media_type="application/octet-stream")


def _carry(sandboxes: LocalSandboxes, access: Access, wanted: tuple[Input, ...]) -> Iterator[Carried]:
    """The inputs of each origin session, one session open at a time; a session that is
    not found (or not the caller's) leaves its inputs out."""
    by_origin: dict[str, list[int]] = {}
    for index, item in enumerate(wanted):
        by_origin.setdefault(item.origin or "", []).append(index)
    for origin, indexes in by_origin.items():
        with contextlib.suppress(SessionNotFound):
            for carried in sandboxes.read_inputs(origin, access, [wanted[i] for i in indexes]):
                yield Carried(indexes[carried.index], carried.found, carried.read_only, carried.reader)


async def _record(request: Request) -> Response:
    access = protocol.access_of(request.query_params)
    sid, key = request.path_params["sid"], request.path_params["key"]

    def record() -> _Bytes:
        found = _sandboxes(request).read_record(sid, access, key)
        return _Bytes({"size": len(found)}, io.BytesIO(found))

    return await _answer(record)


async def _report(request: Request) -> Response:
    """What the console shows of this runner, asked once per refresh while it is open."""
    runner = _runner(request)
    history = runner.telemetry.history

    def report() -> dict[str, Any]:
        [made] = runner.sandboxes.reports()
        return protocol.report_json(replace(made, history=history.summary() if history else None))

    return await _answer(report)


async def _usage(request: Request) -> Response:
    """What each owner holds here, as changed since the caller last asked (a fleet's quotas)."""
    since = request.query_params.get("since", "0")
    if not since.isdigit():
        raise BadRequest("since is a pass number")
    changes = _sandboxes(request).usage.changes(request.query_params.get("epoch", ""), int(since))
    return JSONResponse(changes)


_HANDLERS = {
    protocol.HEALTH: _health,
    protocol.LEASE: _lease,
    protocol.END: _end,
    protocol.CANCEL: _cancel,
    protocol.RUN: _run,
    protocol.WRITE: _write,
    protocol.LIST: _list,
    protocol.READ: _read,
    protocol.REMOVE: _remove,
    protocol.STAT: _stat,
    protocol.READS: _read_inputs,
    protocol.RECORD: _record,
    protocol.REPORT: _report,
    protocol.USAGE: _usage,
}


@dataclass(frozen=True)
class _Bytes:
    """An answer of bytes (protocol.Answer.BYTES): its head, a JSON line, then the reader's bytes."""

    head: dict[str, Any]
    reader: BinaryIO

    def chunks(self) -> Iterator[bytes]:
        with self.reader:
            yield json.dumps(self.head).encode() + b"\n"
            while chunk := self.reader.read(protocol.CHUNK):
                yield chunk


def _with_body(request: Request, work: Callable[[BinaryIO], T]) -> tuple[Callable[[], T], asyncio.Event]:
    """`work` on the request's body, for a worker thread that pulls it from the event loop
    chunk by chunk as it writes: never held whole; and an event set once it has all
    arrived. Work refused before the body's end (a session that does not admit the caller)
    reads the rest first: a caller still sending would otherwise find its connection
    closed, and not hear why."""
    received = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        async for chunk in request.stream():
            yield chunk
        received.set()

    body = request_body(chunks())

    def done() -> T:
        try:
            return work(cast(BinaryIO, body))
        except BaseException:
            while body.read(protocol.CHUNK):
                pass
            raise

    return done, received


async def _answer(work: Callable[[], Any], received: asyncio.Event | None = None) -> Response:
    """`work`'s answer (JSON, or _Bytes), done in a worker thread. Ready within a heartbeat,
    it is answered as it is (an error with its status); later, the answer is a 200 at once,
    kept alive with a space every heartbeat until it, or the error, follows in the body.
    While a request's body still arrives (`received` not set) the caller is sending, not
    waiting, and an answer begun would take the rest of the body (Starlette's streamed
    answer reads the request to hear a disconnect): it begins after."""
    task = asyncio.ensure_future(run_in_threadpool(work))
    if received is not None:
        arrived = asyncio.ensure_future(received.wait())
        await asyncio.wait({task, arrived}, return_when=asyncio.FIRST_COMPLETED)
        arrived.cancel()
    done, _ = await asyncio.wait({task}, timeout=protocol.HEARTBEAT_SECONDS)
    if not done:
        return StreamingResponse(_beating(task), media_type=_OCTETS, headers={protocol.LATE_HEADER: "1"})
    answer = task.result()
    if isinstance(answer, _Bytes):
        return StreamingResponse(answer.chunks(), media_type=_OCTETS)
    return JSONResponse(answer)


_OCTETS = "application/octet-stream"


async def _beating(task: asyncio.Future[Any]) -> AsyncIterator[bytes]:
    while not (await asyncio.wait({task}, timeout=protocol.HEARTBEAT_SECONDS))[0]:
        yield b" "
    try:
        answer = task.result()
    except ServiceError as exc:
        calls.note_refused(exc.reason or exc.error)
        answer = protocol.late_error_json(exc.status, exc.body())
    except Exception:
        log.exception("a late answer failed")
        answer = protocol.late_error_json(500, {"error": "Internal error", "details": "the runner failed"})
    if isinstance(answer, _Bytes):
        async for chunk in iterate_in_threadpool(answer.chunks()):
            yield chunk
    else:
        yield json.dumps(answer).encode() + b"\n"
