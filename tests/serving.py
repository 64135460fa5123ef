"""ASGI apps served by uvicorn in a thread of the test process, and runners started from settings."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from codeexec.api.service import Service
from codeexec.connections import HeaderDeadline
from codeexec.runner.app import Runner, create_runner_app
from codeexec.runner.build import build_runner
from codeexec.serving import KEEP_ALIVE_SECONDS
from codeexec.settings import Settings

RUNNER_KEY = "runner-key-0123456789"
# The `services` fixture: a service for any settings, closed after the test (tests/conftest.py).
Services = Callable[[Settings], Service]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(
    app: Any, host: str = "127.0.0.1", port: int | None = None, certfile: str | None = None, lifespan: str = "auto"
) -> Iterator[str]:
    """Serve `app` until the block ends; yields its base URL (no trailing slash). With a
    certificate file (its key, then its chain), over TLS. `lifespan="off"` where the app's
    service belongs to someone else (its lifespan would close it as the server stops)."""
    port = port or free_port(host)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_keep_alive=KEEP_ALIVE_SECONDS, ssl_certfile=certfile,
        http=HeaderDeadline,
        # A test's server stops with the test: a connection a client keeps open (a pooled one
        # of the backend under test) is not waited for more than a second.
        timeout_graceful_shutdown=1, lifespan=lifespan,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"{'https' if certfile else 'http'}://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def running_runner(settings: Settings, host: str = "127.0.0.1") -> Iterator[tuple[str, Runner]]:
    """A runner of the `local` backend these settings describe, keyed RUNNER_KEY."""
    from pydantic import SecretStr

    runner = build_runner(settings.model_copy(update={"runner_key": SecretStr(RUNNER_KEY)}))
    with serving(create_runner_app(runner), host) as url:
        yield url, runner


@contextlib.contextmanager
def running_fleet(settings: Settings, count: int = 3) -> Iterator[list[tuple[str, Runner]]]:
    """`count` runners of these settings, runner i with RUNNER_INDEX i, all on one root
    (each keeps to the sessions it made: the service routes by their ids)."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(running_runner(settings.model_copy(update={"runner_index": str(i)})))
            for i in range(count)
        ]


def runner_settings(settings: Settings, url: str) -> Settings:
    """The service's settings, leasing from the runner at `url`."""
    from pydantic import SecretStr

    return settings.model_copy(
        update={"sandbox_backend": "runner", "runner_url": url, "runner_key": SecretStr(RUNNER_KEY)}
    )


def fleet_settings(settings: Settings, urls: list[str]) -> Settings:
    """The service's settings, leasing from the fleet of runners at `urls` (runner i at i)."""
    from pydantic import SecretStr

    return settings.model_copy(
        update={"sandbox_backend": "runner", "runner_urls": tuple(urls), "runner_key": SecretStr(RUNNER_KEY)}
    )
