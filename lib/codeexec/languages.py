"""The languages of the contract: the `lang` values a client may send, and what every
backend needs of one, the name its source file takes.

How a language is compiled and run is each backend's own business (the `local` backend's
table is `sandbox/local/toolchains.py`); backends say which they can run
(`Sandboxes.languages`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath


@dataclass(frozen=True)
class Language:
    name: str
    source: str  # the source file's name
    # Patterns tried in order on the code; the first match names the source file instead.
    named_by: tuple[re.Pattern[str], ...] = ()

    def source_name(self, code: str) -> str:
        for pattern in self.named_by:
            # A name no filesystem takes keeps the default, and the compiler says why.
            if (found := pattern.search(code)) and len(found[1]) <= _MAX_NAME:
                return found[1] + PurePosixPath(self.source).suffix
        return self.source


_MAX_NAME = 200  # characters of a source file's name, its suffix aside (filesystems take 255)

# javac insists that a public class lives in a file of its name; without one, the first class.
_JAVA_CLASS = (
    re.compile(r"\bpublic\s+(?:(?:final|abstract)\s+)*(?:class|interface|enum|record)\s+(\w+)"),
    re.compile(r"\b(?:class|interface|enum|record)\s+(\w+)"),
)

LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        Language("py", "main.py"),
        Language("js", "main.js"),
        Language("ts", "main.ts"),
        Language("c", "main.c"),
        Language("cpp", "main.cpp"),
        Language("java", "Main.java", _JAVA_CLASS),
        Language("php", "main.php"),
        Language("rs", "main.rs"),
        Language("go", "main.go"),
        Language("d", "main.d"),
        Language("f90", "main.f90"),
        Language("r", "main.r"),
        Language("bash", "main.sh"),
    )
}

# Other names a client may send for a language (the reference server's, lowercase: python,
# javascript, bun, nodejs, node-js, typescript, sh, ...; and the obvious ones for the rest,
# since LibreChat's tool offers all thirteen). The reference runs `js` on Bun and `node` on
# Node; here every JavaScript name runs on the one Node, as `js` does.
ALIASES: dict[str, str] = {
    alias: lang
    for lang, aliases in {
        "py": ("python", "python3"),
        "js": ("javascript", "node", "nodejs", "node-js", "node-javascript", "bun", "bun-js"),
        "ts": ("typescript", "bun-ts", "bun-typescript"),
        "cpp": ("c++", "cxx"),
        "rs": ("rust",),
        "go": ("golang",),
        "d": ("dlang",),
        "f90": ("fortran", "f95"),
        "bash": ("sh", "shell"),
    }.items()
    for alias in aliases
}


def canonical(lang: str) -> str:
    """The contract's name of a language sent under any of its names (case aside); an
    unknown name as it came, for the caller's check to refuse."""
    name = lang.strip().lower()
    return name if name in LANGUAGES else ALIASES.get(name, lang)
