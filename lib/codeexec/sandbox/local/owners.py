"""Which process made a thing that outlives a crash: a run's cgroup, an upload's staging
directory. Its name carries its maker's pid and start time (a pid alone is reused), so
that a service removes what dead processes left (at its start, and at each reaper pass),
and never what another live service on the host (a second process, a test run) is using.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

_TAG = re.compile(r"(\d+)\.(\d+)")


def tag() -> str:
    """This process's: `pid.starttime`."""
    return _tag(os.getpid())


@functools.cache
def _tag(pid: int) -> str:
    return f"{pid}.{_start_time(pid)}"


def _start_time(pid: int) -> int | None:
    """The process's start, in clock ticks since boot (proc(5), stat field 22); None when
    gone. A zombie is gone: killed, it keeps its pid and start time until its parent reaps
    it, which a supervisor may not have done when the next process starts."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, *fields = stat.rsplit(")", 1)[1].split()
    return None if state in ("Z", "X") else int(fields[18])


def gone(name_tag: str) -> bool:
    """Whether the process a tag names has ended. A name without one is never taken for gone."""
    match = _TAG.fullmatch(name_tag)
    return match is not None and _start_time(int(match[1])) != int(match[2])
