"""cgroups for one run: a memory limit and a process limit over its whole process tree.

Detected, never assumed. For each of `memory` and `pids`: cgroup v2 when the service's
own cgroup hands the controller to its children (its cgroup.subtree_control lists it);
else the controller's v1 hierarchy; else nothing, and rlimits stand in (see limits.py).
Either way the service must be able to write there (root, or a delegated subtree).
A run's cgroups are made under the service's own, so whatever limits the service keeps
limiting its runs too. A mount may show a part of its hierarchy only (a container's own
cgroup, with the host's cgroup namespace): the service's cgroup is found through the
mount's root. In a cgroup namespace of its own, the runner hands v2's controllers down
itself (delegate()).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from . import mountinfo, owners

CONTROLLERS = ("memory", "pids")
_PREFIX = "codeexec-"  # then its maker's tag (owners.py) and a random part
# The runner's own cgroup when it handed v2's controllers down (delegate()): runs' cgroups
# are made beside it, in its parent.
LEAF = "codeexec-runner"  # never taken for a dead maker's (sweep(): no tag in it)

log = logging.getLogger("codeexec")


@dataclass(frozen=True)
class Parent:
    """Where one controller's run cgroups are made: the service's own cgroup in it."""

    path: Path
    v2: bool


@functools.cache
def detect() -> Mapping[str, Parent]:
    """The controllers this host enforces for us, each with its parent cgroup."""
    own = own_cgroups()
    v1_mounts: dict[str, Path] = {}
    v2_parent = None
    for mount in mountinfo.mounts():
        if mount.fstype == "cgroup2" and (path := _mounted(mount, own.get(""))) is not None:
            v2_parent = path.parent if path.name == LEAF else path
        elif mount.fstype == "cgroup":
            for c in mount.super_options & set(CONTROLLERS):
                if (path := _mounted(mount, own.get(c))) is not None:
                    v1_mounts[c] = path
    found = {}
    for controller in CONTROLLERS:
        if v2_parent is not None and controller in _delegated(v2_parent):
            found[controller] = Parent(v2_parent, v2=True)
        elif controller in v1_mounts:
            found[controller] = Parent(v1_mounts[controller], v2=False)
    return {c: p for c, p in found.items() if os.access(p.path, os.W_OK)}


def delegate() -> None:
    """cgroup v2 hands controllers to child cgroups only from a cgroup with no process in it.
    At the root of a cgroup namespace of its own (a container's, which the engine made with
    memory and pids on offer but handed to no child), the runner moves into a leaf, hands
    them down, and runs' cgroups are made beside the leaf."""
    if own_cgroups().get("") != "":
        return  # a host's cgroup is its manager's (systemd's Delegate=) to hand down
    path = next((p for m in mountinfo.mounts() if m.fstype == "cgroup2" and (p := _mounted(m, "")) is not None), None)
    if path is None or not os.access(path, os.W_OK):
        return
    offered = set((path / "cgroup.controllers").read_text().split()) & set(CONTROLLERS)
    if not offered - _delegated(path):
        return
    (path / LEAF).mkdir(exist_ok=True)
    for pid in (path / "cgroup.procs").read_text().split():
        with contextlib.suppress(ProcessLookupError):
            (path / LEAF / "cgroup.procs").write_text(pid)
    (path / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(offered)))
    detect.cache_clear()
    log.info("cgroup v2: the runner moved into %s and hands %s down to runs", path / LEAF, ", ".join(sorted(offered)))


def under(root: str, own: str) -> str | None:
    """`own` (a cgroup path, relative) inside a mount of the cgroup `root`, or None."""
    path = Path("/", own)
    return str(path.relative_to(root)) if path.is_relative_to(root) else None


def _mounted(mount: mountinfo.Mount, own: str | None) -> Path | None:
    inside = None if own is None else under(mount.root, own)
    return None if inside is None else Path(mount.point, inside)


def _delegated(path: Path) -> set[str]:
    try:
        return set((path / "cgroup.subtree_control").read_text().split())
    except OSError:
        return set()


def own_cgroups() -> dict[str, str]:
    """controller -> this process's cgroup path, relative; "" is the v2 hierarchy."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path.lstrip("/")
    return own


class RunCgroup:
    """The cgroups of one run, one per controller's hierarchy (v2 puts both in one)."""

    def __init__(self, parents: Mapping[str, Parent]) -> None:
        self.controllers = frozenset(parents)
        name = f"{_PREFIX}{owners.tag()}-{secrets.token_hex(8)}"
        self._dirs = {c: p.path / name for c, p in parents.items()}
        self._v2 = {c: p.v2 for c, p in parents.items()}

    def create(self, memory_bytes: int, max_processes: int) -> None:
        for path in set(self._dirs.values()):
            path.mkdir()
        if "memory" in self._dirs:
            self._limit_memory(self._dirs["memory"], memory_bytes)
        if "pids" in self._dirs:
            _write(self._dirs["pids"] / "pids.max", max_processes)

    def _limit_memory(self, path: Path, limit: int) -> None:
        # Swap counts too, or a run could spill past its limit into swap.
        if self._v2["memory"]:
            _write(path / "memory.max", limit)
            _write_if_present(path / "memory.swap.max", 0)
        else:
            _write(path / "memory.limit_in_bytes", limit)
            _write_if_present(path / "memory.memsw.limit_in_bytes", limit)

    def add(self, pid: int) -> None:
        """Move a process in; what it starts from then on is born inside."""
        for path in set(self._dirs.values()):
            _write(path / "cgroup.procs", pid)

    def entries(self) -> list[int]:
        """Its cgroup.procs, opened: a process given them moves itself in by writing 0,
        checked against the opener's credentials (a forked run's init, warm/forkserver.py)."""
        return [os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for path in set(self._dirs.values())]

    def oom_killed(self) -> bool:
        if "memory" not in self._dirs:
            return False
        events = "memory.events" if self._v2["memory"] else "memory.oom_control"
        return _counter(self._dirs["memory"] / events, "oom_kill") > 0

    def hit_process_limit(self) -> bool:
        return "pids" in self._dirs and _counter(self._dirs["pids"] / "pids.events", "max") > 0

    def kill(self) -> None:
        """SIGKILL every process still inside (cgroup.kill where v2 has it)."""
        for path in set(self._dirs.values()):
            if (path / "cgroup.kill").exists():
                _write(path / "cgroup.kill", 1)
            else:
                _kill_members(path / "cgroup.procs")

    def remove(self) -> None:
        for path in set(self._dirs.values()):
            _rmdir(path)


@contextlib.contextmanager
def run_cgroup(parents: Mapping[str, Parent], memory_bytes: int, max_processes: int) -> Iterator[RunCgroup]:
    cgroup = RunCgroup(parents)
    try:
        cgroup.create(memory_bytes, max_processes)
        yield cgroup
    finally:
        cgroup.remove()


def sweep(parents: Mapping[str, Parent]) -> int:
    """Remove the run cgroups that processes now gone left behind (a service killed, or
    stopped before its teardown ran), where no process is left in them; how many."""
    removed = 0
    for parent in {p.path for p in parents.values()}:
        with contextlib.suppress(OSError), os.scandir(parent) as entries:
            for entry in entries:
                maker = entry.name.removeprefix(_PREFIX).rpartition("-")[0]
                if entry.name.startswith(_PREFIX) and entry.is_dir() and owners.gone(maker):
                    removed += _remove_if_empty(Path(entry.path))
    if removed:
        log.info("removed %d run cgroups left by processes that ended", removed)
    return removed


def _remove_if_empty(path: Path) -> bool:
    try:
        if (path / "cgroup.procs").read_text().strip():
            log.warning("cgroup %s outlived its maker with processes in it; left alone", path)
            return False
        path.rmdir()
        return True
    except OSError:
        return False


def _kill_members(procs: Path) -> None:
    """Each pid listed is pinned by a pidfd, then killed only if still listed: a pid that
    ended meanwhile, and was given to some other process, is never killed."""
    with contextlib.suppress(FileNotFoundError):
        for pid in map(int, procs.read_text().split()):
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                if str(pid) in procs.read_text().split():
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            finally:
                os.close(pidfd)


def _rmdir(path: Path) -> None:
    # The run's processes are dead by now (they die with its PID namespace), but a dead
    # process stays in its cgroup until its parent reaps it, a few ms later. An empty
    # cgroup left behind costs little, so failing here must not fail the run.
    deadline = time.monotonic() + 2
    while path.exists():
        try:
            path.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                log.warning("could not remove cgroup %s", path)
                return
            time.sleep(0.005)


def _write(path: Path, value: int) -> None:
    path.write_text(str(value))


def _write_if_present(path: Path, value: int) -> None:
    if path.exists():  # swap accounting is optional in the kernel
        _write(path, value)


def _counter(path: Path, key: str) -> int:
    for line in path.read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0
