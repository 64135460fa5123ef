"""The `agentcore` backend: a sandbox is an AWS Bedrock AgentCore Code Interpreter session,
a managed microVM with its own id, timeout and files.

Each coarse operation of the port is as few InvokeCodeInterpreter calls as AgentCore
allows, counted: one command can run a whole step inside the VM (vm.py, sent with it:
the hold, the inputs, the listings, what changed, the hold let go, all in one), and
writeFiles and readFiles carry bytes. A listing, a metadata read and a removal are one
call; a download and an upload two; a bash run one, a py/js/ts run two (the native run,
then the step after it: the step before it rides in the program's first line), plus one
readFiles per other session inputs come from, and one writeFiles for a bash run that
carries them.

Where a session's facts live, and why there:

- Its owner (digests of the organization and the user), whether it is shared, and its
  lease (TTL) are in the session's NAME, set once by StartCodeInterpreterSession. User
  code runs in the same microVM as any file we could keep there and could rewrite it,
  handing its session to someone else; nothing inside the VM can rename a session. The
  name also comes back with every item of ListCodeInterpreterSessions, so the reaper
  reads every lease from the listing pages. Opening a session costs one
  GetCodeInterpreterSession, which is also the liveness check, and the access check.
- "Leased at" is the session's createdAt, and AgentCore itself ends the session when its
  TTL (sessionTimeoutSeconds, at most 8 hours) runs out.
- "Last touched" is the mtime of a marker file in the VM (`.codeexec/touched`), which
  every step touches. A program can touch it too, but that only keeps its own session
  alive, never past its TTL.
- The exclusive hold is a directory in the VM (`.codeexec/hold`), made by `mkdir`, which
  succeeds for one caller only. A holder that died (its function timed out) leaves it
  behind; a hold older than any call can last is taken over.
- A programmatic workflow's record is in the VM too (`.codeexec/state/`): its only
  filesystem is the program's. What protects it is its digest in the signed token.

The artifact directory is the session's working directory: writeFiles and readFiles take
paths relative to it (and refuse absolute ones), and code runs in it. Its hidden
top-level entries are the environment's (shell profiles, caches) and ours
(`.codeexec/`), and so is its `log/` folder: none of them is ever listed.

What the programs see, as on every backend:

- `/mnt/data` is the working directory: each new session links it there in its first
  step (LibreChat's tool descriptions and its own read_file/write_file helpers use
  absolute `/mnt/data/...` paths), by the sandbox user, else with `sudo -n`.
- JavaScript and TypeScript run on Node.js (`runtime: "nodejs"`), not AgentCore's
  default Deno, so `require` and `process` are what LibreChat's models expect.
- bash runs in a step of its own, its stdout and stderr apart and byte for byte
  (executeCommand answers as a terminal does: CRLF, stderr mixed into stdout).
- A py/js/ts run that overruns is killed by a watchdog its first line arms in the
  interpreter itself, unless the step after the run has disarmed it.

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any, BinaryIO

from ... import ids
from ...errors import BackendUnavailable, BadRequest, Conflict, FileNotFound, SessionNotFound, TooLarge
from ..port import (
    Access,
    Carried,
    Changes,
    FileInfo,
    Input,
    Lease,
    Limit,
    LimitHit,
    Opened,
    OwnerTag,
    Placed,
    Placement,
    Program,
    Ran,
    Run,
    RunResult,
    RunSlot,
    Sandboxes,
    SendTo,
)
from . import session_ids
from .api import AgentCoreApi, TimedOut

log = logging.getLogger("codeexec.agentcore")

MAX_SESSION_SECONDS = 28_800  # AgentCore's ceiling for sessionTimeoutSeconds
_NAME_PREFIX = "codeexec"
_MARKER = ".codeexec/touched"
_STATE = ".codeexec/state"
# Top-level entries that are the environment's or ours, never a client's file.
_ENVIRONMENTS = ("log",)
# The seconds the client waits beyond a run's own time limit before giving up on it;
# small, because the API function itself is stopped 4 s after RUN_TIMEOUT_SECONDS.
_GRACE_SECONDS = 2
# AgentCore runs these natively (executeCode), JavaScript and TypeScript on Node.js.
_NATIVE = {"py": ("python", None), "js": ("javascript", "nodejs"), "ts": ("typescript", "nodejs")}
_LANGS = ("py", "js", "ts", "bash")
_VM = resources.files(__package__).joinpath("vm.py").read_text()
_VM_MARK = "CODEEXEC-VM:"
# A native program's first line: the step before the run (vm.py `pre`, in a process of its
# own), then what it answers, run here: the watchdog armed, or why the run may not happen.
# One line, so that the program's own line numbers move by one only.
_BOOT = {
    "python": (
        "import base64, json, subprocess, sys\n"
        "out = subprocess.run([sys.executable, '-c', {vm}, 'pre'], input={args}, stdout=subprocess.PIPE).stdout\n"
        "answer = json.loads(base64.b64decode(out.decode().rsplit({mark}, 1)[-1].strip() or 'e30='))\n"
        "if 'arm' not in answer: raise RuntimeError('codeexec: ' + answer.get('refused', 'the run could not start'))\n"
        "sys.argv[1:] = {argv}\n"
        "exec(answer['arm'], {{}})\n"
    ),
    "javascript": (
        "(() => {{ const cp = process.getBuiltinModule ? process.getBuiltinModule('child_process')"
        " : require('child_process');"
        " const out = cp.execFileSync('python3', ['-c', {vm}, 'pre'], {{ input: {args} }}).toString();"
        " const answer = JSON.parse(Buffer.from(out.split({mark}).pop().trim() || 'e30=', 'base64').toString());"
        " if (!answer.arm) throw new Error('codeexec: ' + (answer.refused || 'the run could not start'));"
        " process.argv.splice(2, Infinity, ...{argv}); eval(answer.arm); }})();"
    ),
}
_FIRST_LINE = {
    "python": "exec(__import__('base64').b64decode({boot!r}).decode(), {{}})",
    "javascript": "eval(Buffer.from({boot}, 'base64').toString());",
    "typescript": "eval((globalThis as any).Buffer.from({boot}, 'base64').toString());",
}


@dataclass(frozen=True)
class AgentCoreConfig:
    interpreter_id: str
    endpoint_url: str | None  # another endpoint, such as the tests' local fake
    lease_ttl_seconds: int
    run_timeout_seconds: float  # the longest run a caller may ask for
    max_output_bytes: int


@dataclass(frozen=True)
class _Session:
    """A session an operation addresses: its wire id, AgentCore's, its lease, and whether
    this call just started it (known to nobody else: no hold needed, its set-up due)."""

    lease: Lease
    fresh: bool = False

    @property
    def id(self) -> str:
        return self.lease.session_id

    @property
    def agentcore_id(self) -> str:
        agentcore_id = session_ids.from_wire(self.id)
        assert agentcore_id is not None, "a lease's id is always a wire id"
        return agentcore_id


class AgentCoreSandboxes(Sandboxes):
    languages = frozenset(_LANGS)
    named_sessions = False  # AgentCore chooses its session ids itself
    cancels = False  # a run key names no session: see `cancel`

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

    # -- the coarse operations ---------------------------------------------------------------

    def execute(self, run: Run, carried: Iterable[Carried] = (), slot: RunSlot = contextlib.nullcontext) -> Ran:
        self.check_language(run.program.lang)
        with slot():  # around every call: AgentCore holds the session inside the run's own
            session = self._landing(run.placement)
            brought = [*self._carry(carried, run), *self._carried_from_others(session, run)]
            step = {
                **self._hold_args(session),
                "token": secrets.token_hex(8),
                "own": self._own_inputs(session, run),
                "keep": run.keep and {"key": run.keep.key, "replaces": run.keep.replaces,
                                      "record": base64.b64encode(run.keep.record).decode()},
            }  # fmt: skip
            if run.program.lang in _NATIVE:
                result, after = self._run_native(session, run.program, step, brought)
            else:
                result, after = self._run_bash(session, run.program, step, brought)
        placed = after.get("placed", {})
        inputs = tuple(_placed(placed.get(str(i))) for i in range(len(run.inputs)))
        return Ran(session.id, session.fresh, result, _changes(after["changes"]), inputs)

    def write_files(self, placement: Placement, files: Iterable[tuple[str, BinaryIO]], limit: int) -> str:
        # AgentCore takes a file's bytes whole, in one call: read them before any is sent,
        # so an oversized or misnamed upload never reaches (nor makes) a session.
        # A path that stays in the session's directory, whoever sent it (the VM checks again).
        blobs = [(ids.file_path(path), _read_within(data, limit)) for path, data in files]
        if any(_reserved(path) for path, _ in blobs):
            raise BadRequest("file ids starting with '.' or 'log/' are reserved on this backend")
        session = self._landing(placement)
        try:
            token = secrets.token_hex(8)
            staged = [(f".codeexec/up-{token}-{n}", path) for n, (path, _) in enumerate(blobs)]
            self._write(session, _blobs([name for name, _ in staged], [blob for _, blob in blobs]))
            answer = self._step(session, "commit", {**self._hold_args(session), "staged": staged})
            if "refused" in answer:
                raise _refusal(answer["refused"], BadRequest)
        except BaseException:
            if session.fresh:  # a session started for a failed upload would hold nothing: stop it
                self.end(session.id)
            raise
        return session.id

    def list_files(self, session_id: str, access: Access) -> list[FileInfo]:
        session = self._open(session_id, access)
        return [FileInfo(p, s, m) for p, s, m in self._step(session, "list", {})["files"]]

    def read_file(self, session_id: str, access: Access, file_id: str, send_to: SendTo | None = None) -> Opened:
        """The file's stat (and, when it is large, its sending from the VM itself: curl to
        a presigned URL, so it never passes through the function), then its bytes."""
        session = self._open(session_id, access)
        if send_to is None:
            info = self._stat(session, file_id)
        else:
            send = {"url": send_to.url, "from_bytes": send_to.from_bytes, "seconds": int(self.hold_wait_seconds)}
            sent = self._step(session, "send", {"file_id": file_id, **send})
            info = _found(sent)
            if sent.get("sent"):
                return Opened(info)
            if info.size >= send_to.from_bytes:
                raise BackendUnavailable("the session could not send the file to storage", retry_after=5)
        data = self._read(session, info.path)
        return Opened(FileInfo(info.path, len(data), info.mtime_ns), io.BytesIO(data))

    def stat_file(self, session_id: str, access: Access, file_id: str) -> FileInfo:
        return self._stat(self._open(session_id, access), file_id)

    def remove_file(self, session_id: str, access: Access, file_id: str) -> str:
        session = self._open(session_id, access)
        answer = self._step(session, "remove", {**self._hold_args(session), "file_id": file_id})
        if "refused" in answer:
            raise _refusal(answer["refused"], BackendUnavailable)
        if "path" not in answer:
            raise FileNotFound()
        return str(answer["path"])

    def read_record(self, session_id: str, access: Access, key: str) -> bytes:
        if not ids.is_file_id(key):
            raise BadRequest("not a record's key")
        try:
            return self._read(self._open(session_id, access), f"{_STATE}/{key}.json")
        except FileNotFound:
            raise Conflict("that program is not in its session (the session ended, or it never ran)") from None

    # -- ending and the reaper ---------------------------------------------------------------

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
        try:
            lease = self.lease(session_id)
        except SessionNotFound:
            return False
        if not still_due(lease):
            return False
        self.end(session_id)
        return True

    def lease(self, session_id: str) -> Lease:
        """One GetCodeInterpreterSession, and the idle clock read (`stat`, not touched)."""
        agentcore_id = session_ids.from_wire(session_id)
        if agentcore_id is None:
            raise SessionNotFound()
        session = self.api.get(agentcore_id)
        lease = self._lease(session) if session.get("status") == "READY" else None
        if lease is None:
            raise SessionNotFound()
        return lease

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

    # -- sessions ----------------------------------------------------------------------------

    def _open(self, session_id: str, access: Access) -> _Session:
        """A live session the access admits: one GetCodeInterpreterSession."""
        agentcore_id = session_ids.from_wire(session_id)
        if agentcore_id is None:
            raise SessionNotFound()
        found = self.api.get(agentcore_id)
        lease = _lease_of(session_id, found.get("name", ""), found["createdAt"].timestamp(), None)
        if found.get("status") != "READY" or lease is None or not access.admits(lease):
            raise SessionNotFound()
        return _Session(lease)

    def _landing(self, placement: Placement) -> _Session:
        for session_id in dict.fromkeys(placement.candidates):
            with contextlib.suppress(SessionNotFound):
                return self._open(session_id, placement.access)
        if placement.named is not None:
            raise BadRequest("AgentCore chooses its session ids itself")
        if not placement.new:
            raise SessionNotFound()
        return self._start(placement.access.owner, placement.shared, placement.read_only)

    def _start(self, owner: OwnerTag, shared: bool, read_only: bool) -> _Session:
        name = _session_name(owner, shared, read_only, self.ttl_seconds)
        started = self.api.start(name, self.ttl_seconds)
        wire_id = session_ids.to_wire(started["sessionId"])
        if wire_id is None:
            # Never hand out an id the service could not take back: that session would be lost.
            self.api.stop(started["sessionId"])
            raise BackendUnavailable("AgentCore named the session with an id that is not a ULID; it was stopped")
        lease = _lease_of(wire_id, name, started["createdAt"].timestamp(), None)
        assert lease is not None
        return _Session(lease, fresh=True)

    def _hold_args(self, session: _Session) -> dict[str, Any]:
        return {"fresh": session.fresh, "hold_seconds": self.hold_seconds, "hold_wait": self.hold_wait_seconds}

    # -- inputs ------------------------------------------------------------------------------

    def _own_inputs(self, session: _Session, run: Run) -> list[dict[str, Any]]:
        """Inputs of the run's own session, found by the VM at the paths their refs verify."""
        return [
            {"index": i, "paths": wanted.paths(session.id), "target": _target(wanted, wanted.paths(session.id)),
             "read_only": session.lease.read_only}
            for i, wanted in enumerate(run.inputs)
            if (wanted.origin or session.id) == session.id
        ]  # fmt: skip

    def _carried_from_others(self, session: _Session, run: Run) -> Iterator[tuple[int, str, bytes, bool]]:
        """Inputs of other sessions (each its own VM): read from each origin once."""
        by_origin: dict[str, list[int]] = {}
        for index, wanted in enumerate(run.inputs):
            if wanted.origin and wanted.origin != session.id:
                by_origin.setdefault(wanted.origin, []).append(index)
        for origin_id, indexes in by_origin.items():
            with contextlib.suppress(SessionNotFound):
                origin = self._open(origin_id, run.reader)
                for index, found, data in self._read_inputs(origin, [(i, run.inputs[i]) for i in indexes]):
                    target = _target(run.inputs[index], [found])
                    if target is not None:
                        yield index, target, data, origin.lease.read_only

    def _read_inputs(self, origin: _Session, wanted: list[tuple[int, Input]]) -> Iterator[tuple[int, str, bytes]]:
        """One readFiles of the paths the refs verify; should one of them not be there, each
        input on its own, path by path."""
        first = [(i, wanted_input.paths(origin.id)[:1]) for i, wanted_input in wanted]
        paths = [p[0] for _, p in first if p]
        with contextlib.suppress(FileNotFound):
            if len(paths) == len(first):
                blobs = self._read_many(origin, paths)
                yield from ((i, p, blobs[p]) for (i, _), p in zip(first, paths, strict=True))
                return
        for index, one in wanted:
            for path in one.paths(origin.id):
                with contextlib.suppress(FileNotFound):
                    yield index, path, self._read(origin, path)
                    break

    def _carry(self, carried: Iterable[Carried], run: Run) -> Iterator[tuple[int, str, bytes, bool]]:
        for c in carried:
            yield c.index, run.inputs[c.index].target(c.found), c.reader.read(), c.read_only

    # -- runs --------------------------------------------------------------------------------

    def _run_native(
        self, session: _Session, program: Program, step: dict[str, Any], brought: list[tuple[int, str, bytes, bool]]
    ) -> tuple[RunResult, dict[str, Any]]:
        language, runtime = _NATIVE[program.lang]
        pid_file = f".codeexec/run-{step['token']}.pid"
        pre = {**step, "lang": language, "timeout": program.timeout, "pid_file": pid_file,
               "carried": [{"index": i, "target": t, "data": base64.b64encode(d).decode(), "read_only": ro}
                           for i, t, d, ro in brought]}  # fmt: skip
        arguments = {"language": language, "code": f"{_first_line(language, pre, program.args)}\n{program.code}",
                     "clearContext": True}  # fmt: skip
        if runtime:
            arguments["runtime"] = runtime
        started = time.monotonic()
        try:
            # clearContext: each run starts as a fresh program, as it would on any other backend.
            ran = self.api.invoke(session.agentcore_id, "executeCode", arguments)
            stdout = ran.structured.get("stdout")
            exit_code: int | None = ran.structured.get("exitCode", 1 if ran.is_error else 0)
            if exit_code != 0 and time.monotonic() - started >= program.timeout:
                exit_code = None  # the watchdog stopped it
            stderr = ran.structured.get("stderr", "")
            result = _run_result(ran.text() if stdout is None else stdout, stderr, exit_code, program,
                                 self.max_output_bytes)  # fmt: skip
        except TimedOut:
            result = RunResult("", "", None, (LimitHit(Limit.TIME, program.timeout, still_running=True),))
        finally:
            after = self._step(session, "post", {"token": step["token"], "pid_file": pid_file})
        return result, _ran(after)

    def _run_bash(
        self, session: _Session, program: Program, step: dict[str, Any], brought: list[tuple[int, str, bytes, bool]]
    ) -> tuple[RunResult, dict[str, Any]]:
        staged = [f".codeexec/in-{step['token']}-{n}" for n in range(len(brought))]
        if brought:  # a command carries no bytes of any size: they go ahead of it
            self._write(session, _blobs(staged, [data for _, _, data, _ in brought]))
        carried = [{"index": i, "target": t, "staged": name, "read_only": ro}
                   for name, (i, t, _, ro) in zip(staged, brought, strict=True)]  # fmt: skip
        args = {**step, "carried": carried, "code": program.code, "args": list(program.args),
                "timeout": program.timeout, "max_output": self.max_output_bytes}  # fmt: skip
        try:
            answer = _ran(self._step(session, "run", args))
        except TimedOut:
            return RunResult("", "", None, (LimitHit(Limit.TIME, program.timeout, still_running=True),)), {}
        done = answer["result"]
        out, err = (base64.b64decode(done[k]).decode(errors="replace") for k in ("stdout", "stderr"))
        return _run_result(out, err, done["exit_code"], program, self.max_output_bytes), answer

    # -- calls -------------------------------------------------------------------------------

    def _step(self, session: _Session, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """One step of vm.py in the session's VM: one executeCommand."""
        args = {**args, "session": session.id}
        if session.fresh:
            args["fresh"] = True  # the first step of a new session links /mnt/data
        command = f"python3 -c {shlex.quote(_VM)} {name} <<'CODEEXEC_ARGS'\n{json.dumps(args)}\nCODEEXEC_ARGS"
        stdout = self.api.invoke(session.agentcore_id, "executeCommand", {"command": command}).structured.get(
            "stdout", ""
        )
        encoded = stdout.rpartition(_VM_MARK)[2]
        try:
            answer: dict[str, Any] = json.loads(base64.b64decode("".join(encoded.split())))
        except ValueError:
            raise BackendUnavailable("AgentCore answered a step with output this service cannot read") from None
        return answer

    def _stat(self, session: _Session, file_id: str) -> FileInfo:
        return _found(self._step(session, "stat", {"file_id": file_id}))

    def _read(self, session: _Session, path: str) -> bytes:
        return self._read_many(session, [path])[path]

    def _read_many(self, session: _Session, paths: list[str]) -> dict[str, bytes]:
        result = self.api.invoke(session.agentcore_id, "readFiles", {"paths": paths})
        resources_ = [block.get("resource") or {} for block in result.content if block.get("type") == "resource"]
        blobs = [_resource_bytes(r) for r in resources_]
        if result.is_error or len(blobs) != len(paths) or any(b is None for b in blobs):
            raise FileNotFound()
        return {path: blob for path, blob in zip(paths, blobs, strict=True) if blob is not None}

    def _write(self, session: _Session, content: list[dict[str, Any]]) -> None:
        if self.api.invoke(session.agentcore_id, "writeFiles", {"content": content}).is_error:
            raise BackendUnavailable("AgentCore could not write the file")


def _first_line(language: str, pre: dict[str, Any], argv: tuple[str, ...]) -> str:
    boot_language = "python" if language == "python" else "javascript"
    literal = repr if boot_language == "python" else json.dumps
    boot = _BOOT[boot_language].format(
        vm=literal(_VM), args=literal(json.dumps(pre).encode() if boot_language == "python" else json.dumps(pre)),
        mark=literal(_VM_MARK), argv=json.dumps(list(argv)),
    )  # fmt: skip
    encoded = base64.b64encode(boot.encode()).decode()
    return _FIRST_LINE[language].format(boot=encoded if language == "python" else json.dumps(encoded))


def _blobs(paths: list[str], blobs: list[bytes]) -> list[dict[str, Any]]:
    return [{"path": path, "blob": blob} for path, blob in zip(paths, blobs, strict=True)]


def _ran(answer: dict[str, Any]) -> dict[str, Any]:
    """A step around a run, or why the run could not happen."""
    refused = answer.get("refused")
    if refused is None:
        return answer
    raise _refusal(refused, BackendUnavailable)


def _refusal(reason: str, otherwise: type[BadRequest] | type[BackendUnavailable]) -> Exception:
    if reason == "busy":
        return BackendUnavailable("the session is busy with another call", retry_after=2)
    if reason.startswith("conflict: "):
        return Conflict(reason.removeprefix("conflict: "))
    return otherwise(reason)


def _found(answer: dict[str, Any]) -> FileInfo:
    if "file" not in answer:
        raise FileNotFound()
    path, size, mtime_ns = answer["file"]
    return FileInfo(str(path), int(size), int(mtime_ns))


def _changes(data: dict[str, Any]) -> Changes:
    return Changes(
        tuple(FileInfo(p, s, m) for p, s, m in data["created"]),
        tuple(FileInfo(p, s, m) for p, s, m in data["modified"]),
        tuple(data["deleted"]),
    )


def _placed(data: dict[str, Any] | None) -> Placed:
    if not data:
        return Placed(None)
    return Placed(data.get("path"), bool(data.get("read_only")), data.get("refused") or "")


def _target(wanted: Input, paths: list[str]) -> str | None:
    with contextlib.suppress(BadRequest):
        return wanted.target(paths[0]) if paths else None
    return None


def _read_within(data: BinaryIO, limit: int) -> bytes:
    blob = data.read(limit + 1)
    if len(blob) > limit:
        raise TooLarge(f"the file is larger than {limit} bytes")
    return blob


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
    top = path.split("/", 1)[0]
    return top.startswith(".") or top in _ENVIRONMENTS


def _resource_bytes(resource: Mapping[str, Any]) -> bytes | None:
    if "blob" in resource:
        return bytes(resource["blob"])
    if "text" in resource:
        return str(resource["text"]).encode()
    return None


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
