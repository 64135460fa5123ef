"""Admission control: which calls this process takes on at once, and fairly between users.

Runs hold a sandbox, memory and a core for seconds; an upload holds its body's stream and
may wait for a run in its session. So each kind has a bounded number of slots, and a call
that cannot have one is refused at once (429 with a retry hint), never queued.

First come, first served holds only within a share, so that no caller can take the host:
- a quarter of a kind's slots is kept for whoever comes next, and the rest is split
  evenly between the users with calls in flight: a user (one of an organization's; the
  key holder that names none is one too) may have at most its part in flight, three
  quarters of the slots while it is alone, so a newcomer finds a slot free however many
  calls one user sends (without a queue, or a run stopped for it, only a free slot serves
  a newcomer at once);
- a session at most SESSION_CALLS calls in flight: one runs, the others wait their turn.
  An upload names its session, and is counted here; a run is counted by the backend, by
  the session it lands in, which only the backend knows (the one it names may be gone, or
  not the caller's, and its files' then chosen: `port.SESSION_CALLS`);
- a run takes its slot only once it holds its session (`run_slot`, which `Sessions` hands
  the backend to enter inside the session's exclusive hold): a call waiting for a session
  that another call holds waits in a thread, holding no slot, and counts in its user's
  share, so those waiting are bounded too.
Runs go to threads of their own, so however many there are, downloads, listings and
/health (which needs no thread at all) always find one.

Listings and downloads share the threads and the interpreter of everything else: each has
slots of its own and the same shares by user (a listing of a large session costs seconds of
a core; fifty of one user's made another's download wait half a minute). They are not
counted by session: a client fetches a run's files at once. A download (or a file's stat or
removal) whose file only a listing finds takes a listing's slot for it too (`listing_slot`).

A named service key (service_keys.py) may bound its own runs besides: so many in flight at
once, so many started a minute, counted by this process (a replica of several counts its own).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from ..errors import RateLimited
from ..sandbox.port import SESSION_CALLS
from ..service_keys import ServiceKey
from ..telemetry import calls

T = TypeVar("T")
# Memory the service keeps for itself before it counts runs' memory.
_RESERVE_BYTES = 1 << 30
_RUNS_PER_CORE = 4  # most runs wait on little: a core each would leave cores idle
_RETRY_SECONDS = 2
LISTINGS = 8  # listings in flight at most: a large one costs seconds of a core
DOWNLOADS = 32  # downloads being opened at most (their bytes stream after)


def default_runs(memory_bytes: int) -> int:
    """What the host allows: a few runs per core, and no more than its memory holds."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    by_memory = (pages - _RESERVE_BYTES) // max(memory_bytes, 1)
    return max(1, min(_RUNS_PER_CORE * (os.cpu_count() or 1), by_memory))


class Shares:
    """The calls of one kind in flight, counted by user and by session against its slots."""

    def __init__(self, kind: str, slots: int, most: int) -> None:
        self.kind = kind
        self.slots = slots
        self._most = most  # calls in flight at most, whoever makes them
        self._users: Counter[Hashable] = Counter()
        self._sessions: Counter[Hashable] = Counter()
        self._lock = threading.Lock()

    def share(self, user: Hashable) -> int:
        users = len(self._users) + (user not in self._users)
        kept = max(1, self.slots // 4) if self.slots > 1 else 0  # for whoever comes next
        return max(1, (self.slots - kept) // users)

    def enter(self, user: Hashable, session: str | None) -> Callable[[], None]:
        """Count a call in, or RateLimited; returns what counts it out."""
        named = (user, session) if session else None
        with self._lock:
            self._refuse(user, named)
            self._users[user] += 1
            if named:
                self._sessions[named] += 1

        def leave() -> None:
            with self._lock:
                self._users -= Counter({user: 1})  # a count that reaches 0 is dropped
                if named:
                    self._sessions -= Counter({named: 1})

        return leave

    def _refuse(self, user: Hashable, named: Hashable | None) -> None:
        held, kind = self._users[user], self.kind
        if held >= self.share(user):
            raise RateLimited(
                f"this user has {held} {kind}s in flight, its share of the {self.slots} {kind} slots while"
                " others may need them; try again shortly",
                retry_after=_RETRY_SECONDS,
                reason="share",
            )
        if named and self._sessions[named] >= SESSION_CALLS:
            said = f"this session has {SESSION_CALLS} {kind}s in flight already"
            raise RateLimited(said, retry_after=_RETRY_SECONDS, reason="session")
        if self._users.total() >= self._most:
            raise RateLimited(
                f"all {self.slots} {kind} slots are taken; try again shortly", retry_after=_RETRY_SECONDS, reason="full"
            )


class KeyLimits:
    """The runs of each named key that bounds its own: in flight, and started in the last minute."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._in_flight: Counter[str] = Counter()
        self._started: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def enter(self, key: ServiceKey) -> Callable[[], None]:
        """Count a run in, or RateLimited; returns what counts it out."""
        with self._lock:
            if key.runs_at_once is not None and self._in_flight[key.name] >= key.runs_at_once:
                said = f"the service key '{key.name}' has {key.runs_at_once} runs in flight, all it may"
                raise RateLimited(said, retry_after=_RETRY_SECONDS, reason="key_runs")
            if key.runs_per_minute is not None:
                self._within_rate(key)
            self._in_flight[key.name] += 1

        def leave() -> None:
            with self._lock:
                self._in_flight -= Counter({key.name: 1})

        return leave

    def _within_rate(self, key: ServiceKey) -> None:
        assert key.runs_per_minute is not None
        now = self._clock()
        started = self._started.setdefault(key.name, deque())
        while started and started[0] <= now - 60:
            started.popleft()
        if len(started) >= key.runs_per_minute:
            wait = math.ceil(started[0] + 60 - now)
            said = f"the service key '{key.name}' started {key.runs_per_minute} runs in the last minute, all it may"
            raise RateLimited(said, retry_after=max(1, wait), reason="key_rate")
        started.append(now)


class Admission:
    def __init__(self, runs: int, uploads: int) -> None:
        self.runs = runs
        # As many again may wait for their sessions, holding no slot.
        self._run_calls = Shares("run", runs, most=2 * runs)
        self._run_slots = threading.BoundedSemaphore(runs)
        self._run_threads = ThreadPoolExecutor(max_workers=2 * runs, thread_name_prefix="run")
        self._uploads = Shares("upload", uploads, most=uploads)
        self._keys = KeyLimits()
        self._reads = {
            "listing": Shares("listing", LISTINGS, most=LISTINGS),
            "download": Shares("download", DOWNLOADS, most=DOWNLOADS),
        }

    def start_run(self, user: Hashable, work: Callable[[], T], key: ServiceKey | None = None) -> Future[T]:
        """Start a run in a thread of its own, or RateLimited past the caller's share or its
        key's limits."""
        with contextlib.ExitStack() as counted:
            counted.callback(self._run_calls.enter(user, None))
            if key is not None:
                counted.callback(self._keys.enter(key))
            future = self._run_threads.submit(calls.carried(work))
            leave = counted.pop_all()  # counted out when the run ends, not now
        future.add_done_callback(lambda _: leave.close())
        return future

    @contextlib.contextmanager
    def run_slot(self) -> Iterator[None]:
        """One of the run slots, for a run that holds its session now."""
        if not self._run_slots.acquire(blocking=False):
            raise RateLimited(
                f"all {self.runs} run slots are taken; try again shortly", retry_after=_RETRY_SECONDS, reason="full"
            )
        try:
            yield
        finally:
            self._run_slots.release()

    @contextlib.contextmanager
    def upload(self, user: Hashable, session: str | None) -> Iterator[None]:
        """An upload's slot, held from before its body is read to its end."""
        leave = self._uploads.enter(user, session)
        try:
            yield
        finally:
            leave()

    @contextlib.contextmanager
    def read(self, kind: str, user: Hashable) -> Iterator[None]:
        """A listing's or a download's slot, within the caller's share."""
        leave = self._reads[kind].enter(user, None)
        try:
            yield
        finally:
            leave()

    def listing_slot(self, user: Hashable) -> contextlib.AbstractContextManager[None]:
        """A listing's slot: also what a download takes for a file only a listing finds."""
        return self.read("listing", user)
