"""Warm sandboxes: runs made ahead, each a fork of a long-lived interpreter.

Two kinds of fork server (forkserver.py, zygote.py), a pool of runs made ahead for each:
an **interpreter** that has imported numpy, pandas and matplotlib and drawn a figure, for
py runs that name them; a **bare** one, Python started and nothing imported, for other
py runs and, by exec, for every other language (the namespaces, mounts and cgroup made
ahead are most of a cold start that is not the language's own). A refill costs a fork,
never a new interpreter and its imports.

A server lives in a bubblewrap sandbox of its own, made as a cold run's (no network,
/usr read-only, the sandbox uid), with the capabilities it needs inside its own user
namespace and nothing of any session. It never runs a program: each run made ahead
(Slot) is a fork that became a sandbox as strong as a cold run's: mount, PID, network,
IPC and UTS namespaces of its own, its own /proc, /tmp, /dev/shm and /code, a cgroup of
its own with the run's limits, the same rlimits and seccomp filter, the sandbox uid
with no capability, and a CPU clock that starts at its fork. It waits for its session:
at the run the service makes a detached copy of the session's mount (open_tree,
nosuid,nodev) and hands it over with the program; the slot attaches it at /mnt/data and
checks that it arrived. Nothing a sandbox sees lives on the host's filesystem: no slot
directory, no shared mount.

A slot serves one run, then it is gone, so nothing of one run reaches another, and none
sees two sessions. A run cannot see, signal, trace or read its server or a sibling:
they are outside its PID namespace, and the filter denies ptrace and process_vm_*.

Never slower than cold, never weaker: a run takes one ready, or one forked for it at once
(a fork costs milliseconds; the imports a cold run makes, half a second); wherever a
server cannot be had (not root, no user namespaces with capabilities, no open_tree; for
the one with the libraries, no memory cgroup) those runs are cold, and the log says why.
Refills run at low priority (nice) while half the pool is ready; a run gets its normal
priority at its hand-over.
The reply is built from the run's exit and output; reaping it and removing its cgroup
happen after, in a thread of their own. A server is replaced after _SERVER_RUNS runs or
_SERVER_SECONDS: its forks share its address-space layout (docs/isolation.md "Warm sandboxes").
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import json
import logging
import os
import queue
import re
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path

from ..port import RunResult
from . import bwrap, cgroups, fonts, forkserver, seccomp
from .limits import Limits
from .toolchains import CODE_DIR, PYTHON_SITE

log = logging.getLogger("codeexec.local.warm")

_SOURCES = {name: (Path(__file__).parent / name).read_bytes() for name in ("zygote.py", "forkserver.py")}

# A server is infrastructure, not a run: its cgroup bounds it to a quarter of the host's
# memory, and its processes (each run's init starts there, then moves to its own) to this many.
_SERVER_MEMORY_BYTES = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
_SERVER_PROCESSES = 4096
_SERVER_RUNS = 1000
_SERVER_SECONDS = 15 * 60
_START_SECONDS = 60.0  # a server's imports, at low priority on a busy host
_READY_SECONDS = 10.0  # a run made ahead
_ENDED_SECONDS = 5.0  # a run's last process, after it was killed
_RETRY_SECONDS = 1.0  # after a run made ahead failed to start


def _may_renice() -> bool:
    """Giving a process its normal priority back takes CAP_SYS_NICE, which a container may
    lack: then refills are not niced at all, or their runs would keep the lower priority."""
    status = Path("/proc/self/status").read_text()
    effective = next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:"))
    return bool(int(effective, 16) >> 23 & 1)  # CAP_SYS_NICE


_REFILL_NICE = 10 if _may_renice() else 0


class Server:
    """One fork server: zygote.py in a sandbox of its own, which forks runs made ahead."""

    def __init__(self, preload: bool, limits: Limits, as_user: tuple[int, int], parents: Mapping[str, cgroups.Parent]):
        self.born = time.monotonic()
        self.forked = 0  # the runs made from it
        self._lock = threading.Lock()
        self._out = 0  # its slots not yet ended
        self._retired = False
        self._stack = contextlib.ExitStack()
        try:
            self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._stack.callback(self.control.close)
            with theirs:
                cgroup = self._stack.enter_context(
                    cgroups.run_cgroup(parents, _SERVER_MEMORY_BYTES, _SERVER_PROCESSES)
                )
                argv = [
                    # The CPU limit is each run's own: the server's imports spend none of it.
                    *limits.prlimit_argv(cgroup.controllers, cpu=False),
                    "/usr/bin/python3", "-s", f"{CODE_DIR}/zygote.py", "--control", str(theirs.fileno()),
                    *([] if preload else ["--bare"]),
                ]  # fmt: skip
                self.sandbox = self._stack.enter_context(
                    bwrap.sandbox(
                        None, argv, _files(limits), limits, as_user, cgroup, _REFILL_NICE,
                        forkserver.CAPABILITIES, (theirs.fileno(),),
                    )  # fmt: skip
                )
            self._wait_ready()
        except BaseException:
            self._close()
            raise

    def _wait_ready(self) -> None:
        """Its hello, once it has imported everything: then it gets a normal priority,
        for the runs that it forks on demand."""
        self.control.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        control = self.control.fileno()
        ended = self.sandbox.pidfd  # bwrap holds the server's end too: its sandbox's end shows here
        said = ended is not None and select.select([control, ended], [], [], _START_SECONDS)[0] == [control]
        message, _, pid = forkserver.receive(self.control) if said else (None, [], None)
        if message != {"hello": "server"} or not pid:
            self.sandbox.kill()
            _, stderr = self.sandbox.streams
            raise RuntimeError(f"the fork server did not start: {os.read(stderr, 4096).decode(errors='replace')}")
        if _REFILL_NICE:
            os.setpriority(os.PRIO_PROCESS, pid, 0)

    def fork(self, limits: Limits, parents: Mapping[str, cgroups.Parent], nice: int) -> Slot | None:
        """A run made ahead, its processes at `nice` until its hand-over; None once the
        server is retired."""
        with self._lock:
            if self._retired:
                return None
            self.forked += 1
            self._out += 1
        try:
            return Slot(self, limits, parents, nice)
        except BaseException:
            self.release()
            raise

    def expired(self) -> bool:
        return self.forked >= _SERVER_RUNS or time.monotonic() - self.born > _SERVER_SECONDS

    def alive(self) -> bool:
        return self.sandbox.poll() is None

    def release(self) -> None:
        """One of its slots ended."""
        with self._lock:
            self._out -= 1
            ended = self._retired and self._out == 0
        if ended:
            self._close()

    def retire(self) -> None:
        """No more slots from it; it ends with the last of those it made (they are in its
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


def _files(limits: Limits) -> dict[str, bytes]:
    """A server's /code: the two sources, and what each run gets (forkserver.Config)."""
    cache = fonts.files()
    config = {
        "ram_disk_bytes": limits.memory_bytes,
        "cpu": limits.cpu,
        "seccomp": f"{CODE_DIR}/.seccomp.bpf",
        "files": [f"{CODE_DIR}/.site/sitecustomize.py", *cache],
    }
    return {
        **_SOURCES, ".seccomp.bpf": seccomp.bpf(), ".site/sitecustomize.py": PYTHON_SITE, **cache,
        forkserver.CONFIG: json.dumps(config).encode(),
    }  # fmt: skip


class Slot:
    """A run made ahead: its init and program forked from a server, in namespaces and a
    cgroup of their own, waiting for their session (forkserver.py)."""

    def __init__(self, server: Server, limits: Limits, parents: Mapping[str, cgroups.Parent], nice: int):
        self.server = server
        self.limits = limits
        self.nice = nice
        self.cgroup = cgroups.RunCgroup(parents)
        self.pids: dict[str, int] = {}  # host pids: init, program
        self.pidfd: int | None = None  # the init's: killing it ends the run's PID namespace
        self.ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ctl.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        try:
            with theirs:
                self.cgroup.create(limits.memory_bytes, limits.max_processes)
                entries = self.cgroup.entries()
                try:
                    forkserver.send(server.control, {"fork": True}, [theirs.fileno(), *entries])
                finally:
                    for fd in entries:
                        os.close(fd)
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        """Each of its two processes says hello once it is where it should be; each is
        given the slot's priority as it does (what it forks from then on inherits it)."""
        self.ctl.settimeout(_READY_SECONDS)
        while len(self.pids) < 2:
            message, fds, pid = forkserver.receive(self.ctl)
            for fd in fds:
                os.close(fd)
            if message is None or "hello" not in message or not pid:
                raise RuntimeError(f"a run made ahead failed: {message}")
            self.pids[message["hello"]] = pid
            if self.nice:
                os.setpriority(os.PRIO_PROCESS, pid, self.nice)
        self.ctl.settimeout(None)
        self.pidfd = os.pidfd_open(self.pids["init"])

    def run(
        self, data_dir: str, program: Mapping[str, bytes], argv: Sequence[str], python: bool, timeout: float,
        cancelled: Callable[[], bool] | None,
    ) -> RunResult | None:  # fmt: skip
        """The run, in the session whose artifact directory is data_dir; then gone. None
        when the slot failed before the program had its run: the caller runs cold."""
        try:
            try:
                streams = self._hand_over(data_dir, program, argv, python)
            except OSError:
                log.exception("a warm sandbox could not take its run; it runs cold")
                return None
            try:
                return bwrap.finish(_Forked(self, streams), self.cgroup, timeout, self.limits, cancelled)
            finally:
                for fd in streams:
                    os.close(fd)
        finally:
            _ending.put(self)  # off the reply's path

    def _hand_over(
        self, data_dir: str, program: Mapping[str, bytes], argv: Sequence[str], python: bool
    ) -> tuple[int, int]:
        """The session's files, the program and its output pipes to the slot; the pipes'
        read ends back."""
        tree = forkserver.open_tree(data_dir)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sources = [bwrap.memfd(name, content) for name, content in program.items()]
        try:
            forkserver.restrict(tree)
            for pid in self.pids.values() if self.nice else ():  # a run gets its normal priority
                os.setpriority(os.PRIO_PROCESS, pid, 0)
            # A py run is the toolchain's `python3 -s <source> <args...>`, run in the interpreter itself.
            run = {"source": argv[2], "args": list(argv[3:])} if python else {"argv": list(argv)}
            forkserver.send(self.ctl, {"files": list(program), "run": run}, [tree, out_w, err_w, *sources])
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
            message, fds, _ = forkserver.receive(self.ctl)
        finally:
            self.ctl.settimeout(None)
        for fd in fds:
            os.close(fd)
        if message != {"started": True}:
            raise OSError(errno.EIO, f"the run was not started: {message}")

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
            while True:
                message, fds, _ = forkserver.receive(self.ctl)
                for fd in fds:
                    os.close(fd)
                if message is None:
                    break
                code = message.get("exit", code)
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
            else:  # its init never said hello: an init waiting for a run ends when the socket closes
                with contextlib.suppress(OSError):
                    self.ctl.shutdown(socket.SHUT_WR)
            self.cgroup.kill()  # anything of the run the above did not reach
            self.cgroup.remove()
        finally:
            self.ctl.close()
            if self.pidfd is not None:
                os.close(self.pidfd)
            self.server.release()


class _Forked:
    """A forked run under way, as bwrap.finish collects it (bwrap.Started): it ends when
    its init does, with the exit status the init reported on the control socket."""

    def __init__(self, slot: Slot, streams: tuple[int, int]) -> None:
        self.slot = slot
        self.streams = streams
        self._code: int | None = None

    def poll(self) -> int | None:
        return self.wait(0)

    def wait(self, timeout: float | None = None) -> int | None:
        # The run has ended when its init has; only then is what it reported read.
        if self._code is None and self.slot.ended(timeout):
            self._code = self.slot.reported_exit()
        return self._code

    def kill(self) -> None:
        assert self.slot.pidfd is not None
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.slot.pidfd, signal.SIGKILL)


# bwrap --die-with-parent ends a server when the THREAD that started it ends: servers are
# started by one that lives as long as the process (an executor's would end before atexit).
_ServerTerms = tuple[bool, Limits, tuple[int, int], Mapping[str, cgroups.Parent]]
_starts: queue.SimpleQueue[tuple[Future[Server], _ServerTerms]] = queue.SimpleQueue()


def _start_servers() -> None:
    while True:
        started, terms = _starts.get()
        try:
            started.set_result(Server(*terms))
        except Exception as error:
            started.set_exception(error)


_ending: queue.SimpleQueue[Slot] = queue.SimpleQueue()


@functools.cache
def _start_threads() -> None:
    for target, name in ((_end_slots, "warm-teardown"), (_start_servers, "warm-server")):
        threading.Thread(target=target, name=name, daemon=True).start()


def _end_slots() -> None:
    while True:
        slot = _ending.get()
        try:
            slot.close()
        except Exception:
            log.exception("a warm sandbox's run did not end cleanly")


class Pool:
    """Up to `size` runs made ahead, refilled in the background from one server."""

    def __init__(
        self, preload: bool, size: int, limits: Limits, as_user: tuple[int, int],
        parents: Mapping[str, cgroups.Parent],
    ) -> None:  # fmt: skip
        self.preload = preload
        self.size = size
        self.taken = 0  # how many runs it served (for tests and benchmarks)
        self._limits, self._as_user, self._parents = limits, as_user, parents
        self.server: Server | None = None
        self._replacing = False
        self._ready: list[Slot] = []
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self.closed = False
        self._failures = 0
        self._wanted.set()
        name = "warm-interpreter" if preload else "warm-bare"
        threading.Thread(target=self._refill, name=name, daemon=True).start()

    @classmethod
    def start(
        cls, preload: bool, size: int, limits: Limits, as_user: tuple[int, int],
        parents: Mapping[str, cgroups.Parent],
    ) -> Pool | None:  # fmt: skip
        """A pool, or None where runs cannot be made ahead as strong as cold ones."""
        if size <= 0:
            return None
        if os.geteuid() != 0:
            log.warning("warm sandboxes are off: the service is not root (it hands each run its session's mount)")
            return None
        try:  # a session reaches a forked run as a detached mount (Linux 5.2)
            os.close(forkserver.open_tree("/"))
        except OSError as error:
            log.warning("warm sandboxes are off: no detached mounts here (open_tree: %s)", error.strerror)
            return None
        if preload and "memory" not in parents:
            # The address-space limit that stands in would count the libraries. A bare
            # server's runs hold it as cold runs do: it is the server's, and each fork's.
            log.warning("warm sandboxes with the libraries are off: no memory cgroup")
            return None
        _start_threads()
        pool = cls(preload, size, limits, as_user, parents)
        _pools.append(pool)
        return pool

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Wait until every run of the pool is ready (tests, benchmarks: runs never wait)."""
        deadline = time.monotonic() + timeout
        while len(self._ready) < self.size and not self.closed and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self._ready) >= self.size

    def take(self) -> Slot | None:
        """A run made ahead, at once, or None."""
        with self._lock:
            slot = self._ready.pop(0) if self._ready else None
            self.taken += slot is not None
        self._wanted.set()
        return slot

    def make(self) -> Slot | None:
        """A run made now, at normal priority, when none was ready: it costs a fork, where a
        cold run costs a new interpreter and its imports. None without a live server."""
        server = self.server
        if self.closed or server is None or not server.alive():
            return None
        try:
            slot = server.fork(self._limits, self._parents, 0)
        except Exception:
            log.exception("a run could not be forked on demand; it runs cold")
            return None
        with self._lock:
            self.taken += slot is not None
        return slot

    def close(self) -> None:
        self.closed = True
        self._wanted.set()
        with self._lock:
            ready, self._ready = self._ready, []
            server, self.server = self.server, None
        for slot in ready:
            slot.close()
        if server is not None:
            server.retire()

    def _refill(self) -> None:
        while not self.closed:
            self._wanted.wait()
            self._wanted.clear()
            while not self.closed and len(self._ready) < self.size:
                try:
                    # At low priority while the pool has half its runs ready; past that, runs
                    # are about to be forked on demand: the same work, better done ahead.
                    nice = _REFILL_NICE if len(self._ready) >= self.size / 2 else 0
                    slot = self._current_server().fork(self._limits, self._parents, nice)
                except Exception:
                    if self.closed:  # closed while it was made (the service is ending): no failure
                        return
                    self._failed()
                    time.sleep(_RETRY_SECONDS)
                    continue
                self._failures = 0
                if slot is None:  # its server was just replaced: the next comes from the new one
                    continue
                with self._lock:
                    if not self.closed:
                        self._ready.append(slot)
                        continue
                slot.close()  # the pool closed while it was made

    def _failed(self) -> None:
        """Cold runs go on; a server that failed makes no more, and a pool that fails
        three times in a row stops trying (a host that lacks what a fork needs)."""
        self._failures += 1
        log.exception("a warm sandbox failed to start")
        with self._lock:
            server, self.server = self.server, None
        if server is not None:
            server.retire()
        if self._failures >= 3:
            log.error("warm sandboxes are off after three failures in a row: every run is cold")
            self.close()

    def _current_server(self) -> Server:
        server = self.server
        if server is None or not server.alive():
            if server is not None:
                server.retire()
            server = self.server = self._start_server().result()
        elif server.expired() and not self._replacing:
            self._replacing = True  # the old one forks on while the new one imports
            self._start_server().add_done_callback(self._replaced)
        return server

    def _start_server(self) -> Future[Server]:
        started: Future[Server] = Future()
        _starts.put((started, (self.preload, self._limits, self._as_user, self._parents)))
        return started

    def _replaced(self, started: Future[Server]) -> None:
        self._replacing = False
        if started.exception() is not None:
            log.error("a fork server could not be replaced; the old one serves on", exc_info=started.exception())
            return
        new = started.result()
        with self._lock:
            old, self.server = self.server, None if self.closed else new
        for server in (old, new if self.closed else None):
            if server is not None:
                server.retire()


# A program that names one of zygote.PRELOADED, or a library that imports one of them
# (measured: each of these imports numpy at least), wants the interpreter that imported
# them; any other, a bare one.
_PRELOADED_USERS = re.compile(
    r"\b(numpy|pandas|matplotlib|openpyxl|seaborn|scipy|sklearn|statsmodels|plotly|pyarrow|cv2|skimage|imageio"
    r"|wordcloud|markitdown)\b"
)


def wants_preloaded(code: str) -> bool:
    return _PRELOADED_USERS.search(code) is not None


_pools: list[Pool] = []


@atexit.register
def _close_all() -> None:
    """The servers die with the process (bwrap --die-with-parent), and their runs with
    them; the runs made ahead, and those not yet taken down, are ended here, so that
    their cgroups go too."""
    for pool in _pools:
        pool.close()
    while not _ending.empty():
        _ending.get().close()

