"""Serving over HTTP, the same way for both servers: the embedded service (server.py) and
the runner (runner/__main__.py), neither of which imports the other.

- uvicorn as both run it: idle connections kept longer than clients keep theirs, and
  connections whose request headers never finish dropped (connections.py);
- the app's lifespan run, which starts and closes the process's owner (the service's,
  api/service.py; the runner's, runner/app.py): its reaper's timer, its backend.

Both apps answer errors the same way too (answers.py), which the Lambda functions, with no
uvicorn, import as well.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from typing import Any, Literal

import uvicorn

from .connections import HeaderDeadline
from .telemetry import Telemetry
from .telemetry.exporter import Exporter

# An idle connection is kept longer than clients keep theirs (Node's agent and httpx, 5 s):
# when both close at the same moment, the client sends its next request on a socket the
# server is closing, and the call fails without reaching the service.
KEEP_ALIVE_SECONDS = 75
log = logging.getLogger("codeexec")

def config(app: Any, host: str, port: int, lifespan: Literal["auto", "off"] = "auto") -> uvicorn.Config:
    # The process's logging is configured already (telemetry/logs.py), and each call's line
    # is its own: uvicorn configures none and writes no access line.
    return uvicorn.Config(
        app, host=host, port=port, timeout_keep_alive=KEEP_ALIVE_SECONDS, http=HeaderDeadline, lifespan=lifespan,
        log_config=None, access_log=False,
    )  # fmt: skip


def server(app: Any, host: str, port: int) -> uvicorn.Server:
    return uvicorn.Server(config(app, host, port))


def with_metrics(app: Any, telemetry: Telemetry, host: str, port: int, metrics_port: int) -> list[uvicorn.Server]:
    """The app's server, and beside it the listener of its Prometheus metrics, unless
    `metrics_port` is 0 (telemetry/exporter.py). A metrics port another process holds (a
    second runner on one host) leaves this one without metrics, said in its log: the API
    serves all the same."""
    servers = [server(app, host, port)]
    if not metrics_port or telemetry.metrics is None:
        return servers
    listening = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, metrics_port))
    except OSError as exc:
        listening.close()
        log.error("no metrics: port %d is taken (%s); set METRICS_PORT or RUNNER_METRICS_PORT", metrics_port, exc)
        return servers
    exporter = config(Exporter(telemetry.metrics), host, metrics_port, lifespan="off")
    exporter.fd = listening.detach()  # uvicorn listens on the socket bound here, open for the process's life
    return [*servers, uvicorn.Server(exporter)]


def serve(*servers: uvicorn.Server) -> None:
    """Serve each until the process is stopped. On SIGTERM uvicorn shuts down (the lifespan
    closes what the process owns), then raises the signal again, and the process would die
    by it, unwinding nothing: here it exits as by sys.exit."""
    signal.signal(signal.SIGTERM, _exit)

    async def all_of_them() -> None:
        await asyncio.gather(*(s.serve() for s in servers))

    asyncio.run(all_of_them())


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
