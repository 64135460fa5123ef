"""`python -m codeexec.runner`: the runner on RUNNER_HOST:RUNNER_PORT, its reaper on a timer.

It reads the same settings as the service (SANDBOX_ROOT, the limits, LEASE_TTL_SECONDS,
IDLE_TIMEOUT_SECONDS, REAP_INTERVAL_SECONDS) and RUNNER_KEY, the key callers must send.
"""

from __future__ import annotations

import logging
import os

import uvicorn

from ..server import start_reaper
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
    print(f"Sandbox runner on http://{host}:{port} (root: {settings.sandbox_root})", flush=True)
    uvicorn.run(create_runner_app(runner), host=host, port=port, log_level="info")


if __name__ == "__main__":
    main()
