"""The wire shapes of CONTRACT.md: measured from the real clients, not designed here."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# G2's resource kinds. An upload of kind `agent` or `skill` is shared by every user of the
# organization (sessions.py); on a file ref the kind is echoed back for the client's books.
Kind = Literal["skill", "agent", "user"]


class FileRef(BaseModel):
    """An input file that already lives in some session.

    TWO SPELLINGS OF ONE FIELD, and both are read: G1 LibreChat sends `session_id`,
    @librechat/agents and hanzo's agents send `storage_session_id`. Reading only one made
    every attached CSV silently invisible in production."""

    model_config = ConfigDict(extra="ignore")

    id: str
    name: str | None = None
    session_id: str | None = None
    storage_session_id: str | None = None
    # G2 (@librechat/agents 3.2+) also sends the resource that owns the file.
    resource_id: str | None = None
    kind: Kind | None = None
    version: int | None = None

    @property
    def home_session(self) -> str | None:
        return self.session_id or self.storage_session_id


class ExecRequest(BaseModel):
    # Clients spread their own parameters into the body (LibreChat even puts its API key
    # there): unknown keys are ignored, and bodies are never logged.
    model_config = ConfigDict(extra="ignore")

    lang: str
    code: str
    args: list[str] = Field(default_factory=list)
    files: list[FileRef] = Field(default_factory=list)
    session_id: str | None = None
    user_id: str | None = None
    runtime_session_hint: str | None = None

    @field_validator("args", mode="before")
    @classmethod
    def _one_string_is_one_arg(cls, value: object) -> object:
        # The hosted API's spec types args as a string; the clients send a list.
        return [value] if isinstance(value, str) else value

    @property
    def lists_inherited(self) -> bool:
        """G2 clients (their file refs carry a `kind`) expect unchanged inputs echoed back
        marked `inherited`, so they can tell them from outputs; G1 clients list no inputs."""
        return any(ref.kind for ref in self.files)


class OutputFile(BaseModel):
    id: str  # derived from the session and the path (codeexec.ids)
    name: str  # the path relative to /mnt/data: `plots/a.png`, never cut to the basename
    session_id: str
    storage_session_id: str  # both spellings, so either kind of client finds it
    # G2 only, and only on an unchanged input echoed back: the input's own ref. The exec
    # route leaves out what is None, so a G1 reply is exactly what it always was.
    resource_id: str | None = None
    kind: Kind | None = None
    version: int | None = None
    inherited: Literal[True] | None = None


class ExecReply(BaseModel):
    session_id: str
    stdout: str
    stderr: str
    files: list[OutputFile]
    # The paths the run removed (G2 drops a file from its session only when named here).
    deleted_files: list[str] | None = None


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
