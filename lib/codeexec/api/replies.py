"""What the service answers, in the shapes LibreChat's clients read (docs/api.md), built
from the domain's reports: a change to a reply touches this module alone.

Both generations are answered at once where they differ in spelling (`session_id` and
`storage_session_id`); fields only G2 reads are left out when they have nothing to say
(`exclude_none`), so a G1 reply is exactly what it always was.
"""

from __future__ import annotations

import mimetypes
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from .. import ids
from ..programmatic import Asked, Finished
from ..sandbox.port import FileInfo
from ..sessions import Report
from ..sessions.commands import InputRef
from ..sessions.outputs import Reason


class OutputFile(BaseModel):
    id: str  # derived from the session and the path (codeexec.ids)
    name: str  # the path relative to /mnt/data: `plots/a.png`, never cut to the basename
    session_id: str
    storage_session_id: str  # both spellings, so either kind of client finds it
    # G2 only, and only on an unchanged input echoed back: the input's own ref.
    resource_id: str | None = None
    kind: str | None = None  # the ref's own (codeexec.wire.RefKind)
    version: int | None = None
    inherited: Literal[True] | None = None


class ArtifactTruncation(BaseModel):
    """Outputs the reply leaves out (the reference server's shape, which the next
    @librechat/agents reads, and drops unless the reasons add up to skipped_count)."""

    code: Literal["artifact_truncated"] = "artifact_truncated"
    reasons: dict[Reason, int]  # how many for each reason
    skipped: list[str]  # up to 20 of the paths
    skipped_count: int


class ExecReply(BaseModel):
    session_id: str
    stdout: str
    stderr: str
    files: list[OutputFile]
    # The paths the run removed (G2 drops a file from its session only when named here).
    deleted_files: list[str] | None = None
    # The stateful profile: the session a runtime_session_hint named, and whether it was new.
    runtime_session_id: str | None = None
    runtime_status: Literal["new", "reused"] | None = None
    # "OL": stdout was cut at its limit. LibreChat's own file tools read images over /exec
    # in windows and say so on it; a cut window without it is base64 that does not parse.
    status: Literal["OL"] | None = None
    artifact_truncation: ArtifactTruncation | None = None
    # The language as the client sent it (`python`, `node`, `sh`: the reference's aliases).
    language: str | None = None


class ToolCall(BaseModel):
    id: str
    name: str
    input: dict[str, Any]


class ProgrammaticReply(BaseModel):
    status: Literal["tool_call_required", "completed", "error"]
    session_id: str
    tool_calls: list[ToolCall] | None = None
    continuation_token: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    files: list[OutputFile] | None = None
    deleted_files: list[str] | None = None
    artifact_truncation: ArtifactTruncation | None = None
    error: str | None = None
    runtime_session_id: str | None = None
    runtime_status: Literal["new", "reused"] | None = None


class UploadedFile(BaseModel):
    fileId: str  # noqa: N815 - the wire's spelling
    # The path the file has under /mnt/data: the multipart filename as sent, which
    # LibreChat's skill priming keys on (`skills/pdf/SKILL.md`).
    filename: str


class UploadReply(BaseModel):
    message: str = "success"  # the client checks this before it reads anything else
    session_id: str  # G1 reads this spelling,
    storage_session_id: str  # G2 this one
    files: list[UploadedFile]


class BatchUploadedFile(UploadedFile):
    status: Literal["success"] = "success"  # a batch here stores every file or none


class BatchUploadReply(BaseModel):
    """POST /v1/upload/batch: LibreChat keeps the files whose status is "success"."""

    message: str = "success"
    session_id: str
    storage_session_id: str
    files: list[BatchUploadedFile]
    succeeded: int
    failed: int = 0


# -- runs ----------------------------------------------------------------------------------


def exec_reply(report: Report, language: str | None = None) -> ExecReply:
    return ExecReply(
        language=language,
        session_id=report.session_id,
        stdout=report.stdout,
        stderr=report.stderr,
        files=_files(report),
        deleted_files=report.deleted or None,
        runtime_session_id=report.session_id if report.runtime_status else None,
        runtime_status=report.runtime_status,
        status="OL" if report.stdout_cut else None,
        artifact_truncation=_truncation(report),
    )


def programmatic_reply(outcome: Asked | Finished) -> ProgrammaticReply:
    if isinstance(outcome, Asked):
        return ProgrammaticReply(
            status="tool_call_required", session_id=outcome.session_id,
            tool_calls=[ToolCall(**call) for call in outcome.calls], continuation_token=outcome.token,
            runtime_session_id=outcome.session_id if outcome.runtime_status else None,
            runtime_status=outcome.runtime_status,
        )  # fmt: skip
    report = outcome.report
    return ProgrammaticReply(
        status="error" if outcome.failure else "completed", error=outcome.failure, session_id=report.session_id,
        stdout=report.stdout, stderr=report.stderr, files=_files(report), deleted_files=report.deleted or None,
        artifact_truncation=_truncation(report),
        runtime_session_id=report.session_id if report.runtime_status else None, runtime_status=report.runtime_status,
    )  # fmt: skip


def _truncation(report: Report) -> ArtifactTruncation | None:
    cut = report.truncation
    if cut is None:
        return None
    return ArtifactTruncation(reasons=cut.reasons, skipped=cut.skipped, skipped_count=cut.count)


def _files(report: Report) -> list[OutputFile]:
    session = report.session_id
    made = [
        OutputFile(id=ids.file_id(session, f.path), name=f.path, session_id=session, storage_session_id=session)
        for f in report.outputs
    ]
    return made + [_echo(ref, session) for ref in report.inherited]


def _echo(ref: InputRef, session_id: str) -> OutputFile:
    """An input the run left as it was, as the client's own ref, so it can tell it from
    what the run made (and skip storing it again)."""
    home = ref.session_id or session_id
    return OutputFile(
        id=ref.id, name=ref.name or ref.id, session_id=home, storage_session_id=home,
        resource_id=ref.resource_id, kind=ref.kind, version=ref.version, inherited=True,
    )  # fmt: skip


# -- files ---------------------------------------------------------------------------------


def uploaded(session_id: str, paths: list[str]) -> UploadReply:
    files = [UploadedFile(fileId=ids.file_id(session_id, p), filename=p) for p in paths]
    return UploadReply(session_id=session_id, storage_session_id=session_id, files=files)


def uploaded_batch(session_id: str, paths: list[str]) -> BatchUploadReply:
    files = [BatchUploadedFile(fileId=ids.file_id(session_id, p), filename=p) for p in paths]
    return BatchUploadReply(session_id=session_id, storage_session_id=session_id, files=files, succeeded=len(files))


def listing(session_id: str, found: list[FileInfo], detail: Literal["summary", "simple", "full"]) -> list[Any]:
    if detail == "simple":
        return [f"{session_id}/{ids.file_id(session_id, f.path)}" for f in found]
    return [summary(session_id, f, full=detail == "full") for f in found]


def summary(session_id: str, f: FileInfo, full: bool) -> dict[str, Any]:
    """One file as a listing names it: `name` is "{session_id}/{file_id}" (G1 LibreChat
    matches it by prefix; 3.1.x rebuilds the id from its second segment), `fileId` what
    LibreChat's liveness check matches, `path` where the file is under /mnt/data."""
    modified = datetime.fromtimestamp(f.mtime_ns / 1e9, UTC).isoformat(timespec="milliseconds")
    file_id = ids.file_id(session_id, f.path)
    item: dict[str, Any] = {
        "name": f"{session_id}/{file_id}",
        "id": file_id,
        "fileId": file_id,
        "path": f.path,
        "size": f.size,
        "lastModified": modified.replace("+00:00", "Z"),
    }
    if full:
        content_type = media_type(f.path)
        item |= {"contentType": content_type, "metadata": {"content-type": content_type, "original-filename": f.path}}
    return item


def removed(session_id: str, path: str, spelling: Literal["session_id", "storage_session_id"]) -> dict[str, str]:
    return {"message": "success", spelling: session_id, "fileId": ids.file_id(session_id, path)}


def media_type(path: str) -> str:
    return mimetypes.guess_type(path)[0] or "application/octet-stream"
