"""A local fake of the AgentCore Code Interpreter data plane, for tests only.

It speaks REST-JSON and event-stream framing closely enough that the real botocore
client, pointed at it by endpoint_url, parses every reply. It is a fake of a sandbox,
not a sandbox: only trusted test programs go through it.

It behaves as AgentCore is documented or recorded to (../shared/FACTS.md):

- Session ids are ULIDs (26 characters of Crockford's base32, a millisecond timestamp
  first); `next_ids` makes the next sessions answer other ids.
- A session is a microVM of its own: every process of a session runs under bubblewrap
  with the host's filesystem and the session's own `/mnt` (empty at start), so a link
  one session makes there is no other session's. writeFiles, readFiles, executeCode and
  executeCommand share the session's working directory, which is not `/mnt/data`; the
  file tools take paths relative to it and refuse absolute ones. It holds a visible
  `log/` folder of the environment's, besides a hidden file.
- executeCode runs JavaScript and TypeScript on Deno unless `runtime` is "nodejs". Deno
  is simulated, distinguishably: the program is an ES module (so `require` is not
  defined) with a `Deno` global, run by Node.
- executeCommand runs on a terminal (a pty): lines end in CRLF, stderr comes in stdout.
- startCommandExecution starts a command on a terminal and answers a task id at once;
  getTask reports it, stopTask kills it.
- listFiles answers a directory's entries as `resource_link` blocks (`uri`, `name`, and a
  file's `size` and `mimeType`): the model's fields for a link; no recorded listing was
  at hand to copy.

Every request it receives, and every reply, error and stream event before it is sent, is
checked against botocore's model of the service (models.py); one that breaks it is answered 500 and kept in
`violations`, which the fake's `with` block raises at its end.
"""

from __future__ import annotations

import base64
import contextlib
import json
import mimetypes
import os
import pty
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from . import eventstream
from .models import ModelViolation, check_error, check_event, check_reply, check_request

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# The programs run with this environment only: nothing of the test process leaks in.
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
_SERVICE = "bedrock-agentcore"
_STATUS = {
    "ResourceNotFoundException": 404,
    "ValidationException": 400,
    "ThrottlingException": 429,
    "ServiceQuotaExceededException": 402,
    "ConflictException": 409,
    "AccessDeniedException": 403,
    "InternalServerException": 500,
}
_OPERATIONS = {
    "PUT sessions/start": "StartCodeInterpreterSession",
    "GET sessions/get": "GetCodeInterpreterSession",
    "POST sessions/list": "ListCodeInterpreterSessions",
    "PUT sessions/stop": "StopCodeInterpreterSession",
    "POST tools/invoke": "InvokeCodeInterpreter",
}
# Longer than any test run; a process still running then is killed.
_PROCESS_SECONDS = 120
# What the simulated Deno adds before a module's code.
_DENO_PRELUDE = 'globalThis.Deno = Object.freeze({ version: { deno: "2 (simulated)" }, pid: process.pid });\n'


def new_ulid() -> str:
    """A ULID as AgentCore makes them: 48 bits of milliseconds, then 80 random bits."""
    value = (int(time.time() * 1000) << 80) | secrets.randbits(80)
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


@dataclass
class Task:
    """A command started by startCommandExecution, running on a terminal of its own."""

    id: str
    process: subprocess.Popen[bytes]
    output: bytearray = field(default_factory=bytearray)
    status: str = "working"  # then completed, failed or canceled

    def report(self) -> dict[str, Any]:
        structured: dict[str, Any] = {"taskId": self.id, "taskStatus": self.status, "stdout": _text_of(self.output)}
        if self.status != "working":
            structured["stderr"] = ""
        if self.process.returncode is not None:  # a task stopped a moment ago may not be reaped yet
            structured["exitCode"] = self.process.returncode
        return _result([_text(f"task {self.id} {self.status}")], structured)


@dataclass
class Session:
    id: str
    interpreter: str
    name: str | None
    timeout: int
    created: float
    home: Path  # the session's VM: its working directory and its own /mnt
    updated: float = 0.0
    stopped: bool = False
    tasks: dict[str, Task] = field(default_factory=dict)

    @property
    def workdir(self) -> Path:
        return self.home / "work"

    def ready(self) -> bool:
        return not self.stopped and time.time() < self.created + self.timeout

    def record(self) -> dict[str, Any]:
        """What Get answers (and, with lastUpdatedAt, what a listing's item carries)."""
        record = {"codeInterpreterIdentifier": self.interpreter, "sessionId": self.id, "createdAt": _iso(self.created)}
        record["status"] = "READY" if self.ready() else "TERMINATED"
        return record | ({"name": self.name} if self.name is not None else {})

    def summary(self) -> dict[str, Any]:
        return self.record() | {"lastUpdatedAt": _iso(max(self.updated, self.created))}

    def in_vm(self, argv: list[str]) -> list[str]:
        """argv as a process of this session's VM: the host's files, the VM's own /mnt."""
        mnt = self.home / "mnt"
        return ["bwrap", "--dev-bind", "/", "/", "--bind", str(mnt), "/mnt", "--chdir", str(self.workdir), *argv]

    def spawn(self, argv: list[str], **streams: Any) -> subprocess.Popen[bytes]:
        env = _ENV | {"HOME": str(self.workdir)}
        return subprocess.Popen(self.in_vm(argv), env=env, start_new_session=True, **streams)

    def end(self) -> None:
        self.stopped, self.updated = True, time.time()
        for task in self.tasks.values():
            _kill(task.process)
        shutil.rmtree(self.home, ignore_errors=True)


class ApiError(Exception):
    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code


@dataclass
class FakeAgentCore:
    root: Path
    sessions: dict[str, Session] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)  # "PUT sessions/start", "invoke readFiles", ...
    # Errors to answer instead of the next calls: (code, whether inside the event stream).
    faults: list[tuple[str, bool]] = field(default_factory=list)
    # Replies that broke botocore's model of the service (answered 500 instead).
    violations: list[str] = field(default_factory=list)
    # Ids the next started sessions get instead of fresh ULIDs.
    next_ids: list[str] = field(default_factory=list)
    # The arguments of every executeCode call, in order.
    executed: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the operations ---------------------------------------------------------------

    def start(self, interpreter: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("name")
        if name is not None and not 1 <= len(name) <= 100:
            raise ApiError("ValidationException", "name must be 1 to 100 characters")
        timeout = int(body.get("sessionTimeoutSeconds", 900))
        if not 1 <= timeout <= 28_800:
            raise ApiError("ValidationException", "sessionTimeoutSeconds must be 1 to 28800")
        with self.lock:
            session_id = self.next_ids.pop(0) if self.next_ids else new_ulid()
        home = Path(tempfile.mkdtemp(prefix="vm-", dir=self.root))
        session = Session(session_id, interpreter, name, timeout, time.time(), home)
        (home / "mnt").mkdir()
        (session.workdir / "log").mkdir(parents=True)
        (session.workdir / "log" / "interpreter.log").write_text("session started\n")
        (session.workdir / ".profile").write_text("# the environment's own hidden file\n")
        with self.lock:
            self.sessions[session_id] = session
        return {"codeInterpreterIdentifier": interpreter, "sessionId": session_id, "createdAt": _iso(session.created)}

    def get(self, interpreter: str, session_id: str) -> dict[str, Any]:
        session = self._session(interpreter, session_id, ready=False)
        return session.record() | {"sessionTimeoutSeconds": session.timeout}

    def list(self, interpreter: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            found = [s for s in self.sessions.values() if s.interpreter == interpreter]
        if body.get("status"):
            found = [s for s in found if s.summary()["status"] == body["status"]]
        start = int(body.get("nextToken") or 0)
        end = start + int(body.get("maxResults", 10))
        page: dict[str, Any] = {"items": [s.summary() for s in found[start:end]]}
        return page | ({"nextToken": str(end)} if end < len(found) else {})

    def stop(self, interpreter: str, session_id: str) -> dict[str, Any]:
        self._session(interpreter, session_id).end()
        return {"codeInterpreterIdentifier": interpreter, "sessionId": session_id, "lastUpdatedAt": _iso(time.time())}

    def invoke(self, interpreter: str, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        session = self._session(interpreter, session_id)
        tool, arguments = body["name"], body.get("arguments", {})
        self.calls.append(f"invoke {tool}")
        tools = {
            "writeFiles": self._write_files,
            "readFiles": self._read_files,
            "listFiles": self._list_files,
            "removeFiles": self._remove_files,
            "executeCommand": self._execute_command,
            "executeCode": self._execute_code,
            "startCommandExecution": self._start_command,
            "getTask": self._get_task,
            "stopTask": self._stop_task,
        }
        if tool not in tools:
            raise ApiError("ValidationException", f"this fake does not implement {tool}")
        return tools[tool](session, arguments)

    # -- the tools --------------------------------------------------------------------

    def _write_files(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        for item in arguments["content"]:
            target = _inside(session.workdir, item["path"])
            target.parent.mkdir(parents=True, exist_ok=True)
            data = base64.b64decode(item["blob"]) if "blob" in item else item.get("text", "").encode()
            target.write_bytes(data)
        return _result([_text(f"wrote {len(arguments['content'])} files")])

    def _read_files(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        blocks = []
        for path in arguments["paths"]:
            target = _inside(session.workdir, path)
            if not target.is_file():
                return _result([_text(f"no such file: {path}")], is_error=True)
            data = target.read_bytes()
            resource: dict[str, Any] = {"uri": f"file://{target}", "mimeType": _mime_type(target)}
            try:  # the service answers text files as text, others as blobs
                resource |= {"type": "text", "text": data.decode()}
            except UnicodeDecodeError:
                resource |= {"type": "blob", "blob": data}
            blocks.append({"type": "resource", "resource": resource})
        return _result(blocks)

    def _list_files(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        directory = _inside(session.workdir, arguments.get("directoryPath") or ".")
        if not directory.is_dir():
            return _result([_text(f"no such directory: {arguments.get('directoryPath')}")], is_error=True)
        blocks = []
        for entry in sorted(directory.iterdir()):
            link: dict[str, Any] = {"type": "resource_link", "uri": f"file://{entry}", "name": entry.name}
            if entry.is_dir():
                link |= {"uri": f"file://{entry}/", "description": "directory"}
            else:
                link |= {"size": entry.stat().st_size, "mimeType": _mime_type(entry)}
            blocks.append(link)
        return _result(blocks)

    def _remove_files(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        for path in arguments["paths"]:
            target = _inside(session.workdir, path)
            if not target.is_file():
                return _result([_text(f"no such file: {path}")], is_error=True)
            target.unlink()
        return _result([_text("removed")])

    def _execute_command(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        output, exit_code = _on_terminal(session, ["bash", "-c", arguments["command"]])
        stdout = _text_of(output)
        structured = {"stdout": stdout, "stderr": "", "exitCode": exit_code, "executionTime": _ms_since(started)}
        return _result([_text(stdout)], structured, is_error=exit_code != 0)

    def _start_command(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        master, slave = pty.openpty()
        process = session.spawn(["bash", "-c", arguments["command"]], stdin=slave, stdout=slave, stderr=slave)
        os.close(slave)
        task = Task(secrets.token_hex(8), process)
        session.tasks[task.id] = task
        threading.Thread(target=_follow, args=(task, master), daemon=True).start()
        return _result([_text(f"started task {task.id}")], {"taskId": task.id, "taskStatus": "working"})

    def _get_task(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        return self._task(session, arguments).report()

    def _stop_task(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        task = self._task(session, arguments)
        if task.status == "working":
            _kill(task.process)
            task.status = "canceled"
        return task.report()

    def _task(self, session: Session, arguments: dict[str, Any]) -> Task:
        task = session.tasks.get(arguments.get("taskId", ""))
        if task is None:
            raise ApiError("ResourceNotFoundException", "no such task")
        return task

    def _execute_code(self, session: Session, arguments: dict[str, Any]) -> dict[str, Any]:
        self.executed.append(arguments)
        language = arguments.get("language", "python")
        runtime = arguments.get("runtime") or ("python" if language == "python" else "deno")
        with tempfile.TemporaryDirectory(prefix="fake-agentcore-code-") as tmp:
            if language == "python":
                source = Path(tmp) / "main.py"
                source.write_text(arguments["code"])
                # A kernel started in the working directory: its modules import.
                return _piped(session, ["env", f"PYTHONPATH={session.workdir}", "python3", str(source)])
            # A Node program is CommonJS (require, no Deno); a Deno one an ES module with a Deno global.
            module = "cjs" if runtime == "nodejs" else "esm"
            program = Path(tmp) / f"main.{'c' if module == 'cjs' else 'm'}js"
            program.write_text(arguments["code"])
            if language == "typescript":  # types stripped, not checked
                source = program.rename(Path(tmp) / "main.ts")
                strip = ["esbuild", "--log-level=error", "--platform=node", f"--format={module}"]
                stripped = _piped(session, [*strip, f"--outfile={program}", str(source)])
                if stripped["isError"]:
                    return stripped
            if module == "esm":
                program.write_text(_DENO_PRELUDE + program.read_text())
            return _piped(session, ["node", str(program)])

    # -- plumbing ---------------------------------------------------------------------

    def _session(self, interpreter: str, session_id: str, ready: bool = True) -> Session:
        with self.lock:
            session = self.sessions.get(session_id)
        if session is None or session.interpreter != interpreter or (ready and not session.ready()):
            raise ApiError("ResourceNotFoundException", "no such session")
        return session

    def take_fault(self, in_stream: bool) -> tuple[str, bool] | None:
        """The next fault, unless it is one inside an event stream and this reply has none."""
        with self.lock:
            if not self.faults or (self.faults[0][1] and not in_stream):
                return None
            return self.faults.pop(0)

    def close(self) -> None:
        with self.lock:
            sessions = list(self.sessions.values())
        for session in sessions:
            session.end()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    operation: str | None = None  # the AgentCore operation of the request being answered

    def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
        self._serve()

    def do_PUT(self) -> None:  # noqa: N802
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # quiet: request lines would only clutter test output

    def _serve(self) -> None:
        try:
            self._answer()
        except ModelViolation:
            self._reply(500, "application/json", b'{"message": "the fake broke the model"}')

    def _answer(self) -> None:
        fake = self.server.fake
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if not self.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256 "):
            return self._error("AccessDeniedException", "the request is not signed")
        if len(parts) < 3 or parts[0] != "code-interpreters":
            return self._error("ValidationException", "unknown route")
        interpreter, route = parts[1], f"{self.command} {'/'.join(parts[2:])}"
        self.operation = _OPERATIONS.get(route)
        session_id = query.get("sessionId") or self.headers.get("x-amzn-code-interpreter-session-id", "")
        if route != "POST tools/invoke":
            fake.calls.append(route)
        if self.operation is not None:
            self._checked(check_request, _SERVICE, self.operation, body)
        fault = fake.take_fault(in_stream=route == "POST tools/invoke")
        if fault and not fault[1]:
            return self._error(fault[0], "injected fault")
        try:
            if route == "POST tools/invoke":
                return self._stream(session_id, fake.invoke(interpreter, session_id, body), fault)
            handlers = {
                "PUT sessions/start": lambda: fake.start(interpreter, body),
                "GET sessions/get": lambda: fake.get(interpreter, session_id),
                "POST sessions/list": lambda: fake.list(interpreter, body),
                "PUT sessions/stop": lambda: fake.stop(interpreter, session_id),
            }
            if route not in handlers:
                return self._error("ValidationException", "unknown route")
            reply = handlers[route]()
            self._checked(check_reply, _SERVICE, self.operation, reply)
            self._reply(200, "application/json", json.dumps(reply).encode())
        except ApiError as exc:
            self._error(exc.code, str(exc))

    def _stream(self, session_id: str, result: dict[str, Any], fault: tuple[str, bool] | None) -> None:
        self._checked(check_event, _SERVICE, "InvokeCodeInterpreter", "result", _wire(result))
        frames = eventstream.event("result", result)
        if fault:  # an error event after the result, as a stream that fails midway would
            member = fault[0][0].lower() + fault[0][1:]  # an error event names its member
            error = _error_body(fault[0], "injected fault")
            self._checked(check_event, _SERVICE, "InvokeCodeInterpreter", member, error)
            frames += eventstream.exception(member, error)
        headers = {"x-amzn-code-interpreter-session-id": session_id}
        self._reply(200, "application/vnd.amazon.eventstream", frames, headers)

    def _error(self, code: str, text: str) -> None:
        body = _error_body(code, text)
        self._checked(check_error, _SERVICE, self.operation, code, _STATUS[code], body)
        self._reply(_STATUS[code], "application/json", json.dumps(body).encode(), {"x-amzn-errortype": code})

    def _checked(self, check: Any, *args: Any) -> None:
        """`check(*args)`, its violation remembered (and raised: the reply is not sent)."""
        try:
            check(*args)
        except ModelViolation as exc:
            self.server.fake.violations.append(str(exc))
            raise

    def _reply(self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeAgentCore) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class RunningFake:
    """The fake served on 127.0.0.1 in a thread, for a `with` block."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.fake = FakeAgentCore(root)
        self._server = _Server(self.fake)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RunningFake:
        self._thread.start()
        return self

    def __exit__(self, failed: object, *exc: object) -> None:
        self.fake.close()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
        if self.fake.violations and failed is None:
            raise ModelViolation("; ".join(self.fake.violations))


def _inside(root: Path, path: str) -> Path:
    # Recorded: an absolute path is refused as "potential path traversal".
    target = (root / path).resolve()
    if path.startswith("/") or not target.is_relative_to(root.resolve()):
        raise ApiError("ValidationException", "Invalid file path: potential path traversal detected")
    return target


def _on_terminal(session: Session, argv: list[str]) -> tuple[bytes, int]:
    """Run argv with a pty as its stdin, stdout and stderr; its output as the terminal
    shows it (the line discipline turns each newline into CRLF), and its exit code."""
    master, slave = pty.openpty()
    process = session.spawn(argv, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    task = Task("", process)
    _follow(task, master)
    return bytes(task.output), process.returncode


def _follow(task: Task, master: int) -> None:
    """Read the task's terminal until its shell has ended and nothing more comes."""
    deadline = time.monotonic() + _PROCESS_SECONDS
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: nothing holds the terminal any more
                    break
                if not chunk:
                    break
                task.output += chunk
            elif task.process.poll() is not None:
                break  # a background process may still hold the terminal: a terminal does not wait for it
        else:
            _kill(task.process)
    finally:
        os.close(master)
        task.process.wait()
        if task.status == "working":
            task.status = "completed" if task.process.returncode == 0 else "failed"


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group: bwrap, the shell, what it started
        os.killpg(process.pid, signal.SIGKILL)


def _piped(session: Session, argv: list[str]) -> dict[str, Any]:
    """Run argv with stdout and stderr apart (executeCode reports them apart)."""
    started = time.monotonic()
    process = session.spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = process.communicate(timeout=_PROCESS_SECONDS)
    except subprocess.TimeoutExpired:
        _kill(process)
        out, err = process.communicate()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    structured = {"stdout": stdout, "stderr": stderr, "exitCode": process.returncode}
    structured["executionTime"] = _ms_since(started)
    return _result([_text(stdout)], structured, is_error=process.returncode != 0)


def _text_of(output: bytes | bytearray) -> str:
    return bytes(output).decode(errors="replace")


def _ms_since(started: float) -> float:
    return (time.monotonic() - started) * 1000


def _result(content: list[dict[str, Any]], structured: dict[str, Any] | None = None, is_error: bool = False) -> dict:
    return {"content": content, "structuredContent": structured or {}, "isError": is_error}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _iso(epoch: float) -> str:
    """A timestamp as AWS writes them: UTC, milliseconds, `Z`."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _mime_type(path: Path) -> str:
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def _error_body(code: str, text: str) -> dict[str, Any]:
    """An error's JSON: its message, and why, where the model requires a reason."""
    return {"message": text} | ({"reason": "FieldValidationFailed"} if code == "ValidationException" else {})


def _wire(value: Any) -> Any:
    """A reply as it goes on the wire (blobs in base64), for the model's check."""
    return json.loads(eventstream.to_json(value))
