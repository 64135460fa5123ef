"""The `local` backend's language table: for each `lang`, how it compiles and runs here.

A program's source is written to `/code/<source>` (outside the artifact directory, so it
never shows up as an output file) and runs with `/mnt/data` as its working directory.
Compilers run in, and write to, the sandbox's private `/tmp`: their artifacts never show
up, and no file of the session's (a `go.mod`, an `ldc2.conf`) changes how they compile.
Nor does any start a runtime differently: Python puts /mnt/data last on its path (the
sitecustomize below) and ignores user site files (-s); R reads no profile (--vanilla).
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

CODE_DIR = "/code"
PROG = "/tmp/prog"  # where a compiled program goes
# The libraries programs run with, apart from the service's Python and from the host's
# (deps/, installed by `make install`), bound read-only into every run at the same path:
# the locked Python set, the npm lock's node_modules, and `python`/`pip` for scripts.
ENVIRONMENT = "/opt/sandbox"
PYTHON_LIBS = f"{ENVIRONMENT}/python"
NODE_MODULES = f"{ENVIRONMENT}/node/node_modules"
TOOLS = f"{ENVIRONMENT}/tools"  # bin/python, bin/pip, matplotlibrc (deps/tools/)
# Found first on PYTHONPATH (bwrap.py sets it), so neither Debian's nor a session's own
# sitecustomize runs: it takes itself off the path and adds the session's directory at
# the end, after the standard library and the installed packages.
PYTHON_SITE = b"""import sys
sys.path[:] = [p for p in sys.path if p != "/code/.site"] + ["/mnt/data"]
"""
# Where the host's apt and pip put packages for Debian 12's python3 (3.11, the sandbox's):
# hidden from runs (bwrap.py), so a run imports the locked set, the same on every host,
# never an older copy beside it (whose .pth files would run first: Debian's matplotlib
# claims mpl_toolkits that way).
HOST_SITE_PACKAGES = ("/usr/lib/python3/dist-packages", "/usr/local/lib/python3.11/dist-packages")


@dataclass(frozen=True)
class Toolchain:
    """One row of the table. In `compile` and `run`, "{source}" is the source's path and
    "{main}" its file name without the suffix (Java's class to run)."""

    run: tuple[str, ...]  # argv; the program's args are appended
    compile: tuple[str, ...] = ()  # argv, run first; a failure is the run's failure
    needs: tuple[str, ...] = ()  # tools the compiler calls besides itself (a linker, a runtime)
    min_timeout: float = 0.0  # seconds a run gets at least: compilers and JVMs start slowly

    def argv(self, lang: str, source_name: str, args: Sequence[str]) -> list[str]:
        fill = {"source": f"{CODE_DIR}/{source_name}", "main": PurePosixPath(source_name).stem}
        run = [part.format_map(fill) for part in self.run]
        if not self.compile:
            return [*run, *args]
        compile_ = [part.format_map(fill) for part in self.compile]
        # One process: the shell compiles in /tmp, then becomes the program in /mnt/data,
        # which gets the args as "$@".
        script = f'cd /tmp && {shlex.join(compile_)} && cd /mnt/data && exec {shlex.join(run)} "$@"'
        return ["/bin/sh", "-c", script, lang, *args]

    def timeout(self, asked: float) -> float:
        return max(asked, self.min_timeout)

    def available(self) -> bool:
        toolchain = (self.compile or self.run)[0], *self.needs
        return all(shutil.which(tool) for tool in toolchain)


# The serial collector starts fastest. The smaller reservations let the JVM start under an
# address-space limit (the memory limit on hosts without a memory cgroup): 1 GB is enough.
_JVM = ("-XX:+UseSerialGC", "-XX:CompressedClassSpaceSize=64m", "-XX:ReservedCodeCacheSize=64m")

TOOLCHAINS: dict[str, Toolchain] = {
    # Debian's python3: a pyenv interpreter imports .pth hooks at start (35 ms vs 9 ms).
    "py": Toolchain(("/usr/bin/python3", "-s", "{source}")),
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
