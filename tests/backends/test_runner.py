"""The runner (`python -m codeexec.runner`) and the `runner` backend: its key, access
decided at the runner, its errors mapped back, bodies streamed both ways as frames, holds
that live inside one request, its own reaper.

The API-level suites run through a runner too: `make test-runner` (CODEEXEC_TEST_BACKEND=runner)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec import errors, ids
from codeexec.api.app import create_app
from codeexec.sandbox import make_sandboxes
from codeexec.sandbox.local import LocalSandboxes
from codeexec.sandbox.port import Access, Intent, Keep, Limit, OwnerTag, Placement, Program, Ran, Run
from codeexec.sandbox.remote import RunnerFleet, protocol
from codeexec.sandbox.remote.protocol import KEY_HEADER, frames, frames_of, run_json
from codeexec.settings import Settings

from ..calls import run, upload
from ..conftest import API_KEY
from ..helpers.processes import modules_imported
from ..serving import RUNNER_KEY, Services, free_port, runner_settings, running_runner

OWNER = OwnerTag("org", "user")
OWNER_B = OwnerTag("org", "someone else")


@pytest.fixture
def runner_url(settings: Settings) -> Iterator[str]:
    with running_runner(settings) as (url, _):
        yield url


@pytest.fixture
def sandboxes(settings: Settings, runner_url: str, services: Services) -> RunnerFleet:
    made = services(runner_settings(settings, runner_url)).sandboxes
    assert isinstance(made, RunnerFleet)
    return made


class Stream(io.RawIOBase):
    """`size` bytes of a repeating pattern, made as they are read."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(i % 251 for i in range(n)) if n < 1024 else (b"\x07" * n)
        self.left -= n
        return n


def test_every_route_but_health_needs_the_runners_key(runner_url: str) -> None:
    assert httpx.get(f"{runner_url}/health").status_code == 200
    routes = [("GET", "/sessions/x"), ("POST", "/reads"), ("GET", "/sessions/x/files"), ("POST", "/cancels/k")]
    for method, path in routes:
        for headers in ({}, {KEY_HEADER: "wrong"}, {KEY_HEADER: RUNNER_KEY[:-1]}):
            answer = httpx.request(method, f"{runner_url}{path}", headers=headers)
            assert answer.status_code == 401, (method, path, headers)
            assert answer.json()["error"] == "Unauthorized"
    assert httpx.get(f"{runner_url}/sessions/{'A' * 21}", headers={KEY_HEADER: RUNNER_KEY}).status_code == 404


def test_a_runner_without_a_key_refuses_everything(settings: Settings) -> None:
    from codeexec.runner.app import create_runner_app
    from codeexec.runner.build import build_runner

    from ..serving import serving

    runner = build_runner(settings)  # RUNNER_KEY unset
    assert runner.key is None
    with serving(create_runner_app(runner)) as url:
        assert httpx.get(f"{url}/sessions/x", headers={KEY_HEADER: ""}).status_code == 401
        assert httpx.get(f"{url}/sessions/x", headers={KEY_HEADER: "None"}).status_code == 401


def test_a_wrong_key_is_the_backend_failing_not_the_caller(
    settings: Settings, runner_url: str, services: Services
) -> None:
    wrong = runner_settings(settings, runner_url).model_copy(update={"runner_key": SecretStr("nope")})
    client = TestClient(create_app(services(wrong)), headers={"X-API-Key": API_KEY})
    answer = client.post("/v1/upload", files={"file": ("a", b"a")})
    # The caller's key was right: a runner refusing the service's key is a 503, never a 401.
    assert answer.status_code == 503
    assert "refused the key" in answer.json()["details"]


def land(owner: OwnerTag = OWNER, *sessions: str) -> Placement:
    return Placement(Access(owner, Intent.LAND), sessions, new=not sessions)


def new_session(sandboxes: RunnerFleet, files: dict[str, bytes] | None = None) -> str:
    items = [(path, io.BytesIO(data)) for path, data in (files or {"a.txt": b"a"}).items()]
    return sandboxes.write_files(Placement(Access(OWNER, Intent.CHANGE)), items, 1 << 20)


def test_errors_cross_as_the_librarys_own(sandboxes: RunnerFleet) -> None:
    read = Access(OWNER, Intent.READ)
    with pytest.raises(errors.SessionNotFound):
        sandboxes.list_files("A" * 21, read)
    session = new_session(sandboxes)
    with pytest.raises(errors.FileNotFound):
        sandboxes.stat_file(session, read, "missing.txt")
    with pytest.raises(errors.FileNotFound):
        sandboxes.read_file(session, read, "missing.txt")
    into = Placement(Access(OWNER, Intent.CHANGE), (session,), new=False)
    with pytest.raises(errors.TooLarge):  # all or none: the first file is not kept either
        sandboxes.write_files(into, [("b.txt", io.BytesIO(b"b")), ("big.bin", io.BytesIO(b"x" * 101))], 100)
    assert [f.path for f in sandboxes.list_files(session, read)] == ["a.txt"]
    with pytest.raises(errors.BadRequest):
        sandboxes.execute(Run(Program("cobol", "DISPLAY 'HI'."), land(OWNER, session)))
    named = Placement(Access(OWNER, Intent.LAND), named=session)  # a session of the same id exists: not for landing
    with pytest.raises(errors.Conflict):
        sandboxes.execute(Run(Program("bash", "true"), replace(named, access=Access(OWNER_B, Intent.LAND))))


def test_a_download_and_a_record_that_take_long_are_kept_alive(
    settings: Settings, runner_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers of bytes are kept alive as JSON ones are: silent past SILENT_SECONDS, a
    download was a 503, and the runner was taken for dead."""
    monkeypatch.setattr(protocol, "SILENT_SECONDS", 1.2)  # the client's read timeout, for a quicker test
    sandboxes = make_sandboxes(runner_settings(settings, runner_url))
    assert isinstance(sandboxes, RunnerFleet)
    read = Access(OWNER, Intent.READ)
    session = new_session(sandboxes, {"a.txt": b"kept"})
    keep = Keep(ids.derived_id("record"), b"the record")
    sandboxes.execute(Run(Program("bash", "true"), land(OWNER, session), keep=keep))
    for name in ("read_file", "read_record"):
        real = getattr(LocalSandboxes, name)

        def slow(*args: object, real: Any = real) -> Any:
            time.sleep(protocol.SILENT_SECONDS + 0.5)
            return real(*args)

        monkeypatch.setattr(LocalSandboxes, name, slow)
    started = time.monotonic()
    with sandboxes.read_file(session, read, "a.txt").reader as reader:  # type: ignore[union-attr]
        assert reader.read() == b"kept"
    assert sandboxes.read_record(session, read, keep.key) == b"the record"
    assert time.monotonic() - started > 2 * protocol.SILENT_SECONDS
    with pytest.raises(errors.FileNotFound):  # a late error crosses as itself
        sandboxes.read_file(session, read, "missing.txt")
    sandboxes.close()


def test_a_session_the_caller_is_not_admitted_to_is_not_touched(sandboxes: RunnerFleet) -> None:
    session = new_session(sandboxes)
    before = sandboxes.lease(session).touched_at
    time.sleep(0.05)
    with pytest.raises(errors.SessionNotFound):
        sandboxes.list_files(session, Access(OWNER_B, Intent.READ))  # decided at the runner, in the one request
    assert sandboxes.lease(session).touched_at == before
    sandboxes.list_files(session, Access(OWNER, Intent.READ))
    assert sandboxes.lease(session).touched_at > before


def test_bodies_stream_both_ways_without_being_held_whole(sandboxes: RunnerFleet) -> None:
    size = 64 << 20
    tracemalloc.start()
    try:
        session = sandboxes.write_files(
            Placement(Access(OWNER, Intent.CHANGE)), [("big.bin", io.BufferedReader(Stream(size)))], size
        )
        opened = sandboxes.read_file(session, Access(OWNER, Intent.READ), "big.bin")
        received = 0
        assert opened.reader is not None
        with opened.reader:
            while chunk := opened.reader.read(1 << 20):
                received += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (opened.info.size, received) == (size, size)
    # Both ends of both directions run in this process: a whole body would be 64 MiB.
    assert peak < 16 << 20, peak


def test_two_runs_in_one_session_take_turns_and_each_reports_its_own_files(sandboxes: RunnerFleet) -> None:
    session = new_session(sandboxes)
    reports: dict[str, Ran] = {}

    def first() -> None:
        reports["first"] = sandboxes.execute(Run(Program("bash", "sleep 1; echo 1 > first.txt"), land(OWNER, session)))

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(0.3)
    second = sandboxes.execute(Run(Program("bash", "echo 2 > second.txt"), land(OWNER, session)))
    thread.join(timeout=30)
    assert [f.path for f in reports["first"].changes.created] == ["first.txt"]
    assert [f.path for f in second.changes.created] == ["second.txt"]


def test_a_caller_that_goes_away_mid_run_holds_nothing(settings: Settings, services: Services) -> None:
    """The hold lives inside the request: a caller that gives up (its function was
    stopped) leaves the session to the next call once its run has ended."""
    with running_runner(settings) as (url, _):
        sandboxes = services(runner_settings(settings, url)).sandboxes
        session = new_session(sandboxes)
        run = Run(Program("bash", "sleep 2", timeout=20), land(OWNER, session))
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/runs", headers={KEY_HEADER: RUNNER_KEY}, timeout=0.5,
                       content=b"".join(frames([(run_json(run), None)])))  # fmt: skip
        started = time.monotonic()
        sandboxes.execute(Run(Program("bash", "true"), land(OWNER, session)))
        assert time.monotonic() - started < 10


def test_a_cancel_crosses_to_the_run(sandboxes: RunnerFleet) -> None:
    key = "runkey_0123456789abcd"
    session = new_session(sandboxes)
    threading.Timer(1.0, sandboxes.cancel, [key]).start()
    ran = sandboxes.execute(Run(Program("bash", "sleep 20", timeout=20, run_key=key), land(OWNER, session)))
    assert [hit.limit for hit in ran.result.hits] == [Limit.CANCELLED]


def test_frames_carry_files_of_any_size_one_after_another() -> None:
    bodies = [b"", b"x" * 100_000, bytes(range(256)) * 3]
    stream = b"".join(frames([({"n": n}, io.BytesIO(body)) for n, body in enumerate(bodies)]))
    pieces = io.BytesIO(stream)
    read_back = [(header["n"], reader.read()) for header, reader in frames_of(lambda size: pieces.read(7))]
    assert read_back == list(enumerate(bodies))
    # A body the reader leaves unread is skipped; a stream cut short is refused.
    pieces = io.BytesIO(stream)
    assert [header["n"] for header, _ in frames_of(pieces.read)] == [0, 1, 2]
    cut = io.BytesIO(stream[:-3])
    with pytest.raises(errors.BadRequest):
        list(frames_of(cut.read))


def test_a_runner_that_went_away_is_a_503_with_a_retry_hint(settings: Settings, services: Services) -> None:
    with running_runner(settings) as (url, _):
        app = create_app(services(runner_settings(settings, url)))
    client = TestClient(app, headers={"X-API-Key": API_KEY})
    answer = client.post("/v1/exec", json={"lang": "py", "code": "print(1)"})
    assert answer.status_code == 503
    assert answer.json()["retry_after_seconds"] == 5
    assert answer.headers["retry-after"] == "5"


def test_inside_lambda_the_runner_backend_starts_and_local_still_refuses(
    settings: Settings, runner_url: str, monkeypatch: pytest.MonkeyPatch, services: Services
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "ApiFunction")
    client = TestClient(create_app(services(runner_settings(settings, runner_url))), headers={"X-API-Key": API_KEY})
    assert run(client, "print(6 * 7)")["stdout"] == "42\n"
    with pytest.raises(RuntimeError, match="refuses to run inside AWS Lambda"):
        make_sandboxes(settings)


def test_python_m_codeexec_runner_serves_and_reaps_on_its_own_timer(sandbox_root: Path, services: Services) -> None:
    port = free_port()
    env = {
        **os.environ,
        "RUNNER_KEY": RUNNER_KEY,
        "RUNNER_PORT": str(port),
        "SANDBOX_ROOT": str(sandbox_root),
        "IDLE_TIMEOUT_SECONDS": "2",
        "REAP_INTERVAL_SECONDS": "0.5",
    }
    env.pop("CODE_EXEC_API_KEY", None)
    process = subprocess.Popen([sys.executable, "-m", "codeexec.runner"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert "Sandbox runner on" in process.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        through_it = Settings(
            code_exec_api_key=API_KEY, sandbox_backend="runner", runner_url=url, runner_key=RUNNER_KEY
        )
        client = TestClient(create_app(services(through_it)), headers={"X-API-Key": API_KEY})
        session = upload(client, "a.txt", b"hello")["session_id"]
        assert client.get(f"/v1/files/{session}").status_code == 200
        deadline = time.monotonic() + 20
        while client.get(f"/v1/files/{session}").status_code == 200:
            assert time.monotonic() < deadline, "the runner's reaper never ended the idle session"
            time.sleep(2.5)  # longer than the idle limit: the look itself touches it
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_runner_imports_neither_the_api_nor_the_embedded_server() -> None:
    """What a MicroVM starts: the port over HTTP, without FastAPI's import time."""
    layers = ("fastapi", "codeexec.api", "codeexec.server", "codeexec.sessions", "codeexec.programmatic")
    assert modules_imported("codeexec.runner.__main__", layers) == []
