"""The HTTP app: auth, parsing and error mapping around the interpreter and the sandboxes.

The route paths live HERE, in the app that serves them, so that nothing else can disagree
about them unnoticed.
"""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, BinaryIO, Literal
from urllib.parse import quote

from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.types import Message, Receive

from . import ids, interpreter
from .auth import Authenticator, Unauthorized, make_authenticator
from .sandbox import make_sandboxes
from .sandbox.port import BackendUnavailable, FileInfo, FileNotFound, Sandboxes, SessionNotFound, TooLarge, exclusive
from .settings import Settings, get_settings
from .tokens import KeysUnavailable
from .wire import ExecReply, ExecRequest, UploadedFile, UploadReply

EXEC_PATH = "/v1/exec"
UPLOAD_PATH = "/v1/upload"
DOWNLOAD_PATH = "/v1/download/{session_id}/{file_id:path}"
FILES_PATH = "/v1/files/{session_id}"
FILE_PATH = "/v1/files/{session_id}/{file_id:path}"
HEALTH_PATH = "/health"

log = logging.getLogger("codeexec")


class Service:
    """What a request needs, built once per process (a Lambda cold start pays it once)."""

    def __init__(self, settings: Settings, sandboxes: Sandboxes, auth: Authenticator) -> None:
        self.settings = settings
        self.sandboxes = sandboxes
        self.auth = auth


def create_app(
    settings: Settings | None = None,
    sandboxes: Sandboxes | None = None,
    api_key: Callable[[], str | None] | None = None,
) -> FastAPI:
    settings = settings or get_settings()
    if api_key is None:
        secret = settings.code_exec_api_key
        api_key = lambda: secret.get_secret_value() if secret else None  # noqa: E731
    service = Service(settings, sandboxes or make_sandboxes(settings), make_authenticator(settings, api_key))
    app = FastAPI(title="Code Interpreter API", docs_url=None, redoc_url=None)
    app.state.service = service
    _add_error_handlers(app)
    _add_routes(app)
    from .g2 import router as g2_routes  # here: its routes use this module's dependencies

    app.include_router(g2_routes)
    return app


# The dependencies are async because they do no I/O: FastAPI would run a sync one in the
# thread pool, a hop (about 0.4 ms on a busy host) per dependency per request.
async def _service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


async def _org(request: Request, service: Annotated[Service, Depends(_service)]) -> str:
    if "authorization" in request.headers:  # verifying a token may fetch the key set
        return await run_in_threadpool(service.auth.org_for, request.headers)
    return service.auth.org_for(request.headers)


ServiceDep = Annotated[Service, Depends(_service)]
OrgDep = Annotated[str, Depends(_org)]


def _add_routes(app: FastAPI) -> None:  # noqa: C901 - one small function per route
    @app.get(HEALTH_PATH)
    def health(service: ServiceDep) -> dict[str, Any]:
        return {
            "status": "ok",
            "auth": service.auth.status(),
            "backend": service.settings.sandbox_backend,
            "languages": sorted(service.sandboxes.languages),
        }

    @app.post(EXEC_PATH, response_model_exclude_none=True)  # G2-only fields are None for G1
    async def execute(body: ExecRequest, service: ServiceDep, org: OrgDep) -> ExecReply:
        # One explicit hop to a thread for the run: a sync route would cost FastAPI a
        # second one, to validate the reply.
        timeout = service.settings.run_timeout_seconds
        max_files = service.settings.max_files_per_run
        return await run_in_threadpool(interpreter.run, service.sandboxes, org, body, timeout, max_files)

    @app.post(UPLOAD_PATH)
    async def upload(request: Request, service: ServiceDep, org: OrgDep) -> UploadReply:
        return await receive_upload(request, service, org)

    @app.get(DOWNLOAD_PATH)
    def download(session_id: str, file_id: str, service: ServiceDep, org: OrgDep) -> StreamingResponse:
        path = ids.file_path(file_id)
        with service.sandboxes.open(org, session_id) as sandbox:
            reader, info = sandbox.open_file(path)
        return _file_response(reader, info)

    @app.get(FILES_PATH)
    def list_files(
        session_id: str,
        service: ServiceDep,
        org: OrgDep,
        detail: Annotated[Literal["summary", "simple", "full"], Query()] = "simple",
    ) -> list[Any]:
        with service.sandboxes.open(org, session_id) as sandbox:
            found = sorted(sandbox.list_files(), key=lambda f: f.path)
        if detail == "simple":
            return [f"{session_id}/{f.path}" for f in found]
        return [summary(session_id, f, full=detail == "full") for f in found]

    @app.delete(FILE_PATH)
    def delete_file(session_id: str, file_id: str, service: ServiceDep, org: OrgDep) -> dict[str, str]:
        path = remove_file(service, org, session_id, file_id)
        return {"message": "success", "session_id": session_id, "fileId": path}


async def receive_upload(request: Request, service: Service, org: str) -> UploadReply:
    """Both generations' uploads, one file or a batch. G2's `kind`/`id`/`version` fields
    select nothing here: a session belongs to the organization (see wire.Kind)."""
    limit = service.settings.max_upload_bytes
    body_limit = limit + 65_536  # room for the multipart framing around the file
    if int(request.headers.get("content-length") or 0) > body_limit:
        raise TooLarge(f"the upload is larger than the {limit} byte limit")
    # A chunked body declares no length: count it as it arrives, so an endless one stops
    # at the limit instead of filling the parser's spool files.
    form = await Request(request.scope, _capped(request.receive, body_limit, limit)).form()
    parts = [p for p in form.getlist("file") + form.getlist("files") if isinstance(p, UploadFile)]
    if not parts:
        raise ids.BadFileId("the form has no file part (named 'file' or 'files')")
    session_id = form.get("session_id") or request.query_params.get("session_id")
    return await run_in_threadpool(_upload, service, org, str(session_id or "") or None, parts)


def _capped(receive: Receive, body_limit: int, limit: int) -> Receive:
    received = 0

    async def capped_receive() -> Message:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > body_limit:
            raise TooLarge(f"the upload is larger than the {limit} byte limit")
        return message

    return capped_receive


def remove_file(service: Service, org: str, session_id: str, file_id: str) -> str:
    path = ids.file_path(file_id)
    with service.sandboxes.open(org, session_id) as sandbox:
        sandbox.remove_file(path)
    return path


def _upload(service: Service, org: str, session_id: str | None, parts: list[UploadFile]) -> UploadReply:
    names = [ids.upload_name(part.filename) for part in parts]
    sandboxes = service.sandboxes
    new_session = None
    try:
        with sandboxes.open(org, session_id) if session_id else sandboxes.create(org) as sandbox:
            new_session = None if session_id else sandbox.id
            with exclusive(sandbox):  # not in the middle of a run: it would list the file as its own
                for part, name in zip(parts, names, strict=True):
                    sandbox.write_file(name, part.file, limit=service.settings.max_upload_bytes)
    except BaseException:
        if new_session:  # a session leased for a failed upload would hold nothing: end it
            sandboxes.end(new_session)
        raise
    files = [UploadedFile(fileId=n, filename=n) for n in names]
    return UploadReply(session_id=sandbox.id, storage_session_id=sandbox.id, files=files)


def _file_response(reader: BinaryIO, info: FileInfo) -> StreamingResponse:
    name = info.path.rsplit("/", 1)[-1]
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    headers = {"Content-Length": str(info.size), "Content-Disposition": _disposition(name)}
    return StreamingResponse(_chunks(reader), media_type=media_type, headers=headers)


def _chunks(reader: BinaryIO) -> Iterator[bytes]:
    # Each chunk of a sync iterator costs a thread hop: 256 KiB took a 1 MB download from
    # 7.1 to 5.1 ms (64 KiB chunks), still bounding the memory a download holds.
    with reader:
        while chunk := reader.read(1 << 18):
            yield chunk


def _disposition(name: str) -> str:
    quoted = quote(name)
    if quoted != name:  # RFC 6266: a non-ASCII or special name travels percent-encoded
        return f"attachment; filename*=utf-8''{quoted}"
    return f'attachment; filename="{name}"'


def summary(session_id: str, f: FileInfo, full: bool) -> dict[str, Any]:
    modified = datetime.fromtimestamp(f.mtime_ns / 1e9, UTC).isoformat(timespec="milliseconds")
    item: dict[str, Any] = {
        "name": f"{session_id}/{f.path}",
        "id": f.path,
        "size": f.size,
        "lastModified": modified.replace("+00:00", "Z"),
    }
    if full:
        content_type = mimetypes.guess_type(f.path)[0] or "application/octet-stream"
        original = f.path.rsplit("/", 1)[-1]
        item |= {"contentType": content_type, "metadata": {"content-type": content_type, "original-filename": original}}
    return item


def _error(
    status: int, error: str, details: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse({"error": error, "details": details, **extra}, status_code=status, headers=headers)


def _add_error_handlers(app: FastAPI) -> None:
    # Each exception of the library maps to one status; details never carry a body or key.
    handlers: dict[type[Exception], Callable[[Exception], JSONResponse]] = {
        Unauthorized: lambda e: _error(401, "Unauthorized", str(e)),
        KeysUnavailable: lambda e: _error(503, "Token keys unavailable", str(e)),
        SessionNotFound: lambda e: _error(404, "Session not found", "no such session for this caller"),
        FileNotFound: lambda e: _error(404, "File not found", "no such file in this session"),
        ids.BadFileId: lambda e: _error(400, "Bad request", str(e)),
        interpreter.UnknownLanguage: lambda e: _error(400, "Unsupported language", _language_details(app, e)),
        TooLarge: lambda e: _error(413, "Payload too large", str(e)),
        BackendUnavailable: _unavailable,
        RequestValidationError: lambda e: _error(400, "Bad request", _validation_details(e)),
        HTTPException: lambda e: _error(e.status_code, str(e.detail), str(e.detail)),  # type: ignore[attr-defined]
    }
    for exc_type, to_response in handlers.items():
        app.add_exception_handler(exc_type, _handler(to_response))
    app.add_exception_handler(Exception, _internal_error)


def _handler(to_response: Callable[[Exception], JSONResponse]) -> Callable[[Request, Exception], JSONResponse]:
    return lambda request, exc: to_response(exc)


def _unavailable(exc: Exception) -> JSONResponse:
    retry = getattr(exc, "retry_after", None)
    if not retry:
        return _error(503, "Sandbox backend unavailable", str(exc))
    # The hint twice: the header for HTTP clients, the body field the G2 client reads.
    headers = {"Retry-After": str(retry)}
    return _error(503, "Sandbox backend unavailable", str(exc), headers, retry_after_seconds=retry)


def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _error(500, "Internal error", "the service failed; the failure is logged")


def _language_details(app: FastAPI, exc: Exception) -> str:
    available = ", ".join(sorted(app.state.service.sandboxes.languages))
    return f"lang '{exc}' is not available here; available: {available}"


def _validation_details(exc: Exception) -> str:
    # Locations and messages only: pydantic's error also carries the input, which may be code.
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    return "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in errors)
