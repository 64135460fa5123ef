"""The sandbox port: the one small interface the service knows about where code runs.

A session IS a sandbox. Its id is the session id, its files live under the artifact
directory (`/mnt/data` inside it), and what it owns (its owner, its lease) lives with the
sandbox itself. A backend keeps no table of its own beside the sandboxes.

What crosses the port is the library's own types: a `Program` to run (never a command
line: each backend decides how to run one), `FileInfo`s with real sizes and times, a
`RunResult` that reports the limits a run hit as facts (`LimitHit`), which
`codeexec.notes` turns into sentences. Failures cross it as `codeexec.errors` types,
mapped at each backend's own boundary.

Every path here is a POSIX path relative to the artifact directory, already checked by
`codeexec.ids.file_path` (no `..`, not absolute, no NUL). Backends still refuse to follow
a symlink out of the directory, because a program can make one.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import Enum
from typing import BinaryIO, Protocol, runtime_checkable


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


class Sandbox(Protocol):
    """One leased sandbox, obtained from `Sandboxes.create` or `Sandboxes.open`."""

    id: str  # the session id
    lease: Lease

    def write_file(self, path: str, data: BinaryIO, limit: int) -> None:
        """Write atomically, replacing what is there: a failed or oversized write
        (TooLarge past `limit` bytes) leaves nothing behind."""

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

        The session layer holds it around every change to the session (input copies, the
        run and the listings around it, uploads, removals), so a reply names exactly the
        files its own call changed. Required: a backend that could not lock would have to
        say so here, in a documented no-op."""

    def run(self, program: Program) -> RunResult:
        """Run the program with the artifact directory as its working directory. Its
        source lives outside that directory, so it never shows up as an output file."""


@runtime_checkable
class SendsFiles(Protocol):
    """What a sandbox may offer beside the port (optional): sending one of its files
    itself, from where it runs, so that a large download never passes through the
    service. Without it, the service reads the file and sends it on."""

    def send_file(self, path: str, url: str) -> None:
        """PUT the file's bytes to `url`, a presigned URL that carries its own
        authorization (the sandbox holds no credentials); FileNotFound as for open_file."""


class Sandboxes(Protocol):
    """A sandbox backend."""

    #: the `lang` values this backend can run
    languages: frozenset[str]
    #: whether `create` takes a session id of the caller's choosing (the stateful
    #: profile derives one per conversation); a backend whose ids are its own says no
    named_sessions: bool

    def create(
        self, owner: OwnerTag, shared: bool = False, read_only: bool = False, session_id: str | None = None
    ) -> AbstractContextManager[Sandbox]:
        """Lease a new sandbox with the backend's TTL, and hold it open. With a
        `session_id` (only where `named_sessions`), Conflict when that id is taken."""

    def open(self, session_id: str, admit: Callable[[Lease], bool]) -> AbstractContextManager[Sandbox]:
        """Open a live sandbox whose lease `admit`s the caller, and touch it; else
        SessionNotFound (an id of the wrong shape never reaches a filesystem or an API).

        While the context is open the reaper does not end the sandbox."""

    def end(self, session_id: str) -> None:
        """End a sandbox now (for one-shot callers); ending an ended one is a no-op."""

    def cancel(self, run_key: str) -> None:
        """Stop the run whose Program carries `run_key`, from any process, now or as soon
        as it starts (a cancel may arrive before the run does); a no-op when none does."""

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        """For the reaper: end the sandbox only if no call is using it and `still_due`
        holds for its lease as it is now. Never waits for a busy sandbox. Returns whether
        it ended."""

    def leases(self) -> Iterator[Lease]:
        """Every lease this backend holds, for the reaper."""
