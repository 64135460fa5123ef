"""Round two: attacks on the SERVICE around the sandbox, through the API only (and, where
the attack is on the host side, from an unprivileged host user). Each asserts that the
attack failed, and, after it, that /health and an ordinary run in a fresh session answer
promptly. Numbered as the issue that found them."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.reaper import reap
from codeexec.sandbox.local import files as local_files
from codeexec.settings import Settings

from .calls import names, run, upload
from .conftest import API_KEY

HOST_USER = 4321  # a host user that is neither root nor the sandbox's uid
PROMPT = 10.0  # seconds: what "answers promptly" allows on a busy 2-core machine
KEY = {"X-API-Key": API_KEY}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "run_timeout_seconds": 10,
            "max_session_bytes": 8 << 20,
            "max_file_bytes": 8 << 30,  # so that only the session's disk limit stops a write
            "max_concurrent_runs": 3,
            "max_concurrent_uploads": 4,
            "max_request_bytes": 1 << 20,
        }
    )


@pytest.fixture
def api(live_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server, headers=KEY, timeout=PROMPT) as client:
        yield client
    # After every attack the service still answers, and still runs code.
    with httpx.Client(base_url=live_server, headers=KEY, timeout=PROMPT) as after:
        assert after.get("/health").status_code == 200
        body = after.post("/exec", json={"lang": "py", "code": "print(6 * 7)"}).json()
        assert (body["stdout"], body["stderr"]) == ("42\n", "")


def exec_(api: httpx.Client, code: str, lang: str = "py", **extra: object) -> dict:
    reply = api.post("/exec", json={"lang": lang, "code": code, **extra})
    assert reply.status_code == 200, reply.text
    return reply.json()


def as_host_user(script: str) -> subprocess.CompletedProcess[str]:
    argv = ["setpriv", f"--reuid={HOST_USER}", f"--regid={HOST_USER}", "--clear-groups", "--", "/bin/sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


# 1. Files that block a reader.


def test_a_fifo_blocks_no_reader_and_no_worker(api: httpx.Client) -> None:
    session = exec_(api, "mkfifo pipe.csv", lang="bash")["session_id"]
    with ThreadPoolExecutor(45) as pool:  # more than the server's worker threads
        downloads = list(pool.map(lambda _: api.get(f"/download/{session}/pipe.csv").status_code, range(45)))
    assert set(downloads) == {404}
    assert api.get(f"/sessions/{session}/objects/pipe.csv").status_code == 404
    ref = {"id": "pipe.csv", "name": "pipe.csv", "session_id": session}
    body = exec_(api, "print('ran')", files=[ref], session_id=session)
    assert body["stdout"] == "ran\n"


def test_a_file_lease_cannot_be_taken(api: httpx.Client) -> None:
    session = exec_(api, "open('held.txt', 'w').write('x')")["session_id"]
    code = (
        "import fcntl, time\nfd = open('held.txt')\n"
        "try:\n    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n    print('leased')\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
        "time.sleep(3)"
    )
    with ThreadPoolExecutor(1) as pool:
        holding = pool.submit(exec_, api, code, session_id=session)
        time.sleep(1)
        assert api.get(f"/download/{session}/held.txt").content == b"x"  # at once, not 45 s later
        assert holding.result()["stdout"] == f"refused {errno.EPERM}\n"


# 2. The session's disk limit, held by the kernel.


def test_fallocate_and_deep_trees_cannot_pass_the_disk_limit(api: httpx.Client, sandbox_root: Path) -> None:
    code = (
        "fallocate -l 4G big; echo $?; touch kept; fallocate -n -l 4G kept; echo $?;"
        " for i in 1 2 3 4 5 6 7 8 9 10; do fallocate -l 1G f$i 2>/dev/null; done; echo done"
    )
    body = exec_(api, code, lang="bash")
    assert body["stdout"] == "1\n1\ndone\n"
    assert "Disk quota exceeded" in body["stderr"]
    deep = (
        "import os\nos.chdir('/mnt/data')\nwritten = 0\n"
        "for level in range(40):\n    os.mkdir('d' * 200); os.chdir('d' * 200)\n"  # 8000 characters deep
        "try:\n    while True:\n        open(f'part{written}', 'wb').write(b'x' * (1 << 20)); written += 1\n"
        "except OSError as e:\n    print(written, e.strerror)"
    )
    got = exec_(api, deep, session_id=body["session_id"])
    parts, reason = got["stdout"].split(" ", 1)
    assert reason == "Disk quota exceeded\n" and int(parts) < 8
    assert api.get(f"/files/{body['session_id']}").status_code == 200


# 3. The body is bounded and the caller known before a byte of it is read.


def _raw_post(live_server: str, headers: str, body_chunks: Iterator[bytes] | None = None) -> str:
    url = urlparse(live_server)
    with socket.create_connection((url.hostname, url.port), timeout=PROMPT) as conn:
        conn.sendall(f"POST /v1/exec HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        for chunk in body_chunks or ():
            try:
                conn.sendall(chunk)
            except OSError:  # the service answered and closed: it did not read the rest
                break
        return conn.recv(4096).decode(errors="replace")


def test_a_big_body_is_refused_before_it_is_read(api: httpx.Client, live_server: str) -> None:
    started = time.monotonic()
    unauthenticated = _raw_post(live_server, "Content-Type: application/json\r\nContent-Length: 300000000\r\n")
    assert unauthenticated.startswith("HTTP/1.1 401")
    declared = _raw_post(live_server, f"X-API-Key: {API_KEY}\r\nContent-Length: 2147483648\r\n")
    assert declared.startswith("HTTP/1.1 413")
    endless = (b"1000\r\n" + b"x" * 4096 + b"\r\n" for _ in range(100_000))  # 400 MB, no length
    chunked = _raw_post(live_server, f"X-API-Key: {API_KEY}\r\nTransfer-Encoding: chunked\r\n", endless)
    assert chunked.startswith("HTTP/1.1 413")
    assert time.monotonic() - started < 3 * PROMPT  # none of them waited for 300 MB to arrive


# 4. Admission control.


def test_runs_beyond_the_slots_are_refused_at_once_and_health_answers(api: httpx.Client) -> None:
    finished: list[tuple[float, int]] = []

    def sleeper(i: int) -> httpx.Response:  # nine users: no user's share stops them first
        reply = api.post("/exec", json={"lang": "bash", "code": "sleep 3", "user_id": f"u{i}"}, timeout=30)
        finished.append((time.monotonic(), reply.status_code))
        return reply

    with ThreadPoolExecutor(9) as pool:
        replies = list(pool.map(sleeper, range(9)))
        health_while_full = api.get("/health")
    statuses = sorted(r.status_code for r in replies)
    assert statuses == [200] * 3 + [429] * 6
    refused = next(r for r in replies if r.status_code == 429).json()
    assert (refused["error"], refused["retry_after_seconds"]) == ("rate_limited", 2)
    # Every refusal came back while the admitted runs were still sleeping.
    last_refusal = max(t for t, status in finished if status == 429)
    first_run = min(t for t, status in finished if status == 200)
    assert last_refusal < first_run
    assert health_while_full.status_code == 200


def test_uploads_waiting_for_a_busy_session_are_bounded(api: httpx.Client) -> None:
    session = exec_(api, "echo ready", lang="bash")["session_id"]
    with ThreadPoolExecutor(10) as pool:
        running = pool.submit(exec_, api, "sleep 3", "bash", session_id=session)
        time.sleep(0.5)
        upload_once = lambda i: api.post(  # noqa: E731
            "/upload", files={"file": (f"u{i}.txt", b"u")}, params={"session_id": session}, timeout=30
        )
        uploads = list(pool.map(upload_once, range(8)))
        assert api.get("/health").status_code == 200
        running.result()
    # One user alone has 3 of the 4 upload slots (one is kept for whoever comes next).
    assert sorted(u.status_code for u in uploads) == [200] * 3 + [429] * 5


def test_a_long_run_keeps_its_connection_alive(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"exec_keepalive_seconds": 0.5}))
    body = TestClient(app, headers=KEY).post("/v1/exec", json={"lang": "bash", "code": "sleep 2; echo done"})
    assert body.status_code == 200
    assert body.text.startswith("  ")  # spaces while it ran, then the reply
    assert json.loads(body.text)["stdout"] == "done\n"


# 5. The reaper survives any one bad entry.


def test_a_deep_tree_and_a_stuck_ending_do_not_stop_the_reaper(app: FastAPI, sandbox_root: Path) -> None:
    client = TestClient(app, headers=KEY)
    deep = "import os\nfor _ in range(1500):\n    os.mkdir('d'); os.chdir('d')\nopen('leaf.txt', 'w').write('x')"
    doomed = [run(client, deep)["session_id"], run(client, "print(1)")["session_id"]]
    stuck = sandbox_root / ".ended-AAAAAAAAAAAAAAAAAAAAA"
    (stuck / "d").mkdir(parents=True)
    (stuck / "d" / "f").write_text("x")
    subprocess.run(["chattr", "+i", str(stuck / "d" / "f")], check=True)  # no removal can finish it
    try:
        sandboxes = app.state.service.sessions.sandboxes
        report = reap(sandboxes, idle_timeout=0, clock=lambda: time.time() + 10)
        assert (report.ended, report.failed) == (2, 0)
        assert all(client.get(f"/v1/files/{s}").status_code == 404 for s in doomed)
        later = run(client, "print(2)")["session_id"]
        assert reap(sandboxes, idle_timeout=0, clock=lambda: time.time() + 10).ended == 1
        assert client.get(f"/v1/files/{later}").status_code == 404
    finally:
        subprocess.run(["chattr", "-i", str(stuck / "d" / "f")], check=True)


# 6. The host side of a session.


def test_another_host_user_reaches_no_session_and_no_setuid_bit_holds(api: httpx.Client, sandbox_root: Path) -> None:
    code = "cp /usr/bin/id myid; chmod 4755 myid; chmod 777 /mnt/data; echo secret > secret.txt; chmod 644 secret.txt"
    session = exec_(api, code, lang="bash")["session_id"]
    data = sandbox_root / session / "data"
    attempt = as_host_user(f"cat {data}/secret.txt; ls {data}; {data}/myid -u; ls {sandbox_root}")
    assert "secret" not in attempt.stdout and "myid" not in attempt.stdout and session not in attempt.stdout
    assert attempt.stderr.count("Permission denied") >= 3
    assert os.statvfs(data).f_flag & os.ST_NOSUID  # even reached, the bit would do nothing
    assert (data.stat().st_mode & 0o777) == 0o777  # the run did chmod it...
    exec_(api, "true", lang="bash", session_id=session)
    assert (data.stat().st_mode & 0o777) == 0o700  # ...and the next run finds it closed again


@pytest.mark.parametrize("owner", [HOST_USER, 0])
def test_a_sandbox_root_someone_else_made_is_refused(settings: Settings, sandbox_root: Path, owner: int) -> None:
    planted = sandbox_root / "planted"
    planted.mkdir()
    if owner:
        os.chown(planted, owner, owner)
    else:  # ours, but in a directory another user may change
        planted.chmod(0o777)
        planted = planted / "root"
        planted.mkdir()
    with pytest.raises(RuntimeError, match="refusing it"):
        create_app(settings.model_copy(update={"sandbox_root": planted}))


def test_a_closed_data_dir_and_unnameable_files_break_no_later_call(api: httpx.Client) -> None:
    code = (
        "import os\nopen(b'bad\\xff.txt', 'wb').write(b'z')\n"
        "for _ in range(20):\n    os.mkdir('x' * 250); os.chdir('x' * 250)\n"  # 5000 characters: past PATH_MAX
        "open('deep.txt', 'w').write('d')\n"
        "os.chdir('/mnt/data'); open('ok.txt', 'w').write('k'); os.chmod('/mnt/data', 0)"
    )
    session = exec_(api, code)["session_id"]
    listing = api.get(f"/files/{session}", params={"detail": "summary"})
    assert [f["path"] for f in listing.json()] == ["ok.txt"]
    body = exec_(api, "print(open('ok.txt').read())", session_id=session)
    assert (body["stdout"], body["stderr"]) == ("k\n", "")


# 7. Kernel surface.


def test_vsock_io_uring_and_what_the_sandbox_can_learn_of_its_host(api: httpx.Client, sandbox_root: Path) -> None:
    code = (
        "import ctypes, errno, socket\n"
        "try:\n    socket.socket(40, socket.SOCK_STREAM)\nexcept OSError as e:\n    print('vsock', e.errno)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('io_uring', libc.syscall(425, 8, ctypes.create_string_buffer(120)), ctypes.get_errno())\n"
        "print(open('/proc/self/mountinfo').read()); print(open('/proc/1/cmdline').read())"
    )
    body = exec_(api, code)
    lines = body["stdout"].splitlines()
    assert lines[:2] == [f"vsock {errno.EAFNOSUPPORT}", f"io_uring -1 {errno.ENOSYS}"]
    assert str(sandbox_root) not in body["stdout"]
    assert "--setenv" not in body["stdout"] and "--bind" not in body["stdout"]


# 8. A session's own files do not change how later runs start.


def test_a_sessions_files_shadow_nothing(api: httpx.Client) -> None:
    planted = {
        "sitecustomize.py": b"print('HIJACKED')\n",
        "usercustomize.py": b"print('HIJACKED')\n",
        "json.py": b"raise SystemExit('HIJACKED')\n",
        "statistics.py": b"mean = None\n",
        "helper.py": b"VALUE = 'helper'\n",
        ".Rprofile": b"cat('HIJACKED\\n')\n",
        "ldc2.conf": b"this is not a configuration\n",
        "go.mod": b"module broken\ngo 9.99\n",
    }
    session = None
    for name, data in planted.items():
        params = {"session_id": session} if session else {}
        session = api.post("/upload", files={"file": (name, data)}, params=params).json()["session_id"]
    code = "import json, statistics, helper\nprint(json.dumps(1), statistics.mean([1, 2]), helper.VALUE)"
    assert exec_(api, code, session_id=session)["stdout"] == "1 1.5 helper\n"
    assert exec_(api, "cat('r ok\\n')", "r", session_id=session)["stdout"] == "r ok\n"
    d = exec_(api, 'import std.stdio; void main() { writeln("d ok"); }', "d", session_id=session)
    assert d["stdout"] == "d ok\n", d["stderr"]
    go = exec_(api, 'package main\nimport "fmt"\nfunc main() { fmt.Println("go ok") }', "go", session_id=session)
    assert go["stdout"] == "go ok\n", go["stderr"]


# 9. Clear errors, never a 500.


def test_malformed_requests_are_clear_400s(api: httpx.Client) -> None:
    session = exec_(api, "import os; os.mkdir('adir')")["session_id"]
    post = lambda body: api.post("/exec", content=body, headers={"Content-Type": "application/json"})  # noqa: E731
    in_session = {"session_id": session}
    cases = {
        "a name too long": api.post("/upload", files={"file": ("n" * 300 + ".txt", b"x")}),
        "an upload onto a directory": api.post("/upload", files={"file": ("adir", b"x")}, params=in_session),
        "NUL in args": api.post("/exec", json={"lang": "bash", "code": "echo", "args": ["a\x00b"]}),
        "args over 128 KiB": api.post("/exec", json={"lang": "bash", "code": "echo", "args": ["a" * 140_000]}),
        "a lone surrogate in code": post(b'{"lang": "py", "code": "\\ud800"}'),
        "a lone surrogate in lang": post(b'{"lang": "p\\udc80y", "code": "1"}'),
        "a lone surrogate in an id": post(b'{"lang": "py", "code": "1", "files": [{"id": "\\ud800"}]}'),
        "1001 input refs": api.post("/exec", json={"lang": "py", "code": "1", "files": [{"id": "x"}] * 1001}),
    }  # fmt: skip
    assert {what: reply.status_code for what, reply in cases.items()} == dict.fromkeys(cases, 400)
    assert all(reply.json()["error"] == "Bad request" for reply in cases.values())
    assert "too long" in cases["a name too long"].json()["details"]


def test_odd_inputs_are_answered_plainly(api: httpx.Client) -> None:
    session = exec_(api, "import os; os.mkdir('adir')")["session_id"]
    elsewhere = api.post("/upload", files={"file": ("x.txt", b"x")}).json()["session_id"]
    ref = {"id": "x.txt", "name": "adir", "session_id": elsewhere}
    onto_dir = exec_(api, "print(1)", session_id=session, files=[ref])
    assert 'File "adir" was not copied: a directory has that name.' in onto_dir["stderr"]
    java = exec_(api, f"public class {'C' * 300} {{ public static void main(String[] a) {{}} }}", "java")
    assert "should be declared in a file named" in java["stderr"]
    missing = [{"id": f"gone{i}.csv", "session_id": "AAAAAAAAAAAAAAAAAAAAA"} for i in range(1000)]
    body = exec_(api, "print('ran')", files=missing)
    assert body["stdout"] == "ran\n" and len(body["stderr"].splitlines()) == 21  # 20 notes and a count
    lines = exec_(api, "for n in ['a\\nb.txt', 'c\\rd.txt']: open(n, 'w').write(n)")
    for f in lines["files"]:
        got = api.get(f"/download/{lines['session_id']}/{f['id']}")
        assert (got.status_code, got.text) == (200, f["name"])


def test_a_download_racing_a_rewrite_is_one_whole_version(api: httpx.Client) -> None:
    size = 4 << 20
    session = exec_(api, f"open('f.txt', 'w').write('a' * {size})")["session_id"]
    rewrite = f"for i in range(60):\n    open('f.txt', 'w').write('ab'[i % 2] * {size})"
    with ThreadPoolExecutor(1) as pool:
        rewriting = pool.submit(exec_, api, rewrite, session_id=session)
        bodies = [api.get(f"/download/{session}/f.txt") for _ in range(15)]
        rewriting.result()
    for got in bodies:
        assert len(got.content) == int(got.headers["content-length"])
        assert len(set(got.content)) <= 1  # never half one version, half another


def test_an_upload_walks_no_session(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    session = run(client, "for i in range(2000):\n    open(f'f{i}.txt', 'w')")["session_id"]
    walked: list[str] = []
    real = local_files.list_beneath
    monkeypatch.setattr(local_files, "list_beneath", lambda root: walked.append(root) or real(root))
    parts = [("file", (f"u{i}.txt", b"u")) for i in range(40)]
    assert client.post("/v1/upload", files=parts, params={"session_id": session}).status_code == 200
    assert walked == []
    assert len(names(run(client, "open('z.txt', 'w')", session_id=session))) == 1
    assert upload(client, "one.txt", b"1", session_id=session)["session_id"] == session
