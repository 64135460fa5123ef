"""The `runner` backend: sandboxes leased from one runner (RUNNER_URL) or a fleet of them
(RUNNER_URLS, or RUNNER_URL_TEMPLATE and RUNNER_COUNT), each call one request to one
runner's port (sandboxes.py). docs/fleet.md says how to run one.

A fleet keeps no store. A session IS its sandbox, so its id names its host: each runner
marks the ids it mints with its index (`ids.runner_mark`), and every call goes to the
runner its session's id names, with no table, no listing and no extra request. An id
that names no runner of the fleet is not found without asking anyone.

- A new session goes to a runner chosen by load: the lighter of two picked at random
  among those that answer (runs now, then sessions held: what their /health reports,
  plus what this replica sent since). A stateful hint's session goes to the runner that
  rendezvous hashing picks among ALL the configured runners, so every replica picks the
  same one whatever it knows of their health (growing the fleet moves a hint only to
  the new runner: docs/fleet.md).
- A run's inputs from other runners are carried in its one request, read from each of
  those runners in one request (`RunnerPort.carry`), as the microvm backend carries them
  between VMs.
- Each runner's /health is asked every HEALTH_INTERVAL_SECONDS. A runner that does not
  answer it (within protocol.SILENT_SECONDS), or takes no connection for a call (within
  RUNNER_CONNECT_TIMEOUT_SECONDS), is down until its /health answers again: its sessions
  are a 503 with a retry hint at once, and new sessions go elsewhere. A call that is cut
  or falls silent fails alone: one slow call tells nothing of the runner's other calls
  (every answer that takes time is kept alive), and marking the runner down for it
  would refuse everyone's. Its disk keeps its sessions; when it answers again, they do too.
- Reaping is each runner's own (it reaps its sessions on its timer): the service's reaper
  lists no fleet.
- Quotas count what an owner holds on every runner: where there are any, each runner is
  asked every USAGE_SECONDS what changed since (one request), and a call placed on one runner
  carries what the owner holds on the others (port.Quota); the runner adds its own.
- A cancel names a run, not a session: it goes to every runner that answers.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

import httpx

from ... import ids
from ...errors import BackendUnavailable, SessionNotFound
from ..port import (
    Access,
    Carried,
    FileInfo,
    HostLoad,
    HostReport,
    Input,
    Lease,
    Opened,
    Placement,
    PoolLoad,
    Ran,
    Run,
    RunSlot,
    Sandboxes,
    SendTo,
)
from . import protocol
from .client import Refused, RunnerClient, Unreachable
from .sandboxes import RunnerPort, call_seconds

log = logging.getLogger("codeexec.runner.fleet")

HEALTH_INTERVAL_SECONDS = 1.0
USAGE_SECONDS = 5.0  # how stale a fleet's view of what an owner holds elsewhere may be
# What a caller of a down runner's session is told to wait before trying again.
RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class FleetConfig:
    urls: tuple[str, ...]  # runner i at urls[i]
    key: str
    run_timeout_seconds: float  # the longest run a caller may ask for
    # Whether session ids name their runner (RUNNER_URLS, a template); RUNNER_URL: one
    # runner, whatever its ids.
    routed: bool = True
    connect_seconds: float = 2.0
    quotas: bool = False  # whether any call may carry a quota: then each runner's usage is kept

    def timeout(self) -> httpx.Timeout:
        # Reads: the runner's heartbeat keeps a working call from ever being silent that long.
        # Writes: a body the runner takes in as it writes it to disk, which may pause.
        longest = call_seconds(self.run_timeout_seconds)
        return httpx.Timeout(protocol.SILENT_SECONDS, connect=self.connect_seconds, write=10.0, pool=longest)


class FleetMember:
    """One runner of the fleet as this replica sees it: its port, whether it answers, and
    the load it last reported."""

    def __init__(self, index: int, url: str, config: FleetConfig) -> None:
        self.index, self.url, self._routed = index, url, config.routed
        self.port = RunnerPort(RunnerClient(url, config.key, config.timeout()))
        self.told: dict[str, Any] = {}  # its last /health
        self.up = False
        self.refused = False  # it claims another index
        self.sent = 0  # this replica's calls to it in flight
        self.placed = 0  # sessions this replica placed on it since its last /health
        self.held: dict[str, int] = {}  # bytes by owner digest, as of its usage pass `_usage_since`
        self._usage_epoch, self._usage_since = "", 0
        self.answered = self.failed = 0  # calls, as they ended
        self.noticed_down: float | None = None  # seconds from the last word of it to its marking down
        self._heard = time.monotonic()  # when it last answered
        self._lock = threading.Lock()

    def ask(self) -> None:
        """Its /health, now: up when it answers as the runner it should be."""
        try:
            health = self.port.client.call(protocol.HEALTH.at(), timeout=protocol.SILENT_SECONDS)
        except BackendUnavailable:
            self._down("does not answer")
            return
        self.refused = self._routed and health.get("index") != self.index
        if self.refused:
            # Two runners claiming one index would mint each other's ids: this one gets nothing.
            self._down(f"says it is runner {health.get('index')} (RUNNER_INDEX), not {self.index}", error=True)
            return
        with self._lock:
            self.told, self.placed, self._heard = health, 0, time.monotonic()
            if not self.up:
                log.info("sandbox runner %d at %s answers", self.index, self.url)
            self.up = True

    def _down(self, why: str, error: bool = False) -> None:
        with self._lock:
            if self.up or error:
                (log.error if error else log.warning)("sandbox runner %d at %s %s", self.index, self.url, why)
            if self.up:
                self.noticed_down = time.monotonic() - self._heard
            self.up = False

    def ask_usage(self) -> None:
        """What changed of what each owner holds on it since it was last asked."""
        try:
            changed = self.port.usage(self._usage_epoch, self._usage_since)
        except BackendUnavailable:
            return  # it keeps what it held; its /health says whether it is down
        held = {} if changed["whole"] else dict(self.held)
        held.update((digest, int(size)) for digest, size in changed["bytes"].items())
        self.held = {digest: size for digest, size in held.items() if size}
        self._usage_epoch, self._usage_since = str(changed["epoch"]), int(changed["generation"])

    def host(self) -> HostLoad:
        """What it holds as it last said, and its state as this replica sees it."""
        told = self.told
        pools = {kind: PoolLoad(**pool) for kind, pool in told.get("pools", {}).items()}
        state = "up" if self.up else "refused" if self.refused else "down"
        return HostLoad(str(self.index), state, int(told.get("runs", 0)), int(told.get("sessions", 0)),
                        int(told.get("bytes_used", 0)), int(told.get("bytes_limit", 0)), pools,
                        self.answered, self.failed, self.noticed_down)  # fmt: skip

    def report(self) -> HostReport:
        if self.up:
            with contextlib.suppress(BackendUnavailable):
                return replace(self.port.report(), load=self.host())  # its state as this replica sees it
        return HostReport(self.host())

    def load(self) -> tuple[int, int]:
        return int(self.told.get("runs", 0)) + self.sent, int(self.told.get("sessions", 0)) + self.placed

    @contextlib.contextmanager
    def calling(self) -> Iterator[RunnerPort]:
        """Its port for one call: at once a 503 while it is down, and down when the call
        finds it takes no connection."""
        if not self.up:
            raise BackendUnavailable(
                f"sandbox runner {self.index}, which holds this session, does not answer; try again later",
                retry_after=RETRY_AFTER_SECONDS,
            )
        with self._lock:
            self.sent += 1
        try:
            yield self.port
        except Refused:
            self._ended(failed=True)
            self._down("takes no connection")
            raise
        except Unreachable:  # cut or silent: this call fails alone
            self._ended(failed=True)
            raise
        except BaseException:  # the runner answered, with an error of the call's own
            self._ended(failed=False)
            raise
        self._ended(failed=False)

    def _ended(self, *, failed: bool) -> None:
        with self._lock:
            self.sent -= 1
            if failed:
                self.failed += 1
            else:
                self.answered += 1
                self._heard = time.monotonic()


class RunnerFleet(Sandboxes):
    """SANDBOX_BACKEND=runner. The service starts whatever the runners' state (under
    Compose they start at once, and a slow host's runner answers later): what only a runner
    can tell, its languages and whether it names sessions, is a 503 with a retry hint until
    one has answered."""

    def __init__(self, config: FleetConfig) -> None:
        self.routed = config.routed
        self.runners = [FleetMember(i, url, config) for i, url in enumerate(config.urls)]
        self._stop = threading.Event()
        for runner in self.runners:
            runner.ask()
            watch = threading.Thread(
                target=_watch, args=(weakref.ref(self), runner, self._stop, config.quotas), daemon=True
            )
            watch.start()

    def close(self) -> None:
        self._stop.set()
        for runner in self.runners:
            runner.port.client.close()

    # -- what the runners tell --------------------------------------------------------------

    @property
    def languages(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset(self._told("languages"))

    @property
    def named_sessions(self) -> bool:  # type: ignore[override]
        return bool(self._told("named_sessions"))

    def _told(self, name: str) -> Any:
        told = next((r.told for r in self.runners if name in r.told), None)
        if told is None:
            raise BackendUnavailable("no sandbox runner has answered yet", retry_after=2)
        return told[name]

    def hosts(self) -> list[HostLoad]:
        return [runner.host() for runner in self.runners]

    def reports(self) -> list[HostReport]:
        """Each runner's, asked of all at once; one that does not answer is told by its load."""
        with ThreadPoolExecutor(max_workers=len(self.runners), thread_name_prefix="report") as asking:
            return list(asking.map(FleetMember.report, self.runners))

    def health(self) -> tuple[bool, dict[str, Any]]:
        runners = [{"index": r.index, "up": r.up} for r in self.runners]
        if any(r.up for r in self.runners):
            return True, {"runners": runners}
        since = "yet" if not any(r.told for r in self.runners) else "now"
        return False, {"runners": runners, "details": f"no sandbox runner answers {since}"}

    # -- where a session is ---------------------------------------------------------------

    def _of(self, session_id: str) -> FleetMember:
        """The runner a session's id names; not found when it names none of the fleet."""
        if not ids.is_session_id(session_id):
            raise SessionNotFound()
        if not self.routed:
            return self.runners[0]
        index = ids.runner_of(session_id)
        if index >= len(self.runners):
            raise SessionNotFound()
        return self.runners[index]

    def _new(self) -> FleetMember:
        """A runner for a new session: the lighter of two that answer, picked at random."""
        up = [r for r in self.runners if r.up]
        if not up:
            raise BackendUnavailable("no sandbox runner answers; try again later", retry_after=RETRY_AFTER_SECONDS)
        chosen = min(random.sample(up, min(2, len(up))), key=FleetMember.load)
        chosen.placed += 1
        return chosen

    def _hinted(self, named: str) -> tuple[FleetMember, str]:
        """A stateful hint's runner, by rendezvous hashing over every configured runner,
        and its session's id marked for it."""
        if not self.routed:
            return self.runners[0], named
        chosen = max(self.runners, key=lambda r: hashlib.sha256(f"{r.index}\0{named[1:]}".encode()).digest())
        return chosen, ids.on_runner(named, chosen.index)

    def _placed(self, placement: Placement) -> Iterator[tuple[FleetMember, Placement]]:
        """Where a placement may land, in order: its named session's runner; else each
        runner holding candidates, with those; else, when it may, a new session's. Each with
        what its owner holds on the other runners, where it has a quota."""
        if placement.named is not None:
            runner, named = self._hinted(placement.named)
            yield runner, self._elsewhere(runner, replace(placement, named=named))
            return
        by_runner: dict[int, list[str]] = {}
        for session_id in placement.candidates:
            with contextlib.suppress(SessionNotFound):
                by_runner.setdefault(self._of(session_id).index, []).append(session_id)
        for index, candidates in by_runner.items():
            runner = self.runners[index]
            yield runner, self._elsewhere(runner, replace(placement, candidates=tuple(candidates), new=False))
        if placement.new:
            runner = self._new()
            yield runner, self._elsewhere(runner, replace(placement, candidates=()))

    def _elsewhere(self, target: FleetMember, placement: Placement) -> Placement:
        quota = placement.quota
        if quota is None:
            return placement
        owner, others = placement.access.owner, [r for r in self.runners if r is not target]
        user = sum(r.held.get(owner.user, 0) for r in others)
        org = sum(r.held.get(owner.org, 0) for r in others)
        return replace(placement, quota=replace(quota, user_elsewhere=user, org_elsewhere=org))

    # -- the coarse operations --------------------------------------------------------------

    def execute(self, run: Run, carried: Iterable[Carried] = (), slot: RunSlot = contextlib.nullcontext) -> Ran:
        for runner, placement in self._placed(run.placement):
            with contextlib.suppress(SessionNotFound), runner.calling() as port:
                here = replace(run, placement=placement)
                return port.execute(here, self._carried(runner, run.reader, run.inputs), slot)
        raise SessionNotFound()

    def write_files(self, placement: Placement, files: Iterable[tuple[str, BinaryIO]], limit: int) -> str:
        for runner, where in self._placed(placement):
            with runner.calling() as port:
                return port.write_files(where, files, limit)  # an upload names one session at most
        raise SessionNotFound()

    def list_files(self, session_id: str, access: Access) -> list[FileInfo]:
        with self._of(session_id).calling() as port:
            return port.list_files(session_id, access)

    def read_file(self, session_id: str, access: Access, file_id: str, send_to: SendTo | None = None) -> Opened:
        with self._of(session_id).calling() as port:
            return port.read_file(session_id, access, file_id)

    def stat_file(self, session_id: str, access: Access, file_id: str) -> FileInfo:
        with self._of(session_id).calling() as port:
            return port.stat_file(session_id, access, file_id)

    def remove_file(self, session_id: str, access: Access, file_id: str) -> str:
        with self._of(session_id).calling() as port:
            return port.remove_file(session_id, access, file_id)

    def read_inputs(self, session_id: str, access: Access, inputs: Iterable[Input]) -> Iterator[Carried]:
        with self._of(session_id).calling() as port:
            return port.read_inputs(session_id, access, inputs)

    def read_record(self, session_id: str, access: Access, key: str) -> bytes:
        with self._of(session_id).calling() as port:
            return port.read_record(session_id, access, key)

    def _carried(self, target: FleetMember, access: Access, inputs: tuple[Input, ...]) -> Iterator[Carried]:
        """The inputs that live on other runners, read from each in one request as the run
        pulls them. A runner that does not answer carries none: the run says which inputs
        it could not have, as for any input not found."""
        by_runner: dict[int, list[int]] = {}
        for index, wanted in enumerate(inputs):
            with contextlib.suppress(SessionNotFound):
                if wanted.origin and (origin := self._of(wanted.origin)) is not target:
                    by_runner.setdefault(origin.index, []).append(index)
        for runner_index, indexes in by_runner.items():
            with contextlib.suppress(BackendUnavailable), self.runners[runner_index].calling() as port:
                found = port.carry(access, [inputs[i] for i in indexes])
                yield from (replace(c, index=indexes[c.index]) for c in found)

    def lease(self, session_id: str) -> Lease:
        with self._of(session_id).calling() as port:
            return port.lease(session_id)

    # -- ending, cancels and the reaper -------------------------------------------------------

    def end(self, session_id: str) -> None:
        with contextlib.suppress(SessionNotFound), self._of(session_id).calling() as port:
            port.end(session_id)

    def cancel(self, run_key: str) -> None:
        for runner in self.runners:
            with contextlib.suppress(BackendUnavailable), runner.calling() as port:
                port.cancel(run_key)

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        return False  # each runner reaps its own sessions

    def leases(self) -> Iterator[Lease]:
        return iter(())  # each runner reaps its own sessions


def _watch(fleet: weakref.ref[RunnerFleet], runner: FleetMember, stop: threading.Event, quotas: bool) -> None:
    """Ask a runner's /health every interval, and its usage every USAGE_SECONDS where there
    are quotas, as long as its fleet is in use."""
    usage_due = 0.0
    while not stop.wait(HEALTH_INTERVAL_SECONDS) and fleet() is not None:
        runner.ask()
        if quotas and runner.up and time.monotonic() >= usage_due:
            runner.ask_usage()
            usage_due = time.monotonic() + USAGE_SECONDS
