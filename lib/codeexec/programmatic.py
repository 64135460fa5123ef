"""Programmatic tool calling: a program that calls the client's tools, across round trips.

REPLAY, not a program held waiting, and why: on AWS Lambda no process outlives a request,
and a held program would need one (in the service, or a second channel into every
backend's sandbox). Instead each round runs the program from its start, in its session,
with the answers to every tool call so far recorded: a recorded call returns its answer
at once, the first unanswered ones end the round, and they go back to the client. The
round is an ordinary run of an ordinary Program, so it works on every backend, under
every limit a run has. What that costs: the program's side effects before its last tool
call happen again each round (a line appended to a file is appended again); its final
stdout is that of the last round, which ran it all.

What a continuation needs lives in the session itself (`.codeexec/state/programs/<id>.json`,
never listed, never an output): the code, the tools, the answers, the listing taken
before the first round. The token the client holds names it, signed (HMAC-SHA256) and
bound to the caller's organization and user and to the round it continues: a token of
another caller, a forged one, or one already used is refused.

Calls are numbered in the order the program makes them (`call_001`...), and matched on
replay by number, name and input, else by name and input (background jobs in bash may
ask in another order). Calls made together (`asyncio.gather`, `a & b & wait`) go out in
one round: a round ends once the program has waited on unanswered calls alone a moment.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import keyword
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

from . import ids
from .errors import BadRequest, Conflict, Forbidden
from .sandbox.port import FileInfo, OwnerTag, Program, RunResult

STATE_DIR = f"{ids.STATE_DIR}/programs"
# Beyond the client's own 20 round trips, and the reference server's 200 calls.
MAX_ROUNDS = 50
MAX_CALLS = 200
TOKEN_SECONDS = 3600  # a client runs its tools between two rounds: minutes at most
_DRIVER = resources.files(__package__).joinpath("ptc_driver.py").read_text()
_BASH_WORDS = (
    "if then else elif fi case esac for select while until do done in function time coproc alias bg bind break "
    "builtin caller cd command compgen complete continue declare dirs disown echo enable eval exec exit export "
    "false fc fg getopts hash help history jobs kill let local logout mapfile popd printf pushd pwd read readarray "
    "readonly return set shift shopt source suspend test times trap true type typeset ulimit umask unalias unset "
    "wait"
)
_BASH_RESERVED = frozenset(_BASH_WORDS.split())  # bash's own words and builtins: a tool may not hide one


@dataclass(frozen=True)
class Tool:
    name: str  # the client's, as it asks for it back
    ident: str  # what the program calls it
    params: tuple[str, ...]  # the order positional arguments take (required ones first)


@dataclass
class Workflow:
    """One programmatic run across its rounds, as the session keeps it."""

    id: str
    lang: str  # "py" or "bash"
    code: str
    tools: list[Tool]
    timeout: float
    before: list[FileInfo]  # the session's files before the first round: outputs are what changed since
    history: dict[str, dict[str, Any]] = field(default_factory=dict)  # call id -> name, input, result...
    pending: list[dict[str, Any]] = field(default_factory=list)  # asked in the last round, unanswered
    round: int = 0
    done: bool = False
    nonce: str = ""  # the last round's: its driver ends a round with a line that starts with it

    def path(self) -> str:
        return self.path_of(self.id)

    @staticmethod
    def path_of(workflow_id: str) -> str:
        return f"{STATE_DIR}/{workflow_id}.json"

    def dump(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def load(cls, data: bytes) -> Workflow:
        raw = json.loads(data)
        raw["tools"] = [Tool(t["name"], t["ident"], tuple(t["params"])) for t in raw["tools"]]
        raw["before"] = [FileInfo(*f.values()) for f in raw["before"]]
        return cls(**raw)

    def program(self, run_key: str | None) -> Program:
        """This round: the driver (ptc_driver.py), and what it needs to replay the program."""
        self.round += 1
        if self.round > MAX_ROUNDS or len(self.history) > MAX_CALLS:
            raise BadRequest(f"the program made more than {MAX_ROUNDS} rounds or {MAX_CALLS} tool calls")
        self.nonce = secrets.token_hex(16)
        config = {"lang": self.lang, "code": self.code, "tools": [asdict(t) for t in self.tools],
                  "history": self.history, "nonce": self.nonce}  # fmt: skip
        code = f"{_DRIVER}\nmain({json.dumps(json.dumps(config))})\n"
        self.pending = []
        return Program("py", code, (), self.timeout, run_key)

    def answer(self, results: list[dict[str, Any]]) -> None:
        """Record the client's answers to the last round's calls; each must be answered."""
        asked = {call["id"]: call for call in self.pending}
        answered = {r.get("call_id"): r for r in results}
        if set(answered) != set(asked):
            raise BadRequest("tool_results must answer each call of the last round, by its call_id, once")
        for call_id, call in asked.items():
            result = answered[call_id]
            self.history[call_id] = {
                **call,
                "result": result.get("result"),
                "is_error": bool(result.get("is_error")),
                "error_message": result.get("error_message"),
            }


    def asked(self, result: RunResult) -> str | None:
        """After a round: the stdout before the driver's last line, when it ended on
        unanswered calls (now `pending`); None when the program ran to its end."""
        head, found, tail = result.stdout.rpartition(f"\n{self.nonce}")
        if not found:
            return None
        self.pending = json.loads(tail.strip())
        return head


def tools_from(definitions: list[dict[str, Any]], lang: str) -> list[Tool]:
    """The client's tool definitions ({name, parameters: JSON schema, ...}) as the program
    will call them: Python or bash identifiers, as the reference server names them."""
    tools = []
    for definition in definitions:
        name = str(definition.get("name") or "")
        schema = definition.get("parameters") or {}
        properties = list((schema.get("properties") or {}).keys())
        required = [p for p in properties if p in (schema.get("required") or [])]
        params = (*required, *(p for p in properties if p not in required))
        tools.append(Tool(name, _ident(name, lang), params))
    idents = [t.ident for t in tools]
    if len(set(idents)) < len(idents) or not all(idents):
        raise BadRequest("two tools have the same name once made identifiers, or a tool has none")
    return tools


def _ident(name: str, lang: str) -> str:
    ident = re.sub(r"[-\s.]" if lang == "bash" else r"[-\s]", "_", name)
    ident = re.sub(r"[^A-Za-z0-9_]", "", ident)
    if ident[:1].isdigit():
        ident = f"_{ident}"
    if lang == "bash":
        reserved = ident in _BASH_RESERVED or ident.lower().startswith("_ptc_")
    else:
        reserved = keyword.iskeyword(ident)
    return f"{ident}_tool" if reserved else ident


class Tokens:
    """Continuation tokens: the workflow they continue, signed and bound to their caller."""

    def __init__(self, secret: Callable[[], bytes | None]) -> None:
        # Read at the first token, not at start: on Lambda with SnapStart nothing secret
        # or unique may be made before the snapshot.
        self._secret = secret
        self._cached: bytes | None = None

    @property
    def _key(self) -> bytes:
        if self._cached is None:
            # No secret configured: one of this process's own (tokens then continue only
            # in this process, as the embedded server is).
            secret = self._secret() or secrets.token_bytes(32)
            self._cached = hashlib.sha256(b"codeexec continuation tokens\0" + secret).digest()
        return self._cached

    def issue(self, workflow: Workflow, session_id: str, owner: OwnerTag) -> str:
        claims = {"w": workflow.id, "s": session_id, "o": owner.org, "u": owner.user, "r": workflow.round,
                  "t": int(time.time())}  # fmt: skip
        body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        return f"{body}.{self._sign(body)}"

    def verify(self, token: str, owner: OwnerTag) -> tuple[str, str, int]:
        """(workflow id, session id, round), or why not."""
        body, _, signature = token.partition(".")
        if not hmac.compare_digest(signature, self._sign(body)):
            raise BadRequest("the continuation token is not one this service issued")
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        if (claims["o"], claims["u"]) != (owner.org, owner.user):
            raise Forbidden("the continuation token belongs to another caller")
        if time.time() > claims["t"] + TOKEN_SECONDS:
            raise Conflict("the continuation token has expired: start the program again")
        return str(claims["w"]), str(claims["s"]), int(claims["r"])

    def _sign(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
