"""What a run hands back: the files it wrote that count as outputs, the files it removed,
and the inputs it left as they were, from the changes the backend computed next to the
files (`port.Changes`).

Which files count as a run's outputs follows the reference server
(ClickHouse/code-interpreter, api/src/job.ts), which is also what @librechat/agents 3.9
tells the model ("/mnt/data keeps files with recognized extensions"): nothing under a
hidden directory (`.cache/`, `.ipython/`) unless an input lives there, and only files
whose name is a recognized kind (by extension, or by a well-known name such as `.env` or
`Dockerfile`). So `__pycache__/*.pyc`, compiler droppings and extensionless scratch
files are never outputs; they stay in the session, listed and downloadable, like any file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from .. import notes
from ..sandbox.port import Changes, FileInfo, Placed, RunResult
from ..wire import FileRef

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
class Report:
    """What a run, or a programmatic workflow, did and said: the domain's answer, which
    `codeexec.api.replies` puts in the wire's shapes."""

    session_id: str
    stdout: str
    stderr: str  # the program's, between the service's notes
    outputs: list[FileInfo]  # what it wrote that counts as an output
    inherited: list[FileRef]  # inputs it left as they were (or read-only ones), echoed for G2
    deleted: list[str]
    stdout_cut: bool
    runtime_status: Literal["new", "reused"] | None = None  # the stateful profile's session


def report(
    session_id: str,
    result: RunResult,
    changes: Changes,
    refs: Sequence[FileRef],
    placed: Sequence[Placed],
    missing: list[str],
    max_files: int,
    lists_inherited: bool,
) -> Report:
    """The outputs are what the run wrote, but never a changed read-only input; G2
    clients (lists_inherited) also get the inputs it left as they were, and the read-only
    ones, as their own refs, so they can tell them from what the run made."""
    inputs = frozenset(p.path for p in placed if p.path)
    read_only = {p.path for p in placed if p.path and p.read_only}
    written = [f for f in changes.written() if f.path not in read_only and is_output(f.path, inputs)]
    echoed = [
        ref
        for ref, where in zip(refs, placed, strict=True)
        if lists_inherited and where.path and (where.read_only or changes.untouched(where.path))
    ]
    limit_notes = [notes.limit_hit(hit) for hit in result.hits]
    if written and any(hit.stopped for hit in result.hits):  # its files, as they were when it was cut
        limit_notes.append(notes.stopped_while_writing())
    if len(written) + len(echoed) > max_files:
        limit_notes.append(notes.files_listed(max_files, len(written) + len(echoed)))
        written = written[:max_files]
        echoed = echoed[: max_files - len(written)]
    stderr = notes.around(result.stderr, missing, limit_notes)
    return Report(session_id, result.stdout, stderr, written, echoed, list(changes.deleted), result.stdout_cut)
