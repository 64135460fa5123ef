"""Running one program under bubblewrap, confined, limited, and with its output bounded.

Isolation: fresh user, PID, IPC, UTS, mount, cgroup and network namespaces (no network
at all, not even loopback: the service's own port is unreachable); the host's toolchains
read-only (/usr and a short /etc allow-list) and nothing else of the host: no /home,
/root, /var, no other session; a private /tmp; the session's directory at /mnt/data; an
environment built from nothing; no capabilities, no_new_privs (bwrap sets it), and a
seccomp filter (seccomp.py). When the service runs as root, bwrap itself is started as
an unprivileged host uid (by util-linux `setpriv`), so even a file the sandbox can see
is checked against that uid, never root's.

Limits: rlimits (limits.py), cgroups for memory and processes (cgroups.py), the kernel's
quota on the session's subvolume (storage.py), and, kept here, the wall clock and the
output. Everything a run starts dies with it: its PID namespace ends when its first
process does.

What a program can learn of its own sandbox is no more than it needs: bwrap takes its
options through a descriptor (`--args`), so the sandbox's pid 1 shows `bwrap --args N --`
and the program's own command line, never the host paths and settings it was started with.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import platform
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..port import Limit, LimitHit, RunResult
from . import cgroups, fonts, seccomp
from .limits import Limits
from .toolchains import CODE_DIR, ENVIRONMENT, HOST_SITE_PACKAGES, NODE_MODULES, PYTHON_LIBS, PYTHON_SITE, TOOLS

ARTIFACT_DIR = "/mnt/data"
NOBODY = 65534
SETPRIV = "/usr/bin/setpriv"

# What the runtimes need from /etc, and nothing else of the host's configuration.
_ETC = (
    "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "fonts",
    "java-17-openjdk", "php", "R", "ssl", "mime.types", "nsswitch.conf", "passwd", "group",
    "matplotlibrc", "ldc2.conf", "libreoffice",
)
_ENV = {
    # `python` and `pip` first (the environment's tools), then the locked set's commands.
    "PATH": f"{TOOLS}/bin:{PYTHON_LIBS}/bin:/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    # Named, so no runtime asks systemd for it (R's does, and says it cannot on stderr).
    "TZ": "UTC",
    # matplotlib's defaults: no display (figures are saved, never shown) and fonts for every
    # script (CJK too). Not MPLBACKEND: a Jupyter kernel a run starts (nbclient) would
    # inherit it, and draw its plots into nothing instead of into the notebook.
    "MATPLOTLIBRC": f"{TOOLS}/matplotlibrc",
    # The service's sitecustomize (toolchains.PYTHON_SITE) puts /mnt/data LAST on the path,
    # so a session's own modules import (a helper.py an earlier run wrote), and a
    # json.py or sitecustomize.py among its files shadows nothing. The locked set comes
    # before the standard library, as any --target install does; none of its top-level
    # names is a standard module's (tests/test_environment.py).
    "PYTHONPATH": f"{CODE_DIR}/.site:{PYTHON_LIBS}",
    "PYTHONNOUSERSITE": "1",  # as `-s`, for a `python` a script starts
    # LibreOffice draws without a display; plotly's kaleido finds Debian's headless Chromium.
    "SAL_USE_VCLPLUGIN": "svp",
    "BROWSER_PATH": "/usr/bin/chromium-headless-shell",
    "GOCACHE": "/tmp/go-cache",  # go build needs a writable cache, and /tmp is the place
    "GOPATH": "/tmp/go",
    # Unbuffered, a Python program stopped at its time limit still shows what it printed.
    "PYTHONUNBUFFERED": "1",
    # No __pycache__ among the session's files for every module a run imports from there.
    "PYTHONDONTWRITEBYTECODE": "1",
}


# Libraries that start a thread per core (BLAS, OpenMP, numexpr, joblib, OpenCV, Go,
# data.table) see the host's cores, not the run's share: they get the run's CPU count.
_THREAD_VARS = (
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "NUMEXPR_MAX_THREADS", "LOKY_MAX_CPU_COUNT",
    "OPENCV_FOR_THREADS_NUM", "GOMAXPROCS", "R_DATATABLE_NUM_THREADS",
)  # fmt: skip


# The sandbox's two writable RAM disks share one size (the memory limit): without a
# memory cgroup nothing else would bound them, with one their pages count against it.
_RAM_DISKS = (("/tmp", "0755"), ("/dev/shm", "1777"))
# How often a run looks whether it was cancelled: a stat of a marker.
_WATCH_SECONDS = 0.02


@dataclass(frozen=True)
class _Control:
    """The descriptors bwrap reads besides the program."""

    seccomp: int | None  # the compiled filter (none for a fork server)
    info: int  # bwrap writes the sandbox's host pid here...
    block: int  # ...then waits for a byte here before it starts the program


def bwrap_args(
    data_dir: str | None,
    program_fds: Mapping[str, int],
    control: _Control,
    limits: Limits,
    caps: Sequence[str] = (),
) -> list[str]:
    """bwrap's options, without the program's command line. The program's files are
    `program_fds` placed in /code. A fork server (forkserver.py) has no session yet (an
    empty /mnt/data), keeps `caps` inside its user namespace and gets no filter: its runs
    load it themselves."""
    argv = [
        # --disable-userns needs --unshare-user named, even where bwrap would pick it itself.
        "--unshare-all", "--unshare-user", "--disable-userns", "--hostname", "sandbox",
        # The host's sandbox uid is nobody inside, a user /etc/passwd knows.
        "--uid", str(NOBODY), "--gid", str(NOBODY),
        "--die-with-parent", "--new-session",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
        # A host without the environment still runs what needs none of it.
        "--ro-bind-try", ENVIRONMENT, ENVIRONMENT,
        # Node's `import` walks up from the importing file and reads no NODE_PATH: at the
        # root, every file finds the packages, with `require` as well.
        "--symlink", NODE_MODULES, "/node_modules",
        "--proc", "/proc", "--dev", "/dev",
        *(["--bind", data_dir, ARTIFACT_DIR] if data_dir is not None else ["--dir", ARTIFACT_DIR]),
        "--chdir", ARTIFACT_DIR,
        "--cap-drop", "ALL", *(arg for cap in caps for arg in ("--cap-add", cap)), "--clearenv",
        "--info-fd", str(control.info), "--block-fd", str(control.block),
    ]  # fmt: skip
    if control.seccomp is not None:
        argv += ["--seccomp", str(control.seccomp)]
    for path, mode in _RAM_DISKS:
        argv += ["--perms", mode, "--size", str(limits.memory_bytes), "--tmpfs", path]
    for name in _ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for path in _host_site_packages():
        argv += ["--tmpfs", path, "--remount-ro", path]
    for key, value in {**_ENV, **dict.fromkeys(_THREAD_VARS, str(limits.cpus))}.items():
        argv += ["--setenv", key, value]
    for name, fd in program_fds.items():  # a relative name is in /code
        argv += ["--ro-bind-data", str(fd), name if name.startswith("/") else f"{CODE_DIR}/{name}"]
    # Last: the root bwrap built the rest on, and /dev, are RAM disks writable until now.
    # Device nodes stay writable on a read-only mount (/dev/null still takes output).
    return [*argv, "--remount-ro", "/dev", "--remount-ro", "/"]


@functools.cache
def _host_site_packages() -> tuple[str, ...]:
    return tuple(path for path in HOST_SITE_PACKAGES if os.path.isdir(path))


def run(
    data_dir: str,
    argv: Sequence[str],
    program: Mapping[str, bytes],
    timeout: float,
    limits: Limits,
    as_user: tuple[int, int] | None,
    cgroup_parents: Mapping[str, cgroups.Parent],
    cancelled: Callable[[], bool] | None = None,
) -> RunResult:
    """Run argv in a fresh sandbox over data_dir; `program` maps file names to the
    contents placed read-only in /code (with the font cache, fonts.py). `cancelled` is asked every 20 ms; once it says
    yes, the run is stopped."""
    files = {**program, ".site/sitecustomize.py": PYTHON_SITE, **fonts.files()}
    with cgroups.run_cgroup(cgroup_parents, limits.memory_bytes, limits.max_processes) as cgroup:
        command = [*limits.prlimit_argv(cgroup.controllers), *argv]
        with sandbox(data_dir, command, files, limits, as_user, cgroup) as started:
            return finish(started, cgroup, timeout, limits, cancelled)


class Started(Protocol):
    """A run under way, as `finish` collects it: a bwrap sandbox (Sandbox) or a run
    forked from a warm server (warm.py)."""

    @property
    def streams(self) -> tuple[int, int]:
        """Where the program's stdout and stderr arrive."""

    def poll(self) -> int | None:
        """The exit code once the run ended, without waiting."""

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, waiting at most timeout seconds (None: until the run ends)."""

    def kill(self) -> None:
        """Kill the whole run at once."""


def finish(
    started: Started, cgroup: cgroups.RunCgroup, timeout: float, limits: Limits, cancelled: Callable[[], bool] | None
) -> RunResult:
    """Collect a started run to its end, or stop it at its limits."""
    output = _collect(started, timeout, limits, cancelled or (lambda: False))
    return RunResult(
        stdout=output.stdout.decode("utf-8", "replace"),
        stderr=output.stderr.decode("utf-8", "replace"),
        exit_code=None if output.stopped else output.exit_code,
        hits=tuple(_hits(limits, output, cgroup)),
    )


def _setpriv_argv(as_user: tuple[int, int] | None) -> list[str]:
    """The prefix that execs bwrap as the sandbox uid, without supplementary groups.
    Popen's user=/group= would do the same, but they make CPython fork, copying the
    service's page tables on every run (~1.5 ms at 60 MB, ~8 ms at 200 MB), where it can
    otherwise vfork."""
    if as_user is None:
        return []
    uid, gid = as_user
    return [SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]


def _nice_argv(nice: int) -> list[str]:
    return ["/usr/bin/nice", "-n", str(nice)] if nice else []


# A run's signals are a new process's, whatever the service inherited (started as a
# script's background job, it ignores SIGINT and SIGQUIT, and an exec keeps what is
# ignored and blocked): coreutils' env sets every disposition to its default and unblocks
# every signal, then execs the rest.
DEFAULT_SIGNALS = ["/usr/bin/env", "--default-signal"]

# Signals 32 and 33 are the C library's own (thread cancellation, set*id across threads):
# neither env nor Python may touch them, yet a parent can leave them ignored (GNU make
# does, for every command it runs) and an exec keeps that. Only the kernel's call resets
# them; a handler the C library installed is left alone.
_LIBC_SIGNALS = (32, 33)
_RT_SIGACTION = {"x86_64": 13, "aarch64": 134}


class _KernelSigaction(ctypes.Structure):
    _fields_ = [("handler", ctypes.c_void_p), ("flags", ctypes.c_ulong), ("restorer", ctypes.c_void_p),
                ("mask", ctypes.c_ulong)]  # fmt: skip


def reset_libc_signals() -> None:
    """Signals 32 and 33 back to their default where this process inherited them ignored,
    so that no run inherits them so (every run is this process's descendant)."""
    call = _RT_SIGACTION.get(platform.machine())
    if call is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for number in _LIBC_SIGNALS:
        old = _KernelSigaction()
        if libc.syscall(call, number, None, ctypes.byref(old), 8) == 0 and old.handler == signal.SIG_IGN.value:
            libc.syscall(call, number, ctypes.byref(_KernelSigaction()), None, 8)


@dataclass
class Sandbox:
    proc: subprocess.Popen[bytes]
    pidfd: int | None = None  # the sandbox's first process, once it exists
    child: int | None = None  # its host pid

    @property
    def streams(self) -> tuple[int, int]:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        return self.proc.stdout.fileno(), self.proc.stderr.fileno()

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        # When the first process of a PID namespace dies, the kernel kills all the others,
        # a fork bomb included; the process group takes bwrap itself.
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):  # bwrap, even where its sandbox has ended
            os.killpg(self.proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def sandbox(
    data_dir: str | None,
    argv: Sequence[str],
    program: Mapping[str, bytes],
    limits: Limits,
    as_user: tuple[int, int] | None,
    cgroup: cgroups.RunCgroup,
    nice: int = 0,
    caps: Sequence[str] = (),
    pass_fds: Sequence[int] = (),
) -> Iterator[Sandbox]:
    """Start bwrap and put its sandbox into the run's cgroup before the program starts.

    bwrap makes the sandbox, reports its host pid on the info fd, then blocks on the
    block fd before it forks or execs anything. Moved into the cgroup at that moment,
    every process of the run is born inside it; a Popen'd process moved after the fact
    could have forked already. Closing the block fd unread would release the sandbox
    too, so on any failure the sandbox is killed first. (`caps`, `pass_fds`: a fork
    server's, bwrap_args.)"""
    proc, info, block = _launch(data_dir, argv, program, limits, as_user, nice, caps, pass_fds)
    started = Sandbox(proc)
    with proc:
        try:
            with open(info, "rb") as info_pipe:
                report = info_pipe.read()
            if report:  # else bwrap failed before making the sandbox, and says why on stderr
                started.child = json.loads(report)["child-pid"]
                started.pidfd = os.pidfd_open(started.child)
                cgroup.add(started.child)
                os.write(block, b"1")
            yield started
        except BaseException:
            started.kill()
            raise
        finally:
            os.close(block)
            if started.pidfd is not None:
                os.close(started.pidfd)


def _launch(
    data_dir: str | None,
    argv: Sequence[str],
    program: Mapping[str, bytes],
    limits: Limits,
    as_user: tuple[int, int] | None,
    nice: int,
    caps: Sequence[str],
    pass_fds: Sequence[int],
) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start bwrap; return it, the read end of its info pipe and the write end of its block pipe."""
    # The program and the filter reach bwrap as in-memory files: nothing is written on the host.
    fds = {name: memfd(name, source) for name, source in program.items()}
    # A fork server runs without the filter, which denies what it does with its caps.
    seccomp_fd = None if caps else memfd("seccomp", seccomp.bpf())
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    options = bwrap_args(data_dir, fds, _Control(seccomp_fd, info_w, block_r), limits, caps)
    args_fd = memfd("args", b"".join(os.fsencode(arg) + b"\0" for arg in options))
    passed = (*fds.values(), *([seccomp_fd] if seccomp_fd is not None else []), info_w, block_r, args_fd)
    try:
        bwrap = shutil.which("bwrap") or "bwrap"
        proc = subprocess.Popen(
            [*DEFAULT_SIGNALS, *_nice_argv(nice), *_setpriv_argv(as_user), bwrap, "--args", str(args_fd), "--", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(*passed, *pass_fds),
            env={},
            start_new_session=True,
        )
    except BaseException:
        os.close(info_r)
        os.close(block_w)
        raise
    finally:
        for fd in passed:
            os.close(fd)
    return proc, info_r, block_w


def memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@dataclass
class _Output:
    stdout: bytes
    stderr: bytes
    dropped: tuple[str, ...]  # the streams cut at max_output_bytes
    stopped: LimitHit | None  # the limit the service stopped the run at, if it did
    exit_code: int


def _collect(started: Started, timeout: float, limits: Limits, cancelled: Callable[[], bool]) -> _Output:
    """Read both streams to the end and wait for the run, keeping at most max_output_bytes
    of each, and stop the run at the deadline or when it is cancelled. Output past the
    cap is read and dropped, so a program printing without end costs the service no
    memory; one that closes its pipes is still waited for, not on."""
    kept = {"stdout": bytearray(), "stderr": bytearray()}
    dropped: set[str] = set()
    stopped = None
    next_watch = time.monotonic()
    deadline = next_watch + timeout
    with selectors.DefaultSelector() as sel:
        for fd, name in zip(started.streams, ("stdout", "stderr"), strict=True):
            sel.register(fd, selectors.EVENT_READ, name)
        while sel.get_map() or started.poll() is None:
            now = time.monotonic()
            if now >= deadline:
                stopped = LimitHit(Limit.TIME, timeout)
            elif now >= next_watch:
                if cancelled():
                    stopped = LimitHit(Limit.CANCELLED, 0)
                next_watch = now + _WATCH_SECONDS
            if stopped:
                started.kill()
                break
            wait = max(min(deadline, next_watch) - time.monotonic(), 0)
            if sel.get_map():
                _read(sel, wait, kept, dropped, limits.max_output_bytes)
            else:
                started.wait(wait)
    exit_code = started.wait()
    assert exit_code is not None
    return _Output(bytes(kept["stdout"]), bytes(kept["stderr"]), tuple(sorted(dropped)), stopped, exit_code)


def _read(
    sel: selectors.BaseSelector, timeout: float, kept: dict[str, bytearray], dropped: set[str], cap: int
) -> None:
    for key, _ in sel.select(timeout):
        chunk = os.read(key.fd, 1 << 16)
        if not chunk:
            sel.unregister(key.fileobj)
            continue
        buf = kept[key.data]
        room = cap - len(buf)
        if len(chunk) > room:
            dropped.add(key.data)
        buf += chunk[: max(room, 0)]


def _hits(limits: Limits, output: _Output, cgroup: cgroups.RunCgroup) -> list[LimitHit]:
    """Each limit the run hit. (A write past the session's disk limit fails in the program
    itself, with "Disk quota exceeded".)"""
    hits = [output.stopped] if output.stopped else []
    # bwrap reports a program killed by a signal as 128 + the signal's number.
    if output.exit_code == 128 + signal.SIGXCPU:
        hits.append(LimitHit(Limit.CPU, limits.cpu_seconds))
    if output.exit_code == 128 + signal.SIGXFSZ:  # Python ignores it: its write fails instead
        hits.append(LimitHit(Limit.FILE_SIZE, limits.max_file_bytes, stopped=False))
    if cgroup.oom_killed():
        hits.append(LimitHit(Limit.MEMORY, limits.memory_bytes))
    if cgroup.hit_process_limit():
        hits.append(LimitHit(Limit.PROCESSES, limits.max_processes, stopped=False))
    for name in output.dropped:
        hits.append(LimitHit(Limit.OUTPUT, limits.max_output_bytes, stopped=False, stream=name))
    return hits
