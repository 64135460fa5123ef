"""One programmatic workflow as the service keeps it between rounds, and one round of it.

The record (`Workflow.record()`) is what a continuation needs that the token does not
carry: the code, the tools, the answers so far. It is kept by the backend with the round
that runs it (port.Keep), where no program writes it, and its digest is in the token.

A round is the driver (driver.py) with the program and the answers recorded so far; it
ends on a last line that starts with the round's nonce and lists the unanswered calls. A
program can read that nonce (its driver's text is its own process's), so the line is
checked, not trusted: calls numbered after the ones answered, each naming a tool the
client offered, with an object for its input. Anything else is a Conflict.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

from ..errors import BadRequest, Conflict
from ..sandbox.port import Program, RunResult
from .commands import ToolAnswer
from .tools import Tool

# Beyond the client's own 20 round trips, and the reference server's 200 calls.
MAX_ROUNDS = 50
MAX_CALLS = 200
# What a round may ask for at once: the calls travel in the token.
MAX_ASKED_BYTES = 1 << 18
_DRIVER = resources.files(__package__).joinpath("driver.py").read_text()
_CALL_ID = re.compile(r"call_\d{3,}")


@dataclass
class Workflow:
    id: str
    lang: str  # "py" or "bash"
    code: str
    tools: list[Tool]
    history: dict[str, dict[str, Any]] = field(default_factory=dict)  # call id -> name, input, result...
    round: int = 0  # the round this record was kept with

    def record(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def of(cls, record: bytes) -> Workflow:
        """A record as the service kept it; ValueError for anything else."""
        try:
            raw = json.loads(record)
            raw["tools"] = [Tool(t["name"], t["ident"], tuple(t["params"])) for t in raw["tools"]]
            return cls(**raw)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError("not a workflow's record") from exc

    def next_round(self, timeout: float, run_key: str | None) -> tuple[Program, str]:
        """The next round's program, and the nonce its driver ends a round with."""
        self.round += 1
        if self.round > MAX_ROUNDS or len(self.history) > MAX_CALLS:
            raise BadRequest(f"the program made more than {MAX_ROUNDS} rounds or {MAX_CALLS} tool calls")
        nonce = secrets.token_hex(16)
        config = {"lang": self.lang, "code": self.code, "tools": [asdict(t) for t in self.tools],
                  "history": self.history, "nonce": nonce}  # fmt: skip
        code = f"{_DRIVER}\nmain({json.dumps(json.dumps(config))})\n"
        return Program("py", code, (), timeout, run_key), nonce

    def answer(self, asked: list[dict[str, Any]], answers: Sequence[ToolAnswer]) -> None:
        """Record the client's answers to the last round's calls; each must be answered."""
        answered = {a.call_id: a for a in answers}
        if set(answered) != {call["id"] for call in asked} or len(answered) != len(answers):
            raise BadRequest("tool_results must answer each call of the last round, by its call_id, once")
        for call in asked:
            answer = answered[call["id"]]
            self.history[call["id"]] = {
                **call,
                "result": answer.result,
                "is_error": answer.is_error,
                "error_message": answer.error_message,
            }

    def asked(self, result: RunResult, nonce: str) -> tuple[str, list[dict[str, Any]]] | None:
        """After a round: the stdout before the driver's last line, and the calls that line
        asks for, when the round ended on unanswered calls; None when the program ran to
        its end. A line that is not the driver's is a Conflict."""
        head, found, tail = result.stdout.rpartition(f"\n{nonce}")
        if not found or result.exit_code != 0:
            return None
        try:
            calls = json.loads(tail.strip())
        except ValueError:
            calls = None
        if not self._driver_asked(calls) or len(tail) > MAX_ASKED_BYTES:
            raise Conflict("the round ended on a line that is not its driver's: calls it cannot make")
        if len(self.history) + len(calls) > MAX_CALLS:  # refused before the client runs any of them
            raise BadRequest(f"the program asked for more than {MAX_CALLS} tool calls")
        return head, calls

    def _driver_asked(self, calls: Any) -> bool:
        offered = {tool.name for tool in self.tools}
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            return False
        ids = [call.get("id") for call in calls]
        return bool(
            ids
            and len(set(ids)) == len(ids)
            and all(isinstance(i, str) and _CALL_ID.fullmatch(i) and i not in self.history for i in ids)
            and all(c.get("name") in offered and isinstance(c.get("input"), dict) and len(c) == 3 for c in calls)
        )
