"""One fork server: zygote.py, with forkserver.py, in a bubblewrap sandbox of its own,
made as a cold run's (no network, /usr read-only, the sandbox uid), with the
capabilities it needs inside its own user namespace and nothing of any session. It
imports what its kind names (policy.KINDS) and then forks runs made ahead (ready.py),
as many as its pool asks for, until it is retired; it ends with the last run it made
(they are in its PID namespace, and would die with it).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from pathlib import Path

from .. import bwrap, cgroups, layout, seccomp
from ..layout import CODE_DIR
from ..limits import Confinement
from . import wire
from .policy import Kind

# What a server runs, copied into its /code: the interpreter, the server's processes, and
# the two modules they share with the service.
SOURCES = {name: (Path(__file__).parent / name).read_bytes()
           for name in ("zygote.py", "forkserver.py", "wire.py", "kernel.py")}  # fmt: skip
# What a server keeps inside its own user namespace: namespaces and mounts, a run's
# loopback up, and emptying the bounding set.
CAPABILITIES = ("CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SETPCAP")
# A server is infrastructure, not a run: its cgroup bounds it to a quarter of the host's
# memory, and its processes (each run's init starts there, then moves to its own) to this many.
_MEMORY_BYTES = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
_PROCESSES = 4096
_START_SECONDS = 60.0  # a server's imports, at low priority on a busy host


class Server:
    """One fork server, which forks runs made ahead."""

    def __init__(self, name: str, kind: Kind, confinement: Confinement, nice: int, stop: int | None = None) -> None:
        """`nice`: its priority while it imports; `stop`: a descriptor that turns readable
        when the server is no longer wanted, even before it is ready (the pools close)."""
        self.name = name
        self.confinement = confinement
        self.born = time.monotonic()
        self.forked = 0  # the runs made from it
        self._lock = threading.Lock()
        self._out = 0  # its runs not yet ended
        self._retired = False
        self._stack = contextlib.ExitStack()
        try:
            self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._stack.callback(self.control.close)
            with theirs:
                made = cgroups.run_cgroup(confinement.cgroup_parents, _MEMORY_BYTES, _PROCESSES)
                cgroup = self._stack.enter_context(made)
                argv = [
                    # The CPU limit is each run's own: the server's imports spend none of it.
                    *confinement.limits.prlimit_argv(cgroup.controllers, cpu=False),
                    "/usr/bin/python3", "-s", f"{CODE_DIR}/zygote.py", "--control", str(theirs.fileno()),
                ]  # fmt: skip
                terms = bwrap.ServerTerms(CAPABILITIES, (theirs.fileno(),), nice)
                self.sandbox = self._stack.enter_context(
                    bwrap.sandbox(confinement, None, argv, _files(kind, confinement), cgroup, terms)
                )
            self._wait_ready(stop, nice)
        except BaseException:
            self._close()
            raise

    def _wait_ready(self, stop: int | None, nice: int) -> None:
        """Its hello, once it has imported everything: then it gets a normal priority,
        for the runs that it forks on demand."""
        self.control.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        control = self.control.fileno()
        ended = self.sandbox.pidfd  # bwrap holds the server's end too: its sandbox's end shows here
        waits = [fd for fd in (control, ended, stop) if fd is not None]
        said = ended is not None and select.select(waits, [], [], _START_SECONDS)[0] == [control]
        hello = wire.read(self.control) if said else None
        if hello is None or hello.kind != wire.HELLO or not hello.pid:
            self.sandbox.kill()
            _, stderr = self.sandbox.streams
            raise RuntimeError(f"the fork server did not start: {os.read(stderr, 4096).decode(errors='replace')}")
        if nice:
            os.setpriority(os.PRIO_PROCESS, hello.pid, 0)

    def claim(self) -> bool:
        """One more run from it, which releases it once, however it ends; False once it is
        retired."""
        with self._lock:
            if self._retired:
                return False
            self.forked += 1
            self._out += 1
        return True

    def age(self) -> float:
        return time.monotonic() - self.born

    def alive(self) -> bool:
        return self.sandbox.poll() is None

    def release(self) -> None:
        """One of its runs ended."""
        with self._lock:
            self._out -= 1
            ended = self._retired and self._out == 0
        if ended:
            self._close()

    def retire(self) -> None:
        """No more runs from it; it ends with the last of those it made (they are in its
        PID namespace, and would die with it)."""
        with self._lock:
            ended = not self._retired and self._out == 0
            self._retired = True
        if ended:
            self._close()

    def _close(self) -> None:
        if hasattr(self, "sandbox"):  # killed first: closing its context waits for it to end
            self.sandbox.kill()
        self._stack.close()


def _files(kind: Kind, confinement: Confinement) -> dict[str, bytes]:
    """A server's /code: its sources, the filter, what each run finds (layout.py), and its
    configuration, which says what of it each run gets."""
    limits, run_files = confinement.limits, layout.run_files()
    config = wire.Config(
        ram_disks=layout.RAM_DISKS,
        ram_disk_bytes=limits.memory_bytes,
        proc_covered=layout.PROC_COVERED,
        cpu=limits.cpu,
        seccomp=f"{CODE_DIR}/.seccomp.bpf",
        files=tuple(layout.path_inside(name) for name in run_files),
        preload=kind.preload,
        warm_ups=kind.warm_ups,
        kept_out=kind.kept_out,
        copy_after=kind.copy_after,
    )
    return {**SOURCES, ".seccomp.bpf": seccomp.bpf(), **run_files, wire.CONFIG: config.to_json()}
