"""What every route may ask for: the service built once per process, and the caller.

Routers import this module, never the app (FastAPI's "bigger applications" layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ..auth import Authenticator, Caller
from ..programmatic import Programs
from ..sessions import Sessions
from ..settings import Settings
from .admission import Admission


@dataclass(frozen=True)
class Service:
    """What a request needs, built once per process (a Lambda cold start pays it once)."""

    settings: Settings
    sessions: Sessions
    programs: Programs
    auth: Authenticator
    admission: Admission


# The dependencies are async because they do no I/O: FastAPI would run a sync one in the
# thread pool, a hop (about 0.4 ms on a busy host) per dependency per request.
async def _service(request: Request) -> Service:
    return request.app.state.service  # type: ignore[no-any-return]


async def _caller(request: Request) -> Caller:
    # Authenticated by the gate (gate.py), before the body was read.
    return request.state.caller  # type: ignore[no-any-return]


ServiceDep = Annotated[Service, Depends(_service)]
CallerDep = Annotated[Caller, Depends(_caller)]
