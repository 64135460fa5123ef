"""The `runner` backend: sandboxes leased from a runner (`python -m codeexec.runner`) over
HTTP, every coarse operation of the port one request (routes in protocol.py).

The runner answers each with the `local` backend's own operation: the session's lease,
its use (the reaper keeps away) and its exclusive hold are taken and let go of inside the
request, so a caller that died mid-call leaves nothing held. Access travels as data and
the runner checks it itself: a caller it does not admit never touches the session. Inputs
from other sessions of the runner are copied there, where the bytes are.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, cast
from urllib.parse import quote

from ... import ids
from ...errors import BackendUnavailable, SessionNotFound, TooLarge
from ..port import Access, Carried, FileInfo, Input, Lease, Opened, Placement, Ran, Run, Sandboxes, SendTo, Slot
from . import protocol
from .client import ResponseReader, RunnerClient

log = logging.getLogger("codeexec.runner.client")
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
        """The longest one request may take: a run, and the copies and listings around it."""
        return 2 * max(self.run_timeout_seconds, _SLOWEST_RUN_SECONDS) + 4 * _GRACE_SECONDS


class RunnerPort(Sandboxes):
    """The port over one runner's client: what the `runner` backend is, and what the
    `microvm` backend talks to once it has found a session's VM."""

    def __init__(self, client: RunnerClient, call_seconds: float) -> None:
        self.client = client
        self.call_seconds = call_seconds

    def execute(self, run: Run, carried: Iterable[Carried] = (), slot: Slot = contextlib.nullcontext) -> Ran:
        frames = itertools.chain(
            [(protocol.run_json(run), None)],
            (({"index": c.index, "found": c.found, "read_only": c.read_only}, c.reader) for c in carried),
        )
        with slot():
            answer = self.client.call("POST", "/runs", timeout=self.call_seconds, content=protocol.frames(frames))
        return protocol.ran_of(answer)

    def write_files(self, placement: Placement, files: Iterable[tuple[str, BinaryIO]], limit: int) -> str:
        spec = {"placement": protocol.placement_json(placement), "limit": limit}
        bounded = (({"path": path}, _Bounded(data, limit)) for path, data in files)
        frames: Iterable[tuple[dict[str, Any], protocol.Readable | None]] = itertools.chain([(spec, None)], bounded)
        answer = self.client.call("POST", "/writes", timeout=self.call_seconds, content=protocol.frames(frames))
        return str(answer["session_id"])

    def list_files(self, session_id: str, access: Access) -> list[FileInfo]:
        listing = self.client.call("GET", _session(session_id, "files"), params=protocol.access_params(access))
        return [protocol.file_of(item) for item in listing]

    def read_file(self, session_id: str, access: Access, file_id: str, send_to: SendTo | None = None) -> Opened:
        params = {**protocol.access_params(access), "id": file_id}
        stack, response = self.client.opened("GET", _session(session_id, "file"), params=params)
        headers = response.headers
        found = json.loads(headers[protocol.PATH_HEADER])
        info = FileInfo(found, int(headers[protocol.SIZE_HEADER]), int(headers[protocol.MTIME_HEADER]))
        return Opened(info, cast(BinaryIO, ResponseReader(stack, response)))

    def stat_file(self, session_id: str, access: Access, file_id: str) -> FileInfo:
        params = {**protocol.access_params(access), "id": file_id}
        return protocol.file_of(self.client.call("GET", _session(session_id, "stat"), params=params))

    def remove_file(self, session_id: str, access: Access, file_id: str) -> str:
        params = {**protocol.access_params(access), "id": file_id}
        return str(self.client.call("DELETE", _session(session_id, "file"), params=params)["path"])

    def read_inputs(self, session_id: str, access: Access, inputs: Iterable[Input]) -> Iterator[Carried]:
        wanted = [{"file_id": i.file_id, "name": i.name} for i in inputs]
        params = protocol.access_params(access)
        stack, response = self.client.opened("POST", _session(session_id, "reads"), params=params, json=wanted)
        with stack:
            reader = ResponseReader(stack, response)
            for header, body in protocol.frames_of(reader.read):
                yield Carried(int(header["index"]), str(header["found"]), bool(header["read_only"]), body)

    def read_record(self, session_id: str, access: Access, key: str) -> bytes:
        path = _session(session_id, "records", key)
        return self.client.raw("GET", path, params=protocol.access_params(access))

    def lease(self, session_id: str) -> Lease:
        return protocol.lease_of(self.client.call("GET", _session(session_id)))

    def end(self, session_id: str) -> None:
        if ids.is_session_id(session_id):
            self.client.call("DELETE", f"/sessions/{session_id}")

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        try:
            lease = self.lease(session_id)
        except SessionNotFound:
            return False
        if not still_due(lease):
            return False
        # The runner ends it only if nobody touched it since this look, and no call holds it.
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


class RunnerSandboxes(RunnerPort):
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


def _session(session_id: str, *rest: str) -> str:
    """A session's route; an id of the wrong shape never reaches the runner."""
    if not ids.is_session_id(session_id):
        raise SessionNotFound()
    return "/".join([f"/sessions/{session_id}", *(quote(part) for part in rest)])


class _Bounded:
    """A file's bytes counted as they go: an oversized one stops at once instead of being
    sent whole (the runner counts too)."""

    def __init__(self, data: BinaryIO, limit: int) -> None:
        self._data, self._limit, self._sent = data, limit, 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._data.read(size)
        self._sent += len(chunk)
        if self._sent > self._limit:
            raise TooLarge(f"the file is larger than {self._limit} bytes")
        return chunk
