"""The MicroVM's run hook: how a runner in a VM learns its key and its one session.

AWS calls `POST /run` on the image's hooks port as the VM starts, with
`{"microvmId": ..., "runHookPayload": ...}`; the payload is what the `microvm` backend
gave RunMicrovm (its key, the owner, shared, read-only). The runner takes the key, and
makes the session whose id the VM id maps to, with that owner, in its own state: the
sandbox sees none of it. Only the first hook counts: a VM has one session, once.
"""

from __future__ import annotations

import json
import threading

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..sandbox.microvm import vm_ids
from ..sandbox.port import OwnerTag
from .app import Runner


def create_hook_app(runner: Runner) -> Starlette:
    booted = threading.Lock()

    async def run(request: Request) -> Response:
        if not booted.acquire(blocking=False):
            return JSONResponse({"error": "Conflict", "details": "this VM has booted already"}, 409)
        try:
            envelope = json.loads(await request.body())
            payload = json.loads(envelope["runHookPayload"])
            session_id = vm_ids.session_of(str(envelope["microvmId"]))
            owner = OwnerTag(str(payload["owner"]["org"]), str(payload["owner"]["user"]))
            key = str(payload["runner_key"])
        except (ValueError, KeyError, TypeError):
            booted.release()
            return JSONResponse({"error": "Bad request", "details": "not a run hook this runner understands"}, 400)

        def create() -> None:
            shared, read_only = bool(payload.get("shared")), bool(payload.get("read_only"))
            with runner.sandboxes.create(owner, shared, read_only, session_id):
                pass

        await run_in_threadpool(create)
        runner.key = key  # from now on, calls with it are served
        return JSONResponse({"session_id": session_id})

    return Starlette(routes=[Route("/run", run, methods=["POST"])])
