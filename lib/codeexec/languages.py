"""The language table: for each `lang`, where its source goes, how it compiles and runs.

A program's source is written to `/code/<source>` (outside the artifact directory, so it
never shows up as an output file) and runs with `/mnt/data` as its working directory.
Compilers write to the sandbox's private `/tmp`, so their artifacts never show up either.
Backends say which of these they can actually run (`Sandboxes.languages`).
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

CODE_DIR = "/code"
PROG = "/tmp/prog"  # where a compiled program goes


@dataclass(frozen=True)
class Language:
    """One row of the table. In `compile` and `run`, "{source}" is the source's path and
    "{main}" its file name without the suffix (Java's class to run)."""

    name: str
    source: str  # file name under CODE_DIR
    run: tuple[str, ...]  # argv; the program's args are appended
    compile: tuple[str, ...] = ()  # argv, run first; a failure is the run's failure
    needs: tuple[str, ...] = ()  # tools the compiler calls besides itself (a linker, a runtime)
    min_timeout: float = 0.0  # seconds a run gets at least: compilers and JVMs start slowly
    # Patterns tried in order on the code; the first match names the source file instead.
    named_by: tuple[re.Pattern[str], ...] = ()

    def source_name(self, code: str) -> str:
        for pattern in self.named_by:
            if found := pattern.search(code):
                return found[1] + PurePosixPath(self.source).suffix
        return self.source

    def argv(self, source_name: str, args: Sequence[str]) -> list[str]:
        fill = {"source": f"{CODE_DIR}/{source_name}", "main": PurePosixPath(source_name).stem}
        run = [part.format_map(fill) for part in self.run]
        if not self.compile:
            return [*run, *args]
        compile_ = [part.format_map(fill) for part in self.compile]
        # One process: the shell compiles, then becomes the program, which gets the args as "$@".
        script = f'{shlex.join(compile_)} && exec {shlex.join(run)} "$@"'
        return ["/bin/sh", "-c", script, self.name, *args]

    def timeout(self, setting: float) -> float:
        return max(setting, self.min_timeout)

    def available(self) -> bool:
        toolchain = (self.compile or self.run)[0], *self.needs
        return all(shutil.which(tool) for tool in toolchain)


# javac insists that a public class lives in a file of its name; without one, the first class.
_JAVA_CLASS = (
    re.compile(r"\bpublic\s+(?:(?:final|abstract)\s+)*(?:class|interface|enum|record)\s+(\w+)"),
    re.compile(r"\b(?:class|interface|enum|record)\s+(\w+)"),
)
# The serial collector starts fastest. The smaller reservations let the JVM start under an
# address-space limit (the memory limit on hosts without a memory cgroup): 1 GB is enough.
_JVM = ("-XX:+UseSerialGC", "-XX:CompressedClassSpaceSize=64m", "-XX:ReservedCodeCacheSize=64m")

LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        # Debian's python3: a pyenv interpreter imports .pth hooks at start (35 ms vs 9 ms).
        Language("py", "main.py", ("/usr/bin/python3", "{source}")),
        Language("js", "main.js", ("/usr/bin/node", "{source}")),
        # esbuild strips the types (it does not check them) in milliseconds; tsc took 2 s.
        # The inline source map makes a stack trace name main.ts and its lines.
        Language(
            "ts", "main.ts",
            ("/usr/bin/node", "--enable-source-maps", "/tmp/main.js"),
            ("/usr/local/bin/esbuild", "--log-level=error", "--platform=node", "--format=cjs",
             "--sourcemap=inline", "--outfile=/tmp/main.js", "{source}"),
            needs=("/usr/bin/node",),
        ),
        Language("c", "main.c", (PROG,), ("/usr/bin/gcc", "-O2", "-o", PROG, "{source}", "-lm")),
        Language("cpp", "main.cpp", (PROG,), ("/usr/bin/g++", "-O2", "-o", PROG, "{source}"), min_timeout=60),
        Language(
            "java", "Main.java",
            ("/usr/bin/java", *_JVM, "-cp", "/tmp/classes", "{main}"),
            ("/usr/bin/javac", *(f"-J{flag}" for flag in _JVM), "-J-XX:TieredStopAtLevel=1",
             "-d", "/tmp/classes", "{source}"),
            needs=("/usr/bin/java",), min_timeout=60, named_by=_JAVA_CLASS,
        ),
        Language("php", "main.php", ("/usr/bin/php", "{source}")),
        # Edition 2021, as cargo would pick: rustc alone defaults to 2015.
        Language(
            "rs", "main.rs", (PROG,), ("/usr/bin/rustc", "--edition=2021", "-o", PROG, "{source}"),
            needs=("/usr/bin/cc",), min_timeout=60,
        ),
        Language("go", "main.go", (PROG,), ("/usr/bin/go", "build", "-o", PROG, "{source}"), min_timeout=60),
        Language(
            "d", "main.d", (PROG,), ("/usr/bin/ldc2", f"-of={PROG}", "-od=/tmp", "{source}"),
            needs=("/usr/bin/cc",), min_timeout=60,
        ),
        # -J: module files go to /tmp, not the working directory.
        Language("f90", "main.f90", (PROG,), ("/usr/bin/gfortran", "-O2", "-J", "/tmp", "-o", PROG, "{source}")),
        Language("r", "main.r", ("/usr/bin/Rscript", "{source}")),
        Language("bash", "main.sh", ("/bin/bash", "{source}")),
    )
}  # fmt: skip
