"""Shared fixtures: a sandbox root, settings, the app in-process, and the app on loopback."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.settings import Settings

from .fakes.agentcore import RunningFake

API_KEY = "test-key-0123456789"


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def live_server(app: FastAPI) -> Iterator[str]:
    """The app served by uvicorn on 127.0.0.1; yields the base URL ending in /v1."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)


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
