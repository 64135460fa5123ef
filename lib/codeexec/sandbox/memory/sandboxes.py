"""The `memory` backend: sessions in this process's memory, programs run as plain
processes of this user (runs.py). NOT A SANDBOX: for tests, and for trying the API on any
machine, where the caller's code is the caller's own. It needs no root, no btrfs and no
bubblewrap, and keeps no file on disk between calls; a stop forgets every session.

A session is a lease, a tree of files (bytes and times), the service's records, and an
exclusive hold (a lock); the table of them is guarded by one condition. Every change to
a session's files replaces its tree whole, under the hold, so a reader holds the bytes of
one moment. The port's operations are `local`'s own (engine.py composes them from the
steps here), so the clauses of docs/backends.md hold by the same code.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import BinaryIO

from ... import ids
from ...errors import BackendUnavailable, BadRequest, Conflict, FileNotFound, RateLimited, SessionNotFound, TooLarge
from ..local.engine import ComposedSandboxes
from ..port import FileInfo, HostLoad, Lease, OwnerTag, Program, Quota, RunResult
from . import runs
from .runs import File, Tree

log = logging.getLogger("codeexec.memory")

NOT_A_SANDBOX = (
    "SANDBOX_BACKEND=memory is not a sandbox: for tests and trying the API. Programs run as this"
    " user with no isolation and no limit but time and output; sessions live in memory until the process stops."
)
# A cancel for no run in progress waits this long for its run; so many wait at most.
_CANCEL_KEPT_SECONDS = 300
_PENDING_CANCELS = 4096


@dataclass(frozen=True)
class MemoryConfig:
    lease_ttl_seconds: int
    max_output_bytes: int  # each of stdout and stderr
    # How long a call waits for a session another holds: beyond the longest run.
    hold_wait_seconds: float = 75.0


@dataclass
class _Session:
    lease: Lease
    tree: Tree = field(default_factory=lambda: Tree({}, frozenset()))
    records: dict[str, bytes] = field(default_factory=dict)
    hold: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0  # calls that have it open: the reaper leaves it
    ending: bool = False  # no call opens it any more


class MemorySandbox:
    """One session, as the engine's steps use it (engine.Sandbox)."""

    def __init__(self, session: _Session, backend: MemorySandboxes) -> None:
        self.id = session.lease.session_id
        self.lease = session.lease  # as it was opened
        self._session = session
        self._backend = backend

    def write_file(self, path: str, data: BinaryIO, limit: int) -> None:
        self._commit({path: _read_within(data, limit)})

    def write_files(self, pairs: Iterable[tuple[str, BinaryIO]], limit: int) -> None:
        self._commit({path: _read_within(data, limit) for path, data in pairs})

    def _commit(self, written: dict[str, File]) -> None:
        """Put files in, all or none: every path checked against the tree first."""
        tree = self._session.tree
        dirs, paths = set(tree.dirs), tree.files.keys() | written.keys()
        for path in written:
            _check_placeable(path, paths, dirs)
            parts = path.split("/")
            dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        self._session.tree = Tree({**tree.files, **written}, frozenset(dirs))

    def open_file(self, path: str) -> tuple[BinaryIO, FileInfo]:
        file = self._file(path)  # one moment's: a run may replace the tree meanwhile
        return io.BytesIO(file.data), FileInfo(path, len(file.data), file.mtime_ns)

    def stat(self, path: str) -> FileInfo:
        file = self._file(path)
        return FileInfo(path, len(file.data), file.mtime_ns)

    def _file(self, path: str) -> File:
        file = self._session.tree.files.get(path)
        if file is None:
            raise FileNotFound()
        return file

    def list_files(self) -> list[FileInfo]:
        return [FileInfo(path, len(f.data), f.mtime_ns) for path, f in self._session.tree.files.items()]

    def find(self, file_id: str) -> str | None:
        # In memory a look at every path is no listing of a disk: nothing to keep beside them.
        return next((path for path in self._session.tree.files if ids.file_id(self.id, path) == file_id), None)

    def remove_file(self, path: str) -> None:
        tree = self._session.tree
        if path not in tree.files:
            raise FileNotFound()
        self._session.tree = Tree({p: f for p, f in tree.files.items() if p != path}, tree.dirs)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        if not self._session.hold.acquire(timeout=self._backend.config.hold_wait_seconds):
            raise BackendUnavailable("the session is busy with another call; try again", retry_after=2)
        try:
            yield
        finally:
            self._session.hold.release()

    def bound(self, quota: Quota) -> None:
        """None held: the memory backend counts no quotas (docs/backends.md, "memory")."""

    def run(self, program: Program) -> RunResult:
        backend = self._backend
        with backend.running(program.run_key) as cancelled:
            result, tree = runs.run_over(
                backend.commands[program.lang], program, self._session.tree, backend.config.max_output_bytes, cancelled
            )
        self._session.tree = tree
        return result

    def read_record(self, key: str) -> bytes | None:
        return self._session.records.get(key)

    def write_record(self, key: str, record: bytes) -> None:
        self._session.records[key] = record


def _read_within(data: BinaryIO, limit: int) -> File:
    chunks, size = [], 0
    while chunk := data.read(1 << 16):
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"the file is larger than {limit} bytes")
        chunks.append(chunk)
    return File(b"".join(chunks), time.time_ns())


def _check_placeable(path: str, files: AbstractSet[str], dirs: AbstractSet[str]) -> None:
    """Refuse what no filesystem would take, as `local` refuses it (local/files.py)."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise BadRequest("a file's path must name a file inside the session's directory")
    if path in dirs:
        raise BadRequest("a directory has that name")
    if any("/".join(parts[:i]) in files for i in range(1, len(parts))):
        raise BadRequest("a part of the file's path is a file, not a directory")


class MemorySandboxes(ComposedSandboxes):
    named_sessions = True
    mnt_data = False  # programs run in a temporary directory of their own

    def __init__(self, config: MemoryConfig) -> None:
        if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
            raise RuntimeError("SANDBOX_BACKEND=memory refuses to run inside AWS Lambda: it is not a sandbox.")
        log.warning(NOT_A_SANDBOX)
        super().__init__()
        self.config = config
        self.commands = runs.interpreters()
        self.languages = frozenset(self.commands)
        self._sessions: dict[str, _Session] = {}
        self._table = threading.Condition()  # guards the sessions, their users, and the runs
        self._running: set[str] = set()  # run keys of the runs under way
        self._cancels: dict[str, float] = {}  # run key -> when its cancel came
        self._runs_now = 0

    @contextlib.contextmanager
    def create(
        self, owner: OwnerTag, shared: bool = False, read_only: bool = False, session_id: str | None = None
    ) -> Iterator[MemorySandbox]:
        if session_id is not None and not ids.is_session_id(session_id):
            raise ValueError("not a session id")
        now = time.time()
        with self._table:
            session_id = session_id or self._new_id()
            if session_id in self._sessions:
                raise Conflict("that session exists already")
            lease = Lease(session_id, owner, shared, read_only, now, self.config.lease_ttl_seconds, now)
            self._sessions[session_id] = _Session(lease)
        with self.open(session_id, lambda lease: True) as sandbox:
            yield sandbox

    def _new_id(self) -> str:
        while (session_id := ids.new_session_id()) in self._sessions:
            pass
        return session_id

    @contextlib.contextmanager
    def open(self, session_id: str, admit: Callable[[Lease], bool]) -> Iterator[MemorySandbox]:
        with self._table:
            session = self._sessions.get(session_id)
            if session is None or session.ending or not admit(session.lease):
                raise SessionNotFound()
            session.users += 1
            _touch(session)  # the idle clock starts again, when the call begins...
        try:
            yield MemorySandbox(session, self)
        finally:
            with self._table:
                session.users -= 1
                _touch(session)  # ...and when it ends
                self._table.notify_all()

    def lease(self, session_id: str) -> Lease:
        with self._table:
            session = self._sessions.get(session_id)
            if session is None or session.ending:
                raise SessionNotFound()
            return session.lease

    def leases(self) -> Iterator[Lease]:
        with self._table:
            leases = [s.lease for s in self._sessions.values() if not s.ending]
        yield from leases

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        with self._table:
            session = self._sessions.get(session_id)
            if session is None or session.ending or session.users or not still_due(session.lease):
                return False
            del self._sessions[session_id]
            return True

    def end(self, session_id: str) -> None:
        """Refuse new calls at once, then wait for those under way, as `local` does."""
        with self._table:
            session = self._sessions.get(session_id)
            if session is None or session.ending:
                return
            session.ending = True
            self._table.wait_for(lambda: not session.users)
            del self._sessions[session_id]

    def cancel(self, run_key: str) -> None:
        with self._table:
            now = time.monotonic()
            self._cancels = {key: at for key, at in self._cancels.items() if now - at < _CANCEL_KEPT_SECONDS}
            if run_key not in self._running and len(self._cancels) >= _PENDING_CANCELS:
                said = "too many cancels wait for runs that have not started; try again later"
                raise RateLimited(said, reason="cancels")
            self._cancels[run_key] = now

    @contextlib.contextmanager
    def running(self, run_key: str | None) -> Iterator[Callable[[], bool] | None]:
        """A run under way (counted), under `run_key` for a cancel to find; yields whether one came."""
        with self._table:
            self._runs_now += 1
            if run_key is not None:
                self._running.add(run_key)
        try:
            yield None if run_key is None else (lambda: run_key in self._cancels)
        finally:
            with self._table:
                self._runs_now -= 1
                if run_key is not None:
                    self._running.discard(run_key)
                    self._cancels.pop(run_key, None)

    def hosts(self) -> list[HostLoad]:
        with self._table:
            sessions = list(self._sessions.values())
            runs_now = self._runs_now
        held = sum(len(f.data) for s in sessions for f in s.tree.files.values())
        return [HostLoad("memory", "up", runs_now, len(sessions), held, 0)]


def _touch(session: _Session) -> None:
    session.lease = replace(session.lease, touched_at=time.time())
