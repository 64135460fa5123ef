"""One run of the `memory` backend: the session's files written out to a temporary
directory, the program run there as a plain process of this user, and the directory read
back. NOT a sandbox: the program can do whatever this user can.

    <temporary directory>/
        code/<source>   the program, outside the files: it never shows up as an output
        data/           the session's files, the program's working directory
        home/           its HOME and TMPDIR

The run is held to its time limit (its process group killed, with whatever it started that
is still in the group), its output to its cap, and a cancel stops it as on `local`
(local/collect.py collects it). What the program leaves in data/ is the session's files
from then on: regular files only (a symlink, a FIFO or a socket it made is not a file of
the session), and its directories, empty ones too, so that the next run finds them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ...errors import Conflict, FileNotFound
from ...languages import LANGUAGES
from ..local import collect, files
from ..port import Program, RunResult


@dataclass(frozen=True)
class File:
    data: bytes
    mtime_ns: int


@dataclass(frozen=True)
class Tree:
    """A session's files, never changed in place (a reader holds one moment's), and every
    directory (the parents of the files among them)."""

    files: Mapping[str, File]
    dirs: frozenset[str]


def interpreters() -> dict[str, str]:
    """The languages this host runs, each by the one command that runs a source file:
    Python by the interpreter the service runs on, bash and Node where the host has them."""
    found = {"py": sys.executable or shutil.which("python3"), "bash": shutil.which("bash"), "js": shutil.which("node")}
    return {lang: command for lang, command in found.items() if command}


def run_over(
    command: str, program: Program, tree: Tree, cap: int, cancelled: Callable[[], bool] | None
) -> tuple[RunResult, Tree]:
    """The program run over the session's files; its result, and the files it left."""
    with tempfile.TemporaryDirectory(prefix="codeexec-memory-", ignore_cleanup_errors=True) as top:
        code, data, home = (Path(top, name) for name in ("code", "data", "home"))
        for made in (code, data, home):
            made.mkdir(mode=0o700)
        source = code / LANGUAGES[program.lang].source_name(program.code)
        source.write_text(program.code, "utf-8", "surrogatepass")
        _write_out(tree, data)
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "TMPDIR": str(home), "LANG": "C.UTF-8"}
        started = time.perf_counter()
        with _Process([command, str(source), *program.args], data, env) as process:
            result = collect.collect(process, program.timeout, cap, cancelled).result()
        # A process of its own each time: cold, as the run metrics' `start` says.
        return replace(result, warm=False, seconds=time.perf_counter() - started), _read_back(data)


def _write_out(tree: Tree, data: Path) -> None:
    for path in sorted(tree.dirs):
        (data / path).mkdir(mode=0o755)
    for path, file in tree.files.items():
        (data / path).write_bytes(file.data)
        os.utime(data / path, ns=(file.mtime_ns, file.mtime_ns))  # their real times, as the program should see


class _Process:
    """The program as `collect` watches a run (collect.Started): a plain process leading a
    process group of its own, and the group ending with it, as a sandbox's processes end
    with the sandbox."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self._popen = subprocess.Popen(  # noqa: S603 (the program is the caller's, run as asked: not a sandbox)
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip

    def __enter__(self) -> _Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self._popen.__exit__(None, None, None)  # its pipes closed (collect reaped it, its group killed)

    @property
    def streams(self) -> tuple[int, int]:
        assert self._popen.stdout is not None and self._popen.stderr is not None
        return self._popen.stdout.fileno(), self._popen.stderr.fileno()

    def poll(self) -> int | None:
        if self._popen.returncode is None:
            # Looked at without reaping it: the group is killed while its id is still the program's.
            if os.waitid(os.P_PID, self._popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                return None
            self.kill()
        code = self._popen.wait()
        return 128 - code if code < 0 else code  # killed by a signal: as a shell (and bwrap) says it

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.005)
        return code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, signal.SIGKILL)


def _read_back(data: Path) -> Tree:
    """What the program left in data/, every file with its bytes and its real time (the
    one it was written out with, where the program did not change it)."""
    dirs = _directories(data)
    kept: dict[str, File] = {}
    for info in files.list_beneath(str(data)):
        with contextlib.suppress(FileNotFound, Conflict):
            reader, _ = files.open_beneath(str(data), info.path, os.dup)
            with reader:
                kept[info.path] = File(reader.read(), info.mtime_ns)
    return Tree(kept, dirs)


def _directories(data: Path) -> frozenset[str]:
    """Every directory beneath data/ (as deep as a listing goes), each made this user's to
    read and enter again on the way, with the files in it: the program ran as this user,
    and may have taken that away (chmod 000)."""
    data.chmod(0o700)
    found: set[str] = set()
    for parent, subdirs, names in os.walk(data):
        for name in names:
            _give_back(os.path.join(parent, name), stat.S_ISREG, 0o600)
        deep = len(Path(parent).relative_to(data).parts) + 1 >= files.MAX_DEPTH
        for name in list(subdirs):
            path = os.path.join(parent, name)
            if deep or not _give_back(path, stat.S_ISDIR, 0o700):
                subdirs.remove(name)  # a link is no directory of the session's: never walked into
            else:
                found.add(os.path.relpath(path, data))
    return frozenset(found)


def _give_back(path: str, kind: Callable[[int], bool], mode: int) -> bool:
    """Whether `path` is of that kind (never following a link), made `mode` if it is."""
    try:
        if not kind(os.lstat(path).st_mode):
            return False
        os.chmod(path, mode)
    except OSError:
        return False
    return True
