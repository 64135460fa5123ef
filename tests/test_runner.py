"""The runner (`python -m codeexec.runner`) and the `runner` backend: its key, its errors
mapped back, bodies streamed both ways, holds across requests, its own reaper.

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
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec import errors
from codeexec.api.app import create_app
from codeexec.reaper import reap
from codeexec.sandbox import make_sandboxes
from codeexec.sandbox.port import Limit, OwnerTag, Program
from codeexec.sandbox.runner import RunnerSandboxes
from codeexec.sandbox.runner.protocol import KEY_HEADER
from codeexec.settings import Settings

from .calls import run, upload
from .conftest import API_KEY
from .serving import RUNNER_KEY, free_port, runner_settings, running_runner

OWNER = OwnerTag("org", "user")


@pytest.fixture
def runner_url(settings: Settings) -> Iterator[str]:
    with running_runner(settings) as (url, _):
        yield url


@pytest.fixture
def sandboxes(settings: Settings, runner_url: str) -> RunnerSandboxes:
    made = make_sandboxes(runner_settings(settings, runner_url))
    assert isinstance(made, RunnerSandboxes)
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
    routes = [("GET", "/sessions"), ("POST", "/sessions"), ("GET", "/sessions/x/files"), ("POST", "/cancels/k")]
    for method, path in routes:
        for headers in ({}, {KEY_HEADER: "wrong"}, {KEY_HEADER: RUNNER_KEY[:-1]}):
            answer = httpx.request(method, f"{runner_url}{path}", headers=headers)
            assert answer.status_code == 401, (method, path, headers)
            assert answer.json()["error"] == "Unauthorized"
    assert httpx.get(f"{runner_url}/sessions", headers={KEY_HEADER: RUNNER_KEY}).status_code == 200


def test_a_runner_without_a_key_refuses_everything(settings: Settings) -> None:
    from codeexec.runner.app import create_runner_app
    from codeexec.runner.build import build_runner

    from .serving import serving

    runner = build_runner(settings)  # RUNNER_KEY unset
    assert runner.key is None
    with serving(create_runner_app(runner)) as url:
        assert httpx.get(f"{url}/sessions", headers={KEY_HEADER: ""}).status_code == 401
        assert httpx.get(f"{url}/sessions", headers={KEY_HEADER: "None"}).status_code == 401


def test_a_wrong_key_is_the_backend_failing_not_the_caller(settings: Settings, runner_url: str) -> None:
    wrong = runner_settings(settings, runner_url).model_copy(update={"runner_key": SecretStr("nope")})
    client = TestClient(create_app(wrong), headers={"X-API-Key": API_KEY})
    answer = client.post("/v1/upload", files={"file": ("a", b"a")})
    # The caller's key was right: a runner refusing the service's key is a 503, never a 401.
    assert answer.status_code == 503
    assert "refused the key" in answer.json()["details"]


def test_errors_cross_as_the_librarys_own(sandboxes: RunnerSandboxes) -> None:
    with pytest.raises(errors.SessionNotFound):
        sandboxes.open("A" * 21, lambda lease: True).__enter__()
    with sandboxes.create(OWNER) as sandbox:
        with pytest.raises(errors.FileNotFound):
            sandbox.stat("missing.txt")
        with pytest.raises(errors.FileNotFound):
            sandbox.open_file("missing.txt")
        with pytest.raises(errors.TooLarge):
            sandbox.write_file("big.bin", io.BytesIO(b"x" * 101), 100)
        assert sandbox.list_files() == []  # the refused write left nothing
        with pytest.raises(errors.BadRequest):
            sandbox.run(Program("cobol", "DISPLAY 'HI'."))
        with pytest.raises(errors.Conflict):
            sandboxes.create(OWNER, session_id=sandbox.id).__enter__()


def test_a_session_the_caller_is_not_admitted_to_is_not_touched(sandboxes: RunnerSandboxes) -> None:
    with sandboxes.create(OWNER) as sandbox:
        session = sandbox.id
    before = sandboxes.lease(session).touched_at
    time.sleep(0.05)
    with pytest.raises(errors.SessionNotFound):
        sandboxes.open(session, lambda lease: False).__enter__()
    assert sandboxes.lease(session).touched_at == before
    with sandboxes.open(session, lambda lease: lease.owner == OWNER):
        pass
    assert sandboxes.lease(session).touched_at > before


def test_bodies_stream_both_ways_without_being_held_whole(sandboxes: RunnerSandboxes) -> None:
    size = 64 << 20
    with sandboxes.create(OWNER) as sandbox:
        tracemalloc.start()
        try:
            sandbox.write_file("big.bin", io.BufferedReader(Stream(size)), size)
            reader, info = sandbox.open_file("big.bin")
            received = 0
            with reader:
                while chunk := reader.read(1 << 20):
                    received += len(chunk)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert (info.size, received) == (size, size)
    # Both ends of both directions run in this process: a whole body would be 64 MiB.
    assert peak < 16 << 20, peak


def test_the_exclusive_hold_spans_requests_and_holds_off_another(sandboxes: RunnerSandboxes) -> None:
    order: list[str] = []
    with sandboxes.create(OWNER) as sandbox:
        session = sandbox.id

    def second() -> None:
        with sandboxes.open(session, lambda lease: True) as other, other.exclusive():
            order.append("second")

    with sandboxes.open(session, lambda lease: True) as first, first.exclusive():
        thread = threading.Thread(target=second)
        thread.start()
        first.write_file("a.txt", io.BytesIO(b"a"), 10)
        time.sleep(0.5)
        first.list_files()
        order.append("first")
    thread.join(timeout=10)
    assert order == ["first", "second"]


def test_the_reaper_keeps_away_while_a_call_has_the_session_open(sandboxes: RunnerSandboxes) -> None:
    later = time.time() + 7200
    with sandboxes.create(OWNER) as sandbox:
        report = reap(sandboxes, idle_timeout=600, clock=lambda: later)
        assert (report.ended, report.skipped) == (0, 1)
        assert sandbox.list_files() == []
    report = reap(sandboxes, idle_timeout=600, clock=lambda: later)
    assert (report.ended, report.skipped) == (1, 0)
    assert list(sandboxes.leases()) == []


def test_end_if_spares_a_session_touched_since_the_reaper_looked(sandboxes: RunnerSandboxes) -> None:
    with sandboxes.create(OWNER) as sandbox:
        session = sandbox.id

    def touched_meanwhile(lease: object) -> bool:
        with sandboxes.open(session, lambda lease: True) as again:
            again.list_files()  # a call came in between the look and the end
        return True

    assert sandboxes.end_if(session, touched_meanwhile) is False
    assert sandboxes.end_if(session, lambda lease: True) is True
    assert sandboxes.end_if(session, lambda lease: True) is False


def test_a_hold_its_caller_abandoned_expires(settings: Settings) -> None:
    from codeexec.runner.app import Runner

    with running_runner(settings) as (url, runner):
        assert isinstance(runner, Runner)
        runner.holds.max_seconds = 1.0
        sandboxes = make_sandboxes(runner_settings(settings, url))
        with sandboxes.create(OWNER) as sandbox:
            session = sandbox.id
        held = httpx.post(f"{url}/sessions/{session}/holds", headers={KEY_HEADER: RUNNER_KEY}).json()
        assert held["hold"]  # and its caller is never heard of again
        started = time.monotonic()
        with sandboxes.open(session, lambda lease: True) as again, again.exclusive():
            waited = time.monotonic() - started
        assert 0.5 < waited < 10


def test_a_cancel_crosses_to_the_run(sandboxes: RunnerSandboxes) -> None:
    key = "runkey_0123456789abcd"
    with sandboxes.create(OWNER) as sandbox:
        threading.Timer(1.0, sandboxes.cancel, [key]).start()
        result = sandbox.run(Program("bash", "sleep 20", timeout=20, run_key=key))
    assert [hit.limit for hit in result.hits] == [Limit.CANCELLED]


def test_a_runner_that_went_away_is_a_503_with_a_retry_hint(settings: Settings) -> None:
    with running_runner(settings) as (url, _):
        app = create_app(runner_settings(settings, url))
    client = TestClient(app, headers={"X-API-Key": API_KEY})
    answer = client.post("/v1/exec", json={"lang": "py", "code": "print(1)"})
    assert answer.status_code == 503
    assert answer.json()["retry_after_seconds"] == 5
    assert answer.headers["retry-after"] == "5"


def test_inside_lambda_the_runner_backend_starts_and_local_still_refuses(
    settings: Settings, runner_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "ApiFunction")
    client = TestClient(create_app(runner_settings(settings, runner_url)), headers={"X-API-Key": API_KEY})
    assert run(client, "print(6 * 7)")["stdout"] == "42\n"
    with pytest.raises(RuntimeError, match="refuses to run inside AWS Lambda"):
        make_sandboxes(settings)


def test_python_m_codeexec_runner_serves_and_reaps_on_its_own_timer(sandbox_root: Path) -> None:
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
        service = Settings(
            code_exec_api_key=API_KEY, sandbox_backend="runner", runner_url=url, runner_key=RUNNER_KEY
        )
        client = TestClient(create_app(service), headers={"X-API-Key": API_KEY})
        session = upload(client, "a.txt", b"hello")["session_id"]
        assert client.get(f"/v1/files/{session}").status_code == 200
        deadline = time.monotonic() + 20
        while client.get(f"/v1/files/{session}").status_code == 200:
            assert time.monotonic() < deadline, "the runner's reaper never ended the idle session"
            time.sleep(2.5)  # longer than the idle limit: the look itself touches it
    finally:
        process.terminate()
        process.wait(timeout=10)
