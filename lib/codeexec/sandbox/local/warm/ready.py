"""A run made ahead (ReadyRun): a fork of a server that became a sandbox as strong as a cold
run's (forkserver.py): mount, PID, network, IPC and UTS namespaces of its own, its own
/proc, /tmp, /dev/shm and /code, a cgroup of its own with the run's limits, the same
rlimits and seccomp filter, the sandbox uid with no capability, and a CPU clock that
starts at its fork. It waits for its session: at the run the service makes a detached
copy of the session's mount (open_tree, nosuid,nodev) and hands it over with the program;
the run attaches it at /mnt/data and checks that it arrived. Nothing a sandbox sees lives
on the host's filesystem: no run directory, no shared mount.

It serves one run, then it is gone, so nothing of one run reaches another, and none sees
two sessions. A run cannot see, signal, trace or read its server or a sibling: they are
outside its PID namespace, and the filter denies ptrace and process_vm_*. The reply is
built from the run's exit and output; reaping it and removing its cgroup happen after,
off the reply's path (pools.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
from collections.abc import Callable

from ...port import RunResult
from .. import bwrap, cgroups, collect
from ..toolchains import Launch
from . import kernel, wire
from .server import Server

log = logging.getLogger("codeexec.local.warm")

_READY_SECONDS = 10.0  # a run made ahead
_ENDED_SECONDS = 5.0  # a run's last process, after it was killed


def fork(server: Server, order: wire.ForkOrder) -> ReadyRun | None:
    """A run made from `server` as `order` says; None once the server is retired."""
    return ReadyRun(server, order) if server.claim() else None


class ReadyRun:
    """A run made ahead: its init and program forked from a server, in namespaces and a
    cgroup of their own, waiting for their session (forkserver.py)."""

    def __init__(self, server: Server, order: wire.ForkOrder):
        self.server = server
        self.limits = server.confinement.limits
        self.nice = order.nice
        self.cgroup = cgroups.RunCgroup(server.confinement.cgroup_parents)
        self.pids: dict[str, int] = {}  # host pids: init, program
        self.pidfd: int | None = None  # the init's: killing it ends the run's PID namespace
        try:
            self.ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except BaseException:
            server.release()
            raise
        self.ctl.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        try:
            with theirs:
                self.cgroup.create(self.limits.memory_bytes, self.limits.max_processes)
                entries = self.cgroup.entries()
                try:
                    wire.order_fork(server.control, order, wire.ForkDescriptors(theirs.fileno(), tuple(entries)))
                finally:
                    for fd in entries:
                        os.close(fd)
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        """Each of its two processes says hello once it is where it should be (the program
        once it is made ready: zygote.ready)."""
        self.ctl.settimeout(_READY_SECONDS)
        try:
            while len(self.pids) < 2:
                hello = wire.expect(self.ctl, wire.HELLO)
                hello.close_fds()
                if not hello.pid:
                    raise OSError("a run made ahead said hello without its credentials")
                self.pids[hello.value] = hello.pid
        except OSError as error:
            raise RuntimeError(f"a run made ahead failed: {error}") from error
        self.ctl.settimeout(None)
        self.pidfd = os.pidfd_open(self.pids["init"])

    def run(self, data_dir: str, launch: Launch, cancelled: Callable[[], bool] | None) -> RunResult | None:
        """The run, in the session whose artifact directory is data_dir. None when it
        failed before the program had its run: the caller runs it cold. Closed after, by
        whoever took it (pools.WarmPools.run)."""
        try:
            streams = self._hand_over(data_dir, launch)
        except OSError:
            log.exception("a warm sandbox could not take its run; it runs cold")
            return None
        try:
            return collect.finish(_Running(self, streams), self.cgroup, launch.timeout, self.limits, cancelled)
        finally:
            for fd in streams:
                os.close(fd)

    def _hand_over(self, data_dir: str, launch: Launch) -> tuple[int, int]:
        """The session's files, the program and its output pipes to the run; the pipes'
        read ends back."""
        tree = kernel.open_tree(data_dir)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sources = [bwrap.memfd(name, content) for name, content in launch.files.items()]
        try:
            kernel.restrict(tree)
            for pid in self.pids.values() if self.nice else ():  # a run gets its normal priority
                os.setpriority(os.PRIO_PROCESS, pid, 0)
            given = wire.RunDescriptors(tree, out_w, err_w, tuple(sources))
            wire.order_run(self.ctl, _order(launch), given)
            self._wait_started()
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            for fd in (tree, out_w, err_w, *sources):
                os.close(fd)
        return out_r, err_r

    def _wait_started(self) -> None:
        """Started, or not: then nothing of the program ran, and the run goes cold."""
        self.ctl.settimeout(_READY_SECONDS)
        try:
            wire.expect(self.ctl, wire.STARTED).close_fds()
        finally:
            self.ctl.settimeout(None)

    def ended(self, timeout: float | None) -> bool:
        """Whether the init has ended, waiting at most timeout seconds. The init is the last
        of the run's processes (the kernel ends the rest of its PID namespace before it), and
        nothing the run says or holds makes it end sooner or look ended."""
        assert self.pidfd is not None
        return bool(select.select([self.pidfd], [], [], timeout)[0])

    def reported_exit(self) -> int:
        """The exit status the ended init reported, or that of a run killed whole (as by
        the memory limit, or at its time limit) when it reported none."""
        code = None
        self.ctl.setblocking(False)
        with contextlib.suppress(OSError):  # nothing more to read
            while (said := wire.read(self.ctl)).kind is not None:
                said.close_fds()
                code = said.value if said.kind == wire.EXIT else code
        return code if isinstance(code, int) and 0 <= code <= 255 else 128 + signal.SIGKILL

    def close(self) -> None:
        """Kill what is left of the run, wait for its last process, remove its cgroup.
        Every wait here is bounded and on the kernel's word, never the run's: one run
        cannot hold up the teardown of others."""
        try:
            if self.pidfd is not None:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                if not self.ended(_ENDED_SECONDS):
                    log.warning("a warm run's init did not end %s s after it was killed", _ENDED_SECONDS)
            else:  # no pidfd yet: a program waiting for its run ends when the socket closes, and its init with it
                with contextlib.suppress(OSError):
                    self.ctl.shutdown(socket.SHUT_WR)
            self.cgroup.kill()  # anything of the run the above did not reach
            self.cgroup.remove()
        finally:
            self.ctl.close()
            if self.pidfd is not None:
                os.close(self.pidfd)
            self.server.release()


def _order(launch: Launch) -> wire.RunOrder:
    """A Python program runs in the forked interpreter itself; anything else by exec."""
    program = launch.interpreted
    if program is None:
        return wire.RunOrder(tuple(launch.files), launch.argv)
    return wire.RunOrder(tuple(launch.files), launch.argv, program.source, program.args)


class _Running:
    """A forked run under way, as collect.finish collects it (collect.Started): it ends
    when its init does, with the exit status the init reported on the control socket."""

    def __init__(self, ready: ReadyRun, streams: tuple[int, int]) -> None:
        self.ready = ready
        self.streams = streams
        self._code: int | None = None

    def poll(self) -> int | None:
        return self.wait(0)

    def wait(self, timeout: float | None = None) -> int | None:
        # The run has ended when its init has; only then is what it reported read.
        if self._code is None and self.ready.ended(timeout):
            self._code = self.ready.reported_exit()
        return self._code

    def kill(self) -> None:
        assert self.ready.pidfd is not None
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.ready.pidfd, signal.SIGKILL)
