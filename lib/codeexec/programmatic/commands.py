"""What a programmatic call asks, in the domain's own words: a first round, or the next one
with the client's answers (built from a request by `codeexec.api.commands`, as the
sessions' commands are)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..sessions.commands import Landing


@dataclass(frozen=True)
class FirstRound:
    """Run a program that may call the client's tools."""

    code: str
    lang: str  # "py", or "bash" (run_tools_with_bash)
    tools: tuple[dict[str, Any], ...] = ()  # the client's definitions: {name, parameters: JSON schema, ...}
    timeout_ms: float | None = None  # for each round; never past the service's limit
    landing: Landing = Landing()
    run_key: str | None = None  # what a cancel names the round by


@dataclass(frozen=True)
class ToolAnswer:
    """The client's answer to one call of a round."""

    call_id: str
    result: Any = None
    is_error: bool = False
    error_message: str | None = None


@dataclass(frozen=True)
class NextRound:
    """Run the program again, with the answers to the calls its last round made: the
    token says which round, and in which session (its inputs came with the first)."""

    token: str
    answers: tuple[ToolAnswer, ...] = ()
    run_key: str | None = None
