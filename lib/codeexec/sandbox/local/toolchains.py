"""The `local` backend's language table: for each `lang`, how it compiles and runs here.

A program's source is written to `/code/<source>` (outside the artifact directory, so it
never shows up as an output file) and runs with `/mnt/data` as its working directory.
Compilers run in, and write to, the sandbox's private `/tmp`: their artifacts never show
up, and no file of the session's (a `go.mod`, an `ldc2.conf`) changes how they compile.
Nor does any start a runtime differently: Python puts /mnt/data last on its path (layout
PYTHON_SITE) and ignores user site files (-s); R reads no profile (--vanilla).
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from .layout import CODE_DIR

PROG = "/tmp/prog"  # where a compiled program goes


@dataclass(frozen=True)
class Interpreted:
    """A Python program the interpreter can run in itself, as `python3 -s source args...`
    would: how a warm run forked from a Python fork server takes it (warm/zygote.py)."""

    source: str  # its path in /code
    args: tuple[str, ...]
    code: str  # its text: what it imports chooses the server it is forked from


@dataclass(frozen=True)
class Launch:
    """What to launch for one program, as its toolchain says: the files placed read-only
    in /code, the command line that runs them, its wall-clock limit and, for Python, the
    program as the interpreter itself runs it."""

    files: Mapping[str, bytes]
    argv: tuple[str, ...]
    timeout: float
    interpreted: Interpreted | None = None


@dataclass(frozen=True)
class Toolchain:
    """One row of the table. In `compile` and `run`, "{source}" is the source's path and
    "{main}" its file name without the suffix (Java's class to run)."""

    run: tuple[str, ...]  # argv; the program's args are appended
    compile: tuple[str, ...] = ()  # argv, run first; a failure is the run's failure
    needs: tuple[str, ...] = ()  # tools the compiler calls besides itself (a linker, a runtime)
    min_timeout: float = 0.0  # seconds a run gets at least: compilers and JVMs start slowly
    interpreted: bool = False  # `run` is python3 running the source: a Python fork server can run it

    def launch(self, lang: str, source_name: str, code: str, args: Sequence[str], timeout: float) -> Launch:
        """What to launch for `code` written to /code/<source_name>, asked to run at most
        `timeout` seconds (or the toolchain's least)."""
        source = f"{CODE_DIR}/{source_name}"
        return Launch(
            files={source_name: code.encode("utf-8", "surrogatepass")},
            argv=tuple(self._argv(lang, source_name, args)),
            timeout=max(timeout, self.min_timeout),
            interpreted=Interpreted(source, tuple(args), code) if self.interpreted else None,
        )

    def _argv(self, lang: str, source_name: str, args: Sequence[str]) -> list[str]:
        fill = {"source": f"{CODE_DIR}/{source_name}", "main": PurePosixPath(source_name).stem}
        run = [part.format_map(fill) for part in self.run]
        if not self.compile:
            return [*run, *args]
        compile_ = [part.format_map(fill) for part in self.compile]
        # One process: the shell compiles in /tmp, then becomes the program in /mnt/data,
        # which gets the args as "$@".
        script = f'cd /tmp && {shlex.join(compile_)} && cd /mnt/data && exec {shlex.join(run)} "$@"'
        return ["/bin/sh", "-c", script, lang, *args]

    def available(self) -> bool:
        toolchain = (self.compile or self.run)[0], *self.needs
        return all(shutil.which(tool) for tool in toolchain)


# The serial collector starts fastest. The smaller reservations let the JVM start under an
# address-space limit (the memory limit on hosts without a memory cgroup): 1 GB is enough.
_JVM = ("-XX:+UseSerialGC", "-XX:CompressedClassSpaceSize=64m", "-XX:ReservedCodeCacheSize=64m")

TOOLCHAINS: dict[str, Toolchain] = {
    # Debian's python3: a pyenv interpreter imports .pth hooks at start (35 ms vs 9 ms).
    "py": Toolchain(("/usr/bin/python3", "-s", "{source}"), interpreted=True),
    "js": Toolchain(("/usr/bin/node", "{source}")),
    # esbuild strips the types (it does not check them) in milliseconds; tsc took 2 s.
    # The inline source map makes a stack trace name main.ts and its lines.
    "ts": Toolchain(
        ("/usr/bin/node", "--enable-source-maps", "/tmp/main.js"),
        ("/usr/local/bin/esbuild", "--log-level=error", "--platform=node", "--format=cjs",
         "--sourcemap=inline", "--outfile=/tmp/main.js", "{source}"),
        needs=("/usr/bin/node",),
    ),
    "c": Toolchain((PROG,), ("/usr/bin/gcc", "-O2", "-o", PROG, "{source}", "-lm")),
    "cpp": Toolchain((PROG,), ("/usr/bin/g++", "-O2", "-o", PROG, "{source}"), min_timeout=60),
    "java": Toolchain(
        ("/usr/bin/java", *_JVM, "-cp", "/tmp/classes", "{main}"),
        ("/usr/bin/javac", *(f"-J{flag}" for flag in _JVM), "-J-XX:TieredStopAtLevel=1",
         "-d", "/tmp/classes", "{source}"),
        needs=("/usr/bin/java",), min_timeout=60,
    ),
    "php": Toolchain(("/usr/bin/php", "{source}")),
    # Edition 2021, as cargo would pick: rustc alone defaults to 2015.
    "rs": Toolchain(
        (PROG,), ("/usr/bin/rustc", "--edition=2021", "-o", PROG, "{source}"), needs=("/usr/bin/cc",), min_timeout=60
    ),
    "go": Toolchain((PROG,), ("/usr/bin/go", "build", "-o", PROG, "{source}"), min_timeout=60),
    "d": Toolchain(
        (PROG,), ("/usr/bin/ldc2", f"-of={PROG}", "-od=/tmp", "{source}"), needs=("/usr/bin/cc",), min_timeout=60
    ),
    # -J: module files go to /tmp, not the working directory.
    "f90": Toolchain((PROG,), ("/usr/bin/gfortran", "-O2", "-J", "/tmp", "-o", PROG, "{source}")),
    "r": Toolchain(("/usr/bin/Rscript", "--vanilla", "{source}")),
    "bash": Toolchain(("/bin/bash", "{source}")),
}  # fmt: skip
