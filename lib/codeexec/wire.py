"""The wire shapes of CONTRACT.md: measured from the real clients, not designed here."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


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
    # Accepted and selects nothing: every session here is already a warm sandbox.
    runtime_session_hint: str | None = None

    @field_validator("args", mode="before")
    @classmethod
    def _one_string_is_one_arg(cls, value: object) -> object:
        # The hosted API's spec types args as a string; the clients send a list.
        return [value] if isinstance(value, str) else value


class OutputFile(BaseModel):
    id: str
    name: str
    session_id: str
    storage_session_id: str  # both spellings, so either kind of client finds it


class ExecReply(BaseModel):
    session_id: str
    stdout: str
    stderr: str
    files: list[OutputFile]


class UploadedFile(BaseModel):
    fileId: str  # noqa: N815 - the wire's spelling
    filename: str


class UploadReply(BaseModel):
    message: str = "success"  # the client checks this before it reads anything else
    session_id: str
    files: list[UploadedFile]
