"""Sessions: the one owner of every change to a session, and of who may address one.

Leasing, input copies, runs, uploads and removals all happen here, each under the
sandbox's exclusive hold, so that what a reply reports is what its own call did. The
HTTP routes only parse a request and call this; nothing below the routes knows HTTP.

It holds no state. The owner is a parameter of every call, passed down from auth and
never read from a request body: a caller that could name the tenant could act in
another one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from . import ids, notes, outputs
from .errors import BadRequest, FileNotFound, SessionNotFound, TooLarge, UnsupportedLanguage
from .sandbox.port import FileInfo, Lease, Owner, Program, Sandbox, Sandboxes
from .wire import ExecReply, ExecRequest, FileRef

# An input copied from another session is bounded by the session's own disk limit alone.
_ANY_SIZE = 1 << 62


@dataclass(frozen=True)
class SessionLimits:
    run_timeout_seconds: float
    max_files_per_run: int  # files listed in one exec reply
    max_upload_bytes: int  # one uploaded file


class Sessions:
    def __init__(self, sandboxes: Sandboxes, limits: SessionLimits) -> None:
        self.sandboxes = sandboxes
        self.limits = limits

    # -- reads --------------------------------------------------------------------------

    def list_files(self, owner: Owner, session_id: str) -> list[FileInfo]:
        with self._open(owner, session_id) as sandbox:
            return sorted(sandbox.list_files(), key=lambda f: f.path)

    def open_file(self, owner: Owner, session_id: str, file_id: str) -> tuple[BinaryIO, FileInfo]:
        path = ids.file_path(file_id)
        with self._open(owner, session_id) as sandbox:
            return sandbox.open_file(path)

    def stat(self, owner: Owner, session_id: str, file_id: str) -> FileInfo:
        path = ids.file_path(file_id)
        with self._open(owner, session_id) as sandbox:
            return sandbox.stat(path)

    # -- changes ------------------------------------------------------------------------

    def remove(self, owner: Owner, session_id: str, file_id: str) -> str:
        path = ids.file_path(file_id)
        with self._open(owner, session_id) as sandbox, sandbox.exclusive():
            sandbox.remove_file(path)
        return path

    def upload(
        self, owner: Owner, session_id: str | None, files: Sequence[tuple[str | None, BinaryIO]]
    ) -> tuple[str, list[str]]:
        """Store every file or none; returns the session and the names the files got.
        Without a session id the upload leases a new session (G1 LibreChat's way)."""
        names = [ids.upload_name(name) for name, _ in files]
        new_session = None
        try:
            with self._open_or_create(owner, session_id) as sandbox, sandbox.exclusive():
                new_session = None if session_id else sandbox.id
                for name, (_, data) in zip(names, files, strict=True):
                    sandbox.write_file(name, data, self.limits.max_upload_bytes)
        except BaseException:
            if new_session:  # a session leased for a failed upload would hold nothing: end it
                self.sandboxes.end(new_session)
            raise
        return sandbox.id, names

    def execute(self, owner: Owner, request: ExecRequest) -> ExecReply:
        """Lease the session, put the inputs in, run the program, report what it changed."""
        program = self._program(request)
        with self._lease_for_run(owner, request) as sandbox, sandbox.exclusive():
            missing, placed = self._copy_inputs(owner, sandbox, request.files)
            before = sandbox.list_files()
            result = sandbox.run(program)
            after = sandbox.list_files()
        changes = outputs.Changes(before, after)
        files = outputs.written(sandbox.id, changes)
        if request.lists_inherited:
            files += outputs.inherited(placed, changes, sandbox.id)
        limit_notes = [notes.limit_hit(hit) for hit in result.hits]
        if len(files) > self.limits.max_files_per_run:
            limit_notes.append(notes.files_listed(self.limits.max_files_per_run, len(files)))
            files = files[: self.limits.max_files_per_run]
        stderr = notes.around(result.stderr, missing, limit_notes)
        return ExecReply(session_id=sandbox.id, stdout=result.stdout, stderr=stderr, files=files)

    def end(self, session_id: str) -> None:
        """End a session now instead of leaving it to the reaper. Nothing on the API calls
        this (a session outlives its run: the reply hands back an id the next calls use),
        but a one-shot caller such as a function invocation is over the moment it answers."""
        self.sandboxes.end(session_id)

    # -- how a call finds its session ----------------------------------------------------

    def _program(self, request: ExecRequest) -> Program:
        if request.lang not in self.sandboxes.languages:
            available = ", ".join(sorted(self.sandboxes.languages))
            raise UnsupportedLanguage(f"lang '{request.lang}' is not available here; available: {available}")
        return Program(request.lang, request.code, tuple(request.args), self.limits.run_timeout_seconds)

    def _open(self, owner: Owner, session_id: str) -> contextlib.AbstractContextManager[Sandbox]:
        return self.sandboxes.open(session_id, _admits(owner))

    def _open_or_create(self, owner: Owner, session_id: str | None) -> contextlib.AbstractContextManager[Sandbox]:
        return self._open(owner, session_id) if session_id else self.sandboxes.create(owner.tag())

    @contextlib.contextmanager
    def _lease_for_run(self, owner: Owner, request: ExecRequest) -> Iterator[Sandbox]:
        """The session the run asks for, else the one its files live in (G1 LibreChat sends
        no top-level session_id), when alive and the caller's; else a new one."""
        candidates = [request.session_id, *(ref.home_session for ref in request.files)]
        with contextlib.ExitStack() as stack:
            yield self._enter_first(stack, owner, candidates)

    def _enter_first(self, stack: contextlib.ExitStack, owner: Owner, candidates: list[str | None]) -> Sandbox:
        for session_id in dict.fromkeys(c for c in candidates if c):
            with contextlib.suppress(SessionNotFound):
                return stack.enter_context(self._open(owner, session_id))
        return stack.enter_context(self.sandboxes.create(owner.tag()))

    # -- input copies ---------------------------------------------------------------------

    def _copy_inputs(
        self, owner: Owner, sandbox: Sandbox, refs: list[FileRef]
    ) -> tuple[list[str], list[tuple[FileRef, str]]]:
        """Bring every input into the run's session: the notes for the reply, and where each
        input now is. An input that cannot be found is named in the reply, never silently
        skipped: a missing CSV must not look like an empty one."""
        missing: list[str] = []
        placed: list[tuple[FileRef, str]] = []
        for ref in refs:
            name = ref.name or ref.id
            try:
                placed.append((ref, self._copy_one(owner, sandbox, ref)))
            except (SessionNotFound, FileNotFound, BadRequest):
                missing.append(notes.not_available(name))
            except TooLarge as exc:
                missing.append(notes.not_copied(name, exc.details))
        return missing, placed

    def _copy_one(self, owner: Owner, sandbox: Sandbox, ref: FileRef) -> str:
        """Place one input in the run's session; returns the path it has there."""
        source_path = ids.file_path(ref.id)
        target_path = ids.upload_name(ref.name) if ref.name else source_path
        home = ref.home_session
        if home is None or home == sandbox.id:
            # Already in place. Some clients rebuild the id from a listing and strip its
            # extension (3.1.x: id "out" for "out.txt"), so the name counts as much as the id.
            with contextlib.suppress(FileNotFound):
                sandbox.stat(target_path)
                return target_path
            self._copy_file(sandbox, source_path, sandbox, target_path)
            return target_path
        with self._open(owner, home) as source:
            self._copy_file(source, source_path, sandbox, target_path)
        return target_path

    def _copy_file(self, source: Sandbox, source_path: str, target: Sandbox, target_path: str) -> None:
        reader, _ = source.open_file(source_path)
        with reader:
            target.write_file(target_path, reader, _ANY_SIZE)


def _admits(owner: Owner) -> Callable[[Lease], bool]:
    """Who may address a session: its own organization."""
    org = owner.tag().org
    return lambda lease: lease.owner.org == org
