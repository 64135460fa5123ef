"""Warm Python interpreters: sandboxes started before their run, numpy, pandas and
matplotlib already imported, each waiting for the one run it will ever have.

A warm sandbox is made exactly as a cold run's (bwrap.py: the same namespaces, seccomp
filter, uid, rlimits and its own cgroup with the run's limits), with two differences
that let it start before anyone knows its session:

- /mnt/data is a mount point of its own slot (`SANDBOX_ROOT/.warm/<slot>/data`), under a
  mount with shared propagation. At the run, the service bind-mounts the session's data
  directory on it, and the kernel propagates that mount into the waiting sandbox alone
  (bwrap's mounts are slaves of the host's). The slot is unmounted and removed after.
- /code is the slot's `code` directory, read-only: the program's source is written there
  at the run, beside the interpreter (zygote.py) and the sitecustomize a cold run has.

The interpreter reads its run on stdin and runs it in a forked child (zygote.py), whose
CPU clock starts at zero. A sandbox serves one run and is then gone: no state, no descriptor and no
memory of one run reaches another, and none sees two sessions.

Never slower than cold: `take` never waits; with none ready, the run starts cold at once.
A refill thread keeps `size` ready, started at low priority (nice) so that a refill never
takes a core from a run; a sandbox gets its normal priority back when its run is handed
over. It needs root (mounts); elsewhere, or with WARM_PYTHON=0, every run is cold.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..port import RunResult
from . import bwrap, cgroups, fonts
from .limits import Limits
from .toolchains import CODE_DIR, PYTHON_SITE
from .zygote import READY as _READY
from .zygote import TAKEN as _TAKEN

log = logging.getLogger("codeexec.local.warm")

_ZYGOTE = (Path(__file__).parent / "zygote.py").read_bytes()
_REFILL_NICE = 10
_MS_BIND, _MS_REMOUNT, _MS_NOSUID, _MS_NODEV, _MS_REC, _MS_SHARED = 4096, 32, 2, 4, 16384, 1 << 20
_MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _mount(source: str | None, target: str, flags: int) -> None:
    if _libc.mount(source and os.fsencode(source), os.fsencode(target), None, flags, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), target)


def unmount(target: str) -> None:
    _libc.umount2(os.fsencode(target), _MNT_DETACH)


class Warm:
    """One sandbox waiting for its run."""

    def __init__(self, slot: Path, limits: Limits, as_user: tuple[int, int], parents: Mapping[str, cgroups.Parent]):
        self.slot = slot
        self._stack = contextlib.ExitStack()
        try:
            (slot / "data").mkdir(parents=True)
            os.chown(slot / "data", *as_user)
            code = slot / "code"
            (code / ".site").mkdir(parents=True)
            (code / ".site" / "sitecustomize.py").write_bytes(PYTHON_SITE)
            (code / ".zygote.py").write_bytes(_ZYGOTE)
            self.cgroup = self._stack.enter_context(
                cgroups.run_cgroup(parents, limits.memory_bytes, limits.max_processes)
            )
            # The CPU limit is set in the program's own process: the imports spend none of it.
            prlimit = limits.prlimit_argv(self.cgroup.controllers, cpu=False)
            argv = [*prlimit, "/usr/bin/python3", "-s", f"{CODE_DIR}/.zygote.py"]
            self.cpu = limits.cpu
            self.sandbox = self._stack.enter_context(
                bwrap.sandbox(
                    str(slot / "data"), argv, fonts.files(), limits, as_user, self.cgroup, str(code), _REFILL_NICE
                )
            )
            self._await_ready()
        except BaseException:
            self.close()
            raise

    def _await_ready(self) -> None:
        if self._read(len(_READY)) != _READY:
            raise RuntimeError("the warm interpreter exited, or said something else than ready")

    def _read(self, size: int) -> bytes:
        """What the interpreter says before the run, read unbuffered: the rest is the run's."""
        stdout = self.sandbox.proc.stdout
        assert stdout is not None
        got = b""
        while len(got) < size:
            chunk = os.read(stdout.fileno(), size - len(got))
            if not chunk:
                break
            got += chunk
        return got

    def run(
        self, data_dir: str, source: str, code: bytes, args: tuple[str, ...], timeout: float, limits: Limits,
        cancelled: Callable[[], bool] | None,
    ) -> RunResult | None:  # fmt: skip
        """The run, in the session whose artifact directory is data_dir; then gone. None
        when the sandbox failed before the program was handed over: the caller runs cold."""
        try:
            try:
                self._hand_over(data_dir, source, code, args)
            except (OSError, ValueError):
                log.exception("a warm interpreter could not take its run; it runs cold")
                return None
            return bwrap.finish(self.sandbox, self.cgroup, timeout, limits, cancelled)
        finally:
            self.close()

    def _hand_over(self, data_dir: str, source: str, code: bytes, args: tuple[str, ...]) -> None:
        (self.slot / "code" / source).write_bytes(code)
        target = str(self.slot / "data")
        _mount(data_dir, target, _MS_BIND)
        self._stack.callback(unmount, target)
        _mount(None, target, _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV)
        self._normal_priority()
        stdin = self.sandbox.proc.stdin
        assert stdin is not None
        data = os.stat(data_dir)
        request = {
            "source": f"{CODE_DIR}/{source}", "args": list(args), "data": [data.st_dev, data.st_ino], "cpu": self.cpu,
        }  # fmt: skip
        stdin.write(json.dumps(request).encode() + b"\n")
        stdin.close()
        if self._read(len(_TAKEN)) != _TAKEN:
            raise ValueError("the session's files did not reach the warm sandbox")

    def _normal_priority(self) -> None:
        """Every process of the sandbox, before the program is forked: it inherits it."""
        pids = [self.sandbox.proc.pid]
        if self.sandbox.child is not None:
            pids.append(self.sandbox.child)
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{self.sandbox.child}/task/{self.sandbox.child}/children").read_text()
                pids += [int(pid) for pid in children.split()]
        for pid in pids:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, pid, 0)

    def close(self) -> None:
        try:
            if getattr(self, "sandbox", None) is not None and self.sandbox.proc.poll() is None:
                self.sandbox.kill()
            self._stack.close()
        finally:
            shutil.rmtree(self.slot, ignore_errors=True)


class Pool:
    """Up to `size` warm sandboxes ready, refilled in the background."""

    def __init__(
        self, root: Path, size: int, limits: Limits, as_user: tuple[int, int], parents: Mapping[str, cgroups.Parent]
    ) -> None:
        self.root = root
        self.size = size
        self._terms = limits, as_user, parents
        self._ready: list[Warm] = []
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._closed = False
        self._failures = 0
        _shared_mount(root)
        self._wanted.set()
        threading.Thread(target=self._refill, name="warm-refill", daemon=True).start()

    @classmethod
    def start(
        cls, root: Path, size: int, limits: Limits, as_user: tuple[int, int], parents: Mapping[str, cgroups.Parent]
    ) -> Pool | None:
        """A pool, or None where warm interpreters cannot be had: not root (no mounts), or
        no memory cgroup (an address-space limit would count the preloaded libraries)."""
        if size <= 0 or os.geteuid() != 0 or "memory" not in parents:
            return None
        try:
            pool = cls(root, size, limits, as_user, parents)
        except OSError as exc:
            log.warning("warm interpreters are off: %s", exc)
            return None
        _pools.append(pool)
        return pool

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Wait until every sandbox of the pool is ready (tests, benchmarks: runs never wait)."""
        deadline = time.monotonic() + timeout
        while len(self._ready) < self.size and not self._closed and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self._ready) >= self.size

    def take(self) -> Warm | None:
        """A ready sandbox at once, or None: the caller runs cold, never waits."""
        with self._lock:
            warm = self._ready.pop() if self._ready else None
        self._wanted.set()
        return warm

    def close(self) -> None:
        self._closed = True
        self._wanted.set()
        with self._lock:
            ready, self._ready = self._ready, []
        for warm in ready:
            warm.close()

    def _refill(self) -> None:
        while not self._closed:
            self._wanted.wait()
            self._wanted.clear()
            while not self._closed and len(self._ready) < self.size:
                try:
                    warm = Warm(self.root / f"{os.getpid()}-{secrets.token_hex(6)}", *self._terms)
                except Exception:
                    # Cold runs go on; a pool that keeps failing stops trying.
                    self._failures += 1
                    log.exception("a warm interpreter failed to start")
                    if self._failures >= 3:
                        self._closed = True
                    break
                with self._lock:
                    if not self._closed:
                        self._ready.append(warm)
                        continue
                warm.close()  # the pool closed while it started


def _shared_mount(root: Path) -> None:
    """The slots' parent as a mount of its own with shared propagation (once per host),
    cleared of the slots of processes that have ended (a slot's name starts with its pid)."""
    root.mkdir(mode=0o711, exist_ok=True)
    mounted = any(line.split()[4] == str(root) for line in Path("/proc/self/mountinfo").read_text().splitlines())
    if not mounted:
        _mount(str(root), str(root), _MS_BIND)
    _mount(None, str(root), _MS_SHARED | _MS_REC)
    for slot in root.iterdir():
        pid = slot.name.partition("-")[0]
        if not (pid.isdigit() and Path(f"/proc/{pid}").exists()):
            unmount(str(slot / "data"))  # a run's session mount, if it died mid-run
            shutil.rmtree(slot, ignore_errors=True)


_pools: list[Pool] = []


@atexit.register
def _close_all() -> None:
    """The ready sandboxes die with the process (bwrap --die-with-parent); their slots go too."""
    for pool in _pools:
        pool.close()
