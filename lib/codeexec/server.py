"""The embedded server: the app under uvicorn on loopback, with the `local` backend, and
the reaper on a timer in-process (on Lambda, an EventBridge schedule runs it instead).

    python -m codeexec.server        (what `make serve` runs)
"""

from __future__ import annotations

import logging
import os
import secrets
import threading

import uvicorn
from pydantic import SecretStr

from .api.app import create_app
from .connections import HeaderDeadline
from .reaper import reap
from .sandbox.port import Sandboxes
from .settings import Settings

log = logging.getLogger("codeexec.server")

# An idle connection is kept longer than clients keep theirs (Node's agent and httpx, 5 s):
# when both close at the same moment, the client sends its next request on a socket the
# server is closing, and the call fails without reaching the service.
KEEP_ALIVE_SECONDS = 75


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings()
    if settings.code_exec_api_key is None:
        # A new user can call the service at once; a deployment sets its own key.
        key = secrets.token_urlsafe(24)
        print(f"CODE_EXEC_API_KEY was not set; this run's key is: {key}", flush=True)
        settings = Settings(code_exec_api_key=SecretStr(key))
    host = os.environ.get("HOST", "127.0.0.1")
    port = int(os.environ.get("PORT", "8000"))
    app = create_app(settings)
    start_reaper(app.state.service.sessions.sandboxes, settings)
    print(f"Code interpreter on http://{host}:{port}/v1 (backend: {settings.sandbox_backend})", flush=True)
    uvicorn.run(
        app, host=host, port=port, log_level="info", timeout_keep_alive=KEEP_ALIVE_SECONDS, http=HeaderDeadline
    )


def start_reaper(sandboxes: Sandboxes, settings: Settings) -> threading.Event:
    """Reap every REAP_INTERVAL_SECONDS in a daemon thread; set the event to stop it."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(settings.reap_interval_seconds):
            try:
                reap(sandboxes, settings.idle_timeout_seconds)
            except Exception:  # one failed pass must not end the timer
                log.exception("reaper pass failed")

    threading.Thread(target=loop, name="reaper", daemon=True).start()
    return stop


if __name__ == "__main__":
    main()
