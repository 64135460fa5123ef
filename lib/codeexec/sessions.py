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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from . import ids, notes, outputs
from .auth import Caller
from .errors import BadRequest, FileNotFound, SessionNotFound, TooLarge, UnsupportedLanguage
from .large_files import LargeFiles
from .sandbox.port import FileInfo, Lease, Program, Sandbox, Sandboxes, SendsFiles
from .wire import ExecReply, ExecRequest, FileRef

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
class Download:
    """One file for a download: its bytes to answer with, or, for a file too large for
    an answer, the key it was put under in the large-files bucket."""

    info: FileInfo
    reader: BinaryIO | None = None
    key: str | None = None


class Sessions:
    def __init__(self, sandboxes: Sandboxes, limits: SessionLimits, large_files: LargeFiles | None = None) -> None:
        self.sandboxes = sandboxes
        self.limits = limits
        self.large_files = large_files

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
        files: Sequence[tuple[str | None, BinaryIO]],
        terms: UploadTerms = UploadTerms(),
    ) -> tuple[str, list[str]]:
        """Store every file or none; returns the session and the paths the files got.
        Without a session id the upload leases a new session (what LibreChat does)."""
        paths = [ids.upload_path(name) for name, _ in files]
        if len(set(paths)) < len(paths):
            raise BadRequest("two files of the upload have the same path")
        new_session = None
        try:
            with self._open_or_create(caller, session_id, terms) as sandbox, sandbox.exclusive():
                new_session = None if session_id else sandbox.id
                for path, (_, data) in zip(paths, files, strict=True):
                    sandbox.write_file(path, data, self.limits.max_upload_bytes)
        except BaseException:
            if new_session:  # a session leased for a failed upload would hold nothing: end it
                self.sandboxes.end(new_session)
            raise
        return sandbox.id, paths

    def execute(self, caller: Caller, request: ExecRequest) -> ExecReply:
        """Lease the session, put the inputs in, run the program, report what it changed."""
        program = self._program(request)
        with self._lease_for_run(caller, request) as sandbox, sandbox.exclusive():
            missing, placed = self._copy_inputs(caller, sandbox, request.files)
            before = sandbox.list_files()
            result = sandbox.run(program)
            after = sandbox.list_files()
        changes = outputs.Changes(before, after)
        files = outputs.written(sandbox.id, changes, placed)
        if request.lists_inherited:
            files += outputs.inherited(placed, changes, sandbox.id)
        limit_notes = [notes.limit_hit(hit) for hit in result.hits]
        if len(files) > self.limits.max_files_per_run:
            limit_notes.append(notes.files_listed(self.limits.max_files_per_run, len(files)))
            files = files[: self.limits.max_files_per_run]
        return ExecReply(
            session_id=sandbox.id,
            stdout=result.stdout,
            stderr=notes.around(result.stderr, notes.capped(missing), limit_notes),
            files=files,
            deleted_files=changes.deleted() or None,
        )

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

    def _open(self, session_id: str, admit: Callable[[Lease], bool]) -> contextlib.AbstractContextManager[Sandbox]:
        return self.sandboxes.open(session_id, admit)

    def _open_or_create(
        self, caller: Caller, session_id: str | None, terms: UploadTerms
    ) -> contextlib.AbstractContextManager[Sandbox]:
        if session_id:
            return self._open(session_id, _may_change(caller))
        return self.sandboxes.create(caller.owner.tag(), shared=terms.shared, read_only=terms.read_only)

    @contextlib.contextmanager
    def _lease_for_run(self, caller: Caller, request: ExecRequest) -> Iterator[Sandbox]:
        """The session the run asks for, else the one its files live in (G1 LibreChat sends
        no top-level session_id), when it is the caller's own and not shared; else a new
        one. Refs to an agent's or a skill's files are never candidates: those sessions
        are shared."""
        own = (ref.home_session for ref in request.files if ref.kind in (None, "user"))
        candidates = [request.session_id, *own]
        with contextlib.ExitStack() as stack:
            yield self._enter_first(stack, caller, candidates)

    def _enter_first(self, stack: contextlib.ExitStack, caller: Caller, candidates: list[str | None]) -> Sandbox:
        for session_id in dict.fromkeys(c for c in candidates if c):
            with contextlib.suppress(SessionNotFound):
                return stack.enter_context(self._open(session_id, _may_land(caller)))
        return stack.enter_context(self.sandboxes.create(caller.owner.tag()))

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
