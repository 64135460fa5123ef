"""The wire shapes of CONTRACT.md: measured from the real clients, not designed here."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

# What one exec may ask for: Linux takes an argument of at most 128 KiB (MAX_ARG_STRLEN);
# inputs past a thousand are not a program's, they are a flood.
MAX_ARG_BYTES = 131_072
MAX_ARGS_BYTES = 1 << 20
MAX_INPUT_FILES = 1000


def _utf8(value: str) -> str:
    # JSON may carry a lone surrogate ("\ud800"), which no file, name or program takes.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


Text = Annotated[str, AfterValidator(_utf8)]

# G2's resource kinds. An upload of kind `agent` or `skill` is shared by every user of the
# organization (sessions.py); on a file ref the kind is echoed back for the client's books.
Kind = Literal["skill", "agent", "user"]


class FileRef(BaseModel):
    """An input file that already lives in some session.

    TWO SPELLINGS OF ONE FIELD, and both are read: G1 LibreChat sends `session_id`,
    @librechat/agents and hanzo's agents send `storage_session_id`. Reading only one made
    every attached CSV silently invisible in production."""

    model_config = ConfigDict(extra="ignore")

    id: Text
    name: Text | None = None
    session_id: Text | None = None
    storage_session_id: Text | None = None
    # G2 (@librechat/agents 3.2+) also sends the resource that owns the file.
    resource_id: Text | None = None
    kind: Kind | None = None
    version: int | None = None

    @property
    def home_session(self) -> str | None:
        return self.session_id or self.storage_session_id


class ExecRequest(BaseModel):
    # Clients spread their own parameters into the body (LibreChat even puts its API key
    # there): unknown keys are ignored, and bodies are never logged.
    model_config = ConfigDict(extra="ignore")

    lang: Text
    code: Text
    args: list[Text] = Field(default_factory=list)
    files: list[FileRef] = Field(default_factory=list, max_length=MAX_INPUT_FILES)
    session_id: Text | None = None
    user_id: Text | None = None
    runtime_session_hint: Text | None = None

    @field_validator("args", mode="before")
    @classmethod
    def _one_string_is_one_arg(cls, value: object) -> object:
        # The hosted API's spec types args as a string; the clients send a list.
        return [value] if isinstance(value, str) else value

    @field_validator("args")
    @classmethod
    def _arguments_a_program_can_take(cls, args: list[str]) -> list[str]:
        sizes = [len(arg.encode()) for arg in args]
        if any("\0" in arg for arg in args):
            raise ValueError("an argument holds a NUL character, which no program's argv can carry")
        if any(size >= MAX_ARG_BYTES for size in sizes) or sum(sizes) > MAX_ARGS_BYTES:
            raise ValueError(f"each argument must be under {MAX_ARG_BYTES} bytes, all under {MAX_ARGS_BYTES}")
        return args

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
