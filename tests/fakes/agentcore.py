"""A local fake of the AgentCore Code Interpreter data plane, for tests only.

It speaks REST-JSON and event-stream framing closely enough that the real botocore
client, pointed at it by endpoint_url, parses every reply. A session is a temporary
directory; code runs there with subprocess. It is a fake of a sandbox, not a sandbox:
only trusted test programs go through it.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import string
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

_ID_ALPHABET = string.ascii_uppercase + string.digits
# The programs run with this environment only: nothing of the test process leaks in.
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
_STATUS = {
    "ResourceNotFoundException": 404,
    "ValidationException": 400,
    "ThrottlingException": 429,
    "ServiceQuotaExceededException": 402,
    "ConflictException": 409,
    "AccessDeniedException": 403,
    "InternalServerException": 500,
}


@dataclass
class Session:
    id: str
    interpreter: str
    name: str | None
    timeout: int
    created: float
    root: Path
    stopped: bool = False

    def ready(self) -> bool:
        return not self.stopped and time.time() < self.created + self.timeout

    def summary(self) -> dict[str, Any]:
        item = {"codeInterpreterIdentifier": self.interpreter, "sessionId": self.id, "createdAt": _iso(self.created)}
        return item | {"name": self.name, "status": "READY" if self.ready() else "TERMINATED"}


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
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the operations ---------------------------------------------------------------

    def start(self, interpreter: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("name")
        if name is not None and not 1 <= len(name) <= 100:
            raise ApiError("ValidationException", "name must be 1 to 100 characters")
        timeout = int(body.get("sessionTimeoutSeconds", 900))
        if not 1 <= timeout <= 28_800:
            raise ApiError("ValidationException", "sessionTimeoutSeconds must be 1 to 28800")
        session_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(26))
        root = self.root / session_id
        root.mkdir()
        (root / ".profile").write_text("# the environment's own hidden file\n")
        session = Session(session_id, interpreter, name, timeout, time.time(), root)
        with self.lock:
            self.sessions[session_id] = session
        return {"codeInterpreterIdentifier": interpreter, "sessionId": session_id, "createdAt": _iso(session.created)}

    def get(self, interpreter: str, session_id: str) -> dict[str, Any]:
        session = self._session(interpreter, session_id, ready=False)
        return session.summary() | {"sessionTimeoutSeconds": session.timeout}

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
        session = self._session(interpreter, session_id)
        session.stopped = True
        shutil.rmtree(session.root, ignore_errors=True)
        return {"codeInterpreterIdentifier": interpreter, "sessionId": session_id, "lastUpdatedAt": _iso(time.time())}

    def invoke(self, interpreter: str, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        session = self._session(interpreter, session_id)
        tool, arguments = body["name"], body.get("arguments", {})
        self.calls.append(f"invoke {tool}")
        tools = {
            "writeFiles": self._write_files,
            "readFiles": self._read_files,
            "removeFiles": self._remove_files,
            "executeCommand": self._execute_command,
            "executeCode": self._execute_code,
        }
        if tool not in tools:
            raise ApiError("ValidationException", f"this fake does not implement {tool}")
        return tools[tool](session.root, arguments)

    # -- the tools --------------------------------------------------------------------

    def _write_files(self, root: Path, arguments: dict[str, Any]) -> dict[str, Any]:
        for item in arguments["content"]:
            target = _inside(root, item["path"])
            target.parent.mkdir(parents=True, exist_ok=True)
            data = base64.b64decode(item["blob"]) if "blob" in item else item.get("text", "").encode()
            target.write_bytes(data)
        return _result([_text(f"wrote {len(arguments['content'])} files")])

    def _read_files(self, root: Path, arguments: dict[str, Any]) -> dict[str, Any]:
        blocks = []
        for path in arguments["paths"]:
            target = _inside(root, path)
            if not target.is_file():
                return _result([_text(f"no such file: {path}")], is_error=True)
            data = target.read_bytes()
            resource: dict[str, Any] = {"uri": f"file://{target}"}
            try:  # the service answers text files as text, others as blobs
                resource |= {"type": "text", "text": data.decode()}
            except UnicodeDecodeError:
                resource |= {"type": "blob", "blob": data}
            blocks.append({"type": "resource", "resource": resource})
        return _result(blocks)

    def _remove_files(self, root: Path, arguments: dict[str, Any]) -> dict[str, Any]:
        for path in arguments["paths"]:
            target = _inside(root, path)
            if not target.is_file():
                return _result([_text(f"no such file: {path}")], is_error=True)
            target.unlink()
        return _result([_text("removed")])

    def _execute_command(self, root: Path, arguments: dict[str, Any]) -> dict[str, Any]:
        return _process(["bash", "-c", arguments["command"]], root)

    def _execute_code(self, root: Path, arguments: dict[str, Any]) -> dict[str, Any]:
        language = arguments.get("language", "python")
        with tempfile.TemporaryDirectory(prefix="fake-agentcore-code-") as tmp:
            suffix = {"python": "py", "javascript": "js", "typescript": "ts"}[language]
            source = Path(tmp) / f"main.{suffix}"
            source.write_text(arguments["code"])
            if language == "python":
                return _process(["python3", str(source)], root)
            if language == "typescript":
                # Types stripped, not checked (esbuild, as the local backend uses).
                js = source.with_suffix(".js")
                strip = ["esbuild", "--log-level=error", "--platform=node", "--format=cjs", f"--outfile={js}"]
                stripped = _process([*strip, str(source)], root)
                if stripped["isError"]:
                    return stripped
                source = js
            return _process(["node", str(source)], root)

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


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
        self._serve()

    def do_PUT(self) -> None:  # noqa: N802
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # quiet: request lines would only clutter test output

    def _serve(self) -> None:
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
        session_id = query.get("sessionId") or self.headers.get("x-amzn-code-interpreter-session-id", "")
        if route != "POST tools/invoke":
            fake.calls.append(route)
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
            self._reply(200, "application/json", json.dumps(handlers[route]()).encode())
        except ApiError as exc:
            self._error(exc.code, str(exc))

    def _stream(self, session_id: str, result: dict[str, Any], fault: tuple[str, bool] | None) -> None:
        frames = eventstream.event("result", result)
        if fault:  # an error event after the result, as a stream that fails midway would
            member = fault[0][0].lower() + fault[0][1:]  # an error event names its member
            frames += eventstream.exception(member, "injected fault")
        headers = {"x-amzn-code-interpreter-session-id": session_id}
        self._reply(200, "application/vnd.amazon.eventstream", frames, headers)

    def _error(self, code: str, text: str) -> None:
        body = json.dumps({"message": text}).encode()
        self._reply(_STATUS[code], "application/json", body, {"x-amzn-errortype": code})

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

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _inside(root: Path, path: str) -> Path:
    target = (root / path).resolve()
    if not target.is_relative_to(root.resolve()):
        raise ApiError("ValidationException", "the path leads out of the working directory")
    return target


def _process(argv: list[str], cwd: Path) -> dict[str, Any]:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, env=_ENV | {"HOME": str(cwd)}, timeout=120)
    stdout, stderr = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    structured = {"stdout": stdout, "stderr": stderr, "exitCode": done.returncode}
    structured["executionTime"] = time.monotonic() - started
    return _result([_text(stdout)], structured, is_error=done.returncode != 0)


def _result(content: list[dict[str, Any]], structured: dict[str, Any] | None = None, is_error: bool = False) -> dict:
    return {"content": content, "structuredContent": structured or {}, "isError": is_error}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()
