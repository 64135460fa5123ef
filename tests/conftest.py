"""Shared fixtures: a sandbox root, settings, the app in-process, and the app on loopback.

With CODEEXEC_TEST_BACKEND=runner (`make test-runner`), every app a test builds for the
`local` backend leases its sandboxes from a runner instead: one started on loopback from
the very same settings (root, limits), and the app switched to SANDBOX_BACKEND=runner.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api import app as app_module
from codeexec.api.app import create_app
from codeexec.sandbox import make_sandboxes
from codeexec.sandbox.port import Sandboxes
from codeexec.settings import Settings

from .fakes.agentcore import RunningFake
from .serving import free_port as free_port  # tests import it from here
from .serving import runner_settings, running_runner, serving

API_KEY = "test-key-0123456789"
CODEEXEC_TEST_BACKEND = os.environ.get("CODEEXEC_TEST_BACKEND", "local")


@pytest.fixture
def sandbox_root() -> Iterator[Path]:
    # Not pytest's tmp_path: its parents are mode 0700, and bwrap runs as the sandbox uid,
    # which must be able to reach the session's directory.
    root = Path(tempfile.mkdtemp(prefix="codeexec-test-", dir="/var/tmp"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def settings(sandbox_root: Path) -> Settings:
    return Settings(
        sandbox_root=sandbox_root,
        code_exec_api_key=SecretStr(API_KEY),
        run_timeout_seconds=20,
        # Small enough that a test can send one byte more than the limit.
        max_upload_bytes=5 << 20,
    )


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    return create_app(settings)


@pytest.fixture
def client(app: FastAPI) -> TestClient:
    return TestClient(app, headers={"X-API-Key": API_KEY})


@pytest.fixture
def live_server(app: FastAPI) -> Iterator[str]:
    """The app served by uvicorn on 127.0.0.1; yields the base URL ending in /v1."""
    with serving(app) as url:
        yield f"{url}/v1"


@pytest.fixture(autouse=CODEEXEC_TEST_BACKEND == "runner")
def local_through_a_runner(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every `local` app of the test leases from a runner of the same settings."""
    with contextlib.ExitStack() as runners:

        def through_a_runner(settings: Settings) -> Sandboxes:
            if settings.sandbox_backend != "local":
                return make_sandboxes(settings)
            url, _ = runners.enter_context(running_runner(settings))
            return make_sandboxes(runner_settings(settings, url))

        monkeypatch.setattr(app_module, "make_sandboxes", through_a_runner)
        yield


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake AWS credentials and a region, and no profile or config file: no test reaches AWS."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def agentcore_fake(aws_env: None, tmp_path: Path) -> Iterator[RunningFake]:
    """The AgentCore data-plane fake, served on 127.0.0.1."""
    with RunningFake(tmp_path / "agentcore") as running:
        yield running
