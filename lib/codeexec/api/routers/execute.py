"""POST /v1/exec: run a program in a session."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...telemetry import calls
from ...wire import ExecRequest
from .. import commands
from ..body_limits import JSON_BODY, body_limit
from ..dependencies import CallerDep, ServiceDep
from ..replies import exec_reply
from ..running import answer

EXEC_PATH = "/v1/exec"

router = APIRouter()


@router.post(EXEC_PATH)
@body_limit(JSON_BODY)
async def execute(body: ExecRequest, request: Request, service: ServiceDep, caller: CallerDep) -> Response:
    calls.note_lang(body.lang)
    order = commands.execute(body, request, caller)
    caller = caller.named(body.user_id)  # G1 LibreChat names its user in the body
    work = lambda: exec_reply(service.sessions.execute(caller, order), body.lang)  # noqa: E731
    run = service.admission.start_run(caller.owner.tag(), work, caller.key)
    return await answer(run, service.settings.exec_keepalive_seconds)
