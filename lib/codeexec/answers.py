"""The one error answer of both apps, the service's and the runner's: a ServiceError's
status, its JSON body and its headers, from the handlers both register (the API adds
FastAPI's own errors beside them). Anything else is a logged 500 that says nothing of
what failed (never a stack trace)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .errors import ServiceError
from .telemetry import calls

log = logging.getLogger("codeexec")

Handler = Callable[[Request, Exception], Response]


def error_response(exc: ServiceError) -> JSONResponse:
    calls.note_refused(exc.reason or exc.error)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())


def error_handlers() -> Mapping[type[Exception], Handler]:
    """The service's errors answered as themselves, anything else as a logged 500."""
    return {ServiceError: _service_error, Exception: _internal_error}


def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return error_response(exc)


def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(ServiceError())
