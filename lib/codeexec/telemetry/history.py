"""The last hour of a process, per minute, in memory: what the console charts (console.py).

Each process keeps its own (a runner its runs; the service its calls, by key); the console
asks each once per refresh and adds them up, so no store keeps any of it, and a restart
forgets the hour (never a file). A minute holds counts and a histogram of durations in fixed
buckets, so minutes of several runners add up and their percentiles are read from the sum:
within a bucket's width (a fifth of its value) of the true one.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..reaper import ReapReport
from .calls import Call

MINUTES = 60
FAILURES = 50  # the last failed runs kept
TOP = 20  # users and tenants told by runs
# Durations from 1 ms to 20 minutes, each bound 1.25 times the one before it.
BOUNDS = tuple(0.001 * 1.25**i for i in range(int(math.log(1200 / 0.001, 1.25)) + 2))


@dataclass
class Minute:
    at: int  # its first second, since the epoch
    runs: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # by outcome
    buckets: Counter[int] = field(default_factory=Counter)  # durations: how many in each of BOUNDS
    rate_limited: int = 0
    users: Counter[str] = field(default_factory=Counter)  # runs, by the digest of their user
    tenants: Counter[str] = field(default_factory=Counter)  # and of their organization
    keys: dict[str, Counter[str]] = field(default_factory=dict)  # calls, runs and 429s, by key name

    def json(self) -> dict[str, Any]:
        return {"at": self.at, "runs": self.runs, "failures": dict(self.failures), "rate_limited": self.rate_limited,
                "buckets": {str(i): n for i, n in self.buckets.items()}}  # fmt: skip


class History:
    """A sink of the process's telemetry (telemetry/__init__.py): every call it is told of
    counts in its minute."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._minutes: deque[Minute] = deque(maxlen=MINUTES)
        self._failures: deque[dict[str, Any]] = deque(maxlen=FAILURES)
        self._lock = threading.Lock()

    def called(self, call: Call) -> None:
        with self._lock:
            minute = self._minute()
            minute.rate_limited += call.status == 429
            run = call.run
            if call.key is not None:
                counts = minute.keys.setdefault(call.key, Counter())
                counts["calls"] += 1
                counts["rate_limited"] += call.status == 429
                counts["runs"] += run is not None
            if run is None:
                return
            minute.runs += 1
            minute.buckets[bisect.bisect_left(BOUNDS, run.seconds)] += 1
            if call.owner is not None:
                minute.users[call.owner.user] += 1
                minute.tenants[call.owner.org] += 1
            if run.outcome != "ok":
                minute.failures[run.outcome] += 1
                self._failures.append({
                    "at": self._clock(), "lang": run.lang, "outcome": run.outcome, "session": call.session,
                    "user": call.owner.user if call.owner else "", "stderr": run.stderr_head,
                })  # fmt: skip

    def reaped(self, report: ReapReport) -> None:
        return None  # the console shows the reaper through its metrics, not its history

    def summary(self) -> dict[str, Any]:
        """The hour as JSON: the minutes with any call, oldest first; the last failures,
        newest first; who ran most; each service key's calls, runs and 429s."""
        with self._lock:
            self._minute()
            minutes = [m for m in self._minutes if m.runs or m.rate_limited or m.keys]
            failures = [f for f in reversed(self._failures) if f["at"] > self._clock() - MINUTES * 60]
            keys: dict[str, Counter[str]] = {}
            for minute in minutes:
                for name, counts in minute.keys.items():
                    keys.setdefault(name, Counter()).update(counts)
            return {
                "minutes": [m.json() for m in minutes],
                "failures": failures,
                "runs_by": {
                    "user": dict(sum((m.users for m in minutes), Counter()).most_common(TOP)),
                    "tenant": dict(sum((m.tenants for m in minutes), Counter()).most_common(TOP)),
                },
                "keys": {name: dict(counts) for name, counts in keys.items()},
            }

    def _minute(self) -> Minute:
        """The minute now; those of more than an hour ago are gone."""
        now = int(self._clock()) // 60 * 60
        if not self._minutes or self._minutes[-1].at != now:
            self._minutes.append(Minute(now))
        while self._minutes[0].at <= now - MINUTES * 60:
            self._minutes.popleft()
        return self._minutes[-1]


def percentile(buckets: Counter[int], share: float) -> float | None:
    """The duration under which `share` of the runs counted in `buckets` (by bucket) ended:
    the upper bound of the bucket it falls in."""
    total = sum(buckets.values())
    if not total:
        return None
    seen = 0
    for index in sorted(buckets):
        seen += buckets[index]
        if seen >= share * total:
            return BOUNDS[min(index, len(BOUNDS) - 1)]
    return BOUNDS[-1]
