"""What a run hands back: the files it wrote that count as outputs, the files it removed,
and the inputs it left as they were, from the changes the backend computed next to the
files (`port.Changes`).

Which files count as a run's outputs starts from the reference server
(ClickHouse/code-interpreter, api/src/job.ts), which is also what @librechat/agents 3.9
tells the model ("/mnt/data keeps files with recognized extensions"): nothing under a
hidden directory (`.cache/`, `.ipython/`, `.ipynb_checkpoints/`) or a bytecode cache
(`__pycache__/`) unless an input lives there, and only files whose name is a recognized
kind (by extension, or by a well-known name such as `.env` or `Dockerfile`). The
reference's list misses whole kinds of file users ask for (a video, a song, an executed
notebook, a packaged skill, map data, a model they trained), so the list here is the
reference's and those kinds besides (docs/environment.md). What is never an output is
what a run leaves behind without being asked: bytecode, caches, compiler droppings and
extensionless scratch files; they stay in the session, listed and downloadable, like any
file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from .. import notes
from ..sandbox.port import Changes, FileInfo, Placed, RunResult
from .commands import InputRef

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
# The kinds the reference leaves out, each a request that would otherwise end with nothing
# handed back ("make a video of this", "run my notebook", "export it as GeoJSON").
_MORE_KINDS = {
    "media": ".mp4 .m4v .webm .mov .mkv .avi .mp3 .wav .ogg .oga .opus .m4a .flac .aac .mid .midi",
    "images": ".heic .heif .eps .ps .jp2",
    "notebooks": ".ipynb",
    "skills": ".skill",
    "gis": ".geojson .topojson .kml .kmz .gpx .shp .shx .dbf .prj .cpg .gpkg",
    "fonts": ".otf",
    "archives": ".tgz .xz .txz .zst .lz4",
    "databases": ".sqlite .sqlite3 .db .duckdb .feather .arrow .orc .avro .h5 .hdf5 .nc",
    "models": ".pkl .pickle .joblib .onnx .pt .pth .safetensors .npy .npz .ubj",
    "documents": ".odg .epub .bib .markdown .dot .mmd .qmd .rmd",
    "data": ".xlsm .dta .sav .sas7bdat .rds .rdata .mat",
}
RECOGNIZED = frozenset(_REFERENCE_LIST.split()) | frozenset(" ".join(_MORE_KINDS.values()).split())
# Directories of the tools' own making, not hidden by a dot: bytecode caches.
JUNK_DIRS = frozenset({"__pycache__"})
# The reference walks no deeper, and skips longer paths.
MAX_DEPTH = 10
MAX_PATH_CHARS = 256


def recognized(name: str) -> bool:
    suffix = PurePosixPath(name).suffix
    if suffix.lower() in RECOGNIZED or name in RECOGNIZED or name.lower() in RECOGNIZED:
        return True
    return not suffix and (f".{name}" in RECOGNIZED or f".{name}".lower() in RECOGNIZED)


def is_output(path: str, inputs: frozenset[str] = frozenset()) -> bool:
    return _kept(path, inputs) and _left_out(path) is None


def _kept(path: str, inputs: frozenset[str]) -> bool:
    """Whether a file is of a kind that is an output: not under a hidden directory no
    input lives in, and a recognized name (the filters, which the reference never reports)."""
    *dirs, name = path.split("/")
    for depth, part in enumerate(dirs):
        under = "/".join(dirs[: depth + 1]) + "/"
        if (part.startswith(".") or part in JUNK_DIRS) and not any(i.startswith(under) for i in inputs):
            return False
    return recognized(name)


def _left_out(path: str) -> Reason | None:
    """Why an output of a kept kind is left out of the reply all the same (the limits,
    which the reference reports as `artifact_truncation`)."""
    if path.count("/") >= MAX_DEPTH:
        return "depth"
    return "path" if len(path) > MAX_PATH_CHARS else None


Reason = Literal["max_files", "depth", "size", "path", "unreadable"]
MAX_SKIPPED_LISTED = 20  # paths named in a truncation; the counts cover the rest


@dataclass(frozen=True)
class Truncation:
    """Outputs the reply leaves out, by why: the client tells the model what was not
    delivered (the reference's `artifact_truncation`). The counts add up to `count`."""

    reasons: dict[Reason, int]
    skipped: list[str]  # the first MAX_SKIPPED_LISTED paths
    count: int

    @classmethod
    def of(cls, left_out: list[tuple[str, Reason]]) -> Truncation | None:
        if not left_out:
            return None
        reasons: dict[Reason, int] = {}
        for _, reason in left_out:
            reasons[reason] = reasons.get(reason, 0) + 1
        return cls(reasons, [path for path, _ in left_out[:MAX_SKIPPED_LISTED]], len(left_out))


@dataclass(frozen=True)
class Report:
    """What a run, or a programmatic workflow, did and said: the domain's answer, which
    `codeexec.api.replies` puts in the wire's shapes."""

    session_id: str
    stdout: str
    stderr: str  # the program's, between the service's notes
    outputs: list[FileInfo]  # what it wrote that counts as an output
    inherited: list[InputRef]  # inputs it left as they were (or read-only ones), echoed for G2
    deleted: list[str]
    stdout_cut: bool
    runtime_status: Literal["new", "reused"] | None = None  # the stateful profile's session
    truncation: Truncation | None = None  # outputs left out of the reply, and why


def report(
    session_id: str,
    result: RunResult,
    changes: Changes,
    refs: Sequence[InputRef],
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
    kept = [f for f in changes.written() if f.path not in read_only and _kept(f.path, inputs)]
    left_out = [(f.path, reason) for f in kept if (reason := _left_out(f.path))]
    written = [f for f in kept if _left_out(f.path) is None]
    echoed = [
        (ref, where.path)
        for ref, where in zip(refs, placed, strict=True)
        if lists_inherited and where.path and (where.read_only or changes.untouched(where.path))
    ]
    limit_notes = [notes.limit_hit(hit) for hit in result.hits]
    if written and any(hit.stopped for hit in result.hits):  # its files, as they were when it was cut
        limit_notes.append(notes.stopped_while_writing())
    if len(written) + len(echoed) > max_files:
        limit_notes.append(notes.files_listed(max_files, len(written) + len(echoed)))
        left_out += [(f.path, "max_files") for f in written[max_files:]]
        written = written[:max_files]
        left_out += [(path, "max_files") for _, path in echoed[max_files - len(written) :]]
        echoed = echoed[: max_files - len(written)]
    stderr = notes.around(result.stderr, missing, limit_notes)
    # The listings before and after the run are whole: what it removed is known even when
    # the reply leaves outputs out, so `deleted` stays (the reference drops it only when
    # its own scan stopped early, which cannot happen here).
    return Report(
        session_id, result.stdout, stderr, written, [ref for ref, _ in echoed], list(changes.deleted),
        result.stdout_cut, truncation=Truncation.of(left_out),
    )  # fmt: skip
