"""The language table: for each `lang`, where its source goes and how it runs.

A program's source is written to `/code/<source>` (outside the artifact directory, so it
never shows up as an output file) and runs with `/mnt/data` as its working directory.
Backends say which of these they can actually run (`Sandboxes.languages`).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass

CODE_DIR = "/code"

# Every `lang` LibreChat's code tool can send.
ALL_LANGS = ("py", "js", "ts", "c", "cpp", "java", "php", "rs", "go", "d", "f90", "r", "bash")


@dataclass(frozen=True)
class Language:
    name: str
    source: str  # file name under CODE_DIR
    run: tuple[str, ...]  # argv; the program's args are appended

    @property
    def source_path(self) -> str:
        return f"{CODE_DIR}/{self.source}"

    def argv(self, args: Sequence[str]) -> list[str]:
        return [*self.run, self.source_path, *args]

    def available(self) -> bool:
        return shutil.which(self.run[0]) is not None


LANGUAGES: dict[str, Language] = {
    lang.name: lang
    for lang in (
        # Debian's python3: a pyenv interpreter imports .pth hooks at start (35 ms vs 9 ms).
        Language("py", "main.py", ("/usr/bin/python3",)),
        Language("js", "main.js", ("/usr/bin/node",)),
        Language("bash", "main.sh", ("/bin/bash",)),
    )
}
