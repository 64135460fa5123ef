"""The reaper: the only thing that ends sessions, on two clocks.

A lease ends when the TTL it was taken for has run out, or when nobody has touched it for
the idle limit. Nothing on the request path ends a lease: the reply of every call hands
back a session id that the next calls address.

The reaper never ends a session a call is using: the backend re-checks the lease under
the session's own lock and skips it when busy (see `Sandboxes.end_if`). On Lambda this is
a scheduled function (handlers/reaper.py); in the embedded server it runs on a timer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .sandbox.port import Lease, Sandboxes

log = logging.getLogger("codeexec.reaper")


@dataclass
class ReapReport:
    seen: int = 0
    ended: int = 0
    skipped: int = 0  # due, but a call was using it: the next pass tries again
    failed: int = 0
    seconds: float = 0.0  # how long the pass took

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def is_due(lease: Lease, now: float, idle_timeout: float) -> bool:
    return now >= lease.leased_at + lease.ttl_seconds or now >= lease.touched_at + idle_timeout


def reap(sandboxes: Sandboxes, idle_timeout: float, clock: Callable[[], float] = time.time) -> ReapReport:
    report = ReapReport()
    started = time.perf_counter()
    for lease in sandboxes.leases():
        report.seen += 1
        if not is_due(lease, clock(), idle_timeout):
            continue
        try:
            # Checked again under the session's lock: a call may have touched it since.
            ended = sandboxes.end_if(lease.session_id, lambda current: is_due(current, clock(), idle_timeout))
        except Exception:
            log.exception("could not end session %s", lease.session_id)
            report.failed += 1
            continue
        if ended:
            report.ended += 1
        else:
            report.skipped += 1
    report.seconds = round(time.perf_counter() - started, 6)
    log.info("reaper pass: %s", report.as_dict())
    return report

