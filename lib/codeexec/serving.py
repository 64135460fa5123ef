"""Serving over HTTP, the same way for both servers: the embedded service (server.py) and
the runner (runner/__main__.py), neither of which imports the other.

- uvicorn as both run it: idle connections kept longer than clients keep theirs, and
  connections whose request headers never finish dropped (connections.py);
- the reaper on a timer in-process (on Lambda, an EventBridge schedule runs it instead).

Both apps answer errors the same way too (answers.py), which the Lambda functions, with no
uvicorn, import as well.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from typing import Any

import uvicorn

from .connections import HeaderDeadline
from .reaper import reap
from .sandbox.port import Sandboxes
from .settings import Settings

log = logging.getLogger("codeexec")

# An idle connection is kept longer than clients keep theirs (Node's agent and httpx, 5 s):
# when both close at the same moment, the client sends its next request on a socket the
# server is closing, and the call fails without reaching the service.
KEEP_ALIVE_SECONDS = 75

def config(app: Any, host: str, port: int, log_level: str = "info") -> uvicorn.Config:
    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level, timeout_keep_alive=KEEP_ALIVE_SECONDS, http=HeaderDeadline
    )


def server(app: Any, host: str, port: int, log_level: str = "info") -> uvicorn.Server:
    return uvicorn.Server(config(app, host, port, log_level))


def serve(*servers: uvicorn.Server) -> None:
    """Serve each until the process is stopped. On SIGTERM uvicorn shuts down, then raises
    the signal again: the process would die by it, and its exit hooks (those that end the
    warm runs and remove their cgroups) would never run. Here it exits as by sys.exit."""
    signal.signal(signal.SIGTERM, _exit)

    async def all_of_them() -> None:
        await asyncio.gather(*(s.serve() for s in servers))

    asyncio.run(all_of_them())


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


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
