"""What every route may ask for: the process's service (service.py), and the caller.

Routers import this module, never the app (FastAPI's "bigger applications" layout).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ..auth import Caller
from .service import Service

__all__ = ["CallerDep", "Service", "ServiceDep"]


# The dependencies are async because they do no I/O: FastAPI would run a sync one in the
# thread pool, a hop (about 0.4 ms on a busy host) per dependency per request.
async def _service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


async def _caller(request: Request) -> Caller:
    # Authenticated by the gate (gate.py), before the body was read.
    return request.state.caller  # type: ignore[no-any-return]


ServiceDep = Annotated[Service, Depends(_service)]
CallerDep = Annotated[Caller, Depends(_caller)]
