"""The `runner` backend: sandboxes leased from a runner (`python -m codeexec.runner`) over HTTP.

Every port operation crosses as one request (routes in protocol.py); the
sandboxes, their leases and their locks are the runner's `local` backend's. What needs
more than one request:

- Opening reads the lease untouched, lets the caller's `admit` decide here, then takes a
  use: the runner holds the session's shared lock for it (the reaper keeps away) and
  touches it, until the context ends and the use is released. A use expires after the
  longest a call can last, so a function that was stopped mid-call lets go.
- The exclusive hold is a token for the session's exclusive lock, held by the runner
  across the requests of one change, released at the end; it expires like a use.
- `end_if` reads the lease, asks `still_due`, and ends the session only if nobody has
  touched it since (the runner compares) and no call holds it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, cast
from urllib.parse import quote

from ... import ids
from ...errors import BackendUnavailable, SessionNotFound, TooLarge
from ..port import FileInfo, Lease, OwnerTag, Program, RunResult
from . import protocol
from .client import ResponseReader, RunnerClient

log = logging.getLogger("codeexec.runner.client")
CHUNK = 1 << 16
# How long the runner's /health may take to answer before it counts as not up yet.
_HEALTH_SECONDS = 5.0
# Compiled languages get at least this long per run (the local backend's floor).
_SLOWEST_RUN_SECONDS = 60.0
# What a request may take beyond its own work: the runner's sandbox set-up, a busy host.
_GRACE_SECONDS = 30.0


@dataclass(frozen=True)
class RunnerConfig:
    url: str
    key: str
    run_timeout_seconds: float  # the longest run a caller may ask for

    @property
    def call_seconds(self) -> float:
        """The longest one call can hold a session: a run, and the copies and listings
        around it. Uses and holds expire after this."""
        return 2 * max(self.run_timeout_seconds, _SLOWEST_RUN_SECONDS) + 4 * _GRACE_SECONDS


class RunnerSandbox:
    def __init__(self, client: RunnerClient, lease: Lease, call_seconds: float) -> None:
        self.id = lease.session_id
        self.lease = lease
        self._client = client
        self._base = f"/sessions/{lease.session_id}"
        self._call_seconds = call_seconds

    def write_file(self, path: str, data: BinaryIO, limit: int) -> None:
        # Counted here too: an oversized body stops at once instead of being sent whole.
        def chunks() -> Iterator[bytes]:
            sent = 0
            while chunk := data.read(CHUNK):
                sent += len(chunk)
                if sent > limit:
                    raise TooLarge(f"the file is larger than {limit} bytes")
                yield chunk

        self._client.call("PUT", self._file(path), params={"limit": limit}, content=chunks())

    def open_file(self, path: str) -> tuple[BinaryIO, FileInfo]:
        stack = contextlib.ExitStack()
        try:
            response = stack.enter_context(self._client.stream("GET", self._file(path)))
            info = FileInfo(
                path, int(response.headers[protocol.SIZE_HEADER]), int(response.headers[protocol.MTIME_HEADER])
            )
        except BaseException:
            stack.close()
            raise
        return cast(BinaryIO, ResponseReader(stack, response)), info

    def stat(self, path: str) -> FileInfo:
        return protocol.file_of(self._client.call("GET", f"{self._base}/stat/{quote(path)}"))

    def list_files(self) -> list[FileInfo]:
        return [protocol.file_of(item) for item in self._client.call("GET", f"{self._base}/files")]

    def remove_file(self, path: str) -> None:
        self._client.call("DELETE", self._file(path))

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        # Waits at the runner for as long as another call may hold it, and a little more.
        params = {"seconds": self._call_seconds, "wait": self._call_seconds}
        answer = self._client.call(
            "POST", f"{self._base}/holds", timeout=self._call_seconds + _GRACE_SECONDS, params=params
        )
        try:
            yield
        finally:
            self._client.call("DELETE", f"{self._base}/holds/{answer['hold']}")

    def run(self, program: Program) -> RunResult:
        timeout = max(program.timeout, _SLOWEST_RUN_SECONDS) + _GRACE_SECONDS
        answer = self._client.call("POST", f"{self._base}/run", timeout=timeout, json=protocol.program_json(program))
        return protocol.result_of(answer)

    def _file(self, path: str) -> str:
        return f"{self._base}/files/{quote(path)}"


class RunnerSessions:
    """The port over one runner's client: what the `runner` backend is, and what the
    `microvm` backend does once it has found a session's VM."""

    def __init__(self, client: RunnerClient, call_seconds: float) -> None:
        self.client = client
        self.call_seconds = call_seconds

    @contextlib.contextmanager
    def create(
        self, owner: OwnerTag, shared: bool = False, read_only: bool = False, session_id: str | None = None
    ) -> Iterator[RunnerSandbox]:
        body = {"owner": {"org": owner.org, "user": owner.user}, "shared": shared, "read_only": read_only}
        if session_id is not None:
            body["session_id"] = session_id
        answer = self.client.call("POST", "/sessions", json=body, params={"seconds": self.call_seconds})
        with self._used(answer):
            yield RunnerSandbox(self.client, protocol.lease_of(answer["lease"]), self.call_seconds)

    @contextlib.contextmanager
    def open(self, session_id: str, admit: Callable[[Lease], bool]) -> Iterator[RunnerSandbox]:
        if not ids.is_session_id(session_id):
            raise SessionNotFound()
        # Admitted here, before the use touches it: a caller it does not admit must not
        # keep another's session alive.
        if not admit(self.lease(session_id)):
            raise SessionNotFound()
        answer = self.client.call("POST", f"/sessions/{session_id}/uses", params={"seconds": self.call_seconds})
        with self._used(answer):
            yield RunnerSandbox(self.client, protocol.lease_of(answer["lease"]), self.call_seconds)

    def lease(self, session_id: str) -> Lease:
        return protocol.lease_of(self.client.call("GET", f"/sessions/{session_id}"))

    def end(self, session_id: str) -> None:
        if ids.is_session_id(session_id):
            self.client.call("DELETE", f"/sessions/{session_id}")

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        if not ids.is_session_id(session_id):
            return False
        try:
            lease = self.lease(session_id)
        except SessionNotFound:
            return False
        if not still_due(lease):
            return False
        answer = self.client.call("DELETE", f"/sessions/{session_id}", params={"if_touched_at": repr(lease.touched_at)})
        return bool(answer["ended"])

    def leases(self) -> Iterator[Lease]:
        with self.client.stream("GET", "/sessions") as response:
            for line in response.iter_lines():
                if line.strip():
                    yield protocol.lease_of(json.loads(line))

    def cancel(self, run_key: str) -> None:
        if ids.is_file_id(run_key):  # the shape of every run key; anything else names no run
            self.client.call("POST", f"/cancels/{run_key}")

    @contextlib.contextmanager
    def _used(self, answer: dict[str, Any]) -> Iterator[None]:
        lease = protocol.lease_of(answer["lease"])
        try:
            yield
        finally:
            self.client.call("DELETE", f"/sessions/{lease.session_id}/uses/{answer['use']}")


class RunnerSandboxes(RunnerSessions):
    """SANDBOX_BACKEND=runner: one runner at RUNNER_URL, with its languages.

    The service starts whatever the runner's state (under Compose both start at once, and a
    slow host's runner answers later): until the runner's /health has answered, a thread
    asks again every second, and what only the runner can tell, its languages and whether
    it names sessions, is a 503 with a retry hint saying so, on /health and on every call."""

    def __init__(self, config: RunnerConfig, client: RunnerClient | None = None) -> None:
        client = client or RunnerClient(config.url, config.key, read_timeout=config.call_seconds)
        super().__init__(client, config.call_seconds)
        self.url = config.url
        self._told: dict[str, Any] = {}
        if not self._ask():
            log.warning("the sandbox runner at %s does not answer yet: every call is a 503 until it does", self.url)
            threading.Thread(target=self._wait_for_runner, name="runner-health", daemon=True).start()

    @property
    def languages(self) -> frozenset[str]:
        return frozenset(self._tells("languages"))

    @languages.setter
    def languages(self, value: frozenset[str]) -> None:
        self._told["languages"] = value

    @property
    def named_sessions(self) -> bool:
        return bool(self._tells("named_sessions"))

    @named_sessions.setter
    def named_sessions(self, value: bool) -> None:
        self._told["named_sessions"] = value

    def _tells(self, name: str) -> Any:
        if name not in self._told:
            raise BackendUnavailable(f"the sandbox runner at {self.url} does not answer yet", retry_after=2)
        return self._told[name]

    def _ask(self) -> bool:
        try:
            health = self.client.call("GET", "/health", timeout=_HEALTH_SECONDS)
        except BackendUnavailable:
            return False
        self.languages = frozenset(str(lang) for lang in health["languages"])
        self.named_sessions = bool(health["named_sessions"])
        return True

    def _wait_for_runner(self) -> None:
        while not self._ask():
            time.sleep(1)
        log.info("the sandbox runner at %s answers", self.url)

