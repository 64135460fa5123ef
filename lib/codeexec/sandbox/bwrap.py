"""Running one program under bubblewrap, with its output bounded and its time limited.

The program gets fresh namespaces (no network at all, not even loopback: the service's
own port is unreachable), the host's toolchains read-only, a private /tmp, its session's
directory at /mnt/data, and an environment built from nothing. When the service runs as
root, bwrap itself is started as an unprivileged host uid, so even a file the sandbox
can see is checked against that uid, never root's.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..languages import CODE_DIR
from .port import RunResult

ARTIFACT_DIR = "/mnt/data"

# What the runtimes need from /etc, and nothing else of the host's configuration.
_ETC = (
    "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "fonts",
    "java-17-openjdk", "php", "R", "ssl", "mime.types", "nsswitch.conf", "passwd", "group",
)
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "MPLBACKEND": "Agg",  # matplotlib without a display: figures are saved, never shown
}


@dataclass(frozen=True)
class Limits:
    timeout: float
    max_output_bytes: int


def bwrap_argv(data_dir: str, program_fds: Mapping[str, int]) -> list[str]:
    argv = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all", "--die-with-parent", "--new-session",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
        "--bind", data_dir, ARTIFACT_DIR, "--chdir", ARTIFACT_DIR,
        "--cap-drop", "ALL", "--clearenv",
    ]  # fmt: skip
    for name in _ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for key, value in _ENV.items():
        argv += ["--setenv", key, value]
    for name, fd in program_fds.items():
        argv += ["--ro-bind-data", str(fd), f"{CODE_DIR}/{name}"]
    return argv


def run(
    data_dir: str,
    argv: Sequence[str],
    program: Mapping[str, bytes],
    limits: Limits,
    as_user: tuple[int, int] | None,
) -> RunResult:
    # The program reaches bwrap as in-memory files: nothing of it is written on the host.
    fds = {name: _memfd(name, source) for name, source in program.items()}
    try:
        proc = subprocess.Popen(
            [*bwrap_argv(data_dir, fds), "--", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=tuple(fds.values()),
            env={},
            start_new_session=True,
            user=as_user[0] if as_user else None,
            group=as_user[1] if as_user else None,
            extra_groups=[] if as_user else None,
        )
    finally:
        for fd in fds.values():
            os.close(fd)
    return _collect(proc, limits)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd


def _collect(proc: subprocess.Popen[bytes], limits: Limits) -> RunResult:
    """Read both pipes to the end, keeping at most max_output_bytes of each, and kill the
    process group at the deadline. Output past the cap is read and dropped, so a program
    printing without end costs the service no memory."""
    assert proc.stdout is not None and proc.stderr is not None
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    dropped = dict.fromkeys(kept, False)
    deadline = time.monotonic() + limits.timeout
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for pipe in kept:
            sel.register(pipe, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                _kill(proc)
                break
            for key, _ in sel.select(remaining):
                chunk = os.read(key.fd, 1 << 16)
                buf = kept[key.fileobj]  # type: ignore[index]
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                room = limits.max_output_bytes - len(buf)
                if len(chunk) > room:
                    dropped[key.fileobj] = True  # type: ignore[index]
                buf += chunk[: max(room, 0)]
    exit_code = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    notes = []
    if timed_out:
        notes.append(f"Stopped: the run exceeded its {limits.timeout:g} s time limit.")
    for pipe, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
        if dropped[pipe]:
            notes.append(
                f"Output truncated: {name} exceeded {limits.max_output_bytes} bytes; the rest was dropped."
            )
    return RunResult(
        stdout=kept[proc.stdout].decode("utf-8", "replace"),
        stderr=kept[proc.stderr].decode("utf-8", "replace"),
        exit_code=None if timed_out else exit_code,
        notes=tuple(notes),
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    # bwrap's children die with it (--die-with-parent), and with them the whole PID
    # namespace; the process group catches anything that raced.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
