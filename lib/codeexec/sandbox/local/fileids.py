"""A session's file ids, found without a listing.

A file id is derived from its session and its path (ids.file_id), so nothing maps it back:
a bare id (a download's, a removal's: no name comes with it) was found by listing the
session and deriving every path's id. A large session's listing costs a core for half a
second, and a made-up id cost a whole one before its 404. So each session keeps, beside
data/, the ids of its files: `ids/<file id>`, a link holding the file's path (read, never
followed), and a mark of when that record was last whole (`ids/.whole`, by its mtime;
`ids/.stale` while a change may have left it short).

- A file the service writes (an upload, an input copied in) is recorded as it is written.
- A run stales the mark before its program starts. A listing (every run lists its session
  after, for its changes) records the files changed since the mark (their ctime, which
  only the kernel sets, and which a rename sets too), and, taken while no change is under
  way, marks the record whole as of its start.
- An id without a link names no file of the session while the record is whole. When it
  is not (a crash cut a run short, a session older than the record), only a listing can
  tell: ListingNeeded, which the service takes in the caller's listing share.

A link may outlive its file (a run deleted it): the path found is looked at like any other.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ... import ids
from ...errors import ListingNeeded

_WHOLE, _STALE = ".whole", ".stale"
# A ctime is read from the kernel's coarse clock, which may lag the time a listing starts
# by a tick: what changed within this of the mark is recorded again (it costs nothing).
_SLACK_NS = 1_000_000_000


class FileIds:
    def __init__(self, session: Path) -> None:
        self._session_id = session.name
        self._dir = session / "ids"

    def make(self) -> None:
        """A new session's record: empty, and whole."""
        self._dir.mkdir(mode=0o700)
        (self._dir / _WHOLE).touch(mode=0o600)

    def find(self, file_id: str) -> str | None:
        """The path recorded for a derived id; None when the id names no file of the
        session; ListingNeeded when only a listing can tell."""
        try:
            return os.readlink(self._dir / file_id)
        except FileNotFoundError:
            if self.whole():
                return None
            raise ListingNeeded() from None

    def whole(self) -> bool:
        return (self._dir / _WHOLE).exists()

    def stale(self) -> bool:
        """Before a change the record may miss; whether it was whole."""
        try:
            os.rename(self._dir / _WHOLE, self._dir / _STALE)
        except FileNotFoundError:
            return False
        except OSError:  # no room even for that (a full session): when it was whole is forgotten
            os.unlink(self._dir / _WHOLE)
        return True

    @contextlib.contextmanager
    def writing(self) -> Iterator[Callable[[Iterable[str]], None]]:
        """Files the service writes, each recorded as it is written (by the callable
        yielded): the record is as whole after as it was before. One cut short, or with
        no room left for the record, leaves it stale."""
        was_whole = self.stale()
        short: list[bool] = []

        def record(paths: Iterable[str]) -> None:
            if not self._record(paths):
                short.append(True)

        yield record
        if was_whole and not short:
            with contextlib.suppress(OSError):
                os.rename(self._dir / _STALE, self._dir / _WHOLE)

    def learn(self, changed: Iterable[tuple[str, int]], started_ns: int, settled: bool) -> None:
        """What a listing that started at `started_ns` found, each path with its ctime:
        those changed since the mark are recorded, and, `settled` (no change was under way
        while it listed), the record is whole as of the listing's start."""
        if self.whole():  # another listing made it whole meanwhile
            return
        try:
            since = os.stat(self._dir / _STALE).st_mtime_ns - _SLACK_NS
        except FileNotFoundError:  # never whole: a session older than the record
            with contextlib.suppress(OSError):  # no room: it stays without one
                self._dir.mkdir(mode=0o700, exist_ok=True)
            since = 0
        recorded = self._record(path for path, ctime_ns in changed if ctime_ns >= since)
        if settled and recorded:
            with contextlib.suppress(OSError):  # no room: it stays stale
                fd = os.open(self._dir / _WHOLE, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    os.utime(fd, ns=(started_ns, started_ns))
                finally:
                    os.close(fd)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._dir / _STALE)

    def _record(self, paths: Iterable[str]) -> bool:
        """Links for these paths; whether every one is there."""
        for path in paths:
            try:
                os.symlink(path, self._dir / ids.file_id(self._session_id, path))
            except FileExistsError:
                continue
            except OSError:  # no room (a full session), or no record (older than it): it stays short
                return False
        return True
