"""The `agentcore` backend: a sandbox is an AWS Bedrock AgentCore Code Interpreter session,
a managed microVM with its own id, timeout and files.

Where a session's facts live, and why there:

- Its owner (digests of the organization and the user), whether it is shared, and its
  lease (TTL) are in the session's NAME, set once by StartCodeInterpreterSession. User
  code runs in the same microVM as any file we could keep there and could rewrite it,
  handing its session to someone else; nothing inside the VM can rename a session. The
  name also comes back with every item of ListCodeInterpreterSessions, so the reaper
  reads every lease from the listing pages. Opening a session costs one
  GetCodeInterpreterSession, which is also the liveness check.
- "Leased at" is the session's createdAt, and AgentCore itself ends the session when its
  TTL (sessionTimeoutSeconds, at most 8 hours) runs out.
- "Last touched" is the mtime of a marker file in the VM (`.codeexec/touched`). A touch
  rides along with the first command or file write of a call, so it costs no round trip
  of its own except on calls that only remove. A program can touch it too, but that only
  keeps its own session alive, never past its TTL.
- The exclusive hold is a directory in the VM (`.codeexec/hold`), made by `mkdir`, which
  succeeds for one caller only. A holder that died (its function timed out) leaves it
  behind; a hold older than any call can last is taken over.

The artifact directory is the session's working directory: writeFiles and readFiles take
paths relative to it, and code runs in it. Its hidden top-level entries are the
environment's (shell profiles, caches) and ours (`.codeexec/`): they are never listed.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

from ...errors import BackendUnavailable, BadRequest, FileNotFound, SessionNotFound, TooLarge
from ..port import FileInfo, Lease, Limit, LimitHit, OwnerTag, Program, RunResult
from .api import AgentCoreApi, TimedOut, ToolResult

MAX_SESSION_SECONDS = 28_800  # AgentCore's ceiling for sessionTimeoutSeconds
_SESSION_ID_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_NAME_PREFIX = "codeexec"
_MARKER = ".codeexec/touched"
_TOUCH = "mkdir -p .codeexec && touch .codeexec/touched"
_HOLD = ".codeexec/hold"
# Every regular file, recursively, as "size mtime path\0"; symlinks are neither followed
# nor listed, and hidden top-level entries are skipped.
_LIST = r"find . -path './.*' -prune -o -type f -printf '%s %T@ %P\0'"
# The seconds the client waits beyond a run's own time limit before giving up on it;
# small, because the API function itself is stopped 4 s after RUN_TIMEOUT_SECONDS.
_GRACE_SECONDS = 2
# AgentCore runs these natively (executeCode); bash runs as a shell command.
_NATIVE = {"py": "python", "js": "javascript", "ts": "typescript"}
_LANGS = ("py", "js", "ts", "bash")
# executeCode takes no argv: the arguments are set by one line put before the program.
_ARGV_LINE = {
    "python": "import sys; sys.argv[1:] = {}\n",
    "javascript": "process.argv.splice(2, Infinity, ...{});\n",
    "typescript": "(globalThis as any).process.argv.splice(2, Infinity, ...{});\n",
}


@dataclass(frozen=True)
class AgentCoreConfig:
    interpreter_id: str
    endpoint_url: str | None  # another endpoint, such as the tests' local fake
    lease_ttl_seconds: int
    run_timeout_seconds: float  # the longest run a caller may ask for
    max_output_bytes: int


class AgentCoreSandbox:
    def __init__(self, lease: Lease, backend: AgentCoreSandboxes, fresh: bool) -> None:
        self.id = lease.session_id
        self.lease = lease
        self._api = backend.api
        self._backend = backend
        # A session this call just started is known to nobody else until the call answers.
        self._fresh = fresh
        self.touch_pending = True

    def write_file(self, path: str, data: BinaryIO, limit: int) -> None:
        if _is_hidden(path):
            raise BadRequest("file ids starting with '.' are reserved on this backend")
        # Read whole before sending: an oversized upload never reaches the session.
        blob = data.read(limit + 1)
        if len(blob) > limit:
            raise TooLarge(f"the file is larger than {limit} bytes")
        self._write([{"path": path, "blob": blob}])

    def open_file(self, path: str) -> tuple[BinaryIO, FileInfo]:
        info = self.stat(path)
        result = self._api.invoke(self.id, "readFiles", {"paths": [path]})
        resources = [block.get("resource") or {} for block in result.content if block.get("type") == "resource"]
        data = _resource_bytes(resources[0]) if resources and not result.is_error else None
        if data is None:
            raise FileNotFound()
        return io.BytesIO(data), FileInfo(path, len(data), info.mtime_ns)

    def stat(self, path: str) -> FileInfo:
        if _is_hidden(path):
            raise FileNotFound()
        quoted = shlex.quote(f"./{path}")
        found = self._command(f"test -f {quoted} && ! test -L {quoted} && stat -c '%s %.9Y' {quoted}")
        info = _file_info(found.structured.get("stdout", "").strip() + " " + path)
        if found.structured.get("exitCode") != 0 or info is None:
            raise FileNotFound()
        return info

    def list_files(self) -> list[FileInfo]:
        result = self._command(_LIST)
        return [info for entry in result.structured.get("stdout", "").split("\0") if (info := _file_info(entry))]

    def remove_file(self, path: str) -> None:
        if _is_hidden(path):
            raise FileNotFound()
        if self._api.invoke(self.id, "removeFiles", {"paths": [path]}).is_error:
            raise FileNotFound()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        if self._fresh:
            yield
            return
        self._hold()
        try:
            yield
        finally:
            self._api.invoke(self.id, "executeCommand", {"command": f"rmdir {_HOLD}"})

    def _hold(self) -> None:
        # mkdir succeeds for one holder at a time. A hold older than the longest call
        # (its holder's function was stopped) is taken over.
        stale = int(self._backend.hold_seconds)
        wait_steps = int(self._backend.hold_wait_seconds * 10)
        command = (
            f"for i in $(seq {wait_steps}); do mkdir {_HOLD} 2>/dev/null && exit 0; "
            f"[ $(( $(date +%s) - $(stat -c %Y {_HOLD} 2>/dev/null || date +%s) )) -gt {stale} ] "
            f"&& rmdir {_HOLD} 2>/dev/null; sleep 0.1; done; exit 1"
        )
        if self._command(command).structured.get("exitCode") != 0:
            raise BackendUnavailable("the session is busy with another call", retry_after=2)

    def run(self, program: Program) -> RunResult:
        language = _NATIVE.get(program.lang)
        timeout = program.timeout
        try:
            if language is None:
                result = self._command(_shell(program.code, program.args, timeout))
            else:
                result = self._api.invoke(self.id, "executeCode", _code(language, program.code, program.args))
        except TimedOut:
            return RunResult("", "", None, (LimitHit(Limit.TIME, timeout, still_running=True),))
        # Only a shell command runs under coreutils' timeout, which exits 124 when it fired.
        timed_out = language is None and result.structured.get("exitCode") == 124
        return _run_result(result, timeout if timed_out else None, self._backend.max_output_bytes)

    def touch(self) -> None:
        if self.touch_pending:
            self._write([])

    def _command(self, command: str) -> ToolResult:
        if self.touch_pending:
            command = f"{_TOUCH}; {command}"
            self.touch_pending = False
        return self._api.invoke(self.id, "executeCommand", {"command": command})

    def _write(self, content: list[dict[str, Any]]) -> None:
        if self.touch_pending:
            content = [*content, {"path": _MARKER, "text": ""}]
            self.touch_pending = False
        if self._api.invoke(self.id, "writeFiles", {"content": content}).is_error:
            raise BackendUnavailable("AgentCore could not write the file")


class AgentCoreSandboxes:
    languages = frozenset(_LANGS)
    named_sessions = False  # AgentCore chooses its session ids itself

    def __init__(self, config: AgentCoreConfig, api: AgentCoreApi | None = None) -> None:
        self.ttl_seconds = min(config.lease_ttl_seconds, MAX_SESSION_SECONDS)
        self.max_output_bytes = config.max_output_bytes
        # The longest any one call holds a session (a run and the copies around it), and
        # how long another waits for it: within the client's own read timeout.
        self.hold_seconds = config.run_timeout_seconds + 30
        self.hold_wait_seconds = config.run_timeout_seconds
        self.api = api or AgentCoreApi(
            config.interpreter_id,
            config.endpoint_url,
            read_timeout=config.run_timeout_seconds + _GRACE_SECONDS,
        )

    @contextlib.contextmanager
    def create(
        self, owner: OwnerTag, shared: bool = False, read_only: bool = False, session_id: str | None = None
    ) -> Iterator[AgentCoreSandbox]:
        if session_id is not None:
            raise ValueError("AgentCore chooses its session ids itself")
        name = _session_name(owner, shared, read_only, self.ttl_seconds)
        started = self.api.start(name, self.ttl_seconds)
        lease = _lease_of(started["sessionId"], name, started["createdAt"].timestamp(), None)
        assert lease is not None
        sandbox = AgentCoreSandbox(lease, self, fresh=True)
        yield sandbox
        sandbox.touch()

    @contextlib.contextmanager
    def open(self, session_id: str, admit: Callable[[Lease], bool]) -> Iterator[AgentCoreSandbox]:
        if not _is_session_id(session_id):
            raise SessionNotFound()
        session = self.api.get(session_id)
        lease = _lease_of(session_id, session.get("name", ""), session["createdAt"].timestamp(), None)
        if session.get("status") != "READY" or lease is None or not admit(lease):
            raise SessionNotFound()
        sandbox = AgentCoreSandbox(lease, self, fresh=False)
        yield sandbox
        sandbox.touch()

    def end(self, session_id: str) -> None:
        if _is_session_id(session_id):
            with contextlib.suppress(SessionNotFound):
                self.api.stop(session_id)

    def cancel(self, run_key: str) -> None:
        """A no-op: the run key names no session, and a call that reaches another function
        than the one running the program has nowhere to find it. A run stops at its time
        limit."""

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        """AgentCore has no lock the reaper could take without waiting. Instead, every
        call touches its session when it begins and lasts far less than the idle limit,
        so a session in use is never idle-due; the lease is read afresh before the stop."""
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
        session_id, created = session["sessionId"], session["createdAt"].timestamp()
        if _lease_of(session_id, session.get("name", ""), created, None) is None:
            return None  # not one of ours: not worth a round trip
        try:
            touched = self._touched_at(session_id)
        except SessionNotFound:
            return None
        return _lease_of(session_id, session.get("name", ""), created, touched)

    def _touched_at(self, session_id: str) -> float | None:
        result = self.api.invoke(session_id, "executeCommand", {"command": f"stat -c %Y {_MARKER}"})
        stdout = result.structured.get("stdout", "").strip()
        return float(stdout) if stdout.isdigit() else None  # never touched: its lease began it


def _is_session_id(session_id: str) -> bool:
    # AgentCore's own pattern, [0-9a-zA-Z]{1,40}.
    return 0 < len(session_id) <= 40 and _SESSION_ID_CHARS.issuperset(session_id)


def _session_name(owner: OwnerTag, shared: bool, read_only: bool, ttl_seconds: int) -> str:
    """`codeexec-<ttl>-<flags>-<org digest>-<user digest>`, at most 71 characters
    (AgentCore names are 1 to 100). The flags: `s` shared, `r` read-only, else `u`."""
    flags = ("s" if shared else "") + ("r" if read_only else "") or "u"
    return f"{_NAME_PREFIX}-{ttl_seconds}-{flags}-{owner.org}-{owner.user}"


def _lease_of(session_id: str, name: str, leased_at: float, touched_at: float | None) -> Lease | None:
    """The lease a session name records, or None when the session is not ours."""
    prefix, ttl, flags, org, user, *rest = [*name.split("-"), "", "", "", "", ""][:6]
    known = flags in ("u", "s", "r", "sr")
    if prefix != _NAME_PREFIX or not ttl.isdigit() or not known or not org or not user or rest[0]:
        return None
    owner = OwnerTag(org, user)
    return Lease(session_id, owner, "s" in flags, "r" in flags, leased_at, int(ttl), touched_at or leased_at)


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
    if not seconds.isdigit():
        return None
    return FileInfo(path, int(size), int(seconds) * 1_000_000_000 + int(fraction[:9].ljust(9, "0")))


def _shell(source: str, args: tuple[str, ...], timeout: float) -> str:
    return f"timeout -k 2 {timeout:g} bash -c {shlex.quote(source)} main.sh {shlex.join(args)}"


def _code(language: str, source: str, args: tuple[str, ...]) -> dict[str, Any]:
    if args:
        source = _ARGV_LINE[language].format(json.dumps(list(args))) + source
    # clearContext: each run starts as a fresh program, as it would on any other backend.
    return {"language": language, "code": source, "clearContext": True}


def _run_result(result: ToolResult, timed_out_after: float | None, limit: int) -> RunResult:
    stdout = result.structured.get("stdout")
    if stdout is None:
        stdout = result.text()
    exit_code = result.structured.get("exitCode", 1 if result.is_error else 0)
    hits = []
    if timed_out_after is not None:
        hits.append(LimitHit(Limit.TIME, timed_out_after))
        exit_code = None
    stdout = _capped(stdout, "stdout", limit, hits)
    stderr = _capped(result.structured.get("stderr", ""), "stderr", limit, hits)
    return RunResult(stdout, stderr, exit_code, tuple(hits))


def _capped(text: str, name: str, limit: int, hits: list[LimitHit]) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    hits.append(LimitHit(Limit.OUTPUT, limit, stopped=False, stream=name))
    return data[:limit].decode(errors="ignore")
