"""One call as the process saw it: the record every layer adds its facts to, and the request
id that names it in every log line, on the service and on the runner it called.

The edge (edge.py) opens a `Call` for each request and keeps it in a context variable, so
the layers below note what they learn (who called, which session, how a run ended, why a
call was refused) without being handed it; the edge then says it once, as one log line and
its metrics. Nothing noted is a request body, a token or a key: owners are the digests the
sandboxes already record (port.OwnerTag), keys are their operator's names.

Work a call hands to a thread of its own (admission.py: runs) carries the context along
(`carried`), so the facts of the run land in the call's record.
"""

from __future__ import annotations

import contextvars
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ..sandbox.port import Limit, OwnerTag, RunResult

T = TypeVar("T")

REQUEST_ID_HEADER = "X-Request-Id"
# What a proxy's id looks like (nginx's 32 hex digits, a UUID, AWS's Root=1-...): anything
# else, too long or with a control character, is replaced, never echoed or logged.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:;=+/-]{1,128}")
# How much of a failed run's stderr the console shows: the line that says what went wrong, cut.
STDERR_HEAD_CHARS = 200
_TRACEBACK = "Traceback (most recent call last):"


def request_id(given: str | None) -> str:
    """The caller's request id when it is one, else a new one."""
    if given and _REQUEST_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


@dataclass
class Call:
    request_id: str
    method: str
    started: float = field(default_factory=time.perf_counter)
    route: str = ""
    status: int = 0
    session: str | None = None
    owner: OwnerTag | None = None
    key: str | None = None  # the operator's name of the service key it came with
    refused: str | None = None  # why it was refused (a 4xx or 5xx the service chose to answer)
    lang: str | None = None  # of a call that asked for a run, known before it ran (or was refused)
    run: Ran | None = None
    received: int = 0  # bytes of the request's body
    sent: int = 0  # bytes of the answer's body

    def seconds(self) -> float:
        return time.perf_counter() - self.started


@dataclass(frozen=True)
class Ran:
    """How the call's run went, as the metrics and the console count it."""

    lang: str
    outcome: str  # OUTCOMES
    seconds: float
    start: str  # how it was launched: warm, cold, or remote (a backend that does not say)
    stderr_head: str = ""


# Every run ends in one of these (a label of the run metrics: a bounded set).
OUTCOMES = ("ok", "error", "timeout", "memory", "cancelled", "refused")


def outcome(result: RunResult) -> str:
    stopped = {hit.limit for hit in result.hits if hit.stopped}
    if Limit.CANCELLED in stopped:
        return "cancelled"
    if Limit.MEMORY in stopped:
        return "memory"
    if stopped & {Limit.TIME, Limit.CPU}:
        return "timeout"
    return "ok" if result.exit_code == 0 and not stopped else "error"


_current: contextvars.ContextVar[Call | None] = contextvars.ContextVar("codeexec_call", default=None)


def current() -> Call | None:
    return _current.get()


def begin(call: Call) -> contextvars.Token[Call | None]:
    return _current.set(call)


def end(token: contextvars.Token[Call | None]) -> None:
    _current.reset(token)


def carried(work: Callable[[], T]) -> Callable[[], T]:
    """`work` to run in another thread with this one's context, the call's record included."""
    context = contextvars.copy_context()
    return lambda: context.run(work)


def note_session(session_id: str, owner: OwnerTag | None = None) -> None:
    call = current()
    if call is not None:
        call.session = session_id
        call.owner = owner or call.owner


def note_key(name: str | None) -> None:
    call = current()
    if call is not None:
        call.key = name


def note_lang(lang: str) -> None:
    call = current()
    if call is not None:
        call.lang = lang


def note_run(lang: str, result: RunResult, seconds: float) -> None:
    call = current()
    if call is None:
        return
    head = ""
    kind = outcome(result)
    if kind != "ok":
        head = stderr_head(result.stderr)
    start = "remote" if result.warm is None else ("warm" if result.warm else "cold")
    call.run = Ran(lang, kind, result.seconds if result.seconds is not None else seconds, start, head)


def stderr_head(stderr: str) -> str:
    """Its first line; but a Python traceback's first line is its header, and the error is
    its last line, so an operator reading the console sees `ZeroDivisionError: ...`."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if not lines:
        return ""
    return (lines[-1] if lines[0].startswith(_TRACEBACK) else lines[0])[:STDERR_HEAD_CHARS]


def note_refused(reason: str) -> None:
    call = current()
    if call is not None:
        call.refused = reason
