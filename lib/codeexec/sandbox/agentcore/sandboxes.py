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
paths relative to it (and refuse absolute ones), and code runs in it. Its hidden
top-level entries are the environment's (shell profiles, caches) and ours
(`.codeexec/`), and so is its `log/` folder: none of them is ever listed.

What the programs see, as on every backend:

- `/mnt/data` is the working directory: each new session links it there first thing
  (LibreChat's tool descriptions and its own read_file/write_file helpers use absolute
  `/mnt/data/...` paths). The link is made by the sandbox user, else with `sudo -n`;
  where neither may write `/mnt`, the session still works through relative paths and
  the backend logs that it could not.
- JavaScript and TypeScript run on Node.js (`runtime: "nodejs"`), not AgentCore's
  default Deno, so `require` and `process` are what LibreChat's models expect.
- bash runs as a command, and executeCommand answers as a terminal does (CRLF, stderr
  mixed into stdout): its stdout and stderr go to files, which the same command hands
  back base64-encoded, so both arrive apart and byte for byte.
- A py/js/ts run that overruns is killed in the VM by a watchdog started just before it
  (startCommandExecution), which reads the program's pid from a file the program's
  first line writes; a bash run is under coreutils' `timeout`.

Session ids on the wire are AgentCore's own, re-spelled in 21 characters
(`session_ids.py`); a session AgentCore names otherwise is stopped and refused.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import secrets
import shlex
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

from ... import ids
from ...errors import BackendUnavailable, BadRequest, FileNotFound, SessionNotFound, TooLarge
from ..port import FileInfo, Lease, Limit, LimitHit, OwnerTag, Program, RunResult
from . import session_ids
from .api import AgentCoreApi, TimedOut, ToolResult

log = logging.getLogger("codeexec.agentcore")

MAX_SESSION_SECONDS = 28_800  # AgentCore's ceiling for sessionTimeoutSeconds
_NAME_PREFIX = "codeexec"
_MARKER = ".codeexec/touched"
_TOUCH = "mkdir -p .codeexec && touch .codeexec/touched"
_HOLD = ".codeexec/hold"
# A new session's first command: its touch, and /mnt/data linked to the working directory
# (by the sandbox user, else by sudo where it may); exits 0 when /mnt/data is the working
# directory.
_SETUP = (
    f"{_TOUCH} && here=$(pwd -P) && {{ [ -e /mnt/data ] || ln -s \"$here\" /mnt/data 2>/dev/null "
    "|| sudo -n ln -s \"$here\" /mnt/data 2>/dev/null; }; [ \"$(cd /mnt/data 2>/dev/null && pwd -P)\" = \"$here\" ]"
)
# Top-level entries that are the environment's or ours, never a client's file: the hidden
# ones, and the interpreter's visible log folder.
_ENVIRONMENTS = ("log",)
# Every regular file, recursively, as "size mtime path\0", base64-encoded so that the
# terminal executeCommand runs on changes nothing (it turns newlines into CRLF, and would
# mix find's complaints into the listing); symlinks are neither followed nor listed.
_LIST = (
    r"{ find . \( -path './.*' -o -path ./log \) -prune -o -type f -printf '%s %T@ %P\0'; } 2>/dev/null | base64 -w0"
)
# The seconds the client waits beyond a run's own time limit before giving up on it;
# small, because the API function itself is stopped 4 s after RUN_TIMEOUT_SECONDS.
_GRACE_SECONDS = 2
# AgentCore runs these natively (executeCode), JavaScript and TypeScript on Node.js.
_NATIVE = {"py": ("python", None), "js": ("javascript", "nodejs"), "ts": ("typescript", "nodejs")}
_LANGS = ("py", "js", "ts", "bash")
# A native program's first line: it writes the program's pid where the watchdog reads it
# ({pid_file}), and, with arguments, sets them (executeCode takes no argv). One line, so
# that the program's own line numbers move by one only.
_FIRST_LINE = {
    "python": '__import__("builtins").open("{pid_file}", "w").write(str(__import__("os").getpid())); ',
    "javascript": (
        '(process.getBuiltinModule ? process.getBuiltinModule("fs") : require("fs"))'
        '.writeFileSync("{pid_file}", String(process.pid)); '
    ),
    "typescript": (
        '((globalThis as any).process.getBuiltinModule?.("fs") ?? require("fs"))'
        '.writeFileSync("{pid_file}", String((globalThis as any).process.pid)); '
    ),
}
_ARGV = {
    "python": '__import__("sys").argv[1:] = {}',
    "javascript": "process.argv.splice(2, Infinity, ...{});",
    "typescript": "(globalThis as any).process.argv.splice(2, Infinity, ...{});",
}
# What a bash run's command prints after the program: its exit code and its stdout and
# stderr in base64, after this marker (a terminal may put other output before it).
_RUN_MARK = "CODEEXEC-RUN:"


@dataclass(frozen=True)
class AgentCoreConfig:
    interpreter_id: str
    endpoint_url: str | None  # another endpoint, such as the tests' local fake
    lease_ttl_seconds: int
    run_timeout_seconds: float  # the longest run a caller may ask for
    max_output_bytes: int


class AgentCoreSandbox:
    def __init__(self, lease: Lease, backend: AgentCoreSandboxes, fresh: bool) -> None:
        self.id = lease.session_id  # the wire id
        self.lease = lease
        self._sid = _agentcore_id(lease.session_id)  # AgentCore's own, for its API
        self._api = backend.api
        self._backend = backend
        # A session this call just started is known to nobody else until the call answers.
        self._fresh = fresh
        self.touch_pending = True
        # A command of ours the next command runs first (tidying up after a run).
        self._pending = ""

    def write_file(self, path: str, data: BinaryIO, limit: int) -> None:
        if _reserved(path):
            raise BadRequest("file ids starting with '.' or 'log/' are reserved on this backend")
        # Read whole before sending: an oversized upload never reaches the session.
        blob = data.read(limit + 1)
        if len(blob) > limit:
            raise TooLarge(f"the file is larger than {limit} bytes")
        self._write([{"path": path, "blob": blob}])

    def open_file(self, path: str) -> tuple[BinaryIO, FileInfo]:
        info = self.stat(path)
        result = self._api.invoke(self._sid, "readFiles", {"paths": [path]})
        resources = [block.get("resource") or {} for block in result.content if block.get("type") == "resource"]
        data = _resource_bytes(resources[0]) if resources and not result.is_error else None
        if data is None:
            raise FileNotFound()
        return io.BytesIO(data), FileInfo(path, len(data), info.mtime_ns)

    def send_file(self, path: str, url: str) -> None:
        """The VM itself PUTs the file to `url` (a presigned S3 URL: no credentials in the
        VM), so a file too large for a Lambda response never passes through the function."""
        self.stat(path)
        quoted = shlex.quote(f"./{path}")
        limit = int(self._backend.hold_wait_seconds)
        sent = self._command(f"curl -sSf --max-time {limit} -o /dev/null -T {quoted} {shlex.quote(url)} 2>/dev/null")
        if sent.structured.get("exitCode") != 0:
            raise BackendUnavailable("the session could not send the file to storage", retry_after=5)

    def stat(self, path: str) -> FileInfo:
        if _reserved(path):
            raise FileNotFound()
        quoted = shlex.quote(f"./{path}")
        found = self._command(f"test -f {quoted} && ! test -L {quoted} && stat -c '%s %.9Y' {quoted} 2>/dev/null")
        info = _file_info(found.structured.get("stdout", "").strip() + " " + path)
        if found.structured.get("exitCode") != 0 or info is None:
            raise FileNotFound()
        return info

    def list_files(self) -> list[FileInfo]:
        result = self._command(_LIST)
        encoded = "".join(result.structured.get("stdout", "").split())
        listing = base64.b64decode(encoded).decode(errors="surrogateescape")
        return [info for entry in listing.split("\0") if (info := _file_info(entry))]

    def remove_file(self, path: str) -> None:
        if _reserved(path):
            raise FileNotFound()
        if self._api.invoke(self._sid, "removeFiles", {"paths": [path]}).is_error:
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
            self._command(f"rmdir {_HOLD}")

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
        started = time.monotonic()
        try:
            if program.lang in _NATIVE:
                return self._run_native(program, started)
            return self._run_bash(program, started)
        except TimedOut:
            return RunResult("", "", None, (LimitHit(Limit.TIME, program.timeout, still_running=True),))

    def _run_bash(self, program: Program, started: float) -> RunResult:
        result = self._command(_bash(program, self._backend.max_output_bytes))
        stdout = result.structured.get("stdout", "")
        exit_code, out, err = _bash_outcome(stdout[stdout.rfind(_RUN_MARK) + len(_RUN_MARK) :])
        # coreutils' timeout exits 124 when it stopped the run, 137 when it had to kill it.
        timed_out = exit_code == 124 or (exit_code == 137 and time.monotonic() - started >= program.timeout)
        return _run_result(out, err, None if timed_out else exit_code, program, self._backend.max_output_bytes)

    def _run_native(self, program: Program, started: float) -> RunResult:
        language, runtime = _NATIVE[program.lang]
        pid_file = f".codeexec/run-{secrets.token_hex(8)}"
        # The watchdog kills the program at its time limit; once the run is over, the
        # next command removes the pid file, and the watchdog then finds nothing to kill.
        pid = f"$(cat {pid_file} 2>/dev/null)"
        watchdog = f'sleep {program.timeout:g}; p={pid} && rm -f {pid_file} && kill -KILL "$p"'
        self._command(watchdog, tool="startCommandExecution")
        self._pending = f"rm -f {pid_file}; "
        arguments = {"language": language, "code": _native_source(language, program, pid_file), "clearContext": True}
        if runtime:
            arguments["runtime"] = runtime
        # clearContext: each run starts as a fresh program, as it would on any other backend.
        result = self._api.invoke(self._sid, "executeCode", arguments)
        stdout = result.structured.get("stdout")
        exit_code: int | None = result.structured.get("exitCode", 1 if result.is_error else 0)
        if exit_code != 0 and time.monotonic() - started >= program.timeout:
            exit_code = None  # the watchdog stopped it
        stderr = result.structured.get("stderr", "")
        return _run_result(result.text() if stdout is None else stdout, stderr, exit_code, program,
                           self._backend.max_output_bytes)  # fmt: skip

    def touch(self) -> None:
        if self.touch_pending:
            self._write([])

    def setup(self) -> None:
        """A new session's first command: its touch, and /mnt/data."""
        self.touch_pending = False
        if self._command(_SETUP).structured.get("exitCode") != 0:
            log.warning("AgentCore session without /mnt/data: the sandbox user cannot link it; relative paths work")

    def _command(self, command: str, tool: str = "executeCommand") -> ToolResult:
        command = self._pending + command
        self._pending = ""
        if self.touch_pending:
            command = f"{_TOUCH}; {command}"
            self.touch_pending = False
        return self._api.invoke(self._sid, tool, {"command": command})

    def _write(self, content: list[dict[str, Any]]) -> None:
        if self.touch_pending:
            content = [*content, {"path": _MARKER, "text": ""}]
            self.touch_pending = False
        if self._api.invoke(self._sid, "writeFiles", {"content": content}).is_error:
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
        wire_id = session_ids.to_wire(started["sessionId"])
        if wire_id is None:
            # Never hand out an id the service could not take back: that session would be lost.
            self.api.stop(started["sessionId"])
            raise BackendUnavailable("AgentCore named the session with an id that is not a ULID; it was stopped")
        lease = _lease_of(wire_id, name, started["createdAt"].timestamp(), None)
        assert lease is not None
        sandbox = AgentCoreSandbox(lease, self, fresh=True)
        sandbox.setup()
        yield sandbox
        sandbox.touch()

    @contextlib.contextmanager
    def open(self, session_id: str, admit: Callable[[Lease], bool]) -> Iterator[AgentCoreSandbox]:
        agentcore_id = session_ids.from_wire(session_id)
        if agentcore_id is None:
            raise SessionNotFound()
        session = self.api.get(agentcore_id)
        lease = _lease_of(session_id, session.get("name", ""), session["createdAt"].timestamp(), None)
        if session.get("status") != "READY" or lease is None or not admit(lease):
            raise SessionNotFound()
        sandbox = AgentCoreSandbox(lease, self, fresh=False)
        yield sandbox
        sandbox.touch()

    def end(self, session_id: str) -> None:
        agentcore_id = session_ids.from_wire(session_id)
        if agentcore_id is not None:
            with contextlib.suppress(SessionNotFound):
                self.api.stop(agentcore_id)

    def cancel(self, run_key: str) -> None:
        """A no-op: the run key names no session, and a call that reaches another function
        than the one running the program has nowhere to find it. A run stops at its time
        limit."""

    def end_if(self, session_id: str, still_due: Callable[[Lease], bool]) -> bool:
        """AgentCore has no lock the reaper could take without waiting. Instead, every
        call touches its session when it begins and lasts far less than the idle limit,
        so a session in use is never idle-due; the lease is read afresh before the stop."""
        agentcore_id = session_ids.from_wire(session_id)
        if agentcore_id is None:
            return False
        try:
            session = self.api.get(agentcore_id)
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
        agentcore_id, created = session["sessionId"], session["createdAt"].timestamp()
        wire_id = session_ids.to_wire(agentcore_id)
        if wire_id is None or _lease_of(wire_id, session.get("name", ""), created, None) is None:
            return None  # not one of ours: not worth a round trip
        try:
            touched = self._touched_at(agentcore_id)
        except SessionNotFound:
            return None
        return _lease_of(wire_id, session.get("name", ""), created, touched)

    def _touched_at(self, agentcore_id: str) -> float | None:
        result = self.api.invoke(agentcore_id, "executeCommand", {"command": f"stat -c %Y {_MARKER} 2>/dev/null"})
        stdout = result.structured.get("stdout", "").strip()
        return float(stdout) if stdout.isdigit() else None  # never touched: its lease began it


def _agentcore_id(wire_id: str) -> str:
    agentcore_id = session_ids.from_wire(wire_id)
    assert agentcore_id is not None, "a lease's id is always a wire id"
    return agentcore_id


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


def _reserved(path: str) -> bool:
    if path.startswith(f"{ids.STATE_DIR}/"):  # the session layer's own, kept like any file
        return False
    top = path.split("/", 1)[0]
    return top.startswith(".") or top in _ENVIRONMENTS


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


def _bash(program: Program, max_output_bytes: int) -> str:
    """One command: the program in /mnt/data under a time limit, its stdin empty and its
    stdout and stderr in files, then what it printed, read back within the output limit."""
    run = f"bash -c {shlex.quote(program.code)} main.sh {shlex.join(program.args)}"
    read = f"head -c {max_output_bytes + 1}"
    return (
        f"cd /mnt/data 2>/dev/null; mkdir -p .codeexec/run; "
        f"timeout -k 1 {program.timeout:g} {run} </dev/null >.codeexec/run/out 2>.codeexec/run/err; rc=$?; "
        f"printf '{_RUN_MARK}%s:' $rc; {read} .codeexec/run/out | base64 -w0; printf :; "
        f"{read} .codeexec/run/err | base64 -w0; rm -f .codeexec/run/out .codeexec/run/err"
    )


def _bash_outcome(marked: str) -> tuple[int | None, str, str]:
    """The exit code, stdout and stderr a bash run's command printed after its marker."""
    exit_code, _, rest = "".join(marked.split()).partition(":")
    out, _, err = rest.partition(":")
    try:
        decoded = [base64.b64decode(part).decode(errors="replace") for part in (out, err)]
    except ValueError:
        raise BackendUnavailable("AgentCore answered a bash run with output this service cannot read") from None
    return (int(exit_code) if exit_code.lstrip("-").isdigit() else None), decoded[0], decoded[1]


def _native_source(language: str, program: Program, pid_file: str) -> str:
    first = _FIRST_LINE[language].format(pid_file=pid_file)
    if program.args:
        first += _ARGV[language].format(json.dumps(list(program.args)))
    return f"{first}\n{program.code}"


def _run_result(stdout: str, stderr: str, exit_code: int | None, program: Program, limit: int) -> RunResult:
    hits = []
    if exit_code is None:
        hits.append(LimitHit(Limit.TIME, program.timeout))
    stdout = _capped(stdout, "stdout", limit, hits)
    stderr = _capped(stderr, "stderr", limit, hits)
    return RunResult(stdout, stderr, exit_code, tuple(hits))


def _capped(text: str, name: str, limit: int, hits: list[LimitHit]) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    hits.append(LimitHit(Limit.OUTPUT, limit, stopped=False, stream=name))
    return data[:limit].decode(errors="ignore")
