"""A run under way collected to its end, however it was launched (a bubblewrap sandbox,
bwrap.py, a fork of a warm server, warm/, or the `memory` backend's plain process): its
output read and bounded, its wall clock and cancel watched, and the limits it hit said as
facts (port.LimitHit).
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from ..port import Limit, LimitHit, RunResult
from . import cgroups
from .limits import Limits

# How often a run looks whether it was cancelled: a stat of a marker.
_WATCH_SECONDS = 0.02


class Started(Protocol):
    """A run under way, as `finish` collects it: a bubblewrap sandbox (bwrap.Bubblewrap) or a run
    forked from a warm server (warm/ready.py)."""

    @property
    def streams(self) -> tuple[int, int]:
        """Where the program's stdout and stderr arrive."""

    def poll(self) -> int | None:
        """The exit code once the run ended, without waiting."""

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, waiting at most timeout seconds (None: until the run ends)."""

    def kill(self) -> None:
        """Kill the whole run at once."""


def finish(
    started: Started, cgroup: cgroups.RunCgroup, timeout: float, limits: Limits, cancelled: Callable[[], bool] | None
) -> RunResult:
    """Collect a started run to its end, or stop it at its limits."""
    output = collect(started, timeout, limits.max_output_bytes, cancelled)
    return output.result(_confined(limits, output.exit_code, cgroup))


@dataclass
class Output:
    """What a run said, as kept, and how it ended."""

    stdout: bytes
    stderr: bytes
    cap: int  # the bytes kept of each stream
    dropped: tuple[str, ...]  # the streams cut at the cap
    stopped: LimitHit | None  # the limit the service stopped the run at, if it did
    exit_code: int

    def result(self, confined: Iterable[LimitHit] = ()) -> RunResult:
        """The run's result, its hits in order: where it was stopped, what its confinement
        held (`confined`), the streams cut."""
        cut = (LimitHit(Limit.OUTPUT, self.cap, stopped=False, stream=name) for name in self.dropped)
        return RunResult(
            stdout=self.stdout.decode("utf-8", "replace"),
            stderr=self.stderr.decode("utf-8", "replace"),
            exit_code=None if self.stopped else self.exit_code,
            hits=(*([self.stopped] if self.stopped else []), *confined, *cut),
        )


def collect(started: Started, timeout: float, cap: int, cancelled: Callable[[], bool] | None) -> Output:
    """Read both streams to the end and wait for the run, keeping at most `cap` bytes of
    each, and stop the run at the deadline or when it is cancelled. Output past the
    cap is read and dropped, so a program printing without end costs the service no
    memory; one that closes its pipes is still waited for, not on."""
    cancelled = cancelled or (lambda: False)
    kept = {"stdout": bytearray(), "stderr": bytearray()}
    dropped: set[str] = set()
    stopped = None
    next_watch = time.monotonic()
    deadline = next_watch + timeout
    with selectors.DefaultSelector() as sel:
        for fd, name in zip(started.streams, ("stdout", "stderr"), strict=True):
            sel.register(fd, selectors.EVENT_READ, name)
        while sel.get_map() or started.poll() is None:
            now = time.monotonic()
            if now >= deadline:
                stopped = LimitHit(Limit.TIME, timeout)
            elif now >= next_watch:
                if cancelled():
                    stopped = LimitHit(Limit.CANCELLED, 0)
                next_watch = now + _WATCH_SECONDS
            if stopped:
                started.kill()
                break
            wait = max(min(deadline, next_watch) - time.monotonic(), 0)
            if sel.get_map():
                _read(sel, wait, kept, dropped, cap)
            else:
                started.wait(wait)
    exit_code = started.wait()
    assert exit_code is not None
    return Output(bytes(kept["stdout"]), bytes(kept["stderr"]), cap, tuple(sorted(dropped)), stopped, exit_code)


def _read(sel: selectors.BaseSelector, timeout: float, kept: dict[str, bytearray], dropped: set[str], cap: int) -> None:
    for key, _ in sel.select(timeout):
        chunk = os.read(key.fd, 1 << 16)
        if not chunk:
            sel.unregister(key.fileobj)
            continue
        buf = kept[key.data]
        room = cap - len(buf)
        if len(chunk) > room:
            dropped.add(key.data)
        buf += chunk[: max(room, 0)]


def _confined(limits: Limits, exit_code: int, cgroup: cgroups.RunCgroup) -> list[LimitHit]:
    """Each limit of the run's confinement it hit. (A write past the session's disk limit
    fails in the program itself, with "Disk quota exceeded".)"""
    hits = []
    # bwrap reports a program killed by a signal as 128 + the signal's number.
    if exit_code == 128 + signal.SIGXCPU:
        hits.append(LimitHit(Limit.CPU, limits.cpu_seconds))
    if exit_code == 128 + signal.SIGXFSZ:  # Python ignores it: its write fails instead
        hits.append(LimitHit(Limit.FILE_SIZE, limits.max_file_bytes, stopped=False))
    if cgroup.oom_killed():
        hits.append(LimitHit(Limit.MEMORY, limits.memory_bytes))
    if cgroup.hit_process_limit():
        hits.append(LimitHit(Limit.PROCESSES, limits.max_processes, stopped=False))
    return hits
