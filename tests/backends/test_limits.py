"""Every limit of the `local` backend: its default and setting, how it holds, the plain
sentence a caller reads in stderr when a run hits it, and that the reply is still a 200.
Also: runs in one session go one at a time, runs in different sessions in parallel."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.sandbox.local import LocalSandboxes, cgroups
from codeexec.sandbox.local.limits import Limits
from codeexec.settings import Settings

from ..calls import run
from ..conftest import API_KEY
from ..helpers.attacks import SMALL_LIMITS
from ..serving import Services

LIMITS_PAGE = Path(__file__).parents[2] / "docs" / "isolation.md"
# Every limit a user can hit, by its setting.
LIMITS = (
    "run_timeout_seconds", "run_cpu_seconds", "run_memory_bytes", "run_max_processes", "max_output_bytes",
    "max_file_bytes", "max_session_bytes", "max_files_per_run", "max_upload_bytes",
)  # fmt: skip
HAS_CGROUPS = {"memory", "pids"} <= set(cgroups.detect())


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update=SMALL_LIMITS)


def test_every_limit_has_a_default_a_setting_and_a_documented_row(
    monkeypatch: pytest.MonkeyPatch,
    sandbox_root: Path,
    services: Services,
    local_sandboxes: Callable[[Settings], LocalSandboxes],
) -> None:
    page = LIMITS_PAGE.read_text()
    for name in LIMITS:
        default = Settings.model_fields[name].default
        rows = (line for line in page.splitlines() if line.startswith("|") and f"`{name.upper()}`" in line)
        row = next(rows, None)
        assert row is not None, f"docs/isolation.md has no row for {name.upper()}"
        assert f"`{default:g}`" in row or f"`{default}`" in row, (name, row)
        monkeypatch.setenv(name.upper(), "7")
    configured = Settings()
    assert all(getattr(configured, name) == 7 for name in LIMITS)
    # Each reaches what enforces it: the backend's run limits, or the session layer's.
    backend = local_sandboxes(configured.model_copy(update={"sandbox_root": sandbox_root}))
    assert backend.limits == Limits(7, 7, 7, 7, 7, 7)
    limits = create_app(
        services(configured.model_copy(update={"sandbox_root": sandbox_root}))
    ).state.service.sessions.limits
    assert (limits.run_timeout_seconds, limits.max_files_per_run) == (7, 7)


# What the program sees: rlimits hold everywhere, cgroups hold the rest where present.


def rlimits_inside(client: TestClient) -> dict[str, list[int]]:
    code = "import resource as r\nfor n in ('CPU', 'FSIZE', 'NOFILE', 'CORE', 'AS', 'NPROC'):\n"
    code += "    print(n, *r.getrlimit(getattr(r, 'RLIMIT_' + n)))"
    lines = run(client, code)["stdout"].splitlines()
    return {name: [int(v) for v in values] for name, *values in map(str.split, lines)}


def test_rlimits_inside_the_sandbox(client: TestClient) -> None:
    limits = rlimits_inside(client)
    assert limits["CPU"] == [1, 2]  # SIGXCPU at 1 s, SIGKILL a second later
    assert limits["FSIZE"] == [1 << 20] * 2
    assert limits["NOFILE"] == [1024] * 2
    assert limits["CORE"] == [0, 0]
    if HAS_CGROUPS:  # the cgroups hold memory and processes, for the whole run
        assert limits["AS"] == [-1, -1] and limits["NPROC"] != [24, 24]


def test_without_cgroups_rlimits_stand_in(settings: Settings, services: Services) -> None:
    app = create_app(services(settings.model_copy(update={"sandbox_cgroups": False})))
    client = TestClient(app, headers={"X-API-Key": API_KEY})
    limits = rlimits_inside(client)
    assert limits["AS"] == [96 << 20] * 2
    assert limits["NPROC"] == [24] * 2
    body = run(client, "hoard = []\nwhile True:\n    hoard.append(bytearray(1 << 20))")
    assert "MemoryError" in body["stderr"]  # the allocation fails; the program says so itself
    assert run(client, "print(6 * 7)")["stdout"] == "42\n"


# One sentence per limit, and a 200.


def test_wall_time(client: TestClient) -> None:
    body = run(client, "import time\ntime.sleep(30)")
    assert body["stderr"] == "Stopped: the run exceeded its 3 s time limit.\n"


def test_a_program_stopped_at_its_time_limit_keeps_what_it_printed(client: TestClient) -> None:
    # Not flushed, and stdout is a pipe: only unbuffered output reaches it before the kill.
    body = run(client, "import time\nprint('got this far')\ntime.sleep(30)")
    assert body["stdout"] == "got this far\n"
    assert body["stderr"] == "Stopped: the run exceeded its 3 s time limit.\n"


def test_cpu_time(client: TestClient) -> None:
    body = run(client, "while True:\n    pass")
    assert body["stderr"] == "Stopped: the program used up its 1 s of CPU time.\n"


@pytest.mark.cgroups
@pytest.mark.skipif(not HAS_CGROUPS, reason="this host has no memory and pids cgroups for us")
def test_memory(client: TestClient) -> None:
    body = run(client, "hoard = []\nwhile True:\n    hoard.append(bytearray(1 << 20))")
    assert f"Killed: the run exceeded its memory limit of {96 << 20} bytes.\n" in body["stderr"]


@pytest.mark.cgroups
@pytest.mark.skipif(not HAS_CGROUPS, reason="this host has no memory and pids cgroups for us")
def test_a_ram_disk_counts_as_memory(client: TestClient) -> None:
    body = run(client, "open('/dev/shm/fill', 'wb').write(b'x' * (200 << 20))")
    assert "memory limit" in body["stderr"] or "No space left" in body["stderr"]


@pytest.mark.cgroups
@pytest.mark.skipif(not HAS_CGROUPS, reason="this host has no memory and pids cgroups for us")
def test_processes_and_threads(client: TestClient) -> None:
    code = """
import threading, time
started = 0
try:
    while True:
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
        started += 1
except RuntimeError:
    print(started)
"""
    body = run(client, code)
    assert 0 < int(body["stdout"]) < 24
    assert "The run reached its limit of 24 processes and threads; no more started.\n" in body["stderr"]


@pytest.mark.cgroups
@pytest.mark.skipif(not HAS_CGROUPS, reason="this host has no memory and pids cgroups for us")
def test_a_runs_cgroup_is_removed_after_it(client: TestClient) -> None:
    body = run(client, "print(open('/proc/self/cgroup').read())")
    names = set(re.findall(r"/(codeexec-[0-9.]+-[0-9a-f]+)$", body["stdout"], re.MULTILINE))
    (name,) = names  # the run was inside one, named alike in each hierarchy
    # Removed after the reply, off its path (a warm run's is, docs/isolation.md "Warm sandboxes").
    deadline = time.monotonic() + 5
    while any((parent.path / name).exists() for parent in cgroups.detect().values()):
        assert time.monotonic() < deadline, "the run's cgroup was not removed"
        time.sleep(0.01)


def test_output(client: TestClient) -> None:
    body = run(client, "import sys\nprint('o' * 50_000)\nprint('e' * 50_000, file=sys.stderr)")
    assert body["stdout"] == "o" * 10_000
    assert body["stderr"].startswith("e" * 10_000 + "\n")
    assert body["stderr"].endswith(
        "Output truncated: stderr exceeded 10000 bytes; the rest was dropped.\n"
        "Output truncated: stdout exceeded 10000 bytes; the rest was dropped.\n"
    )


def test_file_size(client: TestClient) -> None:
    # Python ignores SIGXFSZ, so its write fails and says so; other programs are stopped by it.
    body = run(client, "open('big.txt', 'wb').write(b'x' * (3 << 20))")
    assert "OSError: [Errno 27] File too large" in body["stderr"]
    assert [f["name"] for f in body["files"]] == ["big.txt"]
    assert len(client.get(f"/v1/download/{body['session_id']}/big.txt").content) == 1 << 20
    body = run(client, "head -c 3000000 /dev/zero > big.txt", lang="bash")
    assert body["stderr"].endswith("A file reached the 1048576 byte file size limit; writing past it failed.\n")


def test_session_disk_for_runs_uploads_and_inputs(client: TestClient) -> None:
    code = "for i in range(3):\n    open(f'part{i}', 'wb').write(b'x' * 1_000_000)"
    session = run(client, code)["session_id"]  # 3 MB of the session's 4 MiB
    reply = client.post("/v1/upload", files={"file": ("more.bin", b"x" * 2_000_000)}, params={"session_id": session})
    assert reply.status_code == 413
    assert "the session's files would exceed their 4194304 byte limit" in reply.json()["details"]
    other = client.post("/v1/upload", files={"file": ("input.bin", b"y" * 2_000_000)}).json()["session_id"]
    ref = {"id": "input.bin", "name": "input.bin", "session_id": other}
    body = run(client, "import os\nprint(os.path.exists('input.bin'))", session_id=session, files=[ref])
    assert body["session_id"] == session and body["stdout"] == "False\n"
    assert 'File "input.bin" was not copied' in body["stderr"]


def test_a_full_session_may_still_shrink(client: TestClient) -> None:
    fill = "i = 0\ntry:\n    while True:\n        open(f'part{i}.txt', 'wb').write(b'x' * 500_000); i += 1\n"
    fill += "except OSError as e:\n    print(e.strerror)"
    session = run(client, fill)["session_id"]
    refused = run(client, "open('more.txt', 'w').write('x' * 100_000)", session_id=session)
    assert "OSError: [Errno 122] Disk quota exceeded" in refused["stderr"]
    body = run(client, "import os\nos.remove('part0.txt')\nopen('small.txt', 'w').write('ok')", session_id=session)
    assert (body["stderr"], [f["name"] for f in body["files"]]) == ("", ["small.txt"])


def test_files_per_run(client: TestClient) -> None:
    body = run(client, "for name in 'abcde':\n    open(name + '.txt', 'w').write(name)")
    assert [f["name"] for f in body["files"]] == ["a.txt", "b.txt", "c.txt"]
    assert body["stderr"] == "Listed 3 of 5 files; all of them are in the session's file list.\n"
    assert len(client.get(f"/v1/files/{body['session_id']}").json()) == 5


# Concurrency, through the server on loopback


def test_runs_in_one_session_go_one_at_a_time(client: TestClient, live_server: str) -> None:
    session = run(client, "print('new')")["session_id"]
    code = (
        "import sys, time\n"
        "open('log.txt', 'a').write(f'start {sys.argv[1]}\\n')\n"
        "time.sleep(0.5)\n"
        "open(sys.argv[1] + '.txt', 'w').write('x')\n"
        "open('log.txt', 'a').write(f'end {sys.argv[1]}\\n')\n"
    )

    def exec_in_session(name: str) -> dict:
        body = {"lang": "py", "code": code, "args": [name], "session_id": session}
        return httpx.post(f"{live_server}/exec", json=body, headers={"X-API-Key": API_KEY}, timeout=30).json()

    with ThreadPoolExecutor(3) as pool:
        replies = dict(zip("abc", pool.map(exec_in_session, "abc"), strict=True))
    for name, reply in replies.items():
        assert reply["session_id"] == session
        assert sorted(f["name"] for f in reply["files"]) == sorted([f"{name}.txt", "log.txt"]), name
    log = client.get(f"/v1/download/{session}/log.txt").text.splitlines()
    assert len(log) == 6
    for start, end in zip(log[::2], log[1::2], strict=True):  # never interleaved
        assert start.startswith("start") and end == "end" + start.removeprefix("start")


def test_an_upload_during_a_run_is_not_that_runs_output(client: TestClient, live_server: str) -> None:
    session = run(client, "print('new')")["session_id"]
    headers = {"X-API-Key": API_KEY}
    code = "import time\nopen('started.txt', 'w').write('')\ntime.sleep(1.5)"
    body = {"lang": "py", "code": code, "session_id": session}

    def paths() -> list[str]:
        return [f["path"] for f in client.get(f"/v1/files/{session}", params={"detail": "summary"}).json()]

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(lambda: httpx.post(f"{live_server}/exec", json=body, headers=headers, timeout=30))
        deadline = time.monotonic() + 20
        while "started.txt" not in paths():  # the run is under way
            assert time.monotonic() < deadline and not running.done()
            time.sleep(0.05)
        uploaded = client.post("/v1/upload", files={"file": ("up.txt", b"u")}, params={"session_id": session})
        reply = running.result().json()
    assert uploaded.status_code == 200
    assert [f["name"] for f in reply["files"]] == ["started.txt"]
    assert "up.txt" in paths()


def test_runs_in_different_sessions_run_at_once(live_server: str) -> None:
    # Each program says when it ran, by the host's clock (the sandbox shares it).
    body = {"lang": "py", "code": "import time\nprint(time.time())\ntime.sleep(2)\nprint(time.time())"}

    def exec_one(_: int) -> dict:
        return httpx.post(f"{live_server}/exec", json=body, headers={"X-API-Key": API_KEY}, timeout=30).json()

    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(exec_one, range(2)))
    (a_start, a_end), (b_start, b_end) = ([float(t) for t in r["stdout"].split()] for r in replies)
    assert a_start < b_end and b_start < a_end  # both programs were alive at one moment
    assert len({reply["session_id"] for reply in replies}) == 2
