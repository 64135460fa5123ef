"""POST /v1/exec: run a program in a session."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import Future

from fastapi import APIRouter
from fastapi.responses import Response, StreamingResponse

from ...errors import ServiceError
from ...wire import ExecReply, ExecRequest
from ..dependencies import CallerDep, ServiceDep

EXEC_PATH = "/v1/exec"

router = APIRouter()


@router.post(EXEC_PATH)
async def execute(body: ExecRequest, service: ServiceDep, caller: CallerDep) -> Response:
    # G1 LibreChat names its user in the body.
    run = service.admission.start_run(lambda: service.sessions.execute(caller.named(body.user_id), body))
    return await answer(run, service.settings.exec_keepalive_seconds)


async def answer(run: Future[ExecReply], keepalive: float) -> Response:
    """The reply of a run: as it is, if it comes within `keepalive` seconds; else a 200 at
    once, a space every `keepalive` seconds while it runs (JSON allows whitespace ahead of
    a value), then the reply. A proxy between the client and the service then never sees
    an idle connection to cut. An error after that point can only travel in the body."""
    waiting = asyncio.wrap_future(run)
    done, _ = await asyncio.wait({waiting}, timeout=keepalive)
    if done:
        return _reply(waiting.result())
    return StreamingResponse(_spaces_then(waiting, keepalive), media_type="application/json")


async def _spaces_then(waiting: asyncio.Future[ExecReply], keepalive: float) -> AsyncIterator[bytes]:
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=keepalive)
        if done:
            break
        yield b" "
    try:
        yield _json(waiting.result())
    except ServiceError as failed:
        yield json.dumps(failed.body()).encode()


def _reply(reply: ExecReply) -> Response:
    return Response(_json(reply), media_type="application/json")


def _json(reply: ExecReply) -> bytes:
    # G2-only fields are None for G1, and left out: a G1 reply is what it always was.
    return reply.model_dump_json(exclude_none=True).encode()
