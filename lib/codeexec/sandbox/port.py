"""The sandbox port: the one small interface the interpreter knows about where code runs.

A session IS a sandbox. Its id is the session id, its files live under the artifact
directory (`/mnt/data` inside it), and what it owns (organization, lease) lives with the
sandbox itself. A backend keeps no table of its own beside the sandboxes.

Every path here is a file id: a POSIX path relative to the artifact directory, already
checked by `codeexec.ids.file_path` (no `..`, not absolute, no NUL). Backends still refuse
to follow a symlink out of the directory, because a program can make one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import BinaryIO, Protocol, runtime_checkable


class SessionNotFound(Exception):
    """The session does not exist, has ended, or belongs to another organization.

    The three are one error on purpose: a caller must not learn that another tenant's
    session exists."""


class FileNotFound(Exception):
    """No such file in the session (or the id leads out of the artifact directory)."""


class BackendUnavailable(Exception):
    """The sandbox backend cannot serve now (503). `retry_after` is a hint in seconds."""

    def __init__(self, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TooLarge(Exception):
    """An upload or a file is over its limit (413)."""


@dataclass(frozen=True)
class FileInfo:
    path: str  # the file id: relative to the artifact directory
    size: int
    mtime_ns: int  # real modification time: LibreChat re-uploads what looks older than 23 h


@dataclass(frozen=True)
class RunResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when the run was killed (limit hit)
    # Plain sentences for the caller, e.g. "Stopped: the run exceeded its 30 s time limit."
    # The interpreter appends them to stderr.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Lease:
    session_id: str
    org: str
    leased_at: float  # epoch seconds
    ttl_seconds: int
    touched_at: float  # epoch seconds of the last call that addressed the session


class Sandbox(Protocol):
    """One leased sandbox. Obtained from `Sandboxes.create` or `Sandboxes.open`."""

    @property
    def id(self) -> str: ...

    def write_file(self, path: str, data: BinaryIO, limit: int | None = None) -> FileInfo:
        """Write atomically: a failed or oversized write (TooLarge) leaves nothing behind."""

    def open_file(self, path: str) -> tuple[BinaryIO, FileInfo]:
        """Open for reading (the caller closes it), refusing anything outside the directory."""

    def list_files(self) -> list[FileInfo]:
        """Every regular file under the artifact directory, recursively."""

    def remove_file(self, path: str) -> None: ...

    def run(
        self,
        argv: Sequence[str],
        program: Mapping[str, bytes],
        timeout: float,
    ) -> RunResult:
        """Run argv with `/mnt/data` as the working directory.

        `program` maps file names to contents placed in `/code`, outside the artifact
        directory, so the source never shows up as an output file."""


@runtime_checkable
class Exclusive(Protocol):
    """What a sandbox offers when it can hold off other runs in it, across processes.

    The interpreter holds it around snapshot, run and listing, so that two runs in one
    session at once each report their own files. Optional: a backend without it leaves
    concurrent runs in one session to the caller."""

    def exclusive(self) -> AbstractContextManager[None]: ...


def exclusive(sandbox: Sandbox) -> AbstractContextManager[None]:
    """The sandbox's exclusive hold where it has one, else nothing to hold."""
    return sandbox.exclusive() if isinstance(sandbox, Exclusive) else contextlib.nullcontext()


class Sandboxes(Protocol):
    """A sandbox backend."""

    #: the `lang` values this backend can run (a subset of codeexec.languages.LANGUAGES)
    languages: frozenset[str]

    def is_session_id(self, session_id: str) -> bool:
        """Whether the string is shaped like one of this backend's ids. Checked before
        the id reaches a filesystem or a cloud API."""

    def create(self, org: str) -> AbstractContextManager[Sandbox]:
        """Lease a new sandbox for `org` with the configured TTL."""

    def open(self, org: str, session_id: str) -> AbstractContextManager[Sandbox]:
        """Open a live sandbox of `org` and touch it; SessionNotFound otherwise.

        While the context is open the reaper does not end the sandbox."""

    def end(self, session_id: str) -> None:
        """End a sandbox now (for one-shot callers); ending an ended one is a no-op."""

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        """For the reaper: end the sandbox only if no call is using it and `still_due`
        holds for its lease as it is now. Never waits for a busy sandbox. Returns whether
        it ended."""

    def leases(self) -> Iterator[Lease]:
        """Every lease this backend holds, for the reaper."""
