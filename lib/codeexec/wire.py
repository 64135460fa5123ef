"""The requests of the LibreChat Code Interpreter API (docs/api.md), as the real clients
send them: measured, not designed here.

What a request means is read in one place, `codeexec.api.commands`, which turns it into the
domain's own command; what the service answers is built in one place, `codeexec.api.replies`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

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

# G2's resource kinds. An agent's or a skill's files are shared by every user of the
# organization (api/commands.py); on a file ref the kind is echoed back for the client's books.
RefKind = Literal["skill", "agent", "user"]


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
    kind: RefKind | None = None
    version: int | None = None

    @property
    def home_session(self) -> str | None:
        return self.session_id or self.storage_session_id


class RunRequest(BaseModel):
    """What every request that runs a program says of where it runs."""

    # Clients spread their own parameters into the body (LibreChat even puts its API key
    # there): unknown keys are ignored, and bodies are never logged.
    model_config = ConfigDict(extra="ignore")

    files: list[FileRef] = Field(default_factory=list, max_length=MAX_INPUT_FILES)
    session_id: Text | None = None
    user_id: Text | None = None
    # The conversation, in the stateful profile: one session per organization, user and hint.
    runtime_session_hint: Annotated[Text, Field(max_length=128)] | None = None


class ExecRequest(RunRequest):
    lang: Text
    code: Text
    args: list[Text] = Field(default_factory=list)
    # Milliseconds, as the reference server takes it; never past RUN_TIMEOUT_SECONDS.
    timeout: float | None = Field(default=None, gt=0)

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


class ToolResult(BaseModel):
    call_id: Text
    result: Any = None
    is_error: bool = False
    error_message: Text | None = None


class ProgrammaticRequest(RunRequest):
    """POST /v1/exec/programmatic: a first round (code and tools), or a continuation
    (the token of the last round and the answers to its calls)."""

    code: Text | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list, max_length=100)
    lang: Text | None = None  # "bash" (run_tools_with_bash); Python otherwise
    language: Text | None = None  # the reference server's spelling of lang
    timeout: float | None = Field(default=None, gt=0)  # milliseconds, for one round
    continuation_token: Text | None = None
    tool_results: list[ToolResult] | None = Field(default=None, max_length=200)
