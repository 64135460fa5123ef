"""The sandbox port: the one small interface the service knows about where code runs.

A session IS a sandbox. Its id is the session id, its files live under the artifact
directory (`/mnt/data` inside it), and what it owns (its owner, its lease) lives with the
sandbox itself. A backend keeps no table of its own beside the sandboxes.

The port is COARSE, on httpx's model (a transport's one `handle_request`): every backend
but `local` is across a network, so one call of the service is one operation here, and a
remote backend answers each operation in one request. `Sandboxes` is the base class:

- its coarse operations (`execute`, `write_files`, `list_files`, `read_file`, `stat_file`,
  `remove_file`, `read_record`) have default implementations composed of FINE steps (a
  `Sandbox` opened or created, its files, its exclusive hold, its run), which `local`
  keeps: in-process, a step costs nothing;
- a remote backend overrides each coarse operation with one request, and the other side
  (the runner) answers it with those same defaults. Leases, uses and holds are taken and
  released inside the operation, by the backend, so "one owner of every change" stands and
  the reaper never ends a session an operation is using.

What crosses the port is the library's own types, and data rather than callables, so that
the far side decides in the same request: `Access` (who asks, for what: one shared rule,
`Access.admits`), `Placement` (where a call's session is), `Input` (a client's file ref,
found by `ids.paths_for`, never by listing its session), a `Program` (never a command line:
each backend decides how to run one), `FileInfo`s with real sizes and times, a `RunResult`
whose limits are facts (`LimitHit`, said in words by `codeexec.notes`), and `Changes`,
what a run did to the files, computed next to them. Failures cross as `codeexec.errors`
types, mapped at each backend's own boundary.

Every path here is a POSIX path relative to the artifact directory, already checked by
`codeexec.ids.file_path` (no `..`, not absolute, no NUL). Backends still refuse to follow
a symlink out of the directory, because a program can make one.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, replace
from enum import Enum
from typing import Any, BinaryIO, Protocol

from .. import ids
from ..errors import BadRequest, Conflict, FileNotFound, SessionNotFound, TooLarge, UnsupportedLanguage

# -- who -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    """Who a session belongs to: an organization, and one user of it ("" names none,
    and is then a user of its own)."""

    org: str
    user: str = ""

    def tag(self) -> OwnerTag:
        return OwnerTag(_digest("org", self.org), _digest("user", self.org, self.user))


@dataclass(frozen=True)
class OwnerTag:
    """What a sandbox records of its owner: digests, short enough for any backend's
    metadata (AgentCore keeps them in a 100-character session name), naming nobody."""

    org: str
    user: str


def _digest(*parts: str) -> str:
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).digest()[:16]
    return base64.b32encode(digest).decode().rstrip("=").lower()


class Intent(Enum):
    READ = "read"  # listings, downloads, metadata; copying an input out of it
    CHANGE = "change"  # uploads into it, removals
    LAND = "land"  # a run executes in it


@dataclass(frozen=True)
class Access:
    """Who addresses a session, and for what. Data, not a callable: a backend across a
    network evaluates the same rule (`admits`) and answers "not found" in the same request.

    A session belongs to an organization and one user of it, and may be SHARED (an
    agent's files, a skill: LibreChat hands the same refs to every user). A run lands only
    in a session of its caller's own that is not shared; reading is for the owner, for
    everyone of the organization when the session is shared, and for the organization's
    own server (a key holder naming no user); changing is for the owner and that server."""

    owner: OwnerTag
    intent: Intent
    server: bool = False  # the organization's own server: a key holder naming no user

    def admits(self, lease: Lease) -> bool:
        if lease.owner.org != self.owner.org:
            return False
        own = lease.owner == self.owner
        if self.intent is Intent.LAND:
            return own and not lease.shared
        return own or self.server or (self.intent is Intent.READ and lease.shared)

    def to(self, intent: Intent) -> Access:
        return replace(self, intent=intent)


@dataclass(frozen=True)
class Placement:
    """Where a call's session is, as data, so that the backend decides in the one request:
    the NAMED session (opened, else made with that id: the stateful profile's), else the
    first of the CANDIDATES the access admits, else, when `new` allows, a new session of
    the access's owner (shared or read-only as said)."""

    access: Access
    candidates: tuple[str, ...] = ()
    named: str | None = None
    new: bool = True
    shared: bool = False
    read_only: bool = False


# -- leases and files ------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    session_id: str
    owner: OwnerTag
    # An upload made for everyone of the organization (an agent's files, a skill): runs
    # copy from it and never land in it.
    shared: bool
    # Its files are inputs a run may read but never hands back as its own (a skill's).
    read_only: bool
    leased_at: float  # epoch seconds
    ttl_seconds: int
    touched_at: float  # epoch seconds of the last call that addressed the session


@dataclass(frozen=True)
class FileInfo:
    path: str  # relative to the artifact directory
    size: int
    mtime_ns: int  # real modification time: LibreChat re-uploads what looks older than 23 h


@dataclass(frozen=True)
class Changes:
    """What a run did to its session's files, computed next to them from a listing before
    and one after: only what changed crosses the port, whatever the session holds."""

    created: tuple[FileInfo, ...] = ()
    modified: tuple[FileInfo, ...] = ()
    deleted: tuple[str, ...] = ()

    @classmethod
    def between(cls, before: Iterable[FileInfo], after: Iterable[FileInfo]) -> Changes:
        stamps = {f.path: (f.size, f.mtime_ns) for f in before}
        now = {f.path: f for f in after}
        created = tuple(f for p, f in sorted(now.items()) if p not in stamps)
        modified = tuple(f for p, f in sorted(now.items()) if p in stamps and stamps[p] != (f.size, f.mtime_ns))
        return cls(created, modified, tuple(sorted(p for p in stamps if p not in now)))

    def written(self) -> list[FileInfo]:
        """New or changed files, by path."""
        return sorted((*self.created, *self.modified), key=lambda f: f.path)

    def untouched(self, path: str) -> bool:
        return all(f.path != path for f in (*self.created, *self.modified)) and path not in self.deleted

    def then(self, later: Changes) -> Changes:
        """These changes followed by `later`'s, as one: what a programmatic workflow's
        rounds did together, from before its first."""
        existed, final = self._touched()
        later_existed, later_final = later._touched()
        existed = later_existed | existed  # the first look at a path says whether it was there
        final |= later_final
        created = tuple(f for p, f in sorted(final.items()) if f and not existed[p])
        modified = tuple(f for p, f in sorted(final.items()) if f and existed[p])
        deleted = tuple(sorted(p for p, f in final.items() if f is None and existed[p]))
        return Changes(created, modified, deleted)

    def _touched(self) -> tuple[dict[str, bool], dict[str, FileInfo | None]]:
        existed = {f.path: False for f in self.created} | {f.path: True for f in self.modified}
        existed |= dict.fromkeys(self.deleted, True)
        final: dict[str, FileInfo | None] = {f.path: f for f in (*self.created, *self.modified)}
        return existed, final | dict.fromkeys(self.deleted)


# -- runs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """One program to run, as the caller wrote it."""

    lang: str  # one of codeexec.languages.LANGUAGES
    code: str
    args: tuple[str, ...] = ()
    timeout: float = 30.0  # wall-clock seconds the caller allows; a backend may allow more
    # A handle `Sandboxes.cancel` stops this run by, from any process: derived by the
    # session layer from the caller and the client's request id, so nobody else has it.
    run_key: str | None = None


class Limit(Enum):
    TIME = "time"  # wall clock
    CANCELLED = "cancelled"  # not a limit: the client asked for the run to stop
    CPU = "cpu"
    MEMORY = "memory"
    PROCESSES = "processes"
    FILE_SIZE = "file size"
    OUTPUT = "output"


@dataclass(frozen=True)
class LimitHit:
    """A limit a run reached, as a fact; `codeexec.notes` says it in words."""

    limit: Limit
    amount: float  # the limit itself: seconds, bytes or a count
    stopped: bool = True  # the run was stopped by it (else it only could not go past it)
    stream: str = ""  # OUTPUT: which one, stdout or stderr
    still_running: bool = False  # TIME: the service stopped waiting, the program may not have


@dataclass(frozen=True)
class RunResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when the run was stopped
    hits: tuple[LimitHit, ...] = ()

    @property
    def stdout_cut(self) -> bool:
        return any(hit.limit is Limit.OUTPUT and hit.stream == "stdout" for hit in self.hits)


@dataclass(frozen=True)
class Input:
    """A file a run wants in its session, as the client named it: its id, its name (where
    it goes, and what the id is verified against: `ids.paths_for`), and the session its
    bytes live in (None: the run's own)."""

    file_id: str
    name: str | None = None
    origin: str | None = None

    def paths(self, origin_id: str) -> list[str]:
        return ids.paths_for(origin_id, self.file_id, self.name)

    def target(self, found: str) -> str:
        """Where the input goes in the run's session: what its name says (what the model
        is told), else where it is in its own."""
        return ids.upload_path(self.name) if self.name else found


@dataclass(frozen=True)
class Carried:
    """An input's bytes brought from where they are by the caller, when no backend can
    copy them where they are (each MicroVM is a session of its own): which of the run's
    inputs, the path it has there, and whether it comes from a read-only upload."""

    index: int
    found: str
    read_only: bool
    reader: BinaryIO


@dataclass(frozen=True)
class Placed:
    """Where an input is now in the run's session; no path when it could not be placed:
    not found (`refused` empty: its session ended, or is not the caller's), or refused."""

    path: str | None
    read_only: bool = False  # it came from a read-only upload: never handed back as an output
    refused: str = ""


@dataclass(frozen=True)
class Keep:
    """The service's own record of a programmatic workflow, written with the round that
    runs it, where no program can write it (beside the lease, outside /mnt/data; on
    AgentCore, whose only filesystem the program also writes, in the VM and bound by its
    digest to the signed continuation token). It replaces the record whose digest it names
    (None: there is none yet), else the round is a Conflict: two continuations of one round
    never both run. A round that keeps a record reports its changes since the workflow's
    first round: the backend keeps the listing of then beside the record."""

    key: str  # the workflow's id: a file id's shape
    record: bytes
    replaces: str | None = None


def record_digest(record: bytes) -> str:
    return hashlib.sha256(record).hexdigest()


@dataclass(frozen=True)
class Run:
    """One run as a call asks for it: where (placement), what to bring in (inputs, read
    with the placement's caller's READ access), what to run, and what of its own the
    service keeps with it."""

    program: Program
    placement: Placement
    inputs: tuple[Input, ...] = ()
    keep: Keep | None = None


@dataclass(frozen=True)
class Ran:
    session_id: str
    created: bool  # the run's session was made for it
    result: RunResult
    changes: Changes
    inputs: tuple[Placed, ...] = ()  # one per Input, in order


@dataclass(frozen=True)
class Opened:
    """One file for a read: its stat, and its bytes (the caller closes the reader), unless
    the backend sent the file itself (`Sandboxes.read_file`'s `send_to`)."""

    info: FileInfo
    reader: BinaryIO | None = None


@dataclass(frozen=True)
class SendTo:
    """Where a file of at least `from_bytes` goes instead of into the answer: a presigned
    URL that carries its own authorization (the sandbox holds no credentials)."""

    url: str
    from_bytes: int


# -- the fine steps --------------------------------------------------------------------------


class Sandbox(Protocol):
    """One leased sandbox, as the default coarse operations use it (`Sandboxes.create`,
    `Sandboxes.open`). Only backends that keep the defaults implement it."""

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

    def remove_file(self, path: str) -> None: ...

    def exclusive(self) -> AbstractContextManager[None]:
        """Hold off every other holder of this sandbox, across processes, until exit.
        Every change to the session happens under it, so a reply names exactly the files
        its own call changed."""

    def run(self, program: Program) -> RunResult:
        """Run the program with the artifact directory as its working directory. Its
        source lives outside that directory, so it never shows up as an output file."""

    def read_record(self, key: str) -> bytes | None:
        """The service's own record under `key` (see Keep), from where no program writes."""

    def write_record(self, key: str, record: bytes) -> None: ...


# A run slot of the service's admission, entered once a run holds its session.
Slot = Callable[[], AbstractContextManager[None]]

# The largest input copied from another session: bounded by the session's disk limit alone.
_ANY_SIZE = 1 << 62


class Sandboxes:
    """A sandbox backend: its coarse operations, their defaults composed of fine steps,
    and the reaper's operations. Backends set `languages` and `named_sessions`."""

    #: the `lang` values this backend can run
    languages: frozenset[str] = frozenset()
    #: whether a Placement may name a session of the caller's choosing (the stateful
    #: profile derives one per conversation); a backend whose ids are its own says no
    named_sessions: bool = False

    # -- coarse operations: one request each on a remote backend --------------------------

    def execute(self, run: Run, carried: Iterable[Carried] = (), slot: Slot = contextlib.nullcontext) -> Ran:
        """Place the session, take its hold, then the run `slot` (a call waiting for its
        session holds none), bring the inputs in, run, and report the result with what
        changed; inputs that cannot be placed are reported, not fatal. Inputs `carried`
        in are taken first, in order, each read to its end. A remote backend takes the
        slot around its one request."""
        if run.program.lang not in self.languages:
            raise UnsupportedLanguage(f"lang '{run.program.lang}' is not available on this backend")
        with self._held(run.placement, slot) as (sandbox, created):
            placed = self._place_inputs(sandbox, run, carried)
            before = self._before(sandbox, run.keep)
            result = sandbox.run(run.program)
            changes = Changes.between(before, sandbox.list_files())
        return Ran(sandbox.id, created, result, changes, tuple(placed))

    def write_files(self, placement: Placement, files: Iterable[tuple[str, BinaryIO]], limit: int) -> str:
        """Write every file or none, each bounded by `limit` bytes, consuming `files`
        lazily (each reader to its end before the next pair); returns the session. A new
        session made for a failed write is ended at once."""
        with self._held(placement) as (sandbox, _):
            sandbox.write_files(files, limit)
        return sandbox.id

    def list_files(self, session_id: str, access: Access) -> list[FileInfo]:
        with self.open(session_id, access.admits) as sandbox:
            return sorted(sandbox.list_files(), key=lambda f: f.path)

    def read_file(self, session_id: str, access: Access, file_id: str, send_to: SendTo | None = None) -> Opened:
        """A file by the id a client holds (a derived id, or a raw path); the reader's
        bytes are the file's as they were at one moment. A backend that can send a large
        file from where it is does so when `send_to` asks; the others answer its bytes."""
        with self.open(session_id, access.admits) as sandbox:
            reader, info = sandbox.open_file(_resolve(sandbox, file_id).path)
        return Opened(info, reader)

    def stat_file(self, session_id: str, access: Access, file_id: str) -> FileInfo:
        with self.open(session_id, access.admits) as sandbox:
            return _resolve(sandbox, file_id)

    def remove_file(self, session_id: str, access: Access, file_id: str) -> str:
        """Remove one file; returns its path."""
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
        """The service's record under `key` (see Keep); Conflict when there is none."""
        with self.open(session_id, access.admits) as sandbox:
            record = sandbox.read_record(key)
        if record is None:
            raise Conflict("that program is not in its session (the session ended, or it never ran)")
        return record

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Whether the backend can serve calls now, and what /health says of it besides."""
        return True, {}

    # -- the reaper's operations, and ending --------------------------------------------

    def end(self, session_id: str) -> None:
        """End a sandbox now (for one-shot callers); ending an ended one is a no-op."""
        raise NotImplementedError

    def cancel(self, run_key: str) -> None:
        """Stop the run whose Program carries `run_key`, from any process, now or as soon
        as it starts (a cancel may arrive before the run does); a no-op when none does."""
        raise NotImplementedError

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        """For the reaper: end the sandbox only if no call is using it and `still_due`
        holds for its lease as it is now. Never waits for a busy sandbox. Returns whether
        it ended."""
        raise NotImplementedError

    def leases(self) -> Iterator[Lease]:
        """Every lease this backend holds, for the reaper."""
        raise NotImplementedError

    # -- the fine steps the defaults are made of ----------------------------------------

    def create(
        self, owner: OwnerTag, shared: bool = False, read_only: bool = False, session_id: str | None = None
    ) -> AbstractContextManager[Sandbox]:
        """Lease a new sandbox with the backend's TTL, and hold it open. With a
        `session_id` (only where `named_sessions`), Conflict when that id is taken."""
        raise NotImplementedError

    def open(self, session_id: str, admit: Callable[[Lease], bool]) -> AbstractContextManager[Sandbox]:
        """Open a live sandbox whose lease `admit`s the caller, and touch it; else
        SessionNotFound (an id of the wrong shape never reaches a filesystem or an API).
        While the context is open the reaper does not end the sandbox."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _held(self, placement: Placement, slot: Slot = contextlib.nullcontext) -> Iterator[tuple[Sandbox, bool]]:
        """The sandbox a placement names, open and held, with `slot` taken, and whether it
        was made for this call. One made for a call that fails is ended at once: nobody
        learnt its id, and it would hold nothing."""
        with contextlib.ExitStack() as stack:
            sandbox, created = self._enter(stack, placement)
            try:
                stack.enter_context(sandbox.exclusive())
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
        reader = run.placement.access.to(Intent.READ)
        for origin_id, indexes in by_origin.items():
            try:
                with contextlib.ExitStack() as stack:
                    own = origin_id == sandbox.id
                    origin = sandbox if own else stack.enter_context(self.open(origin_id, reader.admits))
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
    path, else a derived id matched against the session's own listing."""
    with contextlib.suppress(BadRequest, FileNotFound):
        return sandbox.stat(ids.file_path(file_id))
    if ids.is_file_id(file_id):
        found = next((f for f in sandbox.list_files() if ids.file_id(sandbox.id, f.path) == file_id), None)
        if found is not None:
            return found
    raise FileNotFound()


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

