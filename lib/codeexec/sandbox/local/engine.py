"""The engine `local` composes its coarse operations with: each operation of the port
(port.py) made of FINE steps on one `Sandbox` (opened or created, its files, its exclusive
hold, its run). In-process a step costs nothing, so this is the whole backend for `local`,
and what the runner serves over HTTP (runner/app.py): a remote backend never sees it.

The steps keep the port's clauses by construction: a session is placed (`_held`: the named
one, else the first candidate the caller's access admits, else a new one), counted among
the runs that wait for it (`Turns`: SESSION_CALLS at most, by the session a run lands
in), held exclusively, and only then is the run slot taken; inputs are found by `Input.paths`, never
by listing, and each origin session opened once; changes are a listing before and after;
a session made for a call that fails is ended at once.
"""

from __future__ import annotations

import contextlib
import json
import threading
from abc import abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import BinaryIO, Protocol

from ... import ids
from ...errors import BadRequest, Conflict, FileNotFound, RateLimited, SessionNotFound, TooLarge
from ..port import (
    SESSION_CALLS,
    Access,
    Carried,
    Changes,
    FileInfo,
    Input,
    Keep,
    Lease,
    Opened,
    OwnerTag,
    Placed,
    Placement,
    Program,
    Quota,
    Ran,
    Run,
    RunResult,
    RunSlot,
    Sandboxes,
    SendTo,
    record_digest,
)


class Sandbox(Protocol):
    """One leased sandbox, as the engine's steps use it (`ComposedSandboxes.create`,
    `ComposedSandboxes.open`)."""

    id: str  # the session id
    lease: Lease

    def write_file(self, path: str, data: BinaryIO, limit: int) -> None:
        """Write atomically, replacing what is there: a failed or oversized write
        (TooLarge past `limit` bytes) leaves nothing behind."""

    def write_files(self, files: Iterable[tuple[str, BinaryIO]], limit: int) -> None:
        """Write every file or none: each read to its end before the next pair is pulled,
        and none in place until all are in."""

    def open_file(self, path: str) -> tuple[BinaryIO, FileInfo]:
        """The file's bytes as they were at one moment, with their real stat; the caller
        closes the reader. FileNotFound for anything but a regular file inside."""

    def stat(self, path: str) -> FileInfo:
        """The file's real size and modification time; FileNotFound as for open_file."""

    def list_files(self) -> list[FileInfo]:
        """Every regular file under the artifact directory, recursively."""

    def find(self, file_id: str) -> str | None:
        """The path of the file a derived id names, found without a listing; None when
        it names none; ListingNeeded when only a listing could tell."""

    def remove_file(self, path: str) -> None: ...

    def exclusive(self) -> AbstractContextManager[None]:
        """Hold off every other holder of this sandbox, across processes, until exit.
        Every change to the session happens under it, so a reply names exactly the files
        its own call changed."""

    def bound(self, quota: Quota) -> None:
        """Hold what is written from now on to what the owner may still hold (port.Quota);
        TooLarge when nothing is left."""

    def run(self, program: Program) -> RunResult:
        """Run the program with the artifact directory as its working directory. Its
        source lives outside that directory, so it never shows up as an output file."""

    def read_record(self, key: str) -> bytes | None:
        """The service's own record under `key` (see Keep), from where no program writes."""

    def write_record(self, key: str, record: bytes) -> None: ...


# The largest input copied from another session: bounded by the session's disk limit alone.
_ANY_SIZE = 1 << 62


class Turns:
    """The runs holding or waiting for each session's hold in this process: SESSION_CALLS
    at most (one holds it, the others wait their turn), past which a run is refused at
    once; counted by the session a run lands in, whatever it named."""

    def __init__(self) -> None:
        self._calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def waiting(self, session_id: str) -> Iterator[None]:
        with self._lock:
            if self._calls[session_id] >= SESSION_CALLS:
                raise RateLimited(f"this session has {SESSION_CALLS} runs in flight already", retry_after=2)
            self._calls[session_id] += 1
        try:
            yield
        finally:
            with self._lock:
                self._calls -= Counter({session_id: 1})  # a count that reaches 0 is dropped


class ComposedSandboxes(Sandboxes):
    """The port's coarse operations, composed of a subclass's fine steps: `create` and
    `open` (and the reaper's operations, which are the backend's own)."""

    def __init__(self) -> None:
        self.turns = Turns()

    def execute(self, run: Run, carried: Iterable[Carried] = (), slot: RunSlot = contextlib.nullcontext) -> Ran:
        self.check_language(run.program.lang)  # the runner's server answers calls no session layer saw
        with self._held(run.placement, slot, counted=True) as (sandbox, created):
            placed = self._place_inputs(sandbox, run, carried)
            before = self._before(sandbox, run.keep)
            result = sandbox.run(run.program)
            changes = Changes.between(before, sandbox.list_files())
        return Ran(sandbox.id, created, result, changes, tuple(placed))

    def write_files(self, placement: Placement, files: Iterable[tuple[str, BinaryIO]], limit: int) -> str:
        with self._held(placement) as (sandbox, _):
            sandbox.write_files(files, limit)
        return sandbox.id

    def list_files(self, session_id: str, access: Access) -> list[FileInfo]:
        with self.open(session_id, access.admits) as sandbox:
            return sorted(sandbox.list_files(), key=lambda f: f.path)

    def read_file(self, session_id: str, access: Access, file_id: str, send_to: SendTo | None = None) -> Opened:
        with self.open(session_id, access.admits) as sandbox:
            reader, info = sandbox.open_file(_resolve(sandbox, file_id).path)
        return Opened(info, reader)

    def stat_file(self, session_id: str, access: Access, file_id: str) -> FileInfo:
        with self.open(session_id, access.admits) as sandbox:
            return _resolve(sandbox, file_id)

    def remove_file(self, session_id: str, access: Access, file_id: str) -> str:
        with self.open(session_id, access.admits) as sandbox, sandbox.exclusive():
            path = _resolve(sandbox, file_id).path
            sandbox.remove_file(path)
        return path

    def read_inputs(self, session_id: str, access: Access, inputs: Iterable[Input]) -> Iterator[Carried]:
        """The inputs of one session, found as a run would find them, one by one (each
        reader read to its end before the next), for a run elsewhere to carry in; those
        not found are left out."""
        with self.open(session_id, access.admits) as origin:
            for index, wanted in enumerate(inputs):
                with contextlib.suppress(FileNotFound):
                    reader, info = _open_first(origin, wanted.paths(origin.id))
                    with reader:
                        yield Carried(index, info.path, origin.lease.read_only, reader)

    def read_record(self, session_id: str, access: Access, key: str) -> bytes:
        with self.open(session_id, access.admits) as sandbox:
            record = sandbox.read_record(key)
        if record is None:
            raise Conflict("that program is not in its session (the session ended, or it never ran)")
        return record

    @abstractmethod
    def create(
        self, owner: OwnerTag, shared: bool = False, read_only: bool = False, session_id: str | None = None
    ) -> AbstractContextManager[Sandbox]:
        """Lease a new sandbox with the backend's TTL, and hold it open. With a
        `session_id` (only where `named_sessions`), Conflict when that id is taken."""

    @abstractmethod
    def open(self, session_id: str, admit: Callable[[Lease], bool]) -> AbstractContextManager[Sandbox]:
        """Open a live sandbox whose lease `admit`s the caller, and touch it; else
        SessionNotFound (an id of the wrong shape never reaches a filesystem or an API).
        While the context is open the reaper does not end the sandbox."""

    @contextlib.contextmanager
    def _held(
        self, placement: Placement, slot: RunSlot = contextlib.nullcontext, counted: bool = False
    ) -> Iterator[tuple[Sandbox, bool]]:
        """The sandbox a placement names, open and held, with `slot` taken, and whether it
        was made for this call; `counted`, among the session's runs (`Turns`). One made
        for a call that fails is ended at once: nobody learnt its id, and it would hold
        nothing."""
        with contextlib.ExitStack() as stack:
            sandbox, created = self._enter(stack, placement)
            try:
                if counted:
                    stack.enter_context(self.turns.waiting(sandbox.id))
                stack.enter_context(sandbox.exclusive())
                if placement.quota is not None:
                    sandbox.bound(placement.quota)
                stack.enter_context(slot())
                yield sandbox, created
            except BaseException:
                if created:
                    stack.close()
                    self.end(sandbox.id)
                raise

    def _enter(self, stack: contextlib.ExitStack, placement: Placement) -> tuple[Sandbox, bool]:
        if placement.named is not None:
            return self._named(stack, placement)
        for session_id in dict.fromkeys(placement.candidates):
            with contextlib.suppress(SessionNotFound):
                return stack.enter_context(self.open(session_id, placement.access.admits)), False
        if not placement.new:
            raise SessionNotFound()
        owner, shared, read_only = placement.access.owner, placement.shared, placement.read_only
        return stack.enter_context(self.create(owner, shared, read_only)), True

    def _named(self, stack: contextlib.ExitStack, placement: Placement) -> tuple[Sandbox, bool]:
        assert placement.named is not None
        for _ in range(2):  # a first call of the conversation may race another
            with contextlib.suppress(SessionNotFound):
                return stack.enter_context(self.open(placement.named, placement.access.admits)), False
            with contextlib.suppress(Conflict):
                owner, shared, read_only = placement.access.owner, placement.shared, placement.read_only
                return stack.enter_context(self.create(owner, shared, read_only, session_id=placement.named)), True
        raise Conflict("the conversation's session is busy being made; try again")

    def _place_inputs(self, sandbox: Sandbox, run: Run, carried: Iterable[Carried]) -> list[Placed]:
        """Every input into the run's session: the carried ones, then the others from
        their sessions, each origin opened once."""
        inputs = run.inputs
        placed = {c.index: _placed_from(c.reader, c.found, c.read_only, sandbox, inputs[c.index]) for c in carried}
        by_origin: dict[str, list[int]] = {}
        for index, wanted in enumerate(inputs):
            if index not in placed:
                by_origin.setdefault(wanted.origin or sandbox.id, []).append(index)
        for origin_id, indexes in by_origin.items():
            try:
                with contextlib.ExitStack() as stack:
                    own = origin_id == sandbox.id
                    origin = sandbox if own else stack.enter_context(self.open(origin_id, run.reader.admits))
                    placed |= {i: _place_one(origin, sandbox, inputs[i]) for i in indexes}
            except SessionNotFound:
                placed |= {i: Placed(None) for i in indexes}
        return [placed[i] for i in range(len(inputs))]

    def _before(self, sandbox: Sandbox, keep: Keep | None) -> list[FileInfo]:
        """The listing a run's changes are counted from: now, or, for a workflow's round,
        the one kept from before its first round (after checking and writing its record)."""
        now = sandbox.list_files()
        if keep is None:
            return now
        baseline = sandbox.read_record(_baseline(keep.key))
        _check_replaces(sandbox.read_record(keep.key), keep)
        if baseline is None:
            sandbox.write_record(_baseline(keep.key), _listing_json(now))
        sandbox.write_record(keep.key, keep.record)
        return now if baseline is None else _listing_of(baseline)


def _place_one(origin: Sandbox, sandbox: Sandbox, wanted: Input) -> Placed:
    """One input, from its session (`origin`, maybe the run's own) into the run's."""
    try:
        reader, info = _open_first(origin, wanted.paths(origin.id))
    except FileNotFound:
        return Placed(None)
    with reader:
        return _placed_from(reader, info.path, origin.lease.read_only, sandbox, wanted, copy=origin is not sandbox)


def _placed_from(
    reader: BinaryIO, found: str, read_only: bool, sandbox: Sandbox, wanted: Input, copy: bool = True
) -> Placed:
    try:
        target = wanted.target(found)
        if copy or target != found:
            sandbox.write_file(target, reader, _ANY_SIZE)
    except (BadRequest, TooLarge) as refused:
        return Placed(None, refused=refused.details)
    return Placed(target, read_only)


def _open_first(origin: Sandbox, paths: Iterable[str]) -> tuple[BinaryIO, FileInfo]:
    for path in paths:
        with contextlib.suppress(FileNotFound, BadRequest):
            return origin.open_file(path)
    raise FileNotFound()


def _resolve(sandbox: Sandbox, file_id: str) -> FileInfo:
    """The file a bare id names (a download's, a removal's: no name comes with it): a raw
    path, else the path the session found for a derived id, without a listing."""
    with contextlib.suppress(BadRequest, FileNotFound):
        return sandbox.stat(ids.file_path(file_id))
    path = sandbox.find(file_id) if ids.is_file_id(file_id) else None
    if path is None:
        raise FileNotFound()
    return sandbox.stat(path)


def _check_replaces(current: bytes | None, keep: Keep) -> None:
    """A round runs only on the record its token was issued for."""
    if (current is None) != (keep.replaces is None) or (
        current is not None and record_digest(current) != keep.replaces
    ):
        raise Conflict("that continuation token is spent: its round ran already")


def _baseline(key: str) -> str:
    return f"{key}.before"


def _listing_json(listing: Iterable[FileInfo]) -> bytes:
    return json.dumps([asdict(f) for f in listing]).encode()


def _listing_of(data: bytes) -> list[FileInfo]:
    return [FileInfo(str(f["path"]), int(f["size"]), int(f["mtime_ns"])) for f in json.loads(data)]

