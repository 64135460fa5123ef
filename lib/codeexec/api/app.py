"""The HTTP app: the routers, and where errors become answers.

Every error of the library carries its status (`codeexec.errors`), so one handler answers
them all, the one the runner uses too (`codeexec.answers`); FastAPI's own errors (a
malformed body, an unknown route) are mapped beside it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..answers import error_handlers, error_response
from ..errors import BadRequest
from ..telemetry.edge import Observed
from .body_limits import RouteLimits
from .gate import Gate
from .routers import admin, execute, files, health, programmatic
from .service import Service


def create_app(service: Service) -> FastAPI:
    """The API over `service`, which the app's lifespan starts and closes (a server that
    runs the lifespan, as uvicorn does, closes it as it stops)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        with service:
            yield

    app = FastAPI(title="Code Interpreter API", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.service = service
    routers = [module.router for module in (health, execute, programmatic, files, admin)]
    for router in routers:
        app.include_router(router)
    app.add_middleware(Gate, limits=RouteLimits(route for router in routers for route in router.routes))
    app.add_middleware(Observed, telemetry=service.telemetry)  # outermost: it sees every call
    handlers = {**error_handlers(), RequestValidationError: _validation_error, HTTPException: _http_error}
    for kind, handler in (handlers | {ClientDisconnect: _client_left}).items():
        app.add_exception_handler(kind, handler)
    return app


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
