"""The sandbox port: the one small interface the service knows about where code runs.

A session IS a sandbox. Its id is the session id, its files live under the artifact
directory (`/mnt/data` inside it), and what it owns (its owner, its lease) lives with the
sandbox itself. A backend keeps no table of its own beside the sandboxes.

The port is COARSE, on httpx's model (a transport's one `handle_request`): every backend
but `local` is across a network, so one call of the service is one operation here, and a
remote backend answers each operation in one request. `Sandboxes` is the abstract
backend: its coarse operations, the reaper's, and nothing else, so a backend inherits
nothing it cannot do. Leases, uses and holds are taken and released inside each
operation, by the backend, so "one owner of every change" stands and the reaper never
ends a session an operation is using. `local` composes its operations from fine steps (a
sandbox opened or created, its files, its exclusive hold, its run: `local/engine.py`),
which the runner serves over HTTP; the clauses every backend keeps are in
docs/backends.md ("What a new backend must keep").

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
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, BinaryIO

from .. import ids
from ..errors import UnsupportedLanguage
from ..languages import canonical

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
class Quota:
    """How much the access's owner may hold in all, on every host together: its user's
    limit and its organization's (0: none), and what each already holds on OTHER hosts (a
    fleet's caller adds them up; one host has no others). The host holding the session adds
    what its own sessions hold, refuses a call past either limit, and holds the session's
    writes to what is left (a run that writes past it finds its disk full)."""

    user_bytes: int = 0
    org_bytes: int = 0
    user_elsewhere: int = 0
    org_elsewhere: int = 0


@dataclass(frozen=True)
class Placement:
    """Where a call's session is, as data, so that the backend decides in the one request:
    the NAMED session (opened, else made with that id: the stateful profile's), else the
    first of the CANDIDATES the access admits, else, when `new` allows, a new session of
    the access's owner (shared or read-only as said). What is written there is held to the
    owner's `quota`, when it has one."""

    access: Access
    candidates: tuple[str, ...] = ()
    named: str | None = None
    new: bool = True
    shared: bool = False
    read_only: bool = False
    quota: Quota | None = None


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
    # How it was launched, for the metrics: forked from a warm server, or cold; None where
    # the backend does not say (AgentCore).
    warm: bool | None = None
    seconds: float | None = None  # how long the program ran, where the backend measured it

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

    @property
    def reader(self) -> Access:
        """The access its inputs are read with, wherever they live: a shared session of the
        organization's (an agent's files, a skill) admits it, as well as the caller's own."""
        return self.placement.access.to(Intent.READ)


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


# A run slot of the service's admission, entered once a run holds its session.
RunSlot = Callable[[], AbstractContextManager[None]]
# Runs one session takes on at once (and uploads, counted apart): one holds it, the others
# wait their turn. A backend counts runs by the session each lands in (the one a run names
# may be gone, or not the caller's, and it lands in another); past that a run is
# RateLimited at once.
SESSION_CALLS = 3


@dataclass(frozen=True)
class PoolLoad:
    """One kind of warm server's pool: runs made ahead ready now, and the runs that wanted
    that kind, served warm (hits) or launched cold (misses), since the process started."""

    ready: int
    hits: int
    misses: int


@dataclass(frozen=True)
class HostLoad:
    """What one host of sandboxes holds now, as it last said, for the metrics and the
    console: the `local` backend's own host, or each runner of a fleet."""

    name: str  # "local", or a runner's index
    state: str  # up, down, or refused (a runner claiming another index)
    runs: int = 0  # under way
    sessions: int = 0
    bytes_used: int = 0  # of its sessions' disk
    bytes_limit: int = 0  # that disk's size
    pools: Mapping[str, PoolLoad] = field(default_factory=dict)
    # A fleet's runner as the service sees it: the calls to it that were answered, those
    # that failed (no connection, cut, silent), and how long after it last heard from it it
    # noticed the runner down, the last time it did. None where no wire is between them.
    calls_answered: int | None = None
    calls_failed: int = 0
    noticed_down_seconds: float | None = None


@dataclass(frozen=True)
class HostReport:
    """What the operator's console shows of one host: its load; who holds most on it (JSON:
    the local backend's usage.py `top`); and, a runner's, its last hour (JSON: telemetry's
    history.py). None where the host did not answer, or, for the last hour, where it is the
    asking process's own."""

    load: HostLoad
    usage: Mapping[str, Any] | None = None
    history: Mapping[str, Any] | None = None


class Sandboxes(ABC):
    """A sandbox backend: the coarse operations a route needs, one request each on a
    remote backend, and the reaper's. Backends say what they can do in the attributes
    below (docs/backends.md, clause 11)."""

    #: the `lang` values this backend can run
    languages: frozenset[str] = frozenset()
    #: whether a Placement may name a session of the caller's choosing (the stateful
    #: profile derives one per conversation); a backend whose ids are its own says no
    named_sessions: bool = False
    #: whether a program finds its session's files at /mnt/data, its working directory
    #: (where LibreChat tells the model they are); `memory` runs it in a directory of its own
    mnt_data: bool = True
    #: whether `cancel` reaches a run; where a run key names no sandbox it is a no-op
    cancels: bool = True

    def check_language(self, lang: str) -> None:
        """UnsupportedLanguage unless this backend runs `lang`, under any of its names:
        before anything is placed."""
        if canonical(lang) not in self.languages:
            available = ", ".join(sorted(self.languages))
            raise UnsupportedLanguage(f"lang '{lang}' is not available here; available: {available}")

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Whether the backend can serve calls now, and what /health says of it besides."""
        return True, {}

    def close(self) -> None:
        """Let go of what the backend holds besides its sandboxes (warm servers, connections),
        as the service stops; a backend that holds nothing has nothing to do."""
        return None

    def hosts(self) -> list[HostLoad]:
        """What each host of this backend's sandboxes holds now, from what the backend knows
        already (a scrape never walks a disk); a backend of cloud sandboxes has none to tell."""
        return []

    def reports(self) -> list[HostReport]:
        """What the console shows of each host: one request to each of a fleet's runners,
        asked only while someone has the console open."""
        return [HostReport(load) for load in self.hosts()]

    # -- coarse operations ------------------------------------------------------------------

    @abstractmethod
    def execute(self, run: Run, carried: Iterable[Carried] = (), slot: RunSlot = contextlib.nullcontext) -> Ran:
        """Place the session, take its hold (SESSION_CALLS runs at most holding or waiting),
        then the run `slot` (a call waiting for its session holds none), bring the inputs
        in, run, and report the result with what changed; inputs that cannot be placed are
        reported, not fatal. Inputs `carried` in are taken first, in order, each read to
        its end. A remote backend takes the slot around its one request."""

    @abstractmethod
    def write_files(self, placement: Placement, files: Iterable[tuple[str, BinaryIO]], limit: int) -> str:
        """Write every file or none, each bounded by `limit` bytes, consuming `files`
        lazily (each reader to its end before the next pair); returns the session. A new
        session made for a failed write is ended at once."""

    @abstractmethod
    def list_files(self, session_id: str, access: Access) -> list[FileInfo]:
        """Every regular file of the session, by path."""

    @abstractmethod
    def read_file(self, session_id: str, access: Access, file_id: str, send_to: SendTo | None = None) -> Opened:
        """A file by the id a client holds (a derived id, or a raw path); the reader's
        bytes are the file's as they were at one moment. A backend that can send a large
        file from where it is does so when `send_to` asks; the others answer its bytes."""

    @abstractmethod
    def stat_file(self, session_id: str, access: Access, file_id: str) -> FileInfo: ...

    @abstractmethod
    def remove_file(self, session_id: str, access: Access, file_id: str) -> str:
        """Remove one file; returns its path."""

    @abstractmethod
    def read_record(self, session_id: str, access: Access, key: str) -> bytes:
        """The service's record under `key` (see Keep); Conflict when there is none."""

    # -- the reaper's operations, and ending --------------------------------------------

    @abstractmethod
    def lease(self, session_id: str) -> Lease:
        """The session's lease as it is, touching nothing (not its idle clock, not a
        sleeping VM); SessionNotFound when there is none."""

    @abstractmethod
    def leases(self) -> Iterator[Lease]:
        """Every lease this backend holds, for the reaper."""

    @abstractmethod
    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        """For the reaper: end the sandbox only if no call is using it and `still_due`
        holds for its lease as it is now. Never waits for a busy sandbox. Returns whether
        it ended."""

    @abstractmethod
    def end(self, session_id: str) -> None:
        """End a sandbox now (for one-shot callers); ending an ended one is a no-op."""

    @abstractmethod
    def cancel(self, run_key: str) -> None:
        """Stop the run whose Program carries `run_key`, from any process, now or as soon
        as it starts (a cancel may arrive before the run does); a no-op when none does, or
        where a run key names no sandbox."""
