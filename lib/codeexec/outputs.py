"""What a run changed: the files it wrote, and the inputs it left as they were.

Pure functions over two listings of the session, one taken just before the run and one
just after, both under the session's exclusive hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from .sandbox.port import FileInfo
from .wire import FileRef, OutputFile


@dataclass(frozen=True)
class Changes:
    before: list[FileInfo]
    after: list[FileInfo]

    def written(self) -> list[FileInfo]:
        """New or changed files (by size or modification time), by path."""
        stamps = {f.path: _stamp(f) for f in self.before}
        return sorted((f for f in self.after if stamps.get(f.path) != _stamp(f)), key=lambda f: f.path)

    def unchanged(self) -> set[str]:
        stamps = {f.path: _stamp(f) for f in self.before}
        return {f.path for f in self.after if stamps.get(f.path) == _stamp(f)}


def written(session_id: str, changes: Changes) -> list[OutputFile]:
    return [_output(session_id, f) for f in changes.written()]


def inherited(placed: list[tuple[FileRef, str]], changes: Changes, session_id: str) -> list[OutputFile]:
    """The inputs the run left as they were, echoed back as the client's own refs, so it
    can tell them from what the run made (and skip storing them again)."""
    unchanged = changes.unchanged()
    return [_echo(ref, session_id) for ref, path in placed if path in unchanged]


def _stamp(f: FileInfo) -> tuple[int, int]:
    return (f.size, f.mtime_ns)


def _output(session_id: str, f: FileInfo) -> OutputFile:
    name = f.path.rsplit("/", 1)[-1]
    return OutputFile(id=f.path, name=name, session_id=session_id, storage_session_id=session_id)


def _echo(ref: FileRef, session_id: str) -> OutputFile:
    home = ref.home_session or session_id
    return OutputFile(
        id=ref.id,
        name=ref.name or ref.id,
        session_id=home,
        storage_session_id=home,
        resource_id=ref.resource_id,
        kind=ref.kind,
        version=ref.version,
        inherited=True,
    )
