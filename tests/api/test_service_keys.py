"""Issue 41, item 2: named service keys from a file (CODE_EXEC_API_KEYS_FILE), each with its
name in the logs and the metrics, its own organization and limits, read again when the file
changes (a Kubernetes Secret's symlink swap), so a key rotates with an overlap and no restart."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from codeexec.api.app import create_app
from codeexec.service_keys import CHECK_SECONDS, key_hash
from codeexec.settings import Settings

from ..serving import Services


def line(name: str, key: str, **limits: object) -> str:
    return json.dumps({"name": name, "sha256": key_hash(key), **limits})


class MountedSecret:
    """A file as Kubernetes mounts a Secret's key: a symlink into a directory that an update
    replaces whole, by swapping the `..data` link."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.generation = 0
        self.write("")
        (where / "keys").symlink_to("..data/keys")

    @property
    def path(self) -> Path:
        return self.where / "keys"

    def write(self, text: str) -> None:
        self.generation += 1
        made = self.where / f"..{self.generation}"
        made.mkdir()
        (made / "keys").write_text(text)
        (self.where / "..data.new").symlink_to(made.name)
        os.replace(self.where / "..data.new", self.where / "..data")


@pytest.fixture
def secret(tmp_path: Path) -> MountedSecret:
    return MountedSecret(tmp_path)


def client_of(settings: Settings, services: Services, secret: MountedSecret, **more: object) -> TestClient:
    service = services(settings.model_copy(update={"code_exec_api_keys_file": secret.path, **more}))
    return TestClient(create_app(service))


def status(client: TestClient, key: str) -> int:
    return client.get("/v1/files/AAAAAAAAAAAAAAAAAAAAA", headers={"X-API-Key": key}).status_code


def test_a_key_rotates_with_an_overlap_and_no_restart(
    settings: Settings, services: Services, secret: MountedSecret
) -> None:
    secret.write(line("team-a", "old-key") + "\n")
    client = client_of(settings, services, secret)
    assert status(client, "old-key") == 404  # a session it does not have: authenticated
    assert status(client, "new-key") == 401
    secret.write(f"# rotating team-a\n{line('team-a', 'old-key')}\n{line('team-a', 'new-key')}\n")
    time.sleep(CHECK_SECONDS + 0.1)
    assert (status(client, "old-key"), status(client, "new-key")) == (404, 404)
    secret.write(line("team-a", "new-key") + "\n")
    time.sleep(CHECK_SECONDS + 0.1)
    assert (status(client, "old-key"), status(client, "new-key")) == (401, 404)
    # The service's own key opens the service beside the file's.
    assert status(client, "test-key-0123456789") == 404


def test_a_change_that_does_not_parse_keeps_the_keys_and_says_which_line(
    settings: Settings, services: Services, secret: MountedSecret, caplog: pytest.LogCaptureFixture
) -> None:
    secret.write(line("team-a", "a-key") + "\n")
    client = client_of(settings, services, secret)
    secret.write(line("team-a", "a-key") + '\n{"name": "b", "sha256": "pasted-key-itself"}\n')
    time.sleep(CHECK_SECONDS + 0.1)
    with caplog.at_level(logging.ERROR, "codeexec.keys"):
        assert status(client, "a-key") == 404
    assert "line 2 is not a service key" in caplog.text and "pasted-key-itself" not in caplog.text


def test_a_file_that_does_not_parse_refuses_the_start(secret: MountedSecret) -> None:
    secret.write("not json\n")
    with pytest.raises(ValidationError, match="CODE_EXEC_API_KEYS_FILE .*line 1 is not a service key"):
        Settings(code_exec_api_keys_file=secret.path)


def test_a_key_names_its_calls_in_the_metrics_and_the_logs_and_its_organization(
    settings: Settings, services: Services, secret: MountedSecret, caplog: pytest.LogCaptureFixture
) -> None:
    secret.write(line("team-eu", "eu-key", org="eu") + "\n" + line("team-us", "us-key") + "\n")
    client = client_of(settings, services, secret)
    caplog.set_level(logging.INFO, "codeexec.calls")
    eu = client.post("/v1/upload", files={"file": ("a.txt", b"a")}, headers={"X-API-Key": "eu-key"}).json()
    listed = client.get(f"/v1/files/{eu['session_id']}", headers={"X-API-Key": "us-key"})
    assert listed.status_code == 404  # another organization's session does not exist for it
    keys = {(r.route, r.status, getattr(r, "key", None)) for r in caplog.records}
    assert {("/v1/upload", 200, "team-eu"), ("/v1/files/{session_id}", 404, "team-us")} <= keys
    assert "eu-key" not in caplog.text and "us-key" not in caplog.text
    metrics = client.app.state.service.telemetry.metrics  # type: ignore[attr-defined]
    exposed = metrics.exposition().decode()
    assert 'codeexec_requests_total{key="team-eu",route="/v1/upload",status="200"} 1.0' in exposed


def test_a_keys_limits_are_its_own(settings: Settings, services: Services, secret: MountedSecret) -> None:
    secret.write(line("slow", "slow-key", runs_at_once=1) + "\n" + line("few", "few-key", runs_per_minute=2) + "\n")
    client = client_of(settings, services, secret)

    def run(key: str, code: str = "print(1)") -> tuple[int, dict]:
        answer = client.post("/v1/exec", json={"lang": "py", "code": code}, headers={"X-API-Key": key})
        return answer.status_code, answer.json()

    holding = threading.Thread(target=run, args=("slow-key", "import time; time.sleep(2)"))
    holding.start()
    time.sleep(0.5)
    refused = run("slow-key")
    holding.join()
    assert refused[0] == 429 and "'slow' has 1 runs in flight" in refused[1]["details"]
    assert run("slow-key")[0] == 200  # once its run ended
    assert [run("few-key")[0] for _ in range(2)] == [200, 200]
    third = run("few-key")
    assert third[0] == 429 and 50 <= third[1]["retry_after_seconds"] <= 60
    assert run("test-key-0123456789")[0] == 200  # the default key has no limits of its own


def test_the_keys_command_makes_a_key_and_its_line(tmp_path: Path) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "codeexec.keys", "service-key", "team-a", "--runs-per-minute", "60"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = [text for text in made.stdout.splitlines() if not text.startswith("#")]
    key, entry = lines[0], json.loads(lines[1])
    assert entry == {"name": "team-a", "sha256": key_hash(key), "runs_per_minute": 60}
    assert len(key) >= 43 and key not in lines[1]
