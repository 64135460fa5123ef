"""The interpreter, and it is composition rather than implementation: lease a sandbox,
put the program in it, run it, read back what changed.

It holds no state. The organization is a parameter of every call, passed down from auth
and never read from a request body: a caller that could name the tenant could run in
another one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import ids
from .languages import LANGUAGES
from .sandbox.port import FileInfo, FileNotFound, Sandbox, Sandboxes, SessionNotFound, TooLarge, exclusive
from .wire import ExecReply, ExecRequest, FileRef, OutputFile


class UnknownLanguage(ValueError):
    pass


def run(
    sandboxes: Sandboxes, org: str, request: ExecRequest, timeout: float, max_files: int | None = None
) -> ExecReply:
    language = LANGUAGES.get(request.lang)
    if language is None or request.lang not in sandboxes.languages:
        raise UnknownLanguage(request.lang)
    with _lease(sandboxes, org, request) as sandbox:
        notes, placed = _copy_inputs(sandboxes, org, sandbox, request.files)
        # One run at a time per session, from the listing before to the listing after:
        # otherwise one reply could claim a file another run wrote.
        with exclusive(sandbox):
            before = _snapshot(sandbox.list_files())
            source = language.source_name(request.code)
            argv = language.argv(source, request.args)
            result = sandbox.run(argv, {source: request.code.encode()}, language.timeout(timeout))
            after = sandbox.list_files()
    written = [f for f in after if before.get(f.path) != _stamp(f)]
    files = [_output(sandbox.id, f) for f in sorted(written, key=lambda f: f.path)]
    if request.lists_inherited:
        files += _inherited(placed, before, after, sandbox.id)
    limit_notes = list(result.notes)
    if max_files is not None and len(files) > max_files:
        limit_notes.append(f"Listed {max_files} of {len(files)} files; all of them are in the session's file list.")
        files = files[:max_files]
    stderr = _with_notes(notes, result.stderr, limit_notes)
    return ExecReply(session_id=sandbox.id, stdout=result.stdout, stderr=stderr, files=files)


def _with_notes(before: list[str], stderr: str, after: list[str]) -> str:
    """The program's stderr between the service's notes: what happened to the inputs
    first, the limits the run hit last, each on a line of its own."""
    text = "".join(f"{note}\n" for note in before) + stderr
    if after:
        text += ("\n" if text and not text.endswith("\n") else "") + "\n".join(after) + "\n"
    return text


def end(sandboxes: Sandboxes, session_id: str) -> None:
    """End a session now instead of leaving it to the reaper. Nothing on the API calls
    this (a session outlives its run: the reply hands back an id the next calls use),
    but a one-shot caller such as a function invocation is over the moment it answers."""
    sandboxes.end(session_id)


@contextlib.contextmanager
def _lease(sandboxes: Sandboxes, org: str, request: ExecRequest) -> Iterator[Sandbox]:
    """The session the run asks for, else the one its files live in (G1 LibreChat sends
    no top-level session_id), when alive and the caller's; else a new one."""
    candidates = [request.session_id, *(ref.home_session for ref in request.files)]
    with contextlib.ExitStack() as stack:
        yield _enter_first_alive(stack, sandboxes, org, candidates)


def _enter_first_alive(
    stack: contextlib.ExitStack, sandboxes: Sandboxes, org: str, candidates: list[str | None]
) -> Sandbox:
    for session_id in dict.fromkeys(c for c in candidates if c):
        if sandboxes.is_session_id(session_id):
            with contextlib.suppress(SessionNotFound):
                return stack.enter_context(sandboxes.open(org, session_id))
    return stack.enter_context(sandboxes.create(org))


def _copy_inputs(
    sandboxes: Sandboxes, org: str, sandbox: Sandbox, refs: list[FileRef]
) -> tuple[list[str], list[tuple[FileRef, str]]]:
    """Bring every input into the run's session: the notes for the reply, and where each
    input now is. An input that cannot be found is named in the reply, never silently
    skipped: a missing CSV must not look like an empty one."""
    notes: list[str] = []
    placed: list[tuple[FileRef, str]] = []
    for ref in refs:
        try:
            placed.append((ref, _copy_one(sandboxes, org, sandbox, ref)))
        except (SessionNotFound, FileNotFound, ids.BadFileId):
            name = ref.name or ref.id
            notes.append(f'File "{name}" is not available: its session has ended or is not yours.')
        except TooLarge as exc:
            notes.append(f'File "{ref.name or ref.id}" was not copied: {exc}.')
    return notes, placed


def _copy_one(sandboxes: Sandboxes, org: str, sandbox: Sandbox, ref: FileRef) -> str:
    """Place one input in the run's session; returns the path it has there."""
    source_path = ids.file_path(ref.id)
    target_path = ids.upload_name(ref.name) if ref.name else source_path
    home = ref.home_session
    if home is None or home == sandbox.id:
        # Already in place. Some clients rebuild the id from a listing and strip its
        # extension (3.1.x: id "out" for "out.txt"), so the name counts as much as the id.
        with contextlib.suppress(FileNotFound):
            sandbox.open_file(target_path)[0].close()
            return target_path
        _copy_file(sandbox, source_path, sandbox, target_path)
        return target_path
    if not sandboxes.is_session_id(home):
        raise SessionNotFound(home)
    with sandboxes.open(org, home) as source:
        _copy_file(source, source_path, sandbox, target_path)
    return target_path


def _copy_file(source: Sandbox, source_path: str, target: Sandbox, target_path: str) -> None:
    reader, _ = source.open_file(source_path)
    with reader:
        target.write_file(target_path, reader)


def _stamp(f: FileInfo) -> tuple[int, int]:
    return (f.size, f.mtime_ns)


def _snapshot(found: list[FileInfo]) -> dict[str, tuple[int, int]]:
    return {f.path: _stamp(f) for f in found}


def _output(session_id: str, f: FileInfo) -> OutputFile:
    name = f.path.rsplit("/", 1)[-1]
    return OutputFile(id=f.path, name=name, session_id=session_id, storage_session_id=session_id)


def _inherited(
    placed: list[tuple[FileRef, str]], before: dict[str, tuple[int, int]], after: list[FileInfo], session_id: str
) -> list[OutputFile]:
    """The inputs the run left as they were, echoed back as the client's own refs, so it
    can tell them from what the run made (and skip storing them again)."""
    unchanged = {f.path for f in after if before.get(f.path) == _stamp(f)}
    return [_echo(ref, session_id) for ref, path in placed if path in unchanged]


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
