"""Requests become the domain's commands here: a request's body (codeexec.wire) and the
headers sent with it, as what the sessions and the programmatic workflows take
(sessions/commands.py, programmatic/commands.py).

What a request means is read here, once: which session a file ref's two spellings name,
which files an organization shares, what a G2 client expects back, the headers a G2 client
sends with a run, and what an upload's form says. The routes hand the command on; the
domain never sees the wire's shapes.
"""

from __future__ import annotations

from dataclasses import replace

from fastapi import Request
from starlette.datastructures import Headers

from ..auth import Caller
from ..errors import BadRequest
from ..languages import canonical
from ..programmatic.commands import FirstRound, NextRound, ToolAnswer
from ..sessions.access import run_key
from ..sessions.commands import Execute, InputRef, Landing, Upload
from ..streams import ChunkReader
from ..wire import ExecRequest, FileRef, ProgrammaticRequest, RunRequest
from . import uploads

PROFILE_HEADER = "x-codeapi-expected-profile"  # `stateful`: the client expects a stateful workspace
RUN_REQUEST_ID_HEADER = "x-librechat-code-request-id"  # what a cancel names a run by
WORKSPACE_HEADER = "x-librechat-code-workspace-id"  # the bash tool's attached workspace
USER_HEADER = "user-id"  # the user G1 LibreChat uploads for
# G2's kinds of resource whose files every user of the organization shares.
SHARED_KINDS = frozenset({"agent", "skill"})


def execute(body: ExecRequest, request: Request, caller: Caller) -> Execute:
    landing, key = _landing(body, request), _run_key(request, caller)
    return Execute(body.lang, body.code, tuple(body.args), body.timeout, landing, key)


def programmatic(body: ProgrammaticRequest, request: Request, caller: Caller) -> FirstRound | NextRound:
    """A continuation (the token of the last round, and the answers to its calls), else a
    first round: in bash when the client names it (run_tools_with_bash), else in Python."""
    key = _run_key(request, caller)
    if body.continuation_token:
        answers = (ToolAnswer(r.call_id, r.result, r.is_error, r.error_message) for r in body.tool_results or ())
        return NextRound(body.continuation_token, tuple(answers), key)
    if not body.code:
        raise BadRequest("a first round needs the program's code (or a continuation_token)")
    landing = _landing(body, request)
    if workspace := request.headers.get(WORKSPACE_HEADER):
        # The bash tool's attached workspace: a session of its own per user, as a hint's.
        landing = replace(landing, hint=f"workspace:{workspace}", stateful=True)
    lang = "bash" if canonical(body.language or body.lang or "py") == "bash" else "py"
    return FirstRound(body.code, lang, tuple(body.tools), body.timeout, landing, key)


def uploader(request: Request, caller: Caller) -> Caller:
    """Whom an upload is for: G1 LibreChat names the user in `User-Id`."""
    return caller.named(request.headers.get(USER_HEADER))


def upload(headers: Headers, body: ChunkReader, query_session: str | None) -> Upload:
    """What an upload means, from its form's fields (read up to its first file): into the
    session the form names, else the query's (none: a new one). Its files are shared by the
    organization when they are an agent's or a skill's (G2's `kind`), made for an agent
    (G1's `entity_id`) or read-only; read-only when they are a skill's bundle (`read_only`,
    in either generation)."""
    fields, files = uploads.fields_then_files(headers.get("content-type", ""), body)
    read_only = fields.get("read_only", "").lower() == "true"
    shared = fields.get("kind") in SHARED_KINDS or bool(fields.get("entity_id")) or read_only
    return Upload(files, fields.get("session_id") or query_session or None, shared, read_only)


def _landing(body: RunRequest, request: Request) -> Landing:
    stateful = request.headers.get(PROFILE_HEADER, "").lower() == "stateful"
    # G2 clients (their file refs carry a `kind`) expect unchanged inputs echoed back marked
    # `inherited`, so they can tell them from outputs; G1 clients list no inputs.
    echo = any(ref.kind for ref in body.files)
    inputs = tuple(_input(ref) for ref in body.files)
    return Landing(body.session_id, body.runtime_session_hint, stateful, inputs, echo)


def _input(ref: FileRef) -> InputRef:
    shared = ref.kind in SHARED_KINDS
    return InputRef(ref.id, ref.name, ref.home_session, shared, ref.resource_id, ref.kind, ref.version)


def _run_key(request: Request, caller: Caller) -> str | None:
    """The run key of the client's request id, which a cancel names it by. Bound to the
    credential, not to a user a body names: a key holder's cancel names no user, and the
    organization's server may stop any run it started, for whichever user."""
    request_id = request.headers.get(RUN_REQUEST_ID_HEADER)
    return run_key(caller, request_id) if request_id else None
