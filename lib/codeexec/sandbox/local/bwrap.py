"""A cold run: one program in a bubblewrap sandbox of its own (and a fork server's
sandbox, warm/server.py, made the same way).

Isolation: fresh user, PID, IPC, UTS, mount, cgroup and network namespaces (no network
at all, not even loopback: the service's own port is unreachable); what layout.py says a
run sees: the host's toolchains read-only (/usr and a short /etc allow-list) and nothing
else of the host: no /home, /root, /var, no other session; private RAM disks; the
session's directory at /mnt/data; an environment built from nothing; no capabilities,
no_new_privs (bwrap sets it), and a seccomp filter (seccomp.py). When the service runs
as root, bwrap itself is started as an unprivileged host uid (by util-linux `setpriv`),
so even a file the sandbox can see is checked against that uid, never root's.

Limits: rlimits (limits.py), cgroups for memory and processes (cgroups.py), the kernel's
quota on the session's subvolume (storage.py), and the wall clock and the output
(collect.py). Everything a run starts dies with it: its PID namespace ends when its first
process does.

What a program can learn of its own sandbox is no more than it needs: bwrap takes its
options through a descriptor (`--args`), so no command line shows the host paths and
settings it was started with, and a run's pid 1 is not bwrap (whose memory holds them) but
an init of its own that the program cannot read (coldinit.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import platform
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..port import RunResult
from . import cgroups, collect, layout, seccomp
from .layout import ARTIFACT_DIR, ENVIRONMENT, NODE_MODULES
from .limits import Confinement, Limits
from .toolchains import Launch

SETPRIV = "/usr/bin/setpriv"


@dataclass(frozen=True)
class _Control:
    """The descriptors bwrap reads besides the program."""

    seccomp: int | None  # the compiled filter (none for a fork server)
    info: int  # bwrap writes the sandbox's host pid here...
    block: int  # ...then waits for a byte here before it starts the program


@dataclass(frozen=True)
class ServerTerms:
    """What a fork server's sandbox has that a run's has not (warm/server.py): no session yet (an
    empty /mnt/data), `caps` kept inside its user namespace, no filter (its runs load it
    themselves), descriptors passed to it, and a priority."""

    caps: Sequence[str]
    pass_fds: Sequence[int] = ()
    nice: int = 0


def bwrap_args(data_dir: str | None, program_fds: Mapping[str, int], control: _Control, limits: Limits,
               caps: Sequence[str] = (), as_pid_1: bool = False) -> list[str]:  # fmt: skip
    """bwrap's options, without the program's command line: the sandbox layout.py
    describes, over data_dir, with `program_fds` placed read-only (a relative name in /code);
    `as_pid_1`, the command is the sandbox's first process, instead of bwrap's own init."""
    argv = [
        *(["--as-pid-1"] if as_pid_1 else []),
        # --disable-userns needs --unshare-user named, even where bwrap would pick it itself.
        "--unshare-all", "--unshare-user", "--disable-userns", "--hostname", "sandbox",
        # The host's sandbox uid is nobody inside.
        "--uid", str(layout.NOBODY), "--gid", str(layout.NOBODY),
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
    for path, mode in layout.RAM_DISKS:
        argv += ["--perms", mode, "--size", str(limits.memory_bytes), "--tmpfs", path]
    for name in layout.ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for path in layout.host_site_packages():
        argv += ["--tmpfs", path, "--remount-ro", path]
    for key, value in layout.environment(limits).items():
        argv += ["--setenv", key, value]
    for name, fd in program_fds.items():
        argv += ["--ro-bind-data", str(fd), layout.path_inside(name)]
    # Last: the root bwrap built the rest on, and /dev, are RAM disks writable until now.
    # Device nodes stay writable on a read-only mount (/dev/null still takes output).
    return [*argv, "--remount-ro", "/dev", "--remount-ro", "/"]


class ColdRuns:
    """Runs launched cold: each in a new bubblewrap sandbox, with what every run finds
    (layout.run_files), in a cgroup of its own."""

    def __init__(self, confinement: Confinement) -> None:
        self.confinement = confinement

    def run(self, data_dir: str, launch: Launch, cancelled: Callable[[], bool] | None) -> RunResult:
        limits = self.confinement.limits
        with cgroups.run_cgroup(self.confinement.cgroup_parents, limits.memory_bytes, limits.max_processes) as cgroup:
            command = [*limits.prlimit_argv(cgroup.controllers), *launch.argv]
            files = {**launch.files, **layout.run_files()}
            with sandbox(self.confinement, data_dir, command, files, cgroup) as started:
                return collect.finish(started, cgroup, launch.timeout, limits, cancelled)


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
class Bubblewrap:
    """A bubblewrap sandbox under way (a collect.Started)."""

    proc: subprocess.Popen[bytes]
    info: int = field(repr=False)  # bwrap's info pipe, read until it reports the sandbox
    block: int = field(repr=False)  # bwrap's block pipe: a byte starts the program
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
    confinement: Confinement,
    data_dir: str | None,
    argv: Sequence[str],
    files: Mapping[str, bytes],
    cgroup: cgroups.RunCgroup,
    server: ServerTerms | None = None,
) -> Iterator[Bubblewrap]:
    """Start bwrap and put its sandbox into the run's cgroup before the program starts.

    bwrap makes the sandbox, reports its host pid on the info fd, then blocks on the
    block fd before it forks or execs anything. Moved into the cgroup at that moment,
    every process of the run is born inside it; a Popen'd process moved after the fact
    could have forked already. Closing the block fd unread would release the sandbox
    too, so on any failure the sandbox is killed first."""
    started = Bubblewrap(*_launch(confinement, data_dir, argv, files, server))
    with started.proc:
        try:
            with open(started.info, "rb") as info_pipe:
                report = info_pipe.read()
            if report:  # else bwrap failed before making the sandbox, and says why on stderr
                started.child = json.loads(report)["child-pid"]
                started.pidfd = os.pidfd_open(started.child)
                cgroup.add(started.child)
                os.write(started.block, b"1")
            yield started
        except BaseException:
            started.kill()
            raise
        finally:
            os.close(started.block)
            if started.pidfd is not None:
                os.close(started.pidfd)


def _launch(
    confinement: Confinement,
    data_dir: str | None,
    argv: Sequence[str],
    files: Mapping[str, bytes],
    server: ServerTerms | None,
) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start bwrap; return it, the read end of its info pipe and the write end of its block pipe."""
    if server is None:  # a run: its init first (coldinit.py)
        argv = [*_INIT_ARGV, *argv]
        files = {**files, _INIT: _init_source()}
    # The program and the filter reach bwrap as in-memory files: nothing is written on the host.
    fds = {name: memfd(name, content) for name, content in files.items()}
    # A fork server runs without the filter, which denies what it does with its caps.
    seccomp_fd = None if server else memfd("seccomp", seccomp.bpf())
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    control = _Control(seccomp_fd, info_w, block_r)
    options = bwrap_args(data_dir, fds, control, confinement.limits, server.caps if server else (), server is None)
    args_fd = memfd("args", b"".join(os.fsencode(arg) + b"\0" for arg in options))
    passed = (*fds.values(), *([seccomp_fd] if seccomp_fd is not None else []), info_w, block_r, args_fd)
    nice = _nice_argv(server.nice if server else 0)
    try:
        bwrap = shutil.which("bwrap") or "bwrap"
        proc = subprocess.Popen(
            [*DEFAULT_SIGNALS, *nice, *_setpriv_argv(confinement.as_user), bwrap, "--args", str(args_fd), "--", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(*passed, *(server.pass_fds if server else ())),
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


# A run's first process, started by exec from a file of its own, whose memory holds nothing
# of the host; -I -S: nothing of the run's environment or of a site directory is read.
_INIT = ".init.py"
_INIT_ARGV = ["/usr/bin/python3", "-I", "-S", layout.path_inside(_INIT)]


@functools.cache
def _init_source() -> bytes:
    return (Path(__file__).parent / "coldinit.py").read_bytes()


def memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
