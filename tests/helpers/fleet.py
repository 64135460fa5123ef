"""Runners on loopback that a test starts and stops one by one (a runner process that dies
and comes back), each counting the requests it gets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from pydantic import SecretStr

from codeexec.runner.app import create_runner_app
from codeexec.runner.build import build_runner
from codeexec.sandbox.remote import protocol
from codeexec.settings import Settings

from ..serving import RUNNER_KEY, free_port, serving


class Counted:
    """A runner's app, counting the requests it gets (but /health, which the service asks
    every second of its own accord); silent, past the client's patience, on a request
    whose query names `silent_on`."""

    def __init__(self) -> None:
        self.app: Any = None  # the app of the runner process now serving, if any
        self.paths: list[str] = []
        self.silent_on: str | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            self.paths.append(scope["path"])
            if self.silent_on and self.silent_on.encode() in scope["query_string"]:
                await asyncio.sleep(protocol.SILENT_SECONDS + 0.5)
        await self.app(scope, receive, send)


class Fleet:
    """Runners on loopback, each startable and stoppable on its own port, sharing one root."""

    def __init__(self, settings: Settings, count: int) -> None:
        self.settings = settings
        self.ports = [free_port() for _ in range(count)]
        self.apps = [Counted() for _ in range(count)]
        self._serving: dict[int, contextlib.ExitStack] = {}

    def _runner(self, index: int) -> Any:
        own = {"runner_index": str(index), "runner_key": SecretStr(RUNNER_KEY)}
        return build_runner(self.settings.model_copy(update=own))

    @classmethod
    @contextlib.contextmanager
    def running(cls, settings: Settings, count: int) -> Iterator[Fleet]:
        """`count` runners, all started, all stopped when the block ends."""
        made = cls(settings, count)
        try:
            for index in range(count):
                made.start(index)
            yield made
        finally:
            made.close()

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def start(self, index: int) -> None:
        """Runner `index` as a new process would be: its own runner over the one root."""
        stack = contextlib.ExitStack()
        self.apps[index].app = create_runner_app(self._runner(index))
        stack.enter_context(serving(self.apps[index], port=self.ports[index]))
        self._serving[index] = stack

    def stop(self, index: int) -> None:
        self._serving.pop(index).close()

    def requests(self) -> list[int]:
        return [len(app.paths) for app in self.apps]

    def close(self) -> None:
        for index in list(self._serving):
            self.stop(index)
