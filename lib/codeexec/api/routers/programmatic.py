"""POST /v1/exec/programmatic and its cancel: a program that calls the client's tools,
round by round (codeexec.programmatic)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from ...programmatic.commands import NextRound
from ...wire import ProgrammaticRequest, Text
from .. import commands
from ..body_limits import JSON_BODY, body_limit
from ..dependencies import CallerDep, ServiceDep
from ..replies import programmatic_reply
from ..running import answer

PROGRAMMATIC_PATH = "/v1/exec/programmatic"
CANCEL_PATH = "/v1/exec/programmatic/cancel"

router = APIRouter()


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    request_id: Text


@router.post(PROGRAMMATIC_PATH)
@body_limit(JSON_BODY)
async def programmatic(body: ProgrammaticRequest, request: Request, service: ServiceDep, caller: CallerDep) -> Response:
    order = commands.programmatic(body, request, caller)
    caller = caller.named(body.user_id)
    programs, user = service.programs, caller.owner.tag()
    if isinstance(order, NextRound):
        work = lambda: programmatic_reply(programs.resume(caller, order))  # noqa: E731
    else:
        work = lambda: programmatic_reply(programs.start(caller, order))  # noqa: E731
    run = service.admission.start_run(user, work, caller.key)
    return await answer(run, service.settings.exec_keepalive_seconds)


@router.post(CANCEL_PATH)
@body_limit(JSON_BODY)
async def cancel(body: CancelRequest, service: ServiceDep, caller: CallerDep) -> dict[str, Any]:
    service.sessions.cancel(caller, body.request_id)
    return {"request_id": body.request_id, "status": "cancelled"}
