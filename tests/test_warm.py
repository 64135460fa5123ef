"""Warm sandboxes (sandbox/local/warm.py): a warm run is a cold run's equal in isolation
and limits, sees nothing of an earlier run or of another session, and a run that finds
none ready starts cold. (`make test-warm` runs the security, limit and language suites
warm too.)"""

from __future__ import annotations

import os
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.sandbox.local import cgroups
from codeexec.settings import Settings

from .conftest import API_KEY

# Where the service could keep none (warm.Pool.start): it mounts, and needs a memory cgroup.
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or "memory" not in cgroups.detect(), reason="warm sandboxes need root and a memory cgroup"
)

# True only in an interpreter that started warm: a cold run has imported none of them.
WARM = "import sys\nprint('warm' if 'pandas' in sys.modules else 'cold')\n"


@pytest.fixture
def app(settings: Settings, warm_pools: None) -> FastAPI:
    return create_app(settings.model_copy(update={"warm_python": 2, "warm_sandboxes": 2}))


@pytest.fixture
def client(app: FastAPI) -> TestClient:
    return TestClient(app, headers={"X-API-Key": API_KEY})


def run(client: TestClient, code: str, **body: Any) -> dict[str, Any]:
    reply = client.post("/v1/exec", json={"lang": "py", "code": code, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def pools(app: FastAPI) -> dict[str, Any]:
    return app.state.service.sessions.sandboxes.warm  # type: ignore[no-any-return]


def wait_warm(app: FastAPI) -> None:
    assert all(pool.wait_ready() for pool in pools(app).values())


def test_a_warm_run_sees_nothing_of_an_earlier_one(app: FastAPI, client: TestClient) -> None:
    first = run(
        client,
        WARM + "import os, pandas\n"
        "pandas.left_behind = 1\n"  # a preloaded module's state
        "open('/tmp/left.txt', 'w').write('x')\n"
        "os.environ['LEFT'] = '1'\n"
        "kept = os.open('/proc/self/status', os.O_RDONLY)\n"  # a descriptor left open
        "import builtins; builtins.left = 1\n",
    )
    assert first["stdout"] == "warm\n", first
    wait_warm(app)
    second = run(
        client,
        WARM + "import os, builtins, pandas\n"
        "print(hasattr(pandas, 'left_behind'), os.path.exists('/tmp/left.txt'), 'LEFT' in os.environ,\n"
        "      hasattr(builtins, 'left'))\n"
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        print(fd, os.readlink(f'/proc/self/fd/{fd}'))\n"
        "    except OSError:\n"
        "        pass  # listdir's own\n",
    )
    lines = second["stdout"].splitlines()
    assert lines[:2] == ["warm", "False False False False"], second
    # Its standard streams, and what the interpreter's own imports hold open (a font file
    # of matplotlib's); nothing of the earlier run's.
    opened = dict(line.split(" ", 1) for line in lines[2:])
    assert opened.pop("0") == "/dev/null" and {opened.pop("1")[:5], opened.pop("2")[:5]} == {"pipe:"}
    assert all(target.startswith("/usr/") for target in opened.values()), opened


def test_a_warm_run_has_its_own_session_and_no_other(app: FastAPI, client: TestClient) -> None:
    a = run(client, WARM + "open('mine.txt', 'w').write('a')")
    wait_warm(app)
    b = run(client, WARM + "open('theirs.txt', 'w').write('b')")
    wait_warm(app)
    assert (a["stdout"], b["stdout"]) == ("warm\n", "warm\n") and a["session_id"] != b["session_id"]
    look = (
        "import os\nprint(sorted(os.listdir('/mnt/data')), os.getcwd())\n"
        "print(sum(1 for line in open('/proc/self/mountinfo') if ' /mnt/data ' in line))\n"
    )
    again = run(client, WARM + look, session_id=a["session_id"])
    # Its own files at /mnt/data; B's appear nowhere, and only its own session is mounted.
    lines = again["stdout"].splitlines()
    assert lines[:2] == ["warm", "['mine.txt'] /mnt/data"], again
    assert again["session_id"] == a["session_id"] and b["session_id"] not in again["stdout"]


def test_warm_runs_stop_at_the_same_limits(app: FastAPI, client: TestClient, settings: Settings) -> None:
    bomb = run(client, WARM + "x = []\nwhile True:\n    x.append(bytearray(1 << 24))")
    assert bomb["stdout"] == "warm\n"
    assert f"Killed: the run exceeded its memory limit of {settings.run_memory_bytes} bytes." in bomb["stderr"]
    wait_warm(app)
    forks = run(
        client,
        WARM + "import os, time\nfor _ in range(400):\n    try:\n        os.fork() or time.sleep(5)\n"
        "    except OSError:\n        print('refused'); break\n",
        timeout=10_000,
    )
    assert forks["stdout"].startswith("warm\n") and "refused" in forks["stdout"]
    assert f"limit of {settings.run_max_processes} processes" in forks["stderr"]
    wait_warm(app)
    # The program's CPU clock starts at the run, not at the interpreter's imports.
    clock = run(client, WARM + "import time\nprint(time.process_time() < 0.3)")
    assert clock["stdout"] == "warm\nTrue\n"
    assert client.get("/health").status_code == 200


def test_with_none_ready_a_run_starts_cold_at_once(app: FastAPI, client: TestClient) -> None:
    wait_warm(app)
    for small in ("any", "py-bare"):  # these refill in ms: none of them
        pools(app)[small].close()
    interpreters = pools(app)["py"]
    taken = [interpreters.take() for _ in range(2)]  # both: the pool refills now, in about a second
    try:
        reply = run(client, WARM + "print(6 * 7)")
        assert reply["stdout"] == "cold\n42\n"  # it did not wait for the refill
    finally:
        for ready in taken:
            assert ready is not None
            ready.close()


def test_a_program_naming_no_library_forks_from_a_bare_interpreter(app: FastAPI, client: TestClient) -> None:
    wait_warm(app)
    taken = {name: pool.taken for name, pool in pools(app).items()}
    # (It names none of them itself: the heavy interpreter has loaded over a thousand modules.)
    reply = run(client, "import sys, time\nprint(len(sys.modules) < 200, time.process_time() < 0.3, sys.argv)")
    assert reply["stdout"] == "True True ['/code/main.py']\n", reply
    assert {name: pool.taken - taken[name] for name, pool in pools(app).items()} == {"py": 0, "py-bare": 1, "any": 0}


def test_other_languages_run_in_a_sandbox_made_ahead(app: FastAPI, client: TestClient) -> None:
    wait_warm(app)
    before = pools(app)["any"].taken
    js = client.post(
        "/v1/exec",
        json={"lang": "js", "code": "require('fs').writeFileSync('j.txt', 'js'); console.log(process.argv.length)"},
    ).json()
    assert js["stdout"] == "2\n" and [f["name"] for f in js["files"]] == ["j.txt"]
    wait_warm(app)
    probe = "echo \"$0|$1|$2\"; pwd; ls /mnt/data; cat /proc/self/status | grep -E '^(Uid|NoNewPrivs|Seccomp):'"
    bash = client.post(
        "/v1/exec", json={"lang": "bash", "code": probe, "args": ["a b", "$(id)\n'"], "session_id": js["session_id"]}
    ).json()
    lines = bash["stdout"].splitlines()
    # Its args as given, its own session's files, and a cold run's confinement.
    assert lines[0] == "/code/main.sh|a b|$(id)" and lines[1] == "'" and lines[2:4] == ["/mnt/data", "j.txt"], bash
    assert lines[4].split()[1:] == ["65534"] * 4 and lines[5:] == ["NoNewPrivs:\t1", "Seccomp:\t2"]
    assert pools(app)["any"].taken == before + 2


def test_a_warm_run_prints_its_own_errors_and_runs_its_atexit(app: FastAPI, client: TestClient) -> None:
    failed = run(client, WARM + "def f():\n    raise ValueError('nope')\nf()")
    assert failed["stdout"] == "warm\n"
    assert failed["stderr"] == (
        "Traceback (most recent call last):\n"
        '  File "/code/main.py", line 5, in <module>\n    f()\n'
        "  File \"/code/main.py\", line 4, in f\n    raise ValueError('nope')\n"
        "ValueError: nope\n"
    )
    wait_warm(app)
    exited = run(client, WARM + "import atexit, sys\natexit.register(print, 'bye')\nsys.exit(3)")
    assert exited["stdout"] == "warm\nbye\n", exited
