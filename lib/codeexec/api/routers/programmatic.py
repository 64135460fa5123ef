"""POST /v1/exec/programmatic and its cancel: a program that calls the client's tools,
round by round (codeexec.programmatic)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from ...wire import ProgrammaticRequest, Text
from ..dependencies import CallerDep, ServiceDep
from ..replies import programmatic_reply
from ..running import answer, cancel_key, stateful

PROGRAMMATIC_PATH = "/v1/exec/programmatic"
CANCEL_PATH = "/v1/exec/programmatic/cancel"
WORKSPACE_HEADER = "x-librechat-code-workspace-id"

router = APIRouter()


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    request_id: Text


@router.post(PROGRAMMATIC_PATH)
async def programmatic(body: ProgrammaticRequest, request: Request, service: ServiceDep, caller: CallerDep) -> Response:
    profile, key = stateful(request), cancel_key(request, caller)
    caller = caller.named(body.user_id)
    if workspace := request.headers.get(WORKSPACE_HEADER):
        # The bash tool's attached workspace: a session of its own per user, as a hint's.
        body.runtime_session_hint, profile = f"workspace:{workspace}", True
    programs, user = service.programs, caller.owner.tag()
    if body.continuation_token:
        work = lambda: programmatic_reply(programs.resume(caller, body, key))  # noqa: E731
    else:
        work = lambda: programmatic_reply(programs.start(caller, body, profile, key))  # noqa: E731
    run = service.admission.start_run(user, work, caller.key)
    return await answer(run, service.settings.exec_keepalive_seconds)


@router.post(CANCEL_PATH)
async def cancel(body: CancelRequest, service: ServiceDep, caller: CallerDep) -> dict[str, Any]:
    service.sessions.cancel(caller, body.request_id)
    return {"request_id": body.request_id, "status": "cancelled"}
