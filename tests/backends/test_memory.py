"""What the `memory` backend does beside the contract (tests/backends/test_backends.py runs that on
it too): it says it is no sandbox, it stays out of Lambda, and a run's processes, its
directories and the paths it refuses are as in a sandbox's session. No root: it is the
light tier's backend."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.sandbox import make_sandboxes
from codeexec.settings import Settings

from ..calls import names, run
from ..conftest import API_KEY
from ..serving import Services


@pytest.fixture
def client(memory_settings: Settings, services: Services) -> TestClient:
    return TestClient(create_app(services(memory_settings)), headers={"X-API-Key": API_KEY})


def test_it_says_it_is_not_a_sandbox_as_it_starts(
    memory_settings: Settings, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "codeexec.memory"):
        services(memory_settings)
    assert "not a sandbox: for tests and trying the API" in caplog.text


def test_it_refuses_to_run_inside_lambda(memory_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "codeexec-api")
    with pytest.raises(RuntimeError, match="not a sandbox"):
        make_sandboxes(memory_settings)


def test_what_a_program_left_running_ends_with_it(client: TestClient, tmp_path: Path) -> None:
    """As a sandbox's processes end with it: the program's process group is killed as it ends."""
    ticks = tmp_path / "ticks"  # outside the session: no isolation keeps the program from it
    code = f"(while true; do printf . >> {ticks}; sleep 0.05; done) > /dev/null 2>&1 & sleep 0.3"
    assert run(client, code, lang="bash")["stderr"] == ""  # the run ended with its program, not at its limit
    counted = ticks.stat().st_size
    time.sleep(0.5)
    assert ticks.stat().st_size == counted > 0


def test_the_directories_a_run_made_are_there_for_the_next(client: TestClient) -> None:
    session = run(client, "mkdir -p plots/empty; ln -s /etc linked; echo x > plots/a.txt", lang="bash")["session_id"]
    body = run(client, "find . | sort; test -e linked || echo no link", lang="bash", session_id=session)
    assert body["stdout"] == ".\n./plots\n./plots/a.txt\n./plots/empty\nno link\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads what a program made unreadable: the case is a user's")
def test_what_a_program_made_unreadable_is_still_its_sessions(client: TestClient) -> None:
    code = "mkdir -p d; echo a > d/a.txt; echo b > b.txt; chmod 000 d/a.txt b.txt d; chmod 000 ."
    session = run(client, code, lang="bash")["session_id"]
    body = run(client, "cat d/a.txt b.txt", lang="bash", session_id=session)
    assert (body["stdout"], names(body)) == ("a\nb\n", [])


def test_a_path_no_filesystem_would_take_is_refused_as_on_local(client: TestClient) -> None:
    session = client.post("/v1/upload", files={"file": ("a", b"file")}).json()["session_id"]
    for taken in ("a/b.txt", "a/b/c.txt"):  # under a file
        reply = client.post("/v1/upload", data={"session_id": session}, files={"file": (taken, b"x")})
        assert (reply.status_code, reply.json()["details"]) == (
            400,
            "a part of the file's path is a file, not a directory",
        )
    run(client, "mkdir d; echo x > d/x.txt", lang="bash", session_id=session)
    reply = client.post("/v1/upload", data={"session_id": session}, files={"file": ("d", b"x")})  # a directory's name
    assert (reply.status_code, reply.json()["details"]) == (400, "a directory has that name")
    assert client.get(f"/v1/download/{session}/a").content == b"file"
