"""Sessions: the one owner of every change to a session, and of who may address one.

Leasing, input copies, runs, uploads and removals all happen here, each under the
sandbox's exclusive hold, so that what a reply reports is what its own call did. The
HTTP routes only parse a request and call this; nothing below the routes knows HTTP.

Who may do what. A session belongs to an organization and one user of it (the caller
that leased it), and may be SHARED: an upload for everyone of the organization, an
agent's files or a skill (LibreChat hands the same refs to every user's runs).

- A run lands only in a session of its caller's own that is not shared; otherwise it
  gets a session of its own and its inputs are copied in. So no run ever executes where
  another user's refs point, and a user's next run with refs to its own outputs lands in
  its own session again.
- Reading (listings, downloads, metadata) is for the owner, for everyone of the
  organization when the session is shared, and for the organization's own server: a
  key holder that names no user (G1 LibreChat downloads outputs with its key alone).
- Changing a session's files (uploads into it, removals) is for its owner and for the
  organization's own server.

It holds no state. The caller is a parameter of every call, passed down from auth and
never read from a request body: a caller that could name the tenant could act in
another one.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Literal

from . import ids, notes, outputs
from .auth import Caller
from .errors import (
    BadRequest,
    Conflict,
    FileNotFound,
    ProfileMismatch,
    SessionNotFound,
    TooLarge,
    UnsupportedLanguage,
)  # fmt: skip
from .large_files import LargeFiles
from .programmatic import Tokens, Workflow, tools_from
from .sandbox.port import FileInfo, Lease, Limit, Program, RunResult, Sandbox, Sandboxes, SendsFiles
from .wire import (
    ExecReply,
    ExecRequest,
    FileRef,
    OutputFile,
    ProgrammaticReply,
    ProgrammaticRequest,
    RunRequest,
    ToolCall,
)

# An input copied from another session is bounded by the session's own disk limit alone.
_ANY_SIZE = 1 << 62


@dataclass(frozen=True)
class SessionLimits:
    run_timeout_seconds: float
    max_files_per_run: int  # files listed in one exec reply
    max_upload_bytes: int  # one uploaded file


@dataclass(frozen=True)
class UploadTerms:
    """What an upload says of its files (G2's `kind` and `read_only`, G1's `entity_id`)."""

    shared: bool = False  # for everyone of the organization: an agent's files, a skill
    read_only: bool = False  # inputs a run may change in its own copy, never hand back


@dataclass(frozen=True)
class Where:
    """Where a call runs: its sandbox, and, in the stateful profile, whether the session
    its hint names was made for it."""

    sandbox: Sandbox
    runtime_status: Literal["new", "reused"] | None = None  # for a hinted session
    made: bool = False  # leased for this call

    @property
    def runtime_session_id(self) -> str | None:
        return self.sandbox.id if self.runtime_status else None


@dataclass(frozen=True)
class Report:
    """What a run, or a programmatic workflow, changed and said, as a reply carries it."""

    files: list[OutputFile]
    stderr: str
    deleted: list[str] | None


@dataclass(frozen=True)
class Download:
    """One file for a download: its bytes to answer with, or, for a file too large for
    an answer, the key it was put under in the large-files bucket."""

    info: FileInfo
    reader: BinaryIO | None = None
    key: str | None = None


class Sessions:
    def __init__(
        self,
        sandboxes: Sandboxes,
        limits: SessionLimits,
        tokens: Tokens,
        large_files: LargeFiles | None = None,
        run_slot: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        self.sandboxes = sandboxes
        self.limits = limits
        self.tokens = tokens
        self.large_files = large_files
        # Taken once a run holds its session: a call waiting for its session holds none.
        self._run_slot = run_slot

    # -- reads --------------------------------------------------------------------------

    def list_files(self, caller: Caller, session_id: str) -> list[FileInfo]:
        with self._open(session_id, _may_read(caller)) as sandbox:
            return sorted(sandbox.list_files(), key=lambda f: f.path)

    def download(self, caller: Caller, session_id: str, file_id: str) -> Download:
        """The file's bytes, or, when it is large and a bucket is configured, the file put
        in the bucket: by the sandbox itself where its backend can send files (the bytes
        then never pass through here), else from here."""
        with self._open(session_id, _may_read(caller)) as sandbox:
            large = self.large_files
            if large is None:
                reader, info = _open_file(sandbox, file_id)
                return Download(info, reader=reader)
            info = _resolve(sandbox, file_id)
            if not large.is_large(info.size):
                reader, info = sandbox.open_file(info.path)
                return Download(info, reader=reader)
            key = large.new_key()
            if isinstance(sandbox, SendsFiles):
                sandbox.send_file(info.path, large.put_url(key))
            else:
                reader, _ = sandbox.open_file(info.path)
                with reader:
                    large.store(reader, key)
            return Download(info, key=key)

    def stat(self, caller: Caller, session_id: str, file_id: str) -> FileInfo:
        with self._open(session_id, _may_read(caller)) as sandbox:
            return _find(sandbox, file_id) or sandbox.stat(ids.file_path(file_id))

    # -- changes ------------------------------------------------------------------------

    def remove(self, caller: Caller, session_id: str, file_id: str) -> str:
        """Remove one file; returns its path."""
        with self._open(session_id, _may_change(caller)) as sandbox, sandbox.exclusive():
            found = _find(sandbox, file_id)
            path = found.path if found else ids.file_path(file_id)
            sandbox.remove_file(path)
        return path

    def upload(
        self,
        caller: Caller,
        session_id: str | None,
        files: Iterable[tuple[str | None, BinaryIO]],
        terms: UploadTerms = UploadTerms(),
    ) -> tuple[str, list[str]]:
        """Store every file or none; returns the session and the paths the files got.
        `files` is taken lazily, each reader read to its end before the next pair (a
        streamed upload's parts): a file that fails removes those written before it.
        Without a session id the upload leases a new session (what LibreChat does)."""
        paths: list[str] = []
        new_session = None
        try:
            with self._open_or_create(caller, session_id, terms) as sandbox, sandbox.exclusive():
                new_session = None if session_id else sandbox.id
                try:
                    for name, data in files:
                        path = ids.upload_path(name)
                        if path in paths:
                            raise BadRequest("two files of the upload have the same path")
                        sandbox.write_file(path, data, self.limits.max_upload_bytes)
                        paths.append(path)
                    if not paths:
                        raise BadRequest("the upload has no file (a form part named 'file' or 'files')")
                except BaseException:
                    for path in paths:
                        with contextlib.suppress(FileNotFound):
                            sandbox.remove_file(path)
                    raise
        except BaseException:
            if new_session:  # a session leased for a failed upload would hold nothing: end it
                self.sandboxes.end(new_session)
            raise
        return sandbox.id, paths

    def execute(
        self, caller: Caller, request: ExecRequest, stateful: bool = False, run_key: str | None = None
    ) -> ExecReply:
        """Lease the session, put the inputs in, run the program, report what it changed."""
        program = self._program(request, run_key)
        with self._lease_for_run(caller, request, stateful) as where, where.sandbox.exclusive(), self._run_slot():
            sandbox = where.sandbox
            missing, placed = self._copy_inputs(caller, sandbox, request.files)
            before = sandbox.list_files()
            result = sandbox.run(program)
            after = sandbox.list_files()
        report = self._report(sandbox.id, outputs.Changes(before, after), placed, result, missing, request)
        return ExecReply(
            session_id=sandbox.id,
            stdout=result.stdout,
            stderr=report.stderr,
            files=report.files,
            deleted_files=report.deleted,
            runtime_session_id=where.runtime_session_id,
            runtime_status=where.runtime_status,
        )

    def start_program(
        self, caller: Caller, request: ProgrammaticRequest, stateful: bool = False, run_key: str | None = None
    ) -> ProgrammaticReply:
        """The first round of a programmatic run (programmatic.py): its session, inputs,
        code and tools; then as many rounds as its calls take, each a request."""
        lang = "bash" if request.bash else "py"
        if "py" not in self.sandboxes.languages or lang not in self.sandboxes.languages:
            raise UnsupportedLanguage(f"programs in {lang} cannot run on this backend")
        if not request.code:
            raise BadRequest("a first round needs the program's code (or a continuation_token)")
        timeout = min((request.timeout or 1e9) / 1000, self.limits.run_timeout_seconds)
        tools = tools_from(request.tools, lang)
        with self._lease_for_run(caller, request, stateful) as where, where.sandbox.exclusive(), self._run_slot():
            sandbox = where.sandbox
            missing, placed = self._copy_inputs(caller, sandbox, request.files)
            workflow = Workflow(ids.new_session_id(), lang, request.code, tools, timeout, sandbox.list_files())
            return self._round(caller, sandbox, workflow, run_key, (missing, placed, request), where)

    def continue_program(
        self, caller: Caller, request: ProgrammaticRequest, run_key: str | None = None
    ) -> ProgrammaticReply:
        """The next round, with the client's answers to the last one's calls."""
        workflow_id, session_id, round_ = self.tokens.verify(request.continuation_token or "", caller.owner.tag())
        with self._open(session_id, _may_land(caller)) as sandbox, sandbox.exclusive(), self._run_slot():
            workflow = _workflow(sandbox, workflow_id)
            if workflow.done:
                raise Conflict("that program has completed: its continuation token is spent")
            if round_ != workflow.round:
                raise Conflict("that continuation token was used already")
            workflow.answer([r.model_dump() for r in request.tool_results or []])
            return self._round(caller, sandbox, workflow, run_key, ([], [], request), None)

    def cancel(self, caller: Caller, request_id: str) -> None:
        """Stop the run a client's request runs (its X-LibreChat-Code-Request-ID)."""
        self.sandboxes.cancel(run_key(caller, request_id))

    def end(self, session_id: str) -> None:
        """End a session now instead of leaving it to the reaper. Nothing on the API calls
        this (a session outlives its run: the reply hands back an id the next calls use),
        but a one-shot caller such as a function invocation is over the moment it answers."""
        self.sandboxes.end(session_id)

    # -- rounds and reports ----------------------------------------------------------------

    def _round(
        self,
        caller: Caller,
        sandbox: Sandbox,
        workflow: Workflow,
        run_key: str | None,
        inputs: tuple[list[str], list[outputs.Placed], RunRequest],
        where: Where | None,
    ) -> ProgrammaticReply:
        result = sandbox.run(workflow.program(run_key))
        stdout = workflow.asked(result)
        where = where or Where(sandbox)
        if stdout is not None and result.exit_code == 0:
            _save(sandbox, workflow)
            token = self.tokens.issue(workflow, sandbox.id, caller.owner.tag())
            calls = [ToolCall(**call) for call in workflow.pending]
            return ProgrammaticReply(
                status="tool_call_required", session_id=sandbox.id, tool_calls=calls, continuation_token=token,
                runtime_session_id=where.runtime_session_id, runtime_status=where.runtime_status,
            )  # fmt: skip
        workflow.done = True
        _save(sandbox, Workflow(workflow.id, workflow.lang, "", [], 0, [], round=workflow.round, done=True))
        missing, placed, request = inputs
        changes = outputs.Changes(workflow.before, sandbox.list_files())
        report = self._report(sandbox.id, changes, placed, result, missing, request)
        failed = _failure(result)
        return ProgrammaticReply(
            status="error" if failed else "completed", error=failed, session_id=sandbox.id, stdout=result.stdout,
            stderr=report.stderr, files=report.files, deleted_files=report.deleted,
            runtime_session_id=where.runtime_session_id, runtime_status=where.runtime_status,
        )  # fmt: skip

    def _report(
        self,
        session_id: str,
        changes: outputs.Changes,
        placed: list[outputs.Placed],
        result: RunResult,
        missing: list[str],
        request: RunRequest,
    ) -> Report:
        files = outputs.written(session_id, changes, placed)
        if request.lists_inherited:
            files += outputs.inherited(placed, changes, session_id)
        limit_notes = [notes.limit_hit(hit) for hit in result.hits]
        if len(files) > self.limits.max_files_per_run:
            limit_notes.append(notes.files_listed(self.limits.max_files_per_run, len(files)))
            files = files[: self.limits.max_files_per_run]
        stderr = notes.around(result.stderr, notes.capped(missing), limit_notes)
        return Report(files, stderr, changes.deleted() or None)

    # -- how a call finds its session ----------------------------------------------------

    def _program(self, request: ExecRequest, run_key: str | None) -> Program:
        if request.lang not in self.sandboxes.languages:
            available = ", ".join(sorted(self.sandboxes.languages))
            raise UnsupportedLanguage(f"lang '{request.lang}' is not available here; available: {available}")
        timeout = self.limits.run_timeout_seconds
        return Program(request.lang, request.code, tuple(request.args), timeout, run_key)

    def _open(self, session_id: str, admit: Callable[[Lease], bool]) -> contextlib.AbstractContextManager[Sandbox]:
        return self.sandboxes.open(session_id, admit)

    def _open_or_create(
        self, caller: Caller, session_id: str | None, terms: UploadTerms
    ) -> contextlib.AbstractContextManager[Sandbox]:
        if session_id:
            return self._open(session_id, _may_change(caller))
        return self.sandboxes.create(caller.owner.tag(), shared=terms.shared, read_only=terms.read_only)

    @contextlib.contextmanager
    def _lease_for_run(self, caller: Caller, request: RunRequest, stateful: bool) -> Iterator[Where]:
        """The stateful profile's session for the conversation its hint names; else the
        session the run asks for, else the one its files live in (G1 LibreChat sends no
        top-level session_id), when it is the caller's own and not shared; else a new one.
        Refs to an agent's or a skill's files are never candidates: those are shared."""
        if stateful and not self.sandboxes.named_sessions:
            raise ProfileMismatch("this deployment's backend cannot keep a stateful workspace")
        with contextlib.ExitStack() as stack:
            if request.runtime_session_hint and self.sandboxes.named_sessions:
                where = self._hinted(stack, caller, request.runtime_session_hint)
            else:
                where = self._enter_first(stack, caller, named_sessions(request))
            try:
                yield where
            except BaseException:
                if where.made:  # the call failed, refused a run slot say: nobody learnt its id
                    stack.close()
                    self.sandboxes.end(where.sandbox.id)
                raise

    def _hinted(self, stack: contextlib.ExitStack, caller: Caller, hint: str) -> Where:
        """One session per organization, user and hint, its id derived from the three: no
        table, and another user's same hint derives another session."""
        owner = caller.owner.tag()
        session_id = ids.derived_id("hint", owner.org, owner.user, hint)
        for _ in range(2):  # a first call of the conversation may race another
            with contextlib.suppress(SessionNotFound):
                return Where(stack.enter_context(self._open(session_id, _may_land(caller))), "reused")
            with contextlib.suppress(Conflict):
                return Where(stack.enter_context(self.sandboxes.create(owner, session_id=session_id)), "new", made=True)
        raise Conflict("the conversation's session is busy being made; try again")

    def _enter_first(self, stack: contextlib.ExitStack, caller: Caller, candidates: list[str]) -> Where:
        for session_id in candidates:
            with contextlib.suppress(SessionNotFound):
                return Where(stack.enter_context(self._open(session_id, _may_land(caller))))
        return Where(stack.enter_context(self.sandboxes.create(caller.owner.tag())), made=True)

    # -- input copies ---------------------------------------------------------------------

    def _copy_inputs(
        self, caller: Caller, sandbox: Sandbox, refs: list[FileRef]
    ) -> tuple[list[str], list[outputs.Placed]]:
        """Bring every input into the run's session: the notes for the reply, and where each
        input now is. An input that cannot be found is named in the reply, never silently
        skipped: a missing CSV must not look like an empty one."""
        missing: list[str] = []
        placed: list[outputs.Placed] = []
        for ref in refs:
            name = ref.name or ref.id
            try:
                placed.append(self._copy_one(caller, sandbox, ref))
            except (SessionNotFound, FileNotFound):
                missing.append(notes.not_available(name))
            except (BadRequest, TooLarge) as exc:
                missing.append(notes.not_copied(name, exc.details))
        return missing, placed

    def _copy_one(self, caller: Caller, sandbox: Sandbox, ref: FileRef) -> outputs.Placed:
        """Place one input in the run's session, at the path its name gives (what the model
        is told), else where it is in its own session."""
        home = ref.home_session
        if home is None or home == sandbox.id:
            return self._place(sandbox, sandbox, ref)
        with self._open(home, _may_read(caller)) as origin:
            return self._place(origin, sandbox, ref)

    def _place(self, origin: Sandbox, sandbox: Sandbox, ref: FileRef) -> outputs.Placed:
        # Some clients rebuild the id from a listing and strip its extension (3.1.x: id
        # "out" for "out.txt"), so where the name says counts as much as the id.
        reader, info = _open_file(origin, ref.id, ref.name)
        with reader:
            target = ids.upload_path(ref.name) if ref.name else info.path
            if origin is not sandbox or target != info.path:
                sandbox.write_file(target, reader, _ANY_SIZE)
        return outputs.Placed(ref, target, origin.lease.read_only)


def named_sessions(request: RunRequest) -> list[str]:
    """The sessions a run may land in, in the order it tries them: the one it asks for,
    then those its own files live in (refs of an agent's or a skill's are shared)."""
    own = (ref.home_session for ref in request.files if ref.kind in (None, "user"))
    return list(dict.fromkeys(s for s in (request.session_id, *own) if s))


def _find(sandbox: Sandbox, file_id: str) -> FileInfo | None:
    """The file a derived id names, from the session's own listing."""
    if not ids.is_file_id(file_id):
        return None
    return next((f for f in sandbox.list_files() if ids.file_id(sandbox.id, f.path) == file_id), None)


def _resolve(sandbox: Sandbox, file_id: str) -> FileInfo:
    """The file a download's id names: a derived id, else a raw path."""
    found = _find(sandbox, file_id)
    if found:
        return found
    try:
        return sandbox.stat(ids.file_path(file_id))
    except BadRequest:
        raise FileNotFound() from None


def _open_file(sandbox: Sandbox, file_id: str, name: str | None = None) -> tuple[BinaryIO, FileInfo]:
    """The file a client's id names: a derived id, else a raw path (from clients that
    stored one), else, for an input ref, the path its name gives."""
    found = _find(sandbox, file_id)
    for path in (found.path,) if found else (file_id, name):
        with contextlib.suppress(FileNotFound, BadRequest):
            if path:
                return sandbox.open_file(ids.file_path(path))
    raise FileNotFound()


def _may_read(caller: Caller) -> Callable[[Lease], bool]:
    owner = caller.owner.tag()
    return lambda lease: lease.owner.org == owner.org and (_acts_for(caller, lease) or lease.shared)


def _may_change(caller: Caller) -> Callable[[Lease], bool]:
    owner = caller.owner.tag()
    return lambda lease: lease.owner.org == owner.org and _acts_for(caller, lease)


def _acts_for(caller: Caller, lease: Lease) -> bool:
    """The caller is the session's owner, or the organization's own server (a key
    holder naming no user)."""
    return caller.user is None or lease.owner == caller.owner.tag()


def _may_land(caller: Caller) -> Callable[[Lease], bool]:
    owner = caller.owner.tag()
    return lambda lease: lease.owner == owner and not lease.shared


def run_key(caller: Caller, request_id: str) -> str:
    """The handle a client's request id gives its run: bound to the caller, so a cancel
    can reach no one else's."""
    owner = caller.owner.tag()
    return ids.derived_id("run", owner.org, owner.user, request_id)


def _failure(result: RunResult) -> str | None:
    """A failed round, in the words the G2 client passes on to the model."""
    if any(hit.limit is Limit.TIME for hit in result.hits):
        return "Time limit exceeded"
    if any(hit.limit is Limit.CANCELLED for hit in result.hits):
        return "Execution was cancelled"
    if result.exit_code != 0:
        return f"Sandbox exited with code {result.exit_code if result.exit_code is not None else 'unknown'}"
    return None


def _workflow(sandbox: Sandbox, workflow_id: str) -> Workflow:
    if not ids.is_file_id(workflow_id):
        raise BadRequest("the continuation token names no program")
    try:
        reader, _ = sandbox.open_file(Workflow.path_of(workflow_id))
    except FileNotFound:
        raise Conflict("that program is not in its session (the session ended, or it never ran)") from None
    with reader:
        return Workflow.load(reader.read())


def _save(sandbox: Sandbox, workflow: Workflow) -> None:
    sandbox.write_file(workflow.path(), io.BytesIO(workflow.dump()), _ANY_SIZE)
