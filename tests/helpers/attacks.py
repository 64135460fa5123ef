"""What the attack suites (tests/attacks/test_attack_*.py) share: the limits they attack under, a
host user that is neither root nor the sandbox's, and the check that after an attack the
service still serves."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
from fastapi.testclient import TestClient

from ..conftest import API_KEY

HOST_USER = 4321  # a host user that is neither root nor the sandbox's uid, and owns nothing
PROMPT = 10.0  # seconds: what "answers promptly" allows on a busy 2-core machine
KEY = {"X-API-Key": API_KEY}
# Limits small enough to reach quickly.
# Limits small enough to hit quickly: what the suites that hit limits and attack runs
# (test_limits.py, test_security.py) run under, in one place.
SMALL_LIMITS = {
    "run_timeout_seconds": 3,
    "run_cpu_seconds": 1,
    "run_memory_bytes": 96 << 20,
    "run_max_processes": 24,
    "max_output_bytes": 10_000,
    "max_file_bytes": 1 << 20,
    "max_session_bytes": 4 << 20,
    "max_files_per_run": 3,
}
LIMITS = {
    "run_timeout_seconds": 10,
    "max_session_bytes": 8 << 20,
    "max_file_bytes": 8 << 30,  # so that only the session's disk limit stops a write
    "max_concurrent_runs": 3,
    "max_concurrent_uploads": 4,
    "max_request_bytes": 1 << 20,
}


def still_serves(client: httpx.Client | TestClient) -> None:
    """After an attack: /health, and an ordinary run in a fresh session, promptly."""
    started = time.monotonic()
    assert client.get("/health").status_code == 200
    body = client.post("/v1/exec", json={"lang": "py", "code": "print(6 * 7)"}).json()
    assert (body["stdout"], body["stderr"]) == ("42\n", "")
    assert time.monotonic() - started < PROMPT


@contextlib.contextmanager
def attacked(live_server: str) -> Iterator[httpx.Client]:
    """A client of the service on loopback; once the attack is over, the service still serves."""
    base = live_server.removesuffix("/v1")
    with httpx.Client(base_url=base, headers=KEY, timeout=30) as client:
        yield client
    with httpx.Client(base_url=base, headers=KEY, timeout=PROMPT) as after:
        still_serves(after)


def exec_(api: httpx.Client | TestClient, code: str, lang: str = "py", **extra: object) -> dict[str, Any]:
    reply = api.post("/v1/exec", json={"lang": lang, "code": code, **extra})
    assert reply.status_code == 200, reply.text
    return reply.json()  # type: ignore[no-any-return]


def as_host_user(script: str, uid: int = HOST_USER) -> subprocess.CompletedProcess[str]:
    argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", "/bin/sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)
