"""The HTTP app: the routers, and where errors become answers.

Every error of the library carries its status (`codeexec.errors`), so one handler answers
them all, the one the runner uses too (`codeexec.answers`); FastAPI's own errors (a
malformed body, an unknown route) are mapped beside it.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..answers import error_handlers, error_response
from ..auth import make_authenticator
from ..errors import BadRequest
from ..large_files import LargeFiles
from ..programmatic import Programs, Tokens
from ..sandbox import make_sandboxes
from ..sandbox.port import Sandboxes
from ..sessions import SessionLimits, Sessions
from ..settings import Settings, get_settings
from .admission import Admission, default_runs
from .dependencies import Service
from .gate import Gate
from .routers import execute, files, health, programmatic


def create_app(
    settings: Settings | None = None,
    sandboxes: Sandboxes | None = None,
    api_key: Callable[[], str | None] | None = None,
) -> FastAPI:
    settings = settings or get_settings()
    if api_key is None:
        secret = settings.code_exec_api_key
        api_key = lambda: secret.get_secret_value() if secret else None  # noqa: E731
    limits = SessionLimits(
        run_timeout_seconds=settings.run_timeout_seconds,
        max_files_per_run=settings.max_files_per_run,
        max_upload_bytes=settings.max_upload_bytes,
    )
    large_files = None
    if settings.large_files_bucket:
        large_files = LargeFiles(settings.large_files_bucket, settings.large_files_from_bytes)
    runs = settings.max_concurrent_runs or default_runs(settings.run_memory_bytes)
    admission = Admission(runs, settings.max_concurrent_uploads)
    backend = sandboxes or make_sandboxes(settings)
    sessions = Sessions(backend, limits, large_files, admission.run_slot, admission.listing_slot)
    programs = Programs(sessions, Tokens(_token_secret(settings, api_key)))
    app = FastAPI(title="Code Interpreter API", docs_url=None, redoc_url=None)
    app.state.service = Service(settings, sessions, programs, make_authenticator(settings, api_key), admission)
    for module in (health, execute, programmatic, files):
        app.include_router(module.router)
    app.add_middleware(Gate)
    handlers = {**error_handlers(), RequestValidationError: _validation_error, HTTPException: _http_error}
    for kind, handler in (handlers | {ClientDisconnect: _client_left}).items():
        app.add_exception_handler(kind, handler)
    return app


def _token_secret(settings: Settings, api_key: Callable[[], str | None]) -> Callable[[], bytes | None]:
    def secret() -> bytes | None:
        configured = settings.code_exec_token_secret
        key = configured.get_secret_value() if configured else api_key()
        return key.encode() if key else None

    return secret


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    # Locations and messages only: pydantic's error also carries the input, which may be code.
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    said = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in errors)
    return error_response(BadRequest(said))


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    detail = str(getattr(exc, "detail", "error"))
    return JSONResponse({"error": detail, "details": detail}, status_code=getattr(exc, "status_code", 500))


def _client_left(request: Request, exc: Exception) -> Response:
    # Nobody is there to read an answer (or the gate has answered 413 already).
    return Response(status_code=400)
