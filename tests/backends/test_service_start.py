"""The service with the `runner` backend starts whatever its runner's state: before the
runner answers, /health and every call are a 503 with a retry hint saying so; once it
answers, the service serves, with nothing restarted (Compose starts both at once)."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.runner.app import create_runner_app
from codeexec.runner.build import build_runner
from codeexec.settings import Settings

from ..calls import run
from ..conftest import API_KEY
from ..serving import RUNNER_KEY, Services, free_port, runner_settings, serving


def test_the_service_answers_503_until_its_runner_answers_then_serves(settings: Settings, services: Services) -> None:
    port = free_port()
    app = create_app(services(runner_settings(settings, f"http://127.0.0.1:{port}")))  # nothing listens there yet
    client = TestClient(app, headers={"X-API-Key": API_KEY})

    health = client.get("/health")
    assert health.status_code == 503
    assert health.json()["details"] == "no sandbox runner answers yet"
    assert health.json()["runners"] == [{"index": 0, "up": False}]
    assert health.headers["retry-after"] == "2"
    ran = client.post("/v1/exec", json={"lang": "py", "code": "print(1)"})
    assert ran.status_code == 503 and ran.json()["retry_after_seconds"] == 2

    runner = build_runner(settings.model_copy(update={"runner_key": SecretStr(RUNNER_KEY)}))
    with serving(create_runner_app(runner), port=port):
        deadline = time.monotonic() + 15
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline, "the service never saw its runner come up"
            time.sleep(0.2)
        assert "py" in client.get("/health").json()["languages"]
        assert run(client, "print(6 * 7)")["stdout"] == "42\n"
