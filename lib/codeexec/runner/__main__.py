"""`python -m codeexec.runner`: the runner on RUNNER_HOST:RUNNER_PORT, its reaper on a timer.

It reads the same settings as the service (SANDBOX_ROOT, the limits, LEASE_TTL_SECONDS,
IDLE_TIMEOUT_SECONDS, REAP_INTERVAL_SECONDS) and RUNNER_KEY, the key callers must send.
With RUNNER_HOOK_PORT set (in a MicroVM), it also answers the VM's run hook there, which
hands it its key and its one session (hooks.py).
"""

from __future__ import annotations

import asyncio
import logging
import os

import uvicorn

from ..connections import HeaderDeadline
from ..server import KEEP_ALIVE_SECONDS, start_reaper
from ..settings import Settings
from .app import create_runner_app
from .build import build_runner


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings()
    runner = build_runner(settings)
    if runner.key is None:
        # Fail closed: every call but /health answers 401 until a key is configured.
        logging.getLogger("codeexec.runner").warning("RUNNER_KEY is not set: every call will be refused")
    host = os.environ.get("RUNNER_HOST", "127.0.0.1")
    port = int(os.environ.get("RUNNER_PORT", "8080"))
    start_reaper(runner.sandboxes, settings)
    servers = [
        uvicorn.Server(
            uvicorn.Config(
                create_runner_app(runner),
                host=host,
                port=port,
                log_level="info",
                timeout_keep_alive=KEEP_ALIVE_SECONDS,
                http=HeaderDeadline,
            )
        )
    ]
    hook_port = os.environ.get("RUNNER_HOOK_PORT")
    if hook_port:  # in a MicroVM: the key and the session arrive with the run hook
        from .hooks import create_hook_app

        hooks = uvicorn.Config(
            create_hook_app(runner), host=host, port=int(hook_port), log_level="info", http=HeaderDeadline
        )
        servers.append(uvicorn.Server(hooks))
    print(f"Sandbox runner on http://{host}:{port} (root: {settings.sandbox_root})", flush=True)

    async def serve() -> None:
        await asyncio.gather(*(server.serve() for server in servers))

    asyncio.run(serve())


if __name__ == "__main__":
    main()
