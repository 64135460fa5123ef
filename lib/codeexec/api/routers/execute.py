"""POST /v1/exec: run a program in a session."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from ...wire import ExecReply, ExecRequest
from ..dependencies import CallerDep, ServiceDep

EXEC_PATH = "/v1/exec"

router = APIRouter()


@router.post(EXEC_PATH, response_model_exclude_none=True)  # G2-only fields are None for G1
async def execute(body: ExecRequest, service: ServiceDep, caller: CallerDep) -> ExecReply:
    # One explicit hop to a thread for the run: a sync route would cost FastAPI a
    # second one, to validate the reply. G1 LibreChat names its user in the body.
    return await run_in_threadpool(service.sessions.execute, caller.named(body.user_id), body)
