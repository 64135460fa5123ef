"""Attacks on the `local` sandbox, for real: each asserts that the attack failed, that
the reply is still an ordinary 200, and that the next ordinary run in a fresh session
works. Hostile programs run only inside the sandbox, with small limits on."""

from __future__ import annotations

import os
import platform
import uuid
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from fastapi.testclient import TestClient

from codeexec.api.service import Service
from codeexec.sandbox.local import LocalSandboxes
from codeexec.settings import Settings

from ..calls import run
from ..conftest import API_KEY, CODEEXEC_TEST_BACKEND
from ..helpers.attacks import SMALL_LIMITS


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update=SMALL_LIMITS)


@pytest.fixture(autouse=True)
def service_survives(client: TestClient):
    """After every attack, an ordinary run in a fresh session works."""
    yield
    body = run(client, "print(6 * 7)")
    assert (body["stdout"], body["stderr"]) == ("42\n", "")


def upload(client: TestClient, name: str, data: bytes) -> str:
    reply = client.post("/v1/upload", files={"file": (name, data)})
    assert reply.status_code == 200, reply.text
    return reply.json()["session_id"]


def test_runs_go_where_the_suite_says(service: Service) -> None:
    """This host's own sandboxes, or under make test-runner and test-container a runner's
    (on loopback, or in a container): never the host's where the suite says otherwise."""
    assert isinstance(service.sandboxes, LocalSandboxes) == (CODEEXEC_TEST_BACKEND == "local")


def host_processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


TRY = """
import os, sys
def attempt(what, action):
    try:
        action()
        print(f"{what}: DONE")
    except OSError as exc:
        print(f"{what}: refused ({exc.errno})")
"""


def refused_all(stdout: str) -> None:
    lines = stdout.splitlines()
    assert lines, "the program printed nothing"
    assert not [line for line in lines if "DONE" in line]


# Network


def test_the_services_own_port_is_unreachable(client: TestClient, live_server: str) -> None:
    port = urlparse(live_server).port
    code = TRY + f"""
import socket
attempt("connect", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=1))
print(sorted(name for _, name in socket.if_nameindex()))
"""
    body = run(client, code)
    assert "connect: refused" in body["stdout"]
    assert "['lo']" in body["stdout"]  # a namespace of its own: its lo is not the host's
    assert httpx.get(live_server.removesuffix("/v1") + "/health").status_code == 200


def test_outside_addresses_are_unreachable(client: TestClient) -> None:
    code = TRY + """
import socket
attempt("tcp", lambda: socket.create_connection(("192.0.2.1", 80), timeout=1))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.1", 53)))
attempt("dns", lambda: socket.getaddrinfo("example.com", 80) and None)
"""
    refused_all(run(client, code)["stdout"])  # socket.gaierror is an OSError


# Secrets and the host's files


def test_no_key_or_credential_reaches_a_run(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", canary)
    monkeypatch.setenv("CODE_EXEC_API_KEY", canary)
    code = """
import os
print(dict(os.environ))
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            print(pid, open(f"/proc/{pid}/environ", "rb").read())
        except OSError as exc:
            print(pid, exc)
"""
    body = run(client, code)
    assert "/proc/1/" not in body["stderr"]
    out = body["stdout"] + body["stderr"]
    # /proc/1/environ was read and holds nothing of ours, or refused: a warm run's init is
    # not dumpable (issue 32), so its program cannot read it at all.
    assert "1 b'" in out or "1 [Errno 13] Permission denied" in out
    assert canary not in out and API_KEY not in out
    assert "AWS_" not in out


def test_host_files_are_out_of_reach(client: TestClient, sandbox_root: Path) -> None:
    assert Path("/etc/shadow").exists()
    targets = ["/etc/shadow", "/root", "/home", "/var", str(sandbox_root), "/proc/1/root/etc/shadow", "/sys"]
    code = TRY + f"""
for path in {targets!r}:
    attempt(path, lambda: os.listdir(path) if not path.endswith("shadow") else open(path).read())
"""
    refused_all(run(client, code)["stdout"])


def test_another_sessions_files_are_out_of_reach(client: TestClient, sandbox_root: Path) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    other = upload(client, "secret.txt", secret.encode())
    code = TRY + f"""
import glob
attempt("direct", lambda: open("{sandbox_root}/{other}/data/secret.txt").read())
print(glob.glob("/mnt/*"), glob.glob("/var/tmp/*"), os.listdir("/proc"))
"""
    body = run(client, code)
    assert "direct: refused" in body["stdout"]
    assert "['/mnt/data']" in body["stdout"]
    assert secret not in body["stdout"] + body["stderr"]


def test_nothing_is_written_outside_mnt_data(client: TestClient) -> None:
    name = f"escape-{uuid.uuid4().hex}"
    targets = [f"/{d}{name}" for d in ("", "usr/", "etc/", "code/", "mnt/", "dev/", "proc/")]
    targets.append("/proc/sys/kernel/hostname")
    code = TRY + f"""
for path in {targets!r}:
    attempt(path, lambda: open(path, "w").write("x"))
open("/tmp/{name}", "w").write("private")
"""
    body = run(client, code)
    refused_all(body["stdout"])
    assert not Path(f"/tmp/{name}").exists()  # the sandbox's /tmp is its own
    later = run(client, f"import os; print(os.path.exists('/tmp/{name}'))", session_id=body["session_id"])
    assert later["stdout"] == "False\n"


def test_links_to_host_files_are_never_served(client: TestClient, sandbox_root: Path) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    other = upload(client, "secret.txt", secret.encode())
    code = TRY + f"""
os.symlink("/etc/shadow", "shadow")
os.symlink("/etc", "etc")
os.symlink("{sandbox_root}/{other}/data/secret.txt", "other")
os.symlink("../lease.json", "lease")
attempt("hardlink", lambda: os.link("/etc/passwd", "passwd"))
"""
    body = run(client, code)
    refused_all(body["stdout"])
    session = body["session_id"]
    assert body["files"] == []  # a symlink is never an output
    assert client.get(f"/v1/files/{session}").json() == []
    for file_id in ("shadow", "etc/shadow", "etc/passwd", "other", "lease"):
        reply = client.get(f"/v1/download/{session}/{file_id}")
        assert reply.status_code == 404, file_id
        assert secret.encode() not in reply.content and b"root:" not in reply.content


@pytest.mark.parametrize("name", ["../../escape.txt", "/etc/escape.txt", "..%2Fescape.txt", "a/../../escape.txt"])
def test_upload_names_cannot_escape(client: TestClient, sandbox_root: Path, name: str) -> None:
    reply = client.post("/v1/upload", files={"file": (name, b"x")})
    assert reply.status_code in (200, 400), reply.text
    if reply.status_code == 200:
        session, path = reply.json()["session_id"], reply.json()["files"][0]["filename"]
        assert ".." not in path.split("/") and not path.startswith("/")
        assert (sandbox_root / session / "data" / path).is_file()
    assert not Path("/etc/escape.txt").exists()
    assert not list(sandbox_root.glob("escape*")) and not list(sandbox_root.glob("*/escape*"))


@pytest.mark.parametrize(
    "file_id", ["..%2Flease.json", "%2E%2E/lease.json", "%2Fetc%2Fpasswd", "data%2F..%2F..%2Flease.json"]
)
def test_download_ids_cannot_escape(client: TestClient, file_id: str) -> None:
    session = upload(client, "a.txt", b"a")
    reply = client.get(f"/v1/download/{session}/{file_id}")
    assert reply.status_code in (400, 404), reply.text
    assert b'"org"' not in reply.content and b"root:" not in reply.content


# Privileges and the seccomp filter


def test_the_program_holds_no_privilege(client: TestClient) -> None:
    fields = ("Uid", "CapEff", "CapBnd", "NoNewPrivs", "Seccomp:")
    code = f"print(''.join(line for line in open('/proc/self/status') if line.startswith({fields!r})))"
    status = dict(line.split(":\t", 1) for line in run(client, code)["stdout"].split("\n") if ":\t" in line)
    assert status["Uid"].split() == ["65534"] * 4
    assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"  # a filter is on


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 system call numbers")
def test_ptrace_mount_keys_bpf_perf_and_namespaces_are_denied(client: TestClient) -> None:
    code = """
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    "ptrace": (101, 0, 0, 0, 0),  # PTRACE_TRACEME: allowed to anyone without the filter
    "ptrace_attach": (101, 16, 1, 0, 0),
    "mount": (165, b"none", b"/tmp", b"tmpfs", 0, 0),
    "init_module": (175, 0, 0, b""),
    "keyctl": (250, 0, -3, 0),  # KEYCTL_GET_KEYRING_ID: allowed to anyone without the filter
    "unshare_user": (272, 0x10000000),
    "unshare_net": (272, 0x40000000),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "bpf": (321, 0, 0, 0),
    "clone3": (435, 0, 0),
}
for name, (nr, *args) in calls.items():
    result = libc.syscall(nr, *args)
    print(name, result, ctypes.get_errno())
t = threading.Thread(target=print, args=("thread ok",)); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(7)
print("fork ok", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
    lines = run(client, code)["stdout"].splitlines()
    results = {line.split()[0]: line.split()[1:] for line in lines}
    for name in ("ptrace", "ptrace_attach", "mount", "init_module", "keyctl", "unshare_user", "unshare_net",
                 "perf_event_open", "bpf"):  # fmt: skip
        assert results[name] == ["-1", "1"], (name, results[name])  # EPERM
    assert results["clone3"] == ["-1", "38"]  # ENOSYS: the C library falls back to clone
    assert "thread ok" in lines and "fork ok 7" in lines  # what programs need still works


def test_no_new_user_namespace_from_inside(client: TestClient) -> None:
    body = run(client, "unshare --user --map-root-user id; echo rc=$?", lang="bash")
    assert "uid=0" not in body["stdout"]
    assert "rc=1" in body["stdout"]


# Exhaustion


def test_a_fork_bomb_ends_and_leaves_nothing_behind(client: TestClient) -> None:
    marker = f"bomb-{uuid.uuid4().hex}"
    # The sleep keeps the run alive while the bomb grows: a run that ends at once would
    # take the bomb with it before it ever reached the limit.
    body = run(client, ":(){ :|:& };:; sleep 2", lang="bash", args=[marker])
    assert f"limit of {SMALL_LIMITS['run_max_processes']} processes and threads" in body["stderr"]
    assert host_processes_with(marker) == []


def test_a_memory_bomb_is_killed(client: TestClient) -> None:
    body = run(client, "hoard = []\nwhile True:\n    hoard.append(bytearray(1 << 20))")
    assert "memory limit" in body["stderr"] or "MemoryError" in body["stderr"]


def test_an_infinite_loop_is_stopped(client: TestClient) -> None:
    body = run(client, "while True:\n    pass")
    assert "CPU time" in body["stderr"] or "time limit" in body["stderr"]


def test_a_sleep_past_the_wall_limit_is_stopped(client: TestClient) -> None:
    body = run(client, "import time\nprint('before', flush=True)\ntime.sleep(60)\nprint('after')")
    assert body["stdout"] == "before\n"
    assert "Stopped: the run exceeded its 3 s time limit." in body["stderr"]


def test_a_program_that_closes_its_output_is_still_stopped(client: TestClient) -> None:
    body = run(client, "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)")
    assert "time limit" in body["stderr"]


def test_100_mb_of_stdout_is_cut_without_the_service_holding_it(client: TestClient) -> None:
    import resource

    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = "import sys\nfor _ in range(100):\n    sys.stdout.buffer.write(b'x' * (1 << 20))\n"
    code += "print('end', file=sys.stderr)"
    body = run(client, code)
    assert len(body["stdout"]) == SMALL_LIMITS["max_output_bytes"]
    assert f"Output truncated: stdout exceeded {SMALL_LIMITS['max_output_bytes']} bytes" in body["stderr"]
    assert "end" in body["stderr"]  # the program ran to its end: its output was drained
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown_kib < 50 << 10


def test_a_file_that_fills_the_disk_is_stopped(client: TestClient, sandbox_root: Path) -> None:
    one = run(client, "open('big', 'wb').write(b'x' * (5 << 20))")
    assert "File too large" in one["stderr"]
    assert (sandbox_root / one["session_id"] / "data" / "big").stat().st_size == 1 << 20
    code = "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * 1000)\n    i += 1\nprint('never')"
    many = run(client, code.replace("1000", str(900 << 10)))
    assert "Disk quota exceeded" in many["stderr"]  # the kernel refused the write that would pass it
    assert "time limit" not in many["stderr"] and "never" not in many["stdout"]
    used = sum(p.stat().st_blocks * 512 for p in (sandbox_root / many["session_id"] / "data").iterdir())
    assert used <= SMALL_LIMITS["max_session_bytes"]


def test_a_background_process_dies_with_the_run(client: TestClient) -> None:
    marker = f"bg-{uuid.uuid4().hex}"
    code = f"""
import subprocess, sys
subprocess.Popen(["sh", "-c", "sleep 30; echo late > late.txt", "{marker}"], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("started")
"""
    body = run(client, code)
    assert body["stdout"] == "started\n"
    assert "time limit" not in body["stderr"]  # the reply did not wait for the straggler
    assert host_processes_with(marker) == []
