"""The `agentcore` backend: a sandbox is an AWS Bedrock AgentCore Code Interpreter session,
a managed microVM with its own id, timeout and files.

Where a session's facts live, and why there:

- Its organization and lease (TTL) are in the session's NAME, set once by
  StartCodeInterpreterSession. User code runs in the same microVM as any file we could
  keep there and could rewrite it, handing its session to another tenant; nothing inside
  the VM can rename a session. The name also comes back with every item of
  ListCodeInterpreterSessions, so the reaper reads every lease from the listing pages.
  Opening a session costs one GetCodeInterpreterSession, which is also the liveness check.
- "Leased at" is the session's createdAt, and AgentCore itself ends the session when its
  TTL (sessionTimeoutSeconds, at most 8 hours) runs out.
- "Last touched" is the mtime of a marker file in the VM (`.codeexec/touched`). A touch
  rides along with the first command or file write of a call, so it costs no round trip
  of its own except on calls that only read or remove. A program can touch it too, but
  that only keeps its own session alive, never past its TTL.

The artifact directory is the session's working directory: writeFiles and readFiles take
paths relative to it, and code runs in it. Its hidden top-level entries are the
environment's (shell profiles, caches) and ours (`.codeexec/`): they are never listed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import json
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath
from typing import Any, BinaryIO

from .. import ids
from ..languages import LANGUAGES
from ..settings import Settings
from .agentcore_api import AgentCoreApi, TimedOut, ToolResult
from .port import BackendUnavailable, FileInfo, FileNotFound, Lease, RunResult, SessionNotFound, TooLarge

MAX_SESSION_SECONDS = 28_800  # AgentCore's ceiling for sessionTimeoutSeconds
_SESSION_ID_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_NAME_PREFIX = "codeexec-"
_MARKER = ".codeexec/touched"
_TOUCH = "mkdir -p .codeexec && touch .codeexec/touched"
# Every regular file, recursively, as "size mtime path\0"; symlinks are neither followed
# nor listed, and hidden top-level entries are skipped.
_LIST = r"find . -path './.*' -prune -o -type f -printf '%s %T@ %P\0'"
# The seconds the client waits beyond a run's own time limit before giving up on it;
# small, because the API function itself is stopped 4 s after RUN_TIMEOUT_SECONDS.
_GRACE_SECONDS = 2
# readFiles and writeFiles report no modification time; no reader of a file just opened
# or written needs one, and listings carry the real one.
_NO_MTIME = 0
# AgentCore runs these natively (executeCode); bash runs as a shell command.
_NATIVE = {"py": "python", "js": "javascript", "ts": "typescript"}
_LANGS = ("py", "js", "ts", "bash")
_BY_SUFFIX = {PurePosixPath(LANGUAGES[lang].source).suffix: lang for lang in _LANGS}
# executeCode takes no argv: the arguments are set by one line put before the program.
_ARGV_LINE = {
    "python": "import sys; sys.argv[1:] = {}\n",
    "javascript": "process.argv.splice(2, Infinity, ...{});\n",
    "typescript": "(globalThis as any).process.argv.splice(2, Infinity, ...{});\n",
}


class AgentCoreSandbox:
    def __init__(self, session_id: str, api: AgentCoreApi, settings: Settings) -> None:
        self._id = session_id
        self._api = api
        self._settings = settings
        self.touch_pending = True

    @property
    def id(self) -> str:
        return self._id

    def write_file(self, path: str, data: BinaryIO, limit: int | None = None) -> FileInfo:
        if _is_hidden(path):
            raise ids.BadFileId("file ids starting with '.' are reserved on this backend")
        # Read whole before sending: an oversized upload never reaches the session.
        blob = data.read(limit + 1) if limit is not None else data.read()
        if limit is not None and len(blob) > limit:
            raise TooLarge(f"the file is larger than {limit} bytes")
        self._write([{"path": path, "blob": blob}])
        return FileInfo(path, len(blob), _NO_MTIME)

    def open_file(self, path: str) -> tuple[BinaryIO, FileInfo]:
        if _is_hidden(path):
            raise FileNotFound(path)
        result = self._api.invoke(self._id, "readFiles", {"paths": [path]})
        resources = [block.get("resource") or {} for block in result.content if block.get("type") == "resource"]
        data = _resource_bytes(resources[0]) if resources and not result.is_error else None
        if data is None:
            raise FileNotFound(path)
        return io.BytesIO(data), FileInfo(path, len(data), _NO_MTIME)

    def list_files(self) -> list[FileInfo]:
        result = self._command(_LIST)
        return [info for entry in result.structured.get("stdout", "").split("\0") if (info := _file_info(entry))]

    def remove_file(self, path: str) -> None:
        if _is_hidden(path):
            raise FileNotFound(path)
        if self._api.invoke(self._id, "removeFiles", {"paths": [path]}).is_error:
            raise FileNotFound(path)

    def run(self, argv: Sequence[str], program: Mapping[str, bytes], timeout: float) -> RunResult:
        ((name, source),) = program.items()
        lang = _BY_SUFFIX[PurePosixPath(name).suffix]
        # The program's args are what the language table appended to its own command line;
        # the rest of that line names host paths, which mean nothing in the VM.
        args = list(argv[len(LANGUAGES[lang].argv(name, ())) :])
        language = _NATIVE.get(lang)
        try:
            if language is None:
                result = self._command(_shell(source, args, timeout))
            else:
                result = self._api.invoke(self._id, "executeCode", _code(language, source.decode(), args))
        except TimedOut:
            note = f"Stopped waiting: the run exceeded its {timeout:g} s time limit (it may still be running)."
            return RunResult("", "", None, (note,))
        # Only a shell command runs under coreutils' timeout, which exits 124 when it fired.
        timed_out = language is None and result.structured.get("exitCode") == 124
        return _run_result(result, timeout if timed_out else None, self._settings.max_output_bytes)

    def touch(self) -> None:
        if self.touch_pending:
            self._write([])

    def _command(self, command: str) -> ToolResult:
        if self.touch_pending:
            command = f"{_TOUCH}; {command}"
            self.touch_pending = False
        return self._api.invoke(self._id, "executeCommand", {"command": command})

    def _write(self, content: list[dict[str, Any]]) -> None:
        if self.touch_pending:
            content = [*content, {"path": _MARKER, "text": ""}]
            self.touch_pending = False
        if self._api.invoke(self._id, "writeFiles", {"content": content}).is_error:
            raise BackendUnavailable("AgentCore could not write the file")


class AgentCoreSandboxes:
    languages = frozenset(_LANGS)

    def __init__(self, settings: Settings, api: AgentCoreApi | None = None) -> None:
        self.settings = settings
        self.ttl_seconds = min(settings.lease_ttl_seconds, MAX_SESSION_SECONDS)
        self.api = api or AgentCoreApi(
            settings.agentcore_code_interpreter_id,
            settings.agentcore_endpoint_url,
            read_timeout=settings.run_timeout_seconds + _GRACE_SECONDS,
        )

    def is_session_id(self, session_id: str) -> bool:
        # AgentCore's own pattern, [0-9a-zA-Z]{1,40}.
        return 0 < len(session_id) <= 40 and _SESSION_ID_CHARS.issuperset(session_id)

    @contextlib.contextmanager
    def create(self, org: str) -> Iterator[AgentCoreSandbox]:
        started = self.api.start(_session_name(org, self.ttl_seconds), self.ttl_seconds)
        sandbox = AgentCoreSandbox(started["sessionId"], self.api, self.settings)
        yield sandbox
        sandbox.touch()

    @contextlib.contextmanager
    def open(self, org: str, session_id: str) -> Iterator[AgentCoreSandbox]:
        if not self.is_session_id(session_id):
            raise SessionNotFound(session_id)
        session = self.api.get(session_id)
        if session.get("status") != "READY" or _org_of(session.get("name", "")) != org:
            raise SessionNotFound(session_id)
        sandbox = AgentCoreSandbox(session_id, self.api, self.settings)
        yield sandbox
        sandbox.touch()

    def end(self, session_id: str) -> None:
        if self.is_session_id(session_id):
            with contextlib.suppress(SessionNotFound):
                self.api.stop(session_id)

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        """AgentCore has no lock a call could hold. Instead, every call touches its
        session when it begins and lasts far less than the idle limit, so a session in
        use is never idle-due; the lease is read afresh right before the stop."""
        try:
            session = self.api.get(session_id)
        except SessionNotFound:
            return False
        lease = self._lease(session)
        if session.get("status") != "READY" or lease is None or not still_due(lease):
            return False
        self.end(session_id)
        return True

    def leases(self) -> Iterator[Lease]:
        # One touched clock to read per session: read several at once. A session that
        # cannot be read now (throttled, say; logged) waits for the next pass.
        def lease_now(session: Mapping[str, Any]) -> Lease | None:
            with contextlib.suppress(BackendUnavailable):
                return self._lease(session)
            return None

        sessions = list(self.api.ready_sessions())
        with ThreadPoolExecutor(max_workers=8) as pool:
            yield from (lease for lease in pool.map(lease_now, sessions) if lease)

    def _lease(self, session: Mapping[str, Any]) -> Lease | None:
        name = session.get("name", "")
        org = _org_of(name)
        if org is None:
            return None
        leased_at = session["createdAt"].timestamp()
        try:
            touched = self._touched_at(session["sessionId"])
        except SessionNotFound:
            return None
        return Lease(session["sessionId"], org, leased_at, _ttl_of(name), touched or leased_at)

    def _touched_at(self, session_id: str) -> float | None:
        result = self.api.invoke(session_id, "executeCommand", {"command": f"stat -c %Y {_MARKER}"})
        stdout = result.structured.get("stdout", "").strip()
        return float(stdout) if stdout.isdigit() else None  # never touched: its lease began it


def _session_name(org: str, ttl_seconds: int) -> str:
    """`codeexec-<ttl>-<org in base32>`: AgentCore names are 1 to 100 characters."""
    encoded = base64.b32encode(org.encode()).decode().rstrip("=").lower()
    name = f"{_NAME_PREFIX}{ttl_seconds}-{encoded}"
    if len(name) > 100:
        raise ValueError("the organization's name is too long for an AgentCore session name")
    return name


def _org_of(name: str) -> str | None:
    """The organization a session name records, or None when the session is not ours."""
    if not name.startswith(_NAME_PREFIX):
        return None
    ttl, _, encoded = name[len(_NAME_PREFIX) :].partition("-")
    try:
        padded = encoded.upper() + "=" * (-len(encoded) % 8)
        return base64.b32decode(padded).decode() if ttl.isdigit() else None
    except (binascii.Error, UnicodeDecodeError):
        return None


def _ttl_of(name: str) -> int:
    return int(name[len(_NAME_PREFIX) :].partition("-")[0])


def _is_hidden(path: str) -> bool:
    return path.startswith(".")


def _resource_bytes(resource: Mapping[str, Any]) -> bytes | None:
    if "blob" in resource:
        return bytes(resource["blob"])
    if "text" in resource:
        return str(resource["text"]).encode()
    return None


def _file_info(entry: str) -> FileInfo | None:
    size, _, rest = entry.partition(" ")
    mtime, _, path = rest.partition(" ")
    if not path or not size.isdigit():
        return None
    seconds, _, fraction = mtime.partition(".")
    return FileInfo(path, int(size), int(seconds) * 1_000_000_000 + int(fraction[:9].ljust(9, "0")))


def _shell(source: bytes, args: list[str], timeout: float) -> str:
    script = shlex.quote(source.decode())
    return f"timeout -k 2 {timeout:g} bash -c {script} main.sh {shlex.join(args)}"


def _code(language: str, source: str, args: list[str]) -> dict[str, Any]:
    if args:
        source = _ARGV_LINE[language].format(json.dumps(args)) + source
    # clearContext: each run starts as a fresh program, as it would on any other backend.
    return {"language": language, "code": source, "clearContext": True}


def _run_result(result: ToolResult, timed_out_after: float | None, limit: int) -> RunResult:
    stdout = result.structured.get("stdout")
    if stdout is None:
        stdout = result.text()
    exit_code = result.structured.get("exitCode", 1 if result.is_error else 0)
    notes = []
    if timed_out_after is not None:
        notes.append(f"Stopped: the run exceeded its {timed_out_after:g} s time limit.")
        exit_code = None
    stdout = _capped(stdout, "stdout", limit, notes)
    stderr = _capped(result.structured.get("stderr", ""), "stderr", limit, notes)
    return RunResult(stdout, stderr, exit_code, tuple(notes))


def _capped(text: str, name: str, limit: int, notes: list[str]) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    notes.append(f"Output truncated: {name} exceeded {limit} bytes; the rest was dropped.")
    return data[:limit].decode(errors="ignore")
