"""This process's mounts, as /proc/self/mountinfo lists them: which part of a filesystem
each one shows (a cgroup mount's cgroup) and with which flags, which /proc/mounts omits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mount:
    root: str  # the part of its filesystem mounted: a cgroup mount's cgroup path, "/" for all
    point: str
    options: frozenset[str]  # the mount's own (ro, nosuid, ...)
    fstype: str
    super_options: frozenset[str]  # the filesystem's: a v1 cgroup mount's controllers


def mounts() -> list[Mount]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # id parent major:minor root point options [optional fields...] - fstype source super
        fields, _, rest = line.partition(" - ")
        _, _, _, root, point, options, *_ = fields.split()
        fstype, _, super_options = rest.split()
        found.append(Mount(root, point, frozenset(options.split(",")), fstype, frozenset(super_options.split(","))))
    return found
