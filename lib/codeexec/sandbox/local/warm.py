"""Warm sandboxes: runs made ahead, each a fork of a long-lived interpreter.

Three kinds of fork server (forkserver.py, zygote.py), a pool of runs made ahead for each:
an **interpreter** that has imported numpy, pandas and matplotlib and drawn a figure, for
py runs that name them; a **scientific** one that has also imported SciPy, seaborn,
scikit-learn, statsmodels and plotly, for py runs that name those; a **bare** one, Python
started and nothing imported, for other py runs and, by exec, for every other language
(the namespaces, mounts and cgroup made ahead are most of a cold start that is not the
language's own). A refill costs a fork, never a new interpreter and its imports.

A server lives in a bubblewrap sandbox of its own, made as a cold run's (no network,
/usr read-only, the sandbox uid), with the capabilities it needs inside its own user
namespace and nothing of any session. It never runs a program: each run made ahead
(ReadyRun) is a fork that became a sandbox as strong as a cold run's: mount, PID, network,
IPC and UTS namespaces of its own, its own /proc, /tmp, /dev/shm and /code, a cgroup of
its own with the run's limits, the same rlimits and seccomp filter, the sandbox uid
with no capability, and a CPU clock that starts at its fork. It waits for its session:
at the run the service makes a detached copy of the session's mount (open_tree,
nosuid,nodev) and hands it over with the program; the run attaches it at /mnt/data and
checks that it arrived. Nothing a sandbox sees lives on the host's filesystem: no run
directory, no shared mount.

A run made ahead serves one run, then it is gone, so nothing of one run reaches another, and none
sees two sessions. A run cannot see, signal, trace or read its server or a sibling:
they are outside its PID namespace, and the filter denies ptrace and process_vm_*.

Never slower than cold, never weaker: a run takes one ready, or one forked for it at once
(a fork costs milliseconds; the imports a cold run makes, half a second); wherever a
server cannot be had (not root, no user namespaces with capabilities, no open_tree; for
the one with the libraries, no memory cgroup) those runs are cold, and the log says why.
Refills run at low priority (nice) while half the pool is ready; a run gets its normal
priority at its hand-over.
The reply is built from the run's exit and output; reaping it and removing its cgroup
happen after, in a thread of their own. The pools, and the two threads they share, are
the backend's (WarmPools, held by launcher.Launcher): it closes them. A server is replaced after _SERVER_RUNS runs or
_SERVER_SECONDS: its forks share its address-space layout (docs/isolation.md "Warm sandboxes").
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from ..port import RunResult
from . import bwrap, capabilities, cgroups, collect, forkserver, layout, seccomp
from .layout import CODE_DIR
from .limits import Confinement
from .toolchains import Launch

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


# Giving a process its normal priority back takes CAP_SYS_NICE, which a container may lack:
# then refills are not niced at all, or their runs would keep the lower priority.
_REFILL_NICE = 10 if capabilities.effective(capabilities.SYS_NICE) else 0

# A program that names one of these (or a library that imports one of them: measured, each
# of these imports numpy at least) wants the interpreter that imported them...
_PRELOADED_USERS = re.compile(
    r"\b(numpy|pandas|matplotlib|openpyxl|seaborn|scipy|sklearn|statsmodels|plotly|pyarrow|cv2|skimage|imageio"
    r"|wordcloud|markitdown)\b"
)
# ... and one that names one of these, the scientific one.
_SCIENTIFIC_USERS = re.compile(r"\b(scipy|seaborn|sklearn|statsmodels|plotly)\b")
# Chosen by measurement (docs/performance.md, bench/warm_bench.py): what most programs
# import, and (the scientific server's) what fewer do: on top of the first they cost a
# server about 150 MB and each fork and exit 1.5 ms more, which the first server's runs
# (pandas, a chart) do not pay; each saves its program 0.4 to 1 s.
_PRELOADED = (
    "numpy", "pandas", "matplotlib.pyplot", "openpyxl",  # pyplot loads the font cache
    # What pandas imports only at a first to_excel/read_excel (20 ms), df.plot (7), to_csv
    # and a DataFrame printed (1 each): modules only, nothing registered.
    "xlsxwriter", "pandas.io.formats.excel", "pandas.plotting._matplotlib", "pandas.io.formats.csvs",
    "pandas.io.formats.string",
)  # fmt: skip
_SCIENTIFIC = ("scipy.stats", "seaborn", "sklearn.linear_model", "sklearn.model_selection", "sklearn.ensemble",
               "sklearn.metrics", "statsmodels.api", "statsmodels.formula.api", "plotly.express")  # fmt: skip


@dataclass(frozen=True)
class Kind:
    """A kind of fork server: the modules it imports and the first uses it makes of them
    (zygote.py reads both from its configuration)."""

    preload: tuple[str, ...]
    warm_ups: tuple[str, ...]  # zygote._WARM_UPS


KINDS = {
    "py": Kind(_PRELOADED, ("draw",)),
    "scientific": Kind(_PRELOADED + _SCIENTIFIC, ("draw", "chart", "fit")),
    "bare": Kind((), ()),  # Python started, nothing imported: other py runs, and every language by exec
}


def kinds_for(launch: Launch) -> list[str]:
    """The kinds of server a launch may be forked from, best first: for a Python program,
    the one with the libraries it names (the scientific one for SciPy, seaborn, sklearn,
    statsmodels or plotly), else the bare one; any other language, the bare one alone."""
    program = launch.interpreted
    if program is None:
        return ["bare"]
    if _SCIENTIFIC_USERS.search(program.code):
        return ["scientific", "py", "bare"]
    if _PRELOADED_USERS.search(program.code):
        return ["py", "scientific", "bare"]
    return ["bare", "py", "scientific"]


class Server:
    """One fork server: zygote.py in a sandbox of its own, which forks runs made ahead."""

    def __init__(self, kind: str, confinement: Confinement, stop: int | None = None) -> None:
        """`stop`: a descriptor that turns readable when the server is no longer wanted,
        even before it is ready (the pools close)."""
        self.kind = kind
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
                cgroup = self._stack.enter_context(
                    cgroups.run_cgroup(confinement.cgroup_parents, _SERVER_MEMORY_BYTES, _SERVER_PROCESSES)
                )
                argv = [
                    # The CPU limit is each run's own: the server's imports spend none of it.
                    *confinement.limits.prlimit_argv(cgroup.controllers, cpu=False),
                    "/usr/bin/python3", "-s", f"{CODE_DIR}/zygote.py", "--control", str(theirs.fileno()),
                ]  # fmt: skip
                terms = bwrap.ServerTerms(forkserver.CAPABILITIES, (theirs.fileno(),), _REFILL_NICE)
                self.sandbox = self._stack.enter_context(
                    bwrap.sandbox(confinement, None, argv, _server_files(kind, confinement), cgroup, terms)
                )
            self._wait_ready(stop)
        except BaseException:
            self._close()
            raise

    def _wait_ready(self, stop: int | None) -> None:
        """Its hello, once it has imported everything: then it gets a normal priority,
        for the runs that it forks on demand."""
        self.control.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        control = self.control.fileno()
        ended = self.sandbox.pidfd  # bwrap holds the server's end too: its sandbox's end shows here
        waits = [fd for fd in (control, ended, stop) if fd is not None]
        said = ended is not None and select.select(waits, [], [], _START_SECONDS)[0] == [control]
        hello = forkserver.read(self.control) if said else None
        if hello is None or hello.kind != forkserver.HELLO or not hello.pid:
            self.sandbox.kill()
            _, stderr = self.sandbox.streams
            raise RuntimeError(f"the fork server did not start: {os.read(stderr, 4096).decode(errors='replace')}")
        if _REFILL_NICE:
            os.setpriority(os.PRIO_PROCESS, hello.pid, 0)

    def fork(self, order: forkserver.ForkOrder) -> ReadyRun | None:
        """A run, as `order` says; None once the server is retired."""
        with self._lock:
            if self._retired:
                return None
            self.forked += 1
            self._out += 1
        return ReadyRun(self, order)  # which releases it once, however it ends

    def expired(self) -> bool:
        return self.forked >= _SERVER_RUNS or time.monotonic() - self.born > _SERVER_SECONDS

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


def _server_files(kind: str, confinement: Confinement) -> dict[str, bytes]:
    """A server's /code: the two sources, the filter, what each run finds (layout.py),
    and its configuration, which says what of it each run gets."""
    limits, run_files = confinement.limits, layout.run_files()
    config = forkserver.Config(
        ram_disks=layout.RAM_DISKS,
        ram_disk_bytes=limits.memory_bytes,
        proc_covered=layout.PROC_COVERED,
        cpu=limits.cpu,
        seccomp=f"{CODE_DIR}/.seccomp.bpf",
        files=tuple(layout.path_inside(name) for name in run_files),
        preload=KINDS[kind].preload,
        warm_ups=KINDS[kind].warm_ups,
    )
    return {**_SOURCES, ".seccomp.bpf": seccomp.bpf(), **run_files, forkserver.CONFIG: config.to_json()}


class ReadyRun:
    """A run made ahead: its init and program forked from a server, in namespaces and a
    cgroup of their own, waiting for their session (forkserver.py)."""

    def __init__(self, server: Server, order: forkserver.ForkOrder):
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
                    forkserver.order_fork(server.control, order, theirs.fileno(), entries)
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
                hello = forkserver.expect(self.ctl, forkserver.HELLO)
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
        whoever took it (WarmPools.run)."""
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
        tree = forkserver.open_tree(data_dir)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sources = [bwrap.memfd(name, content) for name, content in launch.files.items()]
        try:
            forkserver.restrict(tree)
            for pid in self.pids.values() if self.nice else ():  # a run gets its normal priority
                os.setpriority(os.PRIO_PROCESS, pid, 0)
            forkserver.order_run(self.ctl, _order(launch), [tree, out_w, err_w, *sources])
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
            forkserver.expect(self.ctl, forkserver.STARTED).close_fds()
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
            while (said := forkserver.read(self.ctl)).kind is not None:
                said.close_fds()
                code = said.value if said.kind == forkserver.EXIT else code
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


def _order(launch: Launch) -> forkserver.RunOrder:
    """A Python program runs in the forked interpreter itself; anything else by exec."""
    program = launch.interpreted
    if program is None:
        return forkserver.RunOrder(tuple(launch.files), launch.argv)
    return forkserver.RunOrder(tuple(launch.files), launch.argv, program.source, program.args)


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


class WarmPools:
    """A pool of runs made ahead for each kind of server, and the two threads they share:
    one starts servers, one takes finished runs down. The backend owns it and closes it."""

    def __init__(self, confinement: Confinement, sizes: Mapping[str, int]) -> None:
        self._starts: queue.SimpleQueue[tuple[Future[Server], str, Confinement] | None] = queue.SimpleQueue()
        self._closed = False
        self._ending: queue.SimpleQueue[ReadyRun | None] = queue.SimpleQueue()
        self._teardown = threading.Thread(target=self._end_runs, name="warm-teardown", daemon=True)
        self._starter = threading.Thread(target=self._start_servers, name="warm-server", daemon=True)
        self._stop_r, self._stop_w = os.pipe()  # a byte in it: a server starting now is not wanted
        if not any(size > 0 for size in sizes.values()) or not _possible():
            self.pools: dict[str, Pool] = {}
            return
        self._teardown.start()
        self._starter.start()
        self.pools = {
            kind: Pool(kind, size, confinement, self._start_server)
            for kind, size in sizes.items()
            if size > 0 and (kind == "bare" or _libraries_possible(confinement))
        }

    def run(self, data_dir: str, launch: Launch, cancelled: Callable[[], bool] | None) -> RunResult | None:
        """The launch forked from a server of the kind it wants; None where no run could be
        had or the one taken failed before the program ran: then it runs cold."""
        ready = self._take(launch)
        if ready is None:
            return None
        try:
            return ready.run(data_dir, launch, cancelled)
        finally:
            self._ending.put(ready)  # off the reply's path

    def _take(self, launch: Launch) -> ReadyRun | None:
        """A run made ahead of the best kind for this launch; with none of it ready, one
        forked now (a fork costs less than the imports another kind would make), else one
        of another kind."""
        pools = [pool for kind in kinds_for(launch) if (pool := self.pools.get(kind))]
        if not pools:
            return None
        return pools[0].take() or pools[0].make() or next((ready for pool in pools[1:] if (ready := pool.take())), None)

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Every pool full (tests, benchmarks: runs never wait)."""
        return all(pool.wait_ready(timeout) for pool in self.pools.values())

    def close(self) -> None:
        """The runs made ahead and the servers end, and so do the runs not yet taken
        down, with their cgroups; then the two threads."""
        if self._closed:
            return
        self._closed = True
        os.write(self._stop_w, b"x")
        for pool in self.pools.values():
            pool.close()
        # The runs taken down first: the last of a server's ends it. Only then may the thread
        # that started the servers end: they die with it, before bwrap has reaped them.
        for stop, thread in ((self._ending, self._teardown), (self._starts, self._starter)):
            stop.put(None)
            if thread.is_alive():
                thread.join(_ENDED_SECONDS * 2)
        if not self._starter.is_alive():  # else a start still selects on it
            os.close(self._stop_r)
            os.close(self._stop_w)

    def _start_server(self, kind: str, confinement: Confinement) -> Future[Server]:
        started: Future[Server] = Future()
        if self._closed:
            started.set_exception(RuntimeError("the warm pools are closed"))
        else:
            self._starts.put((started, kind, confinement))
        return started

    def _start_servers(self) -> None:
        # bwrap --die-with-parent ends a server when the THREAD that started it ends: servers
        # are started by this one, which lives as long as the pools (an executor's would not).
        while (order := self._starts.get()) is not None:
            started, kind, confinement = order
            try:
                started.set_result(Server(kind, confinement, self._stop_r))
            except Exception as error:
                started.set_exception(error)
        while not self._starts.empty():  # asked for as the pools closed: none will come
            if (order := self._starts.get()) is not None:
                order[0].set_exception(RuntimeError("the warm pools are closed"))

    def _end_runs(self) -> None:
        while (ready := self._ending.get()) is not None:
            try:
                ready.close()
            except Exception:
                log.exception("a warm sandbox's run did not end cleanly")


def _possible() -> bool:
    """Whether runs can be made ahead as strong as cold ones here; the log says why not."""
    if os.geteuid() != 0:
        log.warning("warm sandboxes are off: the service is not root (it hands each run its session's mount)")
        return False
    try:  # a session reaches a forked run as a detached mount (Linux 5.2)
        os.close(forkserver.open_tree("/"))
    except OSError as error:
        log.warning("warm sandboxes are off: no detached mounts here (open_tree: %s)", error.strerror)
        return False
    return True


def _libraries_possible(confinement: Confinement) -> bool:
    """The address-space limit that stands in for a memory cgroup would count the libraries.
    A bare server's runs hold it as cold runs do: it is the server's, and each fork's."""
    if "memory" in confinement.cgroup_parents:
        return True
    log.warning("warm sandboxes with the libraries are off: no memory cgroup")
    return False


class Pool:
    """Up to `size` runs made ahead, refilled in the background from one server of its
    kind (KINDS)."""

    def __init__(
        self, kind: str, size: int, confinement: Confinement,
        start_server: Callable[[str, Confinement], Future[Server]],
    ) -> None:  # fmt: skip
        self.kind = kind
        self.size = size
        self.taken = 0  # how many runs it served (for tests and benchmarks)
        self._confinement = confinement
        self._start = start_server
        self.server: Server | None = None
        self._replacing = False
        self._ready: list[ReadyRun] = []
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self.closed = False
        self._failures = 0
        self._wanted.set()
        threading.Thread(target=self._refill, name=f"warm-{kind}", daemon=True).start()

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Wait until every run of the pool is ready (tests, benchmarks: runs never wait)."""
        deadline = time.monotonic() + timeout
        while len(self._ready) < self.size and not self.closed and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self._ready) >= self.size

    def take(self) -> ReadyRun | None:
        """A run made ahead, at once, or None."""
        with self._lock:
            ready = self._ready.pop(0) if self._ready else None
            self.taken += ready is not None
        self._wanted.set()
        return ready

    def make(self) -> ReadyRun | None:
        """A run made now, at normal priority, when none was ready: it costs a fork, where a
        cold run costs a new interpreter and its imports. None without a live server."""
        server = self.server
        if self.closed or server is None or not server.alive():
            return None
        try:
            ready = server.fork(forkserver.ForkOrder(nice=0))
        except Exception:
            log.exception("a run could not be forked on demand; it runs cold")
            return None
        with self._lock:
            self.taken += ready is not None
        return ready

    def close(self) -> None:
        self.closed = True
        self._wanted.set()
        with self._lock:
            ready, self._ready = self._ready, []
            server, self.server = self.server, None
        for each in ready:
            each.close()
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
                    ready = self._current_server().fork(forkserver.ForkOrder(nice))
                except Exception:
                    if self.closed:  # closed while it was made (the service is ending): no failure
                        return
                    self._failed()
                    time.sleep(_RETRY_SECONDS)
                    continue
                self._failures = 0
                if ready is None:  # its server was just replaced: the next comes from the new one
                    continue
                with self._lock:
                    if not self.closed:
                        self._ready.append(ready)
                        continue
                ready.close()  # the pool closed while it was made

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
            server = self._start(self.kind, self._confinement).result()
            with self._lock:
                closed = self.closed
                self.server = None if closed else server
            if closed:  # while it started: it would outlive the pool
                server.retire()
                raise RuntimeError("the pool closed while its server started")
        elif server.expired() and not self._replacing:
            self._replacing = True  # the old one forks on while the new one imports
            self._start(self.kind, self._confinement).add_done_callback(self._replaced)
        return server

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
