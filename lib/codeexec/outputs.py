"""What a run changed: the files it wrote, the files it removed, and the inputs it left as
they were.

Pure functions over two listings of the session, one taken just before the run and one
just after, both under the session's exclusive hold.

Which files count as a run's outputs follows the reference server
(ClickHouse/code-interpreter, api/src/job.ts), which is also what @librechat/agents 3.9
tells the model ("/mnt/data keeps files with recognized extensions"): nothing under a
hidden directory (`.cache/`, `.ipython/`) unless an input lives there, and only files
whose name is a recognized kind (by extension, or by a well-known name such as `.env` or
`Dockerfile`). So `__pycache__/*.pyc`, compiler droppings and extensionless scratch
files are never outputs; they stay in the session, listed and downloadable, like any file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from . import ids
from .sandbox.port import FileInfo
from .wire import FileRef, OutputFile

# The reference's list (api/src/job.ts `isSupportedOutputFilename`), as it is.
_REFERENCE_LIST = (
    ".c .cs .cpp .go .java .js .kt .kts .lua .php .pl .ps1 .py .r .rb .rs .scala .sh .sql .swift .ts .jsx .tsx "
    ".groovy .css .htm .html .less .sass .scss .svg .svelte .vue .adoc .asciidoc .md .rst .tex .txt .wiki .csv "
    ".json .bson .json5 .jsonl .parquet .tsv .xml .yaml .yml .ics .ical .ifb .icalendar .conf .env .gitignore .ini "
    ".properties .toml .doc .docx .pdf .ppt .pptx .xls .xlsx .odt .ods .odp .rtf .avif .bmp .gif .ico .jpeg .jpg "
    ".png .tif .tiff .webp .eot .ttf .woff .woff2 .7z .bz2 .gz .gzip .rar .tar .zip .tf .tfvars .tfstate .hcl "
    ".dockerfile .Dockerfile .dockerignore .helmignore .helmfile .jenkinsfile .vagrantfile .eslintrc .prettierrc "
    ".editorconfig .nomad .bat .cmd .deb .log .rpm .vbs"
)
RECOGNIZED = frozenset(_REFERENCE_LIST.split())
# The reference walks no deeper, and skips longer paths.
MAX_DEPTH = 10
MAX_PATH_CHARS = 256


def recognized(name: str) -> bool:
    suffix = PurePosixPath(name).suffix
    if suffix.lower() in RECOGNIZED or name in RECOGNIZED or name.lower() in RECOGNIZED:
        return True
    return not suffix and (f".{name}" in RECOGNIZED or f".{name}".lower() in RECOGNIZED)


def is_output(path: str, inputs: frozenset[str] = frozenset()) -> bool:
    *dirs, name = path.split("/")
    if len(dirs) >= MAX_DEPTH or len(path) > MAX_PATH_CHARS:
        return False
    for depth, part in enumerate(dirs):
        under = "/".join(dirs[: depth + 1]) + "/"
        if part.startswith(".") and not any(i.startswith(under) for i in inputs):
            return False
    return recognized(name)


@dataclass(frozen=True)
class Changes:
    before: list[FileInfo]
    after: list[FileInfo]

    def written(self) -> list[FileInfo]:
        """New or changed files (by size or modification time), by path."""
        stamps = {f.path: _stamp(f) for f in self.before}
        return sorted((f for f in self.after if stamps.get(f.path) != _stamp(f)), key=lambda f: f.path)

    def unchanged(self) -> set[str]:
        stamps = {f.path: _stamp(f) for f in self.before}
        return {f.path for f in self.after if stamps.get(f.path) == _stamp(f)}

    def deleted(self) -> list[str]:
        remaining = {f.path for f in self.after}
        return sorted(f.path for f in self.before if f.path not in remaining)


@dataclass(frozen=True)
class Placed:
    """An input the run found in its session: the client's ref, and where it is now."""

    ref: FileRef
    path: str
    read_only: bool  # from a read-only upload (a skill's files): never handed back as an output


def written(session_id: str, changes: Changes, placed: list[Placed]) -> list[OutputFile]:
    """The run's outputs: what it wrote, but never a changed read-only input."""
    inputs = frozenset(p.path for p in placed)
    read_only = {p.path for p in placed if p.read_only}
    return [
        _output(session_id, f)
        for f in changes.written()
        if f.path not in read_only and is_output(f.path, inputs)
    ]


def inherited(placed: list[Placed], changes: Changes, session_id: str) -> list[OutputFile]:
    """The inputs the run left as they were (and the read-only ones, changed or not),
    echoed back as the client's own refs, so it can tell them from what the run made
    (and skip storing them again)."""
    unchanged = changes.unchanged()
    return [_echo(p.ref, session_id) for p in placed if p.path in unchanged or p.read_only]


def _stamp(f: FileInfo) -> tuple[int, int]:
    return (f.size, f.mtime_ns)


def _output(session_id: str, f: FileInfo) -> OutputFile:
    file_id = ids.file_id(session_id, f.path)
    return OutputFile(id=file_id, name=f.path, session_id=session_id, storage_session_id=session_id)


def _echo(ref: FileRef, session_id: str) -> OutputFile:
    home = ref.home_session or session_id
    return OutputFile(
        id=ref.id,
        name=ref.name or ref.id,
        session_id=home,
        storage_session_id=home,
        resource_id=ref.resource_id,
        kind=ref.kind,
        version=ref.version,
        inherited=True,
    )
