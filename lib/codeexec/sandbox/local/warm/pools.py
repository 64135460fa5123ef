"""The warm pools: for each kind of server (policy.KINDS), up to its size of runs made ahead
(ready.py), refilled in the background from one server of that kind (server.py); and the
two threads the pools share: one starts servers, one takes finished runs down. The
backend owns them (launcher.Launcher) and closes them.

Never slower than cold, never weaker: a run takes one ready, or one forked for it at once
(a fork costs milliseconds; the imports a cold run makes, half a second); wherever a
server cannot be had (not root, no user namespaces with capabilities, no open_tree; for
the one with the libraries, no memory cgroup) those runs are cold, and the log says why.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from ...port import PoolLoad, RunResult
from ..limits import Confinement
from ..toolchains import Launch
from . import kernel, ready, wire
from .policy import Policy
from .ready import ReadyRun
from .server import Server

log = logging.getLogger("codeexec.local.warm")

_RETRY_SECONDS = 1.0  # after a run made ahead failed to start
_CLOSE_SECONDS = 10.0  # each of the pools' threads, at their close


class WarmPools:
    """A pool of runs made ahead for each kind of server the policy sizes, and the two
    threads they share."""

    def __init__(self, confinement: Confinement, policy: Policy) -> None:
        self.policy = policy
        self._confinement = confinement
        self._starts: queue.SimpleQueue[tuple[Future[Server], str] | None] = queue.SimpleQueue()
        self._closed = False
        self._ending: queue.SimpleQueue[ReadyRun | None] = queue.SimpleQueue()
        self._teardown = threading.Thread(target=self._end_runs, name="warm-teardown", daemon=True)
        self._starter = threading.Thread(target=self._start_servers, name="warm-server", daemon=True)
        self._stop_r, self._stop_w = os.pipe()  # a byte in it: a server starting now is not wanted
        self._counted = threading.Lock()
        self._hits: collections.Counter[str] = collections.Counter()
        self._misses: collections.Counter[str] = collections.Counter()
        self.pools: dict[str, Pool] = {}
        if not any(size > 0 for size in policy.sizes.values()) or not _possible():
            return
        self._teardown.start()
        self._starter.start()
        self.pools = {
            kind: Pool(kind, size, policy, self._start_server)
            for kind, size in policy.sizes.items()
            if size > 0 and (kind == "bare" or _libraries_possible(confinement))
        }

    def run(self, data_dir: str, launch: Launch, cancelled: Callable[[], bool] | None) -> RunResult | None:
        """The launch forked from a server of the kind it wants; None where no run could be
        had or the one taken failed before the program ran: then it runs cold."""
        pools = [pool for kind in self.policy.kinds_for(launch) if (pool := self.pools.get(kind))]
        if not pools:
            return None
        served, taken = _take(pools)
        result = None
        if taken is not None:
            try:
                result = taken.run(data_dir, launch, cancelled)
            finally:
                self._ending.put(taken)  # off the reply's path
                served.ran()
        with self._counted:
            if result is not None:
                self._hits[served.kind] += 1
            else:
                self._misses[pools[0].kind] += 1
        return result

    def stats(self) -> dict[str, PoolLoad]:
        """Each pool's runs ready now, and the runs it served warm and those that ran cold."""
        with self._counted:
            return {kind: PoolLoad(pool.ready(), self._hits[kind], self._misses[kind])
                    for kind, pool in self.pools.items()}  # fmt: skip

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
                thread.join(_CLOSE_SECONDS)
        if not self._starter.is_alive():  # else a start still selects on it
            os.close(self._stop_r)
            os.close(self._stop_w)

    def _start_server(self, kind: str) -> Future[Server]:
        started: Future[Server] = Future()
        if self._closed:
            started.set_exception(RuntimeError("the warm pools are closed"))
        else:
            self._starts.put((started, kind))
        return started

    def _start_servers(self) -> None:
        # bwrap --die-with-parent ends a server when the THREAD that started it ends: servers
        # are started by this one, which lives as long as the pools (an executor's would not).
        while (order := self._starts.get()) is not None:
            started, kind = order
            try:
                kinds, nice = self.policy.kinds, self.policy.refill_nice
                started.set_result(Server(kind, kinds[kind], self._confinement, nice, self._stop_r))
            except Exception as error:
                started.set_exception(error)
        while not self._starts.empty():  # asked for as the pools closed: none will come
            if (order := self._starts.get()) is not None:
                order[0].set_exception(RuntimeError("the warm pools are closed"))

    def _end_runs(self) -> None:
        while (taken := self._ending.get()) is not None:
            try:
                taken.close()
            except Exception:
                log.exception("a warm sandbox's run did not end cleanly")


def _take(pools: list[Pool]) -> tuple[Pool, ReadyRun | None]:
    """A run made ahead from the first pool; with none of it ready, one forked now (a fork
    costs less than the imports another kind would make), else one of another kind. With
    the pool it came from (the first, where none came)."""
    first, *others = pools
    if taken := first.take() or first.make():
        return first, taken
    return next(((pool, taken) for pool in others if (taken := pool.take())), (first, None))


def _possible() -> bool:
    """Whether runs can be made ahead as strong as cold ones here; the log says why not."""
    if os.geteuid() != 0:
        log.warning("warm sandboxes are off: the service is not root (it hands each run its session's mount)")
        return False
    try:  # a session reaches a forked run as a detached mount (Linux 5.2)
        os.close(kernel.open_tree("/"))
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
    """Up to `size` runs made ahead, refilled in the background from one server of its kind."""

    def __init__(self, kind: str, size: int, policy: Policy, start_server: Callable[[str], Future[Server]]) -> None:
        self.kind = kind
        self.size = size
        self.policy = policy
        self.taken = 0  # how many runs it handed out (for tests and benchmarks)
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

    def ready(self) -> int:
        """How many runs made ahead are ready now."""
        return len(self._ready)

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Wait until every run of the pool is ready (tests, benchmarks: runs never wait)."""
        deadline = time.monotonic() + timeout
        while len(self._ready) < self.size and not self.closed and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self._ready) >= self.size

    def take(self) -> ReadyRun | None:
        """A run made ahead, at once, or None. The pool refills once the run has ended
        (ran), or at once if it holds too few now (Policy.ample)."""
        with self._lock:
            taken = self._ready.pop(0) if self._ready else None
            self.taken += taken is not None
            ample = self.policy.is_ample(len(self._ready), self.size)
        if not ample:
            self._wanted.set()
        return taken

    def ran(self) -> None:
        """A run it served has ended: time to refill."""
        self._wanted.set()

    def make(self) -> ReadyRun | None:
        """A run made now, at normal priority, when none was ready: it costs a fork, where a
        cold run costs a new interpreter and its imports. None without a live server."""
        server = self.server
        if self.closed or server is None or not server.alive():
            return None
        try:
            made = ready.fork(server, wire.ForkOrder(nice=0))
        except Exception:
            log.exception("a run could not be forked on demand; it runs cold")
            return None
        with self._lock:
            self.taken += made is not None
        return made

    def close(self) -> None:
        self.closed = True
        self._wanted.set()
        with self._lock:
            made, self._ready = self._ready, []
            server, self.server = self.server, None
        for each in made:
            each.close()
        if server is not None:
            server.retire()

    def _refill(self) -> None:
        while not self.closed:
            self._wanted.wait()
            self._wanted.clear()
            while not self.closed and len(self._ready) < self.size:
                try:
                    nice = self.policy.refill_priority(len(self._ready), self.size)
                    made = ready.fork(self._current_server(), wire.ForkOrder(nice))
                except Exception:
                    if self.closed:  # closed while it was made (the service is ending): no failure
                        return
                    self._failed()
                    time.sleep(_RETRY_SECONDS)
                    continue
                self._failures = 0
                if made is None:  # its server was just replaced: the next comes from the new one
                    continue
                with self._lock:
                    if not self.closed:
                        self._ready.append(made)
                        continue
                made.close()  # the pool closed while it was made

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
            server = self._start(self.kind).result()
            with self._lock:
                closed = self.closed
                self.server = None if closed else server
            if closed:  # while it started: it would outlive the pool
                server.retire()
                raise RuntimeError("the pool closed while its server started")
        elif self._expired(server) and not self._replacing:
            self._replacing = True  # the old one forks on while the new one imports
            self._start(self.kind).add_done_callback(self._replaced)
        return server

    def _expired(self, server: Server) -> bool:
        return server.forked >= self.policy.server_runs or server.age() > self.policy.server_seconds

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
