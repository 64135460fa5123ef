"""Shared fixtures: a sandbox root, settings, the app in-process, and the app on loopback."""

from __future__ import annotations

import contextlib
import os
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
from codeexec.sandbox.local import btrfs
from codeexec.sandbox.local.storage import Storage
from codeexec.settings import Settings

from .fakes.agentcore import RunningFake

API_KEY = "test-key-0123456789"


# One btrfs filesystem for every test's sandbox root (the local backend's storage needs
# one: kernel quotas per session), made once and kept mounted for later runs.
TEST_STORAGE = Path("/var/tmp/codeexec-tests")


@pytest.fixture(scope="session")
def sandbox_storage() -> Path:
    Storage.prepare(TEST_STORAGE, session_bytes=1 << 30, sandbox_gid=Settings().sandbox_gid, image_bytes=16 << 30)
    return TEST_STORAGE


@pytest.fixture
def sandbox_root(sandbox_storage: Path) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="root-", dir=sandbox_storage))
    yield root
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for entry in root.iterdir():  # sessions are subvolumes: one call each, whatever is in them
        with contextlib.suppress(OSError):
            btrfs.destroy_subvolume(fd, entry.name)
    os.close(fd)
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
