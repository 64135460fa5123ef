"""Warm sandboxes: made before their run, each waiting for the one run it will ever have.

Three kinds. An Interpreter is Python with numpy, pandas and matplotlib already imported
(zygote.py), for py runs that name them; a BareInterpreter, Python started and nothing
imported, for the others. A Shell waits to become any language's command line: the
sandbox, its cgroup and its mounts are made before the request, which is most of a cold
start that is not the language's own.

A warm sandbox is made exactly as a cold run's (bwrap.py: the same namespaces, seccomp
filter, uid, rlimits and its own cgroup with the run's limits), with two differences
that let it start before anyone knows its session:

- /mnt/data is a mount point of its own slot (`SANDBOX_ROOT/.warm/<slot>/data`), under a
  mount with shared propagation. At the run, the service bind-mounts the session's data
  directory on it, and the kernel propagates that mount into the waiting sandbox alone
  (bwrap's mounts are slaves of the host's); the service checks, through the sandbox's
  own root, that it arrived. The slot is unmounted and removed after.
- /code is the slot's `code` directory, read-only: the program's source is written there
  at the run, beside the sitecustomize a cold run has.

A sandbox serves one run and is then gone: no state, no descriptor and no memory of one
run reaches another, and none sees two sessions.

Never slower than cold: `take` never waits; with none ready, the run starts cold at once.
A refill thread keeps `size` ready, started at low priority (nice) so that a refill never
takes a core from a run; a sandbox gets its normal priority back when its run is handed
over. It needs root (mounts) and a memory cgroup; elsewhere, or with WARM_PYTHON=0 and
WARM_SANDBOXES=0, every run is cold.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import errno
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..port import RunResult
from . import bwrap, cgroups, fonts
from .bwrap import ARTIFACT_DIR
from .limits import Limits
from .toolchains import CODE_DIR, PYTHON_SITE
from .zygote import READY

log = logging.getLogger("codeexec.local.warm")

_ZYGOTE = (Path(__file__).parent / "zygote.py").read_bytes()
_REFILL_NICE = 10
_MEMORY_BYTES = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
_MS_BIND, _MS_REMOUNT, _MS_NOSUID, _MS_NODEV, _MS_REC, _MS_SHARED = 4096, 32, 2, 4, 16384, 1 << 20
_MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _mount(source: str | None, target: str, flags: int) -> None:
    if _libc.mount(source and os.fsencode(source), os.fsencode(target), None, flags, None) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), target)


def unmount(target: str) -> None:
    _libc.umount2(os.fsencode(target), _MNT_DETACH)


class Warm:
    """One sandbox waiting for its run. What waits in it, and how it is handed its run,
    is the kind's (Interpreter, Shell)."""

    files: Mapping[str, bytes] = {}  # placed in /code beside the sitecustomize
    memory_bytes = 2 << 20  # what one holds while it waits, about

    def __init__(self, slot: Path, limits: Limits, as_user: tuple[int, int], parents: Mapping[str, cgroups.Parent]):
        self.slot = slot
        self.limits = limits
        self._stack = contextlib.ExitStack()
        try:
            (slot / "data").mkdir(parents=True)
            os.chown(slot / "data", *as_user)
            code = slot / "code"
            (code / ".site").mkdir(parents=True)
            for name, content in {".site/sitecustomize.py": PYTHON_SITE, **self.files}.items():
                (code / name).write_bytes(content)
            self.cgroup = self._stack.enter_context(
                cgroups.run_cgroup(parents, limits.memory_bytes, limits.max_processes)
            )
            argv = self.command(limits, self.cgroup.controllers)
            self.sandbox = self._stack.enter_context(
                bwrap.sandbox(
                    str(slot / "data"), argv, fonts.files(), limits, as_user, self.cgroup, str(code), _REFILL_NICE
                )
            )
            if self._read(len(READY)) != READY:
                raise RuntimeError("the warm sandbox exited, or said something else than ready")
        except BaseException:
            self.close()
            raise

    def command(self, limits: Limits, controllers: frozenset[str]) -> list[str]:
        """What waits in the sandbox, under the run's rlimits."""
        raise NotImplementedError

    def request(self, argv: Sequence[str]) -> bytes:
        """The line that hands over the run of argv (the language's command line)."""
        raise NotImplementedError

    def _read(self, size: int) -> bytes:
        """What the sandbox says before the run, read unbuffered: the rest is the run's."""
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
        self, data_dir: str, program: Mapping[str, bytes], argv: Sequence[str], timeout: float,
        cancelled: Callable[[], bool] | None,
    ) -> RunResult | None:  # fmt: skip
        """The run, in the session whose artifact directory is data_dir; then gone. None
        when the sandbox failed before the program was handed over: the caller runs cold."""
        try:
            try:
                self._hand_over(data_dir, program, argv)
            except OSError:
                log.exception("a warm sandbox could not take its run; it runs cold")
                return None
            return bwrap.finish(self.sandbox, self.cgroup, timeout, self.limits, cancelled)
        finally:
            self.close()

    def _hand_over(self, data_dir: str, program: Mapping[str, bytes], argv: Sequence[str]) -> None:
        for name, content in program.items():
            (self.slot / "code" / name).write_bytes(content)
        target = str(self.slot / "data")
        _mount(data_dir, target, _MS_BIND)
        self._stack.callback(unmount, target)
        _mount(None, target, _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV)
        # The session's mount must have reached this sandbox (seen through its own root),
        # or the program would run in an empty directory.
        inside, session = os.stat(f"/proc/{self.sandbox.child}/root{ARTIFACT_DIR}"), os.stat(data_dir)
        if (inside.st_dev, inside.st_ino) != (session.st_dev, session.st_ino):
            raise OSError(errno.EIO, "the session's files did not reach the warm sandbox")
        self._normal_priority()
        stdin = self.sandbox.proc.stdin
        assert stdin is not None
        stdin.write(self.request(argv))
        stdin.close()

    def _normal_priority(self) -> None:
        """Every process of the sandbox, before the program starts: it inherits it."""
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


class Interpreter(Warm):
    """Python with numpy, pandas and matplotlib imported (zygote.py), for py runs."""

    files = {".zygote.py": _ZYGOTE}
    memory_bytes = 160 << 20

    def command(self, limits: Limits, controllers: frozenset[str]) -> list[str]:
        # The CPU limit is set in the program's own process: the imports spend none of it.
        return [*limits.prlimit_argv(controllers, cpu=False), "/usr/bin/python3", "-s", f"{CODE_DIR}/.zygote.py"]

    def request(self, argv: Sequence[str]) -> bytes:
        # argv is the py toolchain's: python3 -s <source> <args...>.
        source, *args = argv[2:]
        return json.dumps({"source": source, "args": args, "cpu": self.limits.cpu}).encode() + b"\n"


class BareInterpreter(Interpreter):
    """Python started and nothing imported: a run that needs none of the preloaded
    libraries forks from a small process, whose fork and exit cost next to nothing."""

    memory_bytes = 16 << 20

    def command(self, limits: Limits, controllers: frozenset[str]) -> list[str]:
        return [*super().command(limits, controllers), "--bare"]


# A program that names one of zygote.PRELOADED, or a library that imports one of them
# (measured: each of these imports numpy at least), wants an Interpreter; any other, a bare one.
_PRELOADED_USERS = re.compile(
    r"\b(numpy|pandas|matplotlib|openpyxl|seaborn|scipy|sklearn|statsmodels|plotly|pyarrow|cv2|skimage|imageio"
    r"|wordcloud|markitdown)\b"
)


def wants_preloaded(code: str) -> bool:
    return _PRELOADED_USERS.search(code) is not None


class Shell(Warm):
    """A shell that waits, then becomes the run's command line: for every language, the
    sandbox and its cgroup made before the request (most of a cold start that is not the
    language's own)."""

    # The command line arrives as a file beside the program (it may hold any byte), and
    # the line on stdin says go. stdin is then /dev/null, as a cold run's.
    _WAIT = "printf '\\000codeexec-warm-ready\\n'; read -r _ || exit 0; exec </dev/null; cd /mnt/data && . /code/.run"

    def command(self, limits: Limits, controllers: frozenset[str]) -> list[str]:
        return [*limits.prlimit_argv(controllers), "/bin/sh", "-c", self._WAIT]

    def request(self, argv: Sequence[str]) -> bytes:
        (self.slot / "code" / ".run").write_text(f"exec {shlex.join(argv)}\n")
        return b"go\n"


class Pool:
    """Up to `size` warm sandboxes ready, refilled in the background."""

    def __init__(
        self, kind: type[Warm], root: Path, size: int, limits: Limits, as_user: tuple[int, int],
        parents: Mapping[str, cgroups.Parent],
    ) -> None:  # fmt: skip
        self.kind = kind
        self.root = root
        self.size = size
        self.taken = 0  # how many runs it served (for tests and benchmarks)
        self._terms = limits, as_user, parents
        self._ready: list[Warm] = []
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._closed = False
        self._failures = 0
        _shared_mount(root)
        self._wanted.set()
        threading.Thread(target=self._refill, name=f"warm-{kind.__name__.lower()}", daemon=True).start()

    @classmethod
    def start(
        cls, kind: type[Warm], root: Path, size: int, limits: Limits, as_user: tuple[int, int],
        parents: Mapping[str, cgroups.Parent],
    ) -> Pool | None:  # fmt: skip
        """A pool, or None where warm sandboxes cannot be had: not root (no mounts), or
        no memory cgroup (an address-space limit would count the preloaded libraries)."""
        # Waiting sandboxes of a kind hold at most an eighth of the host's memory.
        size = min(size, _MEMORY_BYTES // 8 // kind.memory_bytes)
        if size <= 0 or os.geteuid() != 0 or "memory" not in parents:
            return None
        try:
            pool = cls(kind, root, size, limits, as_user, parents)
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
            self.taken += warm is not None
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
                    warm = self.kind(self.root / f"{os.getpid()}-{secrets.token_hex(6)}", *self._terms)
                except Exception:
                    # Cold runs go on; a pool that fails three times in a row stops trying.
                    self._failures += 1
                    log.exception("a warm sandbox (%s) failed to start", self.kind.__name__)
                    if self._failures >= 3:
                        self._closed = True
                    break
                self._failures = 0
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
