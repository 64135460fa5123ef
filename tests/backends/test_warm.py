"""Warm sandboxes (sandbox/local/warm/): a run forked from a fork server
is a cold run's equal in isolation and limits, sees nothing of an earlier run or of
another session, cannot reach its server or a sibling, and a run that finds none ready,
or a host that cannot make them, runs cold. (`make test-warm` runs the security, limit
and language suites warm too.)"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.sandbox.local import cgroups
from codeexec.sandbox.local.warm import kernel, ready, wire
from codeexec.sandbox.local.warm import server as fork_server
from codeexec.sandbox.local.warm.pools import Pool
from codeexec.sandbox.port import OwnerTag, PoolLoad, Program, RunResult
from codeexec.settings import Settings

from ..conftest import API_KEY
from ..helpers.processes import family
from ..serving import Services

# Where the service could keep none (warm._possible): it hands runs a mount, and needs a memory cgroup.
pytestmark = [
    pytest.mark.root,
    pytest.mark.cgroups,
    pytest.mark.skipif(
        os.geteuid() != 0 or "memory" not in cgroups.detect(), reason="warm sandboxes need root and a memory cgroup"
    ),
]

# True only in a run forked from the interpreter with the libraries: a cold run has imported none.
WARM = "import sys\nprint('warm' if 'pandas' in sys.modules else 'cold')\n"


@pytest.fixture
def app(settings: Settings, services: Services) -> FastAPI:
    return create_app(services(settings.model_copy(update={"warm_python": 2, "warm_sandboxes": 2})))


@pytest.fixture
def client(app: FastAPI) -> TestClient:
    return TestClient(app, headers={"X-API-Key": API_KEY})


def run(client: TestClient, code: str, **body: Any) -> dict[str, Any]:
    reply = client.post("/v1/exec", json={"lang": "py", "code": code, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def pools(app: FastAPI) -> dict[str, Pool]:
    """The app's pools that are on (its scientific one is off here: test_warm_scientific.py)."""
    return dict(app.state.service.sandboxes.launcher.warm.pools)


def wait_warm(app: FastAPI) -> None:
    assert all(pool.wait_ready() for pool in pools(app).values())


def test_a_warm_run_sees_nothing_of_an_earlier_one(app: FastAPI, client: TestClient) -> None:
    first = run(
        client,
        WARM + "import os, functools, linecache, numpy, pandas\n"
        "numpy.sum = lambda *a, **k: 'patched'\n"  # a preloaded module's state
        "pandas.left_behind = 1\n"
        "linecache.cache['/left.py'] = (1, None, ['x'], '/left.py')\n"  # a cache of the interpreter's
        "open('/tmp/left.txt', 'w').write('x')\n"
        "os.environ['LEFT'] = '1'\n"
        "kept = os.open('/proc/self/status', os.O_RDONLY)\n"  # a descriptor left open
        "import builtins; builtins.left = 1\n"
        "print(numpy.sum([1, 2]))\n",
    )
    assert first["stdout"] == "warm\npatched\n", first
    wait_warm(app)
    second = run(
        client,
        WARM + "import os, builtins, linecache, numpy, pandas\n"
        "print(numpy.sum([1, 2]), hasattr(pandas, 'left_behind'), '/left.py' in linecache.cache,\n"
        "      os.path.exists('/tmp/left.txt'), 'LEFT' in os.environ, hasattr(builtins, 'left'))\n"
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        print(fd, os.readlink(f'/proc/self/fd/{fd}'))\n"
        "    except OSError:\n"
        "        pass  # listdir's own\n",
    )
    lines = second["stdout"].splitlines()
    assert lines[:2] == ["warm", "3 False False False False False"], second
    # Its standard streams, and what the interpreter's own imports hold open (a font file
    # of matplotlib's); nothing of the earlier run's, nothing of the server's.
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
        "for line in open('/proc/self/mountinfo'):\n"
        "    _, _, _, root, point, *rest = line.split()\n"
        "    if rest[rest.index('-') + 1] == 'btrfs':\n"
        "        print(point, root)\n"
    )
    again = run(client, WARM + look, session_id=a["session_id"])
    # Its own files at /mnt/data; and of the sessions' filesystem it sees its own data
    # directory there and nothing else: no run directory, no other session, not the top level.
    lines = again["stdout"].splitlines()
    assert lines[:2] == ["warm", "['mine.txt'] /mnt/data"], again
    assert len(lines) == 3 and lines[2].endswith(f"/{a['session_id']}/data"), again
    assert lines[2].startswith("/mnt/data ") and b["session_id"] not in again["stdout"]


def test_nothing_of_the_server_lives_on_the_sessions_filesystem(app: FastAPI, sandbox_root: Path) -> None:
    wait_warm(app)
    device = sandbox_root.stat().st_dev
    for pool in pools(app).values():
        assert pool.server is not None
        for pid in family(pool.server):
            for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
                major, minor = line.split()[2].split(":")
                assert os.makedev(int(major), int(minor)) != device, line
    assert not (sandbox_root / ".warm").exists()


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
    # The program's CPU clock starts at its fork, not at the interpreter's imports.
    clock = run(client, WARM + "import time\nprint(time.process_time() < 0.05)")
    assert clock["stdout"] == "warm\nTrue\n"
    assert client.get("/health").status_code == 200


BOMBS = {
    "memory": ("py", "x = []\nwhile True:\n    x.append(bytearray(1 << 20))"),
    "cpu": ("py", "while True:\n    pass"),
    "wall time": ("py", "import time\ntime.sleep(60)"),
    "processes": ("bash", ":(){ :|:& };:; sleep 2"),
    "output": ("py", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"),
}


@pytest.mark.parametrize("name", BOMBS)
def test_bombs_stop_the_same_way_warm_and_cold(
    settings: Settings, name: str, services: Services
) -> None:
    small = settings.model_copy(
        update={"run_timeout_seconds": 3, "run_cpu_seconds": 1, "run_memory_bytes": 128 << 20,
                "run_max_processes": 32, "max_output_bytes": 64 << 10}
    )  # fmt: skip
    warm_app = create_app(services(small.model_copy(update={"warm_python": 1, "warm_sandboxes": 1})))
    cold = {"warm_python": 0, "warm_sandboxes": 0, "warm_scientific": 0}
    cold_app = create_app(services(small.model_copy(update=cold)))
    lang, code = BOMBS[name]
    replies = {}
    for side, app in (("warm", warm_app), ("cold", cold_app)):
        client = TestClient(app, headers={"X-API-Key": API_KEY})
        replies[side] = run(client, code, lang=lang)
        assert run(client, "print(6 * 7)")["stdout"] == "42\n"  # and the service goes on
    assert sum(pool.taken for pool in pools(warm_app).values() if pool) >= 1  # the bomb, the first run
    # What stopped it, in the same words; nothing else said differs either.
    notes = {side: reply["stderr"].splitlines()[-1] for side, reply in replies.items()}
    assert notes["warm"] == notes["cold"], replies
    assert len(replies["warm"]["stdout"]) == len(replies["cold"]["stdout"])


ATTACK = """
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)

class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

buf = ctypes.create_string_buffer(64)
local, remote = IOVec(ctypes.addressof(buf), 64), IOVec(0x400000, 64)

def called(result):
    if result < 0:
        raise OSError(ctypes.get_errno(), "")

def read_mem(pid):
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(0x400000)
        mem.read(64)

ATTEMPTS = {
    "ptrace": lambda pid: called(libc.ptrace(16, pid, 0, 0)),  # PTRACE_ATTACH
    "process_vm_readv": lambda pid: called(
        libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    ),
    "mem": read_mem,
    "kill": lambda pid: os.kill(pid, signal.SIGKILL),
}
print("visible", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
for pid in map(int, sys.argv[1:]):
    for what, attempt in ATTEMPTS.items():
        try:
            attempt(pid)
            print(what, pid, "DONE")
        except OSError as exc:
            print(what, pid, exc.errno)
print("still here")
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 system call numbers")
def test_a_run_cannot_reach_its_server_or_a_sibling(
    app: FastAPI, client: TestClient, live_server: str, sandbox_root: Path
) -> None:
    session = run(client, WARM + "print('first')")["session_id"]
    wait_warm(app)
    sibling_code = WARM + "import time\nopen('started.txt', 'w').close()\ntime.sleep(3)\nprint('alive')"
    body = {"lang": "py", "code": sibling_code, "session_id": session}
    with ThreadPoolExecutor(1) as pool:
        sibling = pool.submit(httpx.post, f"{live_server}/exec", json=body, headers={"X-API-Key": API_KEY}, timeout=30)
        deadline = time.monotonic() + 10
        while not (sandbox_root / session / "data" / "started.txt").exists():
            assert time.monotonic() < deadline and not sibling.done()
            time.sleep(0.02)
        wait_warm(app)
        servers = {name: p.server for name, p in pools(app).items()}
        # Everything the servers made, by host pid: the sibling's program, init and monitor,
        # the runs made ahead, the servers themselves; and 1 and 2, its own init and itself.
        targets = sorted({pid for server in servers.values() if server for pid in family(server)})
        attack = run(client, WARM + ATTACK, args=[str(pid) for pid in (*targets, 1)])
        sibling_reply = sibling.result().json()
    assert sibling_reply["stdout"] == "warm\nalive\n", sibling_reply
    lines = attack["stdout"].splitlines()
    assert lines[0] == "warm" and lines[1] == "visible [1, 2]" and lines[-1] == "still here", attack
    results = {(what, int(pid)): code for what, pid, code in map(str.split, lines[2:-1])}
    for pid in targets:  # a host pid means nothing in its own PID namespace
        assert results["ptrace", pid] == results["process_vm_readv", pid] == "1"  # EPERM: the filter
        assert results["mem", pid] == "2" and results["kill", pid] == "3", pid  # ENOENT, ESRCH
    # Its own init: no tracing either, and a signal from inside does not reach pid 1.
    assert results["ptrace", 1] == results["process_vm_readv", 1] == "1" and results["kill", 1] == "DONE"
    assert {name: p.server for name, p in pools(app).items()} == servers
    assert all(server and server.alive() for server in servers.values())
    wait_warm(app)
    assert run(client, WARM + "print(6 * 7)")["stdout"] == "warm\n42\n"


def test_with_none_ready_a_run_is_forked_at_once_and_without_a_server_runs_cold(
    app: FastAPI, client: TestClient
) -> None:
    wait_warm(app)
    interpreters = pools(app)["py"]
    taken = [interpreters.take() for _ in range(2)]  # both: the pool refills now, at low priority
    try:
        assert run(client, WARM + "print(6 * 7)")["stdout"] == "warm\n42\n"  # a fork, not the imports
        for pool in pools(app).values():
            pool.close()
        assert run(client, WARM + "print(6 * 7)")["stdout"] == "cold\n42\n"
    finally:
        for ready in taken:
            assert ready is not None
            ready.close()


def test_a_run_says_whether_it_ran_warm_and_each_pool_counts_its_hits_and_misses(app: FastAPI) -> None:
    sandboxes = app.state.service.sessions.sandboxes

    def launched(code: str) -> RunResult:
        with sandboxes.create(OwnerTag("org", "user")) as sandbox:
            return sandbox.run(Program("py", code))

    wait_warm(app)
    stats = sandboxes.launcher.warm_stats
    assert {kind: stats()[kind] for kind in ("py", "bare")} == {"py": PoolLoad(2, 0, 0), "bare": PoolLoad(2, 0, 0)}
    pandas, bare = launched(WARM), launched("print(1)")
    assert (pandas.stdout, pandas.warm, bare.stdout, bare.warm) == ("warm\n", True, "1\n", True)
    for pool in pools(app).values():
        pool.close()
    cold = launched(WARM)
    assert (cold.stdout, cold.warm) == ("cold\n", False)
    # The cold run counts against the kind it wanted; the pools hold no run now.
    assert {kind: stats()[kind] for kind in ("py", "bare")} == {"py": PoolLoad(0, 1, 1), "bare": PoolLoad(0, 1, 0)}


def test_a_pool_with_runs_to_spare_refills_after_the_run_not_during_it(app: FastAPI) -> None:
    """policy.Policy.ample: a refill's fork and mounts would share the CPU with the run."""
    wait_warm(app)
    bare = pools(app)["bare"]
    taken = [bare.take()]
    try:
        time.sleep(0.5)  # a bare fork is ready in milliseconds
        assert bare.ready() == 1
        bare.ran()
        assert bare.wait_ready(10)
        taken += [bare.take(), bare.take()]  # none to spare: it refills at once
        assert bare.wait_ready(10)
    finally:
        for each in taken:
            assert each is not None
            each.close()


def test_a_program_naming_no_library_forks_from_a_bare_interpreter(app: FastAPI, client: TestClient) -> None:
    wait_warm(app)
    taken = {name: pool.taken for name, pool in pools(app).items()}
    # (It names none of them itself: the heavy interpreter has loaded over a thousand modules.)
    reply = run(client, "import sys, time\nprint(len(sys.modules) < 200, time.process_time() < 0.05, sys.argv)")
    assert reply["stdout"] == "True True ['/code/main.py']\n", reply
    assert {name: pool.taken - taken[name] for name, pool in pools(app).items()} == {"py": 0, "bare": 1}


THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@pytest.mark.skipif(not THP.exists() or "[never]" in THP.read_text(), reason="no transparent huge pages here")
def test_a_run_shares_the_interpreters_heap_in_huge_pages_and_starts_its_clock_at_zero(
    app: FastAPI, client: TestClient
) -> None:
    # What makes a fork of the interpreter with the libraries cheap (zygote.share_as_huge_pages);
    # its copies are the run's own, and cost the run no CPU time before its program starts.
    wait_warm(app)
    reply = run(
        client,
        WARM + "import re, time\nstart = time.process_time()\n"
        "rollup = open('/proc/self/smaps_rollup').read()\n"
        "print(int(re.search(r'AnonHugePages:\\s+(\\d+)', rollup)[1]) >= 2048, start < 0.05)\n",
    )
    assert reply["stdout"] == "warm\nTrue True\n", reply


def test_other_languages_run_by_exec_in_a_sandbox_made_ahead(app: FastAPI, client: TestClient) -> None:
    wait_warm(app)
    before = pools(app)["bare"].taken
    js = client.post(
        "/v1/exec",
        json={"lang": "js", "code": "require('fs').writeFileSync('j.txt', 'js'); console.log(process.argv.length)"},
    ).json()
    assert js["stdout"] == "2\n" and [f["name"] for f in js["files"]] == ["j.txt"]
    wait_warm(app)
    probe = (
        "echo \"$0|$1|$2\"; pwd; ls /mnt/data; grep -E '^(Uid|Cap...|NoNewPrivs|Seccomp):' /proc/self/status; "
        "trap -p; ulimit -t"
    )
    bash = client.post(
        "/v1/exec", json={"lang": "bash", "code": probe, "args": ["a b", "$(id)\n'"], "session_id": js["session_id"]}
    ).json()
    lines = bash["stdout"].splitlines()
    # Its args as given, its own session's files, and a cold run's confinement: no
    # capability in any set, no signal left ignored by the interpreter it was forked from.
    assert lines[0] == "/code/main.sh|a b|$(id)" and lines[1] == "'" and lines[2:4] == ["/mnt/data", "j.txt"], bash
    assert lines[4].split()[1:] == ["65534"] * 4
    assert [line.split()[1] for line in lines[5:10]] == ["0000000000000000"] * 5
    assert lines[10:] == ["NoNewPrivs:\t1", "Seccomp:\t2", "30"], bash
    assert pools(app)["bare"].taken == before + 2


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
    wait_warm(app)
    # Python's own signal handling, as in a Python started for the run.
    interrupted = run(client, WARM + "import os, signal\nos.kill(os.getpid(), signal.SIGINT)")
    assert interrupted["stderr"].endswith("KeyboardInterrupt\n"), interrupted


def test_a_server_is_replaced_after_its_runs(
    app: FastAPI, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    wait_warm(app)
    bare = pools(app)["bare"]
    first = bare.server
    assert first is not None
    monkeypatch.setattr(bare, "policy", dataclasses.replace(bare.policy, server_runs=first.forked + 1))
    for _ in range(6):  # the pool replaces it while the runs it made ahead go on serving
        assert run(client, "print(1)")["stdout"] == "1\n"
        wait_warm(app)
        if bare.server is not first:
            break
        time.sleep(0.2)
    assert bare.server is not first and bare.server is not None and bare.server.alive()
    deadline = time.monotonic() + 10
    while first.alive():  # the old one ends with the last run it made
        assert time.monotonic() < deadline
        run(client, "print(1)")
        time.sleep(0.1)


@pytest.fixture
def cold_on_failure(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A host where a server starts but cannot make a run's namespaces (no capability)."""
    monkeypatch.setattr(fork_server, "CAPABILITIES", ("CAP_NET_ADMIN",))
    yield


def test_a_host_that_cannot_fork_runs_runs_every_run_cold(
    settings: Settings, cold_on_failure: None, services: Services
) -> None:
    app = create_app(services(settings.model_copy(update={"warm_python": 1, "warm_sandboxes": 1})))
    client = TestClient(app, headers={"X-API-Key": API_KEY})
    deadline = time.monotonic() + 60
    while any(pool and not pool.closed for pool in pools(app).values()):  # three failures, then off
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert run(client, WARM + "print(6 * 7)")["stdout"] == "cold\n42\n"
    assert all(pool is None or pool.taken == 0 for pool in pools(app).values())


def test_a_run_the_ready_run_cannot_take_runs_cold(
    app: FastAPI, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    wait_warm(app)

    def refused(path: str) -> int:
        raise OSError(1, "open_tree refused")

    monkeypatch.setattr(kernel, "open_tree", refused)
    reply = run(client, WARM + "print(6 * 7)")
    assert reply["stdout"] == "cold\n42\n"
    assert pools(app)["py"].taken == 1  # it was taken, failed before the program had its run, and ran cold


def test_without_cgroups_a_bare_servers_runs_hold_the_rlimits_cold_runs_hold(
    settings: Settings, services: Services
) -> None:
    app = create_app(
        services(settings.model_copy(
            update={"sandbox_cgroups": False, "warm_python": 1, "warm_sandboxes": 1, "warm_scientific": 1,
                    "run_memory_bytes": 96 << 20, "run_max_processes": 24}
        ))  # fmt: skip
    )
    client = TestClient(app, headers={"X-API-Key": API_KEY})
    assert list(pools(app)) == ["bare"]  # an address-space limit would count the others' libraries
    code = "import resource as r\nprint(r.getrlimit(r.RLIMIT_AS), r.getrlimit(r.RLIMIT_NPROC))"
    assert run(client, code)["stdout"] == f"({96 << 20}, {96 << 20}) (24, 24)\n"
    bomb = run(client, "hoard = []\nwhile True:\n    hoard.append(bytearray(1 << 20))")
    assert "MemoryError" in bomb["stderr"]  # the allocation fails; the program says so itself
    assert pools(app)["bare"].taken == 2


def test_a_host_without_detached_mounts_runs_every_run_cold(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, services: Services
) -> None:
    def missing(path: str) -> int:
        raise OSError(38, "Function not implemented")  # a kernel before 5.2

    monkeypatch.setattr(kernel, "open_tree", missing)
    every_kind = {"warm_python": 1, "warm_sandboxes": 1, "warm_scientific": 1}
    app = create_app(services(settings.model_copy(update=every_kind)))
    assert pools(app) == {}
    assert run(TestClient(app, headers={"X-API-Key": API_KEY}), WARM + "print(6 * 7)")["stdout"] == "cold\n42\n"


def test_a_fork_that_fails_leaves_its_server_to_end_with_its_pool(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, services: Services
) -> None:
    """A run made ahead that could not be made gives its server back once, not twice: a
    server counted one run short would never see its last run end, and outlive its pool
    (as a retired server would outlive its replacement, holding its memory)."""
    bare_only = {"warm_python": 0, "warm_sandboxes": 1, "warm_scientific": 0}
    app = create_app(services(settings.model_copy(update=bare_only)))
    bare = pools(app)["bare"]
    assert bare.wait_ready() and bare.server is not None
    server = bare.server

    def refused(self: cgroups.RunCgroup, *limits: int) -> None:
        raise OSError(28, "No space left on device")  # as a full cgroup hierarchy answers

    with monkeypatch.context() as patched:
        patched.setattr(cgroups.RunCgroup, "create", refused)
        with pytest.raises(OSError):
            ready.fork(server, wire.ForkOrder(nice=0))
    bare.close()  # its runs made ahead end, and it is retired; the backend's threads live on
    deadline = time.monotonic() + 10
    while server.alive():
        assert time.monotonic() < deadline, "the server outlived its pool"
        time.sleep(0.05)


def test_a_run_made_ahead_that_waited_has_copied_the_pages_runs_write(app: FastAPI, client: TestClient) -> None:
    """zygote.meanwhile: a run made ahead that waited for its run holds its copies of the
    pages runs write first (12 MiB for this server) before its program starts; and the
    server's first uses left nothing a program could see (no figure open)."""
    wait_warm(app)
    time.sleep(1.5)  # longer than a run made ahead waits before it copies (policy.Kind.copy_after)
    code = (
        WARM + "rollup = dict(line.split(':') for line in open('/proc/self/smaps_rollup').readlines()[1:])\n"
        "print(int(rollup['Private_Dirty'].split()[0]) > 8 * 1024)\n"
        "import matplotlib.pyplot as plt\nprint(plt.get_fignums())"
    )
    assert run(client, code)["stdout"] == "warm\nTrue\n[]\n"
