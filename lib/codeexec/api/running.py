"""What the routes that run programs share: the headers a G2 client sends with a run, and
how a long run is answered."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import TypeVar

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel

from ..auth import Caller
from ..errors import ServiceError
from ..sessions.access import run_key
from ..telemetry import calls

PROFILE_HEADER = "x-codeapi-expected-profile"
REQUEST_ID_HEADER = "x-librechat-code-request-id"
Reply = TypeVar("Reply", bound=BaseModel)


def stateful(request: Request) -> bool:
    """The client expects a stateful workspace (`X-CodeAPI-Expected-Profile: stateful`)."""
    return request.headers.get(PROFILE_HEADER, "").lower() == "stateful"


def cancel_key(request: Request, caller: Caller) -> str | None:
    """The run key of the client's request id, which a cancel names it by. Bound to the
    credential, not to a user a body names: a key holder's cancel names no user, and the
    organization's server may stop any run it started, for whichever user."""
    request_id = request.headers.get(REQUEST_ID_HEADER)
    return run_key(caller, request_id) if request_id else None


async def answer(run: Future[Reply], keepalive: float) -> Response:
    """The reply of a run: as it is, if it comes within `keepalive` seconds; else a 200 at
    once, a space every `keepalive` seconds while it runs (JSON allows whitespace ahead of
    a value), then the reply. A proxy between the client and the service then never sees
    an idle connection to cut. An error after that point can only travel in the body."""
    waiting = asyncio.wrap_future(run)
    done, _ = await asyncio.wait({waiting}, timeout=keepalive)
    if done:
        return Response(_json(waiting.result()), media_type="application/json")
    return StreamingResponse(_spaces_then(waiting, keepalive), media_type="application/json")


async def _spaces_then(waiting: asyncio.Future[Reply], keepalive: float) -> AsyncIterator[bytes]:
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=keepalive)
        if done:
            break
        yield b" "
    try:
        yield _json(waiting.result())
    except ServiceError as failed:
        calls.note_refused(failed.reason or failed.error)
        yield json.dumps(failed.body()).encode()


def _json(reply: BaseModel) -> bytes:
    # What is None is left out: a G1 reply carries no G2-only field.
    return reply.model_dump_json(exclude_none=True).encode()
