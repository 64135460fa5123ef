"""The runner's MicroVM lifecycle hooks, at the paths and with the bodies AWS documents.

AWS calls them on the image's hooks port (RUNNER_HOOK_PORT, the template's `Hooks.Port`):

- `POST /aws/lambda-microvms/runtime/v1/ready` while it builds the image: 200 once the
  runner serves, so the snapshot AWS then takes, which every VM resumes from, holds a
  runner that answers; 503 before, and AWS asks again.
- `POST /aws/lambda-microvms/runtime/v1/run` as each VM starts, with the `runHookPayload`
  the `microvm` backend gave RunMicrovm: the runner's key, which the VM's image does not
  hold (every VM resumes from one snapshot). AWS's API reference calls the payload the
  hook's request body; AWS's samples read it from `{"microvmId", "runHookPayload"}`: the
  runner takes either. The first key given is the VM's for good.

The session is not made here: the backend creates it through the runner's own API once
the key works, named after the VM id that RunMicrovm answered, so nothing here depends
on how AWS names the VM to it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .app import Runner

HOOKS = "/aws/lambda-microvms/runtime/v1"
MAX_BODY = 1 << 16  # a run hook's payload is a key and a few names: read no more


def create_hook_app(runner: Runner, ready: Callable[[], bool]) -> Starlette:
    keyed = threading.Lock()

    async def ready_hook(request: Request) -> Response:
        if not ready():
            return JSONResponse({"status": "starting"}, 503)
        return JSONResponse({"status": "ready"})

    async def run_hook(request: Request) -> Response:
        body = await _bounded_body(request)
        if body is None:
            too_large = {"error": "Payload too large", "details": f"a run hook's body is at most {MAX_BODY} bytes"}
            return JSONResponse(too_large, 413)
        key = _runner_key(body)
        if key is None:
            return JSONResponse({"error": "Bad request", "details": "not a run hook payload of this project's"}, 400)
        with keyed:
            if runner.key is None:
                runner.key = key  # from now on, calls with it are served
            elif not runner.authorized(key):
                return JSONResponse({"error": "Conflict", "details": "this VM has its key already"}, 409)
        return JSONResponse({"status": "running"})

    return Starlette(
        routes=[
            Route(f"{HOOKS}/ready", ready_hook, methods=["POST"]),
            Route(f"{HOOKS}/run", run_hook, methods=["POST"]),
        ]
    )


async def _bounded_body(request: Request) -> bytes | None:
    """The body, or None once it is past MAX_BODY (the rest is never read)."""
    if int(request.headers.get("content-length") or 0) > MAX_BODY:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return None
    return bytes(body)


def _runner_key(body: bytes) -> str | None:
    """The key in the payload, whether the body is the payload or AWS's envelope of it."""
    try:
        data: Any = json.loads(body)
        if isinstance(data, dict) and isinstance(data.get("runHookPayload"), str):
            data = json.loads(data["runHookPayload"])
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return None
    key = data.get("runner_key") if isinstance(data, dict) else None
    return key if isinstance(key, str) and key else None
