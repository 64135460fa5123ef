"""How a long run is answered: what the routes that run programs share."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import TypeVar

from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel

from ..errors import ServiceError
from ..telemetry import calls

Reply = TypeVar("Reply", bound=BaseModel)


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
