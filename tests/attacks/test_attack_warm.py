"""Attacks on a warm run's hand-over (sandbox/local/warm/forkserver.py, ready.py): the program of
a forked run tries to take its init's control socket to the service, forge the run's end
and live on past its limit. It must find the init out of reach, be stopped at its limit
whatever it says, and leave the teardown of other users' runs (their cgroups, the
service's descriptors) untouched."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.sandbox.local import cgroups
from codeexec.sandbox.local.warm import ready, server
from codeexec.sandbox.local.warm.pools import Pool
from codeexec.settings import Settings

from ..calls import run
from ..conftest import API_KEY
from ..serving import Services

pytestmark = [
    pytest.mark.root,
    pytest.mark.cgroups,
    pytest.mark.skipif(
        os.geteuid() != 0 or "memory" not in cgroups.detect(), reason="warm sandboxes need root and a memory cgroup"
    ),
    pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 system call numbers"),
]

LIMIT = 3  # seconds: the run's wall-clock limit

# pidfd_open(1) and pidfd_getfd on every descriptor the init may hold, then /proc/1/mem;
# whatever socket it takes is told the run ended, and its output closes; then it writes
# on, past its limit.
STEAL = """
import ctypes, json, os, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
pidfd = libc.syscall(434, 1, 0)
stolen, errors = [], set()
for target in range(64):
    fd = libc.syscall(438, pidfd, target, 0)
    if fd >= 0:
        stolen.append(fd)
    else:
        errors.add(ctypes.get_errno())
print("pidfd", pidfd >= 0, "stolen", len(stolen), "errors", sorted(errors))
try:
    open("/proc/1/mem", "rb").close()
    print("mem opened")
except OSError as error:
    print("mem", error.errno)
for fd in stolen:
    try:
        sock = socket.socket(fileno=fd)
        if sock.type == socket.SOCK_SEQPACKET:
            sock.send(json.dumps({"exit": 0}).encode())
            print("forged an end")
    except OSError:
        pass
sys.stdout.flush()
if stolen:  # the forged end, and its output closed: the reply may come, the program goes on
    os.close(1)
    os.close(2)
while True:
    with open("alive.txt", "a") as out:
        out.write(f"{time.time()}\\n")
    time.sleep(0.1)
"""


@pytest.fixture(params=["out of reach", "reachable"])
def reachable(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """The init as it is; or, to try the service's own guard alone, an init that stays
    dumpable (its servers' forkserver.py without the line that makes it not)."""
    if request.param == "out of reach":
        return False
    source = server.SOURCES["forkserver.py"]
    line = b"    kernel.not_dumpable()\n"
    assert line in source
    monkeypatch.setitem(server.SOURCES, "forkserver.py", source.replace(line, b""))
    return True


@pytest.fixture
def app(settings: Settings, reachable: bool, services: Services) -> FastAPI:
    return create_app(
        services(settings.model_copy(update={"warm_python": 1, "warm_sandboxes": 2, "run_timeout_seconds": LIMIT}))
    )


@pytest.fixture
def client(app: FastAPI) -> TestClient:
    return TestClient(app, headers={"X-API-Key": API_KEY})


def pools(app: FastAPI) -> dict[str, Pool]:
    return app.state.service.sandboxes.launcher.warm.pools  # type: ignore[no-any-return]


def wait_warm(app: FastAPI) -> None:
    assert all(pool.wait_ready() for pool in pools(app).values() if pool)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def eventually(check: Any, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_program_cannot_take_its_inits_socket_nor_outlive_its_limit(
    app: FastAPI, client: TestClient, sandbox_root: Path, reachable: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    used: list[cgroups.RunCgroup] = []  # the cgroups of every warm run taken, to see them go
    take = ready.ReadyRun.run

    def recorded(made: ready.ReadyRun, *args: Any, **kwargs: Any) -> Any:
        used.append(made.cgroup)
        return take(made, *args, **kwargs)

    monkeypatch.setattr(ready.ReadyRun, "run", recorded)
    wait_warm(app)
    run(client, "print(1)")  # the service's lazily opened descriptors, opened before the count
    wait_warm(app)
    assert eventually(lambda: all(not d.exists() for c in used for d in c._dirs.values()))
    descriptors = open_descriptors()

    started = time.monotonic()
    attack = run(client, STEAL)
    elapsed = time.monotonic() - started
    lines = attack["stdout"].splitlines()
    if reachable:  # the attack as it was: the socket taken, the run's end forged
        assert lines[1] == "mem opened" and "forged an end" in lines, attack
    else:  # the init is out of reach: not dumpable, every descriptor refused (EPERM), its memory too
        assert lines[:2] == ["pidfd True stolen 0 errors [1]", "mem 13"], attack
        assert "forged an end" not in attack["stdout"]
    # Stopped at its limit, and said so; and after the reply it writes no more.
    assert elapsed >= LIMIT, attack
    assert f"exceeded its {LIMIT} s time limit" in attack["stderr"], attack
    written = sandbox_root / attack["session_id"] / "data" / "alive.txt"
    size = written.stat().st_size
    time.sleep(1)
    assert written.stat().st_size == size

    # Other users' runs, each in a session of its own, are served and torn down whole.
    sessions = {run(client, f"print({n})")["session_id"] for n in range(6)}
    assert len(sessions) == 6
    assert sum(pool.taken for pool in pools(app).values() if pool) >= 7
    wait_warm(app)
    assert eventually(lambda: all(not d.exists() for c in used for d in c._dirs.values())), "a run's cgroup was left"
    assert eventually(lambda: open_descriptors() <= descriptors), (open_descriptors(), descriptors)
    assert client.get("/health").status_code == 200
    assert run(client, "print(6 * 7)")["stdout"] == "42\n"
