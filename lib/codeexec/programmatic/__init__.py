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

What a continuation needs is split by who can be trusted with it:

- the record (workflow.py: the code, the tools, the answers so far) is kept by the
  backend with the round that runs it, where no program writes it (port.Keep), and its
  digest goes into the token: a record a program rewrote (on AgentCore it lives in the
  VM) does not verify, and the continuation is a 409;
- the token (continuations.py), signed and bound to the caller, carries the rest: the round it
  continues, the calls so far, the calls that round asked for, and the client's time
  limit, which each round caps with RUN_TIMEOUT_SECONDS. A spent token finds a later
  record; two continuations of one round cannot both run (the backend compares the record
  it replaces under the session's hold).

A round costs one request to a remote backend; a continuation two (its record, then
the round). Calls are numbered in the order the program makes them (`call_001`...), and
matched on replay by number, name and input, else by name and input (background jobs in
bash may ask in another order). Calls made together (`asyncio.gather`, `a & b & wait`) go
out in one round: a round ends once the program has waited on unanswered calls alone a
moment.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Literal

from .. import ids
from ..auth import Caller
from ..errors import BadRequest, Conflict
from ..sandbox.port import Keep, Limit, Placement, Run, RunResult, record_digest
from ..sessions import Report, Sessions, inputs, placement
from ..sessions.access import landing
from ..sessions.commands import Landing
from .commands import FirstRound, NextRound
from .continuations import Claims, Tokens
from .tools import tools_from
from .workflow import MAX_CALLS, MAX_ROUNDS, Workflow

__all__ = ["Asked", "Finished", "Programs", "Tokens"]


@dataclass(frozen=True)
class Asked:
    """A round that ended on calls for the client's tools."""

    session_id: str
    calls: list[dict[str, Any]]  # {id, name, input}
    token: str
    runtime_status: Literal["new", "reused"] | None = None


@dataclass(frozen=True)
class Finished:
    """The workflow's last round: its report, and why it failed, if it did."""

    report: Report
    failure: str | None


class Programs:
    def __init__(self, sessions: Sessions, tokens: Tokens) -> None:
        self.sessions = sessions
        self.tokens = tokens

    def start(self, caller: Caller, order: FirstRound) -> Asked | Finished:
        """The first round: its session, inputs, code and tools."""
        for needed in ("py", order.lang):  # the driver is Python, whatever the program's language
            self.sessions.sandboxes.check_language(needed)
        workflow = Workflow(ids.new_session_id(), order.lang, order.code, tools_from(order.tools, order.lang))
        asked_for = order.timeout_ms / 1000 if order.timeout_ms else 0.0
        where = placement.for_run(caller, order.landing, self.sessions.sandboxes.named_sessions)
        return self._round(caller, workflow, where, order.landing, asked_for, order.run_key)

    def resume(self, caller: Caller, order: NextRound) -> Asked | Finished:
        """The next round, with the client's answers to the last one's calls."""
        claims = self.tokens.verify(order.token, caller.owner.tag())
        if claims.round >= MAX_ROUNDS or claims.calls > MAX_CALLS:
            raise BadRequest(f"the program made more than {MAX_ROUNDS} rounds or {MAX_CALLS} tool calls")
        record = self.sessions.sandboxes.read_record(claims.session, landing(caller), claims.workflow)
        workflow = _verified(record, claims)
        workflow.answer(claims.pending, order.answers)
        where = Placement(landing(caller), (claims.session,), new=False)
        return self._round(caller, workflow, where, Landing(), claims.timeout, order.run_key, claims.record)

    def _round(
        self,
        caller: Caller,
        workflow: Workflow,
        where: Placement,
        asks: Landing,
        asked_for: float,
        run_key: str | None,
        replaces: str | None = None,
    ) -> Asked | Finished:
        limit = self.sessions.limits.run_timeout_seconds
        program, nonce = workflow.next_round(min(asked_for or limit, limit), run_key)
        keep = Keep(workflow.id, workflow.record(), replaces)
        ran = self.sessions.run(caller, Run(program, where, inputs.of(asks.inputs), keep))
        asked = workflow.asked(ran.result, nonce)
        if asked is None:
            return Finished(self.sessions.report(ran, where, asks), _failure(ran.result))
        _, calls = asked
        owner = caller.owner.tag()
        claims = Claims(
            workflow.id, ran.session_id, owner.org, owner.user, workflow.round, len(workflow.history) + len(calls),
            asked_for, record_digest(keep.record), calls,
        )  # fmt: skip
        status = placement.runtime_status(where, ran.created)
        return Asked(ran.session_id, calls, self.tokens.issue(claims), status)


def _verified(record: bytes, claims: Claims) -> Workflow:
    """The record the token was issued with, or a 409 saying why not."""
    if record_digest(record) == claims.record:
        return Workflow.of(record)
    with contextlib.suppress(ValueError):
        if Workflow.of(record).round > claims.round:
            raise Conflict("that continuation token is spent: its program ran past that round")
    raise Conflict("the program's saved state does not verify: it changed since its round")


def _failure(result: RunResult) -> str | None:
    """A failed round, in the words the G2 client passes on to the model."""
    if any(hit.limit is Limit.TIME for hit in result.hits):
        return "Time limit exceeded"
    if any(hit.limit is Limit.CANCELLED for hit in result.hits):
        return "Execution was cancelled"
    if result.exit_code != 0:
        return f"Sandbox exited with code {result.exit_code if result.exit_code is not None else 'unknown'}"
    return None
