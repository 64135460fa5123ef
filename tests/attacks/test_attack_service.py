"""Attacks on the SERVICE around the sandbox, through the API only: bodies and headers that
never end, calls that take every slot, files a program leaves to trip the service up,
malformed requests, tokens. Each asserts that the attack failed, and that /health and an
ordinary run in a fresh session still answer promptly. Each names the issue (and its item)
that found it: 19 (round two), 23 (round three)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec import connections, ids
from codeexec.api import gate
from codeexec.api.app import create_app
from codeexec.reaper import reap
from codeexec.sandbox.local import files as local_files
from codeexec.settings import Settings

from ..calls import names, run, upload
from ..conftest import API_KEY
from ..helpers.attacks import KEY, PROMPT, exec_, still_serves
from ..helpers.g2 import KID, TENANT, g2_settings, librechat_token
from ..helpers.tokens import Issuer
from ..serving import Services, serving

# Issue 19, item 1: Files that block a reader.


def test_a_fifo_blocks_no_reader_and_no_worker(api: httpx.Client) -> None:
    session = exec_(api, "mkfifo pipe.csv", lang="bash")["session_id"]
    with ThreadPoolExecutor(45) as pool:  # more than the server's worker threads
        downloads = list(pool.map(lambda _: api.get(f"/v1/download/{session}/pipe.csv").status_code, range(45)))
    assert set(downloads) == {404}
    assert api.get(f"/v1/sessions/{session}/objects/pipe.csv").status_code == 404
    ref = {"id": "pipe.csv", "name": "pipe.csv", "session_id": session}
    body = exec_(api, "print('ran')", files=[ref], session_id=session)
    assert body["stdout"] == "ran\n"


# Issue 19, item 3: The body is bounded and the caller known before a byte of it is read.


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


# Issue 19, item 4: Admission control.


def test_runs_beyond_the_slots_are_refused_at_once_and_health_answers(api: httpx.Client) -> None:
    finished: list[tuple[float, int]] = []

    def sleeper(i: int) -> httpx.Response:  # nine users: no user's share stops them first
        reply = api.post("/v1/exec", json={"lang": "bash", "code": "sleep 3", "user_id": f"u{i}"}, timeout=30)
        finished.append((time.monotonic(), reply.status_code))
        return reply

    with ThreadPoolExecutor(9) as pool:
        replies = list(pool.map(sleeper, range(9)))
        health_while_full = api.get("/v1/health")
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
            "/v1/upload", files={"file": (f"u{i}.txt", b"u")}, params={"session_id": session}, timeout=30
        )
        uploads = list(pool.map(upload_once, range(8)))
        assert api.get("/v1/health").status_code == 200
        running.result()
    # One user alone has 3 of the 4 upload slots (one is kept for whoever comes next).
    assert sorted(u.status_code for u in uploads) == [200] * 3 + [429] * 5


def test_a_sessions_calls_are_counted_where_they_land(settings: Settings, services: Services) -> None:
    """Issue 42, item 9: a session takes three calls at once, counted by the session each
    lands in. They were counted by the session each named: six runs naming six sessions
    that are gone, with a file of one session of the caller's, all waited for that one,
    and six naming one gone session, each landing in a new one, were refused past three."""
    app = create_app(services(settings.model_copy(update={"max_concurrent_runs": 8})))  # a user alone: 6 in flight
    with serving(app) as url, httpx.Client(base_url=url, headers=KEY, timeout=60) as api:
        landing = exec_(api, "echo x > x.txt", lang="bash")["session_id"]
        ref = [{"id": ids.file_id(landing, "x.txt"), "name": "x.txt", "session_id": landing}]

        def sleep(named: str, files: list[dict[str, str]]) -> int:
            body = {"lang": "bash", "code": "sleep 1", "session_id": named, "files": files}
            return api.post("/v1/exec", json=body).status_code

        with ThreadPoolExecutor(6) as pool:
            into_one = list(pool.map(lambda _: sleep(ids.new_session_id(), ref), range(6)))
            gone = ids.new_session_id()
            each_its_own = list(pool.map(lambda _: sleep(gone, []), range(6)))
        assert sorted(into_one) == [200] * 3 + [429] * 3
        assert each_its_own == [200] * 6
        still_serves(api)


def test_a_long_run_keeps_its_connection_alive(settings: Settings, services: Services) -> None:
    app = create_app(services(settings.model_copy(update={"exec_keepalive_seconds": 0.5})))
    body = TestClient(app, headers=KEY).post("/v1/exec", json={"lang": "bash", "code": "sleep 2; echo done"})
    assert body.status_code == 200
    assert body.text.startswith("  ")  # spaces while it ran, then the reply
    assert json.loads(body.text)["stdout"] == "done\n"


# Issue 19, item 5: The reaper survives any one bad entry.


def test_a_deep_tree_and_a_stuck_ending_do_not_stop_the_reaper(app: FastAPI, sandbox_root: Path) -> None:
    client = TestClient(app, headers=KEY)
    deep = "import os\nfor _ in range(1500):\n    os.mkdir('d'); os.chdir('d')\nopen('leaf.txt', 'w').write('x')"
    doomed = [run(client, deep)["session_id"], run(client, "print(1)")["session_id"]]
    stuck = sandbox_root / ".ended-AAAAAAAAAAAAAAAAAAAAA"
    (stuck / "d").mkdir(parents=True)
    (stuck / "d" / "f").write_text("x")
    subprocess.run(["chattr", "+i", str(stuck / "d" / "f")], check=True)  # no removal can finish it
    try:
        sandboxes = app.state.service.sandboxes
        report = reap(sandboxes, idle_timeout=0, clock=lambda: time.time() + 10)
        assert (report.ended, report.failed) == (2, 0)
        assert all(client.get(f"/v1/files/{s}").status_code == 404 for s in doomed)
        later = run(client, "print(2)")["session_id"]
        assert reap(sandboxes, idle_timeout=0, clock=lambda: time.time() + 10).ended == 1
        assert client.get(f"/v1/files/{later}").status_code == 404
    finally:
        subprocess.run(["chattr", "-i", str(stuck / "d" / "f")], check=True)


# Issue 19, item 6: The host side of a session.


def test_a_closed_data_dir_and_unnameable_files_break_no_later_call(api: httpx.Client) -> None:
    code = (
        "import os\nopen(b'bad\\xff.txt', 'wb').write(b'z')\n"
        "for _ in range(20):\n    os.mkdir('x' * 250); os.chdir('x' * 250)\n"  # 5000 characters: past PATH_MAX
        "open('deep.txt', 'w').write('d')\n"
        "os.chdir('/mnt/data'); open('ok.txt', 'w').write('k'); os.chmod('/mnt/data', 0)"
    )
    session = exec_(api, code)["session_id"]
    listing = api.get(f"/v1/files/{session}", params={"detail": "summary"})
    assert [f["path"] for f in listing.json()] == ["ok.txt"]
    body = exec_(api, "print(open('ok.txt').read())", session_id=session)
    assert (body["stdout"], body["stderr"]) == ("k\n", "")


# Issue 19, item 9: Clear errors, never a 500.


def test_malformed_requests_are_clear_400s(api: httpx.Client) -> None:
    session = exec_(api, "import os; os.mkdir('adir')")["session_id"]
    post = lambda body: api.post("/v1/exec", content=body, headers={"Content-Type": "application/json"})  # noqa: E731
    in_session = {"session_id": session}
    cases = {
        "a name too long": api.post("/v1/upload", files={"file": ("n" * 300 + ".txt", b"x")}),
        "an upload onto a directory": api.post("/v1/upload", files={"file": ("adir", b"x")}, params=in_session),
        "NUL in args": api.post("/v1/exec", json={"lang": "bash", "code": "echo", "args": ["a\x00b"]}),
        "args over 128 KiB": api.post("/v1/exec", json={"lang": "bash", "code": "echo", "args": ["a" * 140_000]}),
        "a lone surrogate in code": post(b'{"lang": "py", "code": "\\ud800"}'),
        "a lone surrogate in lang": post(b'{"lang": "p\\udc80y", "code": "1"}'),
        "a lone surrogate in an id": post(b'{"lang": "py", "code": "1", "files": [{"id": "\\ud800"}]}'),
        "1001 input refs": api.post("/v1/exec", json={"lang": "py", "code": "1", "files": [{"id": "x"}] * 1001}),
    }  # fmt: skip
    assert {what: reply.status_code for what, reply in cases.items()} == dict.fromkeys(cases, 400)
    assert all(reply.json()["error"] == "Bad request" for reply in cases.values())
    assert "too long" in cases["a name too long"].json()["details"]


def test_odd_inputs_are_answered_plainly(api: httpx.Client) -> None:
    session = exec_(api, "import os; os.mkdir('adir')")["session_id"]
    elsewhere = api.post("/v1/upload", files={"file": ("x.txt", b"x")}).json()["session_id"]
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
        got = api.get(f"/v1/download/{lines['session_id']}/{f['id']}")
        assert (got.status_code, got.text) == (200, f["name"])


def test_a_download_racing_a_rewrite_is_one_whole_version(api: httpx.Client) -> None:
    size = 4 << 20
    session = exec_(api, f"open('f.txt', 'w').write('a' * {size})")["session_id"]
    rewrite = f"for i in range(60):\n    open('f.txt', 'w').write('ab'[i % 2] * {size})"
    with ThreadPoolExecutor(1) as pool:
        rewriting = pool.submit(exec_, api, rewrite, session_id=session)
        bodies = [api.get(f"/v1/download/{session}/f.txt") for _ in range(15)]
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


# Issue 23, item 2: One caller takes every run slot.


@contextlib.contextmanager
def served(settings: Settings, services: Services) -> Iterator[httpx.Client]:
    with (
        serving(create_app(services(settings))) as base,
        httpx.Client(base_url=base, headers=KEY, timeout=30) as client,
    ):
        yield client
        still_serves(client)


def test_one_user_cannot_take_the_run_slots_from_another(settings: Settings, services: Services) -> None:
    with served(settings.model_copy(update={"max_concurrent_runs": 4}), services) as client:
        finished: list[tuple[float, int]] = []

        def hog(_: int) -> httpx.Response:
            reply = client.post("/v1/exec", json={"lang": "bash", "code": "sleep 4", "user_id": "hog"})
            finished.append((time.monotonic(), reply.status_code))
            return reply

        with ThreadPoolExecutor(8) as pool:
            hogs = [pool.submit(hog, i) for i in range(8)]
            time.sleep(1)
            asked = time.monotonic()
            chat = client.post("/v1/exec", json={"lang": "py", "code": "print('hi')", "user_id": "chat"})
            answered = time.monotonic()
            statuses = sorted(h.result().status_code for h in hogs)
        assert (chat.status_code, chat.json()["stdout"]) == (200, "hi\n")
        assert answered - asked < 3  # while every run of the hog still sleeps
        assert statuses == [200] * 3 + [429] * 5  # its share alone: all but the slot kept for the next user
        first_run_done = min(t for t, status in finished if status == 200)
        assert max(t for t, status in finished if status == 429) < first_run_done  # refused at once


def test_calls_waiting_for_their_session_hold_no_run_slot(settings: Settings, services: Services) -> None:
    with served(settings.model_copy(update={"max_concurrent_runs": 6}), services) as client:
        own = {u: exec_(client, "true", "bash", user_id=u)["session_id"] for u in ("a", "b")}

        def call(user: str, session: str | None) -> httpx.Response:
            body = {"lang": "bash", "code": "sleep 2", "user_id": user, "session_id": session}
            return client.post("/v1/exec", json=body)

        with ThreadPoolExecutor(8) as pool:
            waiting = []
            for user, session, count in (("a", own["a"], 3), ("b", own["b"], 2), ("c", None, 1)):
                waiting += [pool.submit(call, user, session) for _ in range(count)]
                time.sleep(0.3)
            # a's session has its three calls (one runs, two wait for it): a fourth is refused at once
            assert call("a", own["a"]).status_code == 429
            asked = time.monotonic()
            other = client.post("/v1/exec", json={"lang": "py", "code": "print(1)", "user_id": "d"})
            answered = time.monotonic()
            assert sorted(w.result().status_code for w in waiting) == [200] * 6
        # Six calls in flight, three of them waiting: they held no slot, so d found one.
        assert other.status_code == 200 and answered - asked < 1.5


# Issue 23, item 3: Uploads spooled to the host's /tmp, with no deadline; headers that never finish.


def _stalled_upload(base: str, session: str) -> socket.socket:
    """An upload whose body stops after 2 MB of a declared 4 MB."""
    url = urlparse(base)
    conn = socket.create_connection((url.hostname, url.port), timeout=30)
    part = b'--b0undary\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n'
    head = (
        f"POST /v1/upload?session_id={session} HTTP/1.1\r\nHost: x\r\nX-API-Key: {API_KEY}\r\n"
        f"Content-Type: multipart/form-data; boundary=b0undary\r\nContent-Length: {4 << 20}\r\n\r\n"
    )
    conn.sendall(head.encode() + part + b"x" * (2 << 20))  # past what Starlette kept in memory
    return conn


def _open_in_tmp() -> set[str]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(tempfile.gettempdir() + "/"):
                found.add(target)
    return found


def test_a_stalled_upload_holds_no_host_disk_and_ends(
    api: httpx.Client, sandbox_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate, "BODY_IDLE_SECONDS", 1.0)
    session = api.post("/v1/upload", files={"file": ("keep.txt", b"kept")}).json()["session_id"]
    before = _open_in_tmp()
    conns = [_stalled_upload(str(api.base_url), session) for _ in range(6)]
    time.sleep(0.5)
    assert _open_in_tmp() <= before  # nothing of the 12 MB went to the host's /tmp
    answers = [conn.recv(4096).decode(errors="replace").split("\r\n", 1)[0] for conn in conns]
    for conn in conns:
        conn.close()
    # A session takes three uploads at once: the others were refused before their body was
    # read, the three admitted cut once their body stopped arriving.
    assert sorted(answers) == ["HTTP/1.1 408 Request Timeout"] * 3 + ["HTTP/1.1 429 Too Many Requests"] * 3
    listing = api.get(f"/v1/files/{session}", params={"detail": "summary"}).json()
    assert [f["path"] for f in listing] == ["keep.txt"]
    assert [p.name for p in (sandbox_root / session / "data").iterdir()] == ["keep.txt"]  # no partial file
    again = api.post("/v1/upload", files={"file": ("next.txt", b"n")}, params={"session_id": session})
    assert again.status_code == 200  # the slots were given back


def test_a_field_after_a_file_is_refused_and_the_upload_leaves_nothing(api: httpx.Client, sandbox_root: Path) -> None:
    session = api.post("/v1/upload", files={"file": ("keep.txt", b"kept")}).json()["session_id"]
    files = [("file", ("one.txt", b"1")), ("file", ("two.txt", b"2"))]
    late = api.post("/v1/upload", params={"session_id": session}, files=files, data={"kind": "user"})
    # httpx puts the data fields first; send one after the files by hand.
    body = (
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="three.txt"\r\n\r\n3\r\n'
        b'--B\r\nContent-Disposition: form-data; name="kind"\r\n\r\nskill\r\n--B--\r\n'
    )
    after = api.post(
        "/v1/upload", params={"session_id": session}, content=body,
        headers={"Content-Type": "multipart/form-data; boundary=B"},
    )  # fmt: skip
    assert late.status_code == 200
    assert after.status_code == 400 and "before its files" in after.json()["details"]
    listing = api.get(f"/v1/files/{session}", params={"detail": "summary"}).json()
    assert sorted(f["path"] for f in listing) == ["keep.txt", "one.txt", "two.txt"]  # three.txt went with its upload
    assert not [p for p in (sandbox_root / session / "data").iterdir() if p.name.startswith(".")]


def test_headers_that_never_finish_are_dropped(api: httpx.Client) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    url = urlparse(str(api.base_url))
    conns = []
    try:
        for _ in range(1000):
            conn = socket.create_connection((url.hostname, url.port), timeout=30)
            conn.sendall(b"POST /v1/exec HTTP/1.1\r\nHost: x\r\n")  # and never the rest
            conns.append(conn)
        trickle = socket.create_connection((url.hostname, url.port), timeout=30)
        conns.append(trickle)
        health = api.get("/health", timeout=PROMPT)  # the service answers meanwhile
        started = time.monotonic()
        while time.monotonic() - started < connections.HEADER_SECONDS + 2:
            with contextlib.suppress(OSError):  # once the service has closed it
                trickle.sendall(b"X")  # a byte every half second: busy, but its headers never end
            time.sleep(0.5)
        assert health.status_code == 200
        assert sum(_closed_by_the_service(conn) for conn in conns) == 1001
    finally:
        for conn in conns:
            conn.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _closed_by_the_service(conn: socket.socket) -> bool:
    conn.setblocking(False)
    try:
        return conn.recv(1) == b""
    except BlockingIOError:  # open, and nothing to read
        return False
    except ConnectionResetError:
        return True


# Issue 23, item 5: No-copy-on-write files and directories.


def test_a_file_that_cannot_be_cloned_is_still_served_and_copied(api: httpx.Client, sandbox_root: Path) -> None:
    body = exec_(api, "touch f; chattr +C f; echo $?; mkdir d; chattr +C d 2>/dev/null; echo $?", "bash")
    assert body["stdout"] == "1\n1\n"  # the program's attempt fails
    session = body["session_id"]
    data = sandbox_root / session / "data"
    # What a program left before the filter: a +C file, and a +C folder (files inherit it).
    subprocess.run(["chattr", "+C", str(data / "f"), str(data / "d")], check=True)
    (data / "f").write_bytes(b"nocow " * 1000)
    assert "C" in subprocess.run(["lsattr", "-d", str(data / "f")], capture_output=True, text=True).stdout.split()[0]
    got = api.get(f"/v1/download/{session}/f")
    assert (got.status_code, got.content) == (200, b"nocow " * 1000)
    up = api.post("/v1/upload", files={"file": ("d/up.txt", b"uploaded")}, params={"session_id": session})
    assert up.status_code == 200
    assert api.get(f"/v1/download/{session}/d/up.txt").content == b"uploaded"
    other = exec_(api, "pass")["session_id"]
    refs = [{"id": path, "name": path.split("/")[-1], "session_id": session} for path in ("f", "d/up.txt")]
    copied = exec_(api, "print(len(open('f').read()), open('up.txt').read())", files=refs, session_id=other)
    assert (copied["session_id"], copied["stdout"], copied["stderr"]) == (other, "6000 uploaded\n", "")


# Issue 23, item 6: A bearer token without `sub`.


def test_a_token_without_sub_is_not_the_organizations_server(
    settings: Settings, tmp_path: Path, services: Services
) -> None:
    issuer = Issuer(tmp_path / "jwks.json")
    issuer.add_key(KID, "EdDSA")
    app = create_app(services(g2_settings(settings, issuer).model_copy(update={"code_exec_org": TENANT})))
    server = TestClient(app, headers=KEY)  # the organization's server: the key, no user
    session = server.post("/v1/upload", files={"file": ("report.csv", b"a,b\n")}).json()["session_id"]
    now = int(time.time())
    claims = {"iss": "librechat", "aud": "codeapi", "iat": now, "exp": now + 300, "sub": None}
    nameless = issuer.token(KID, TENANT, **claims)
    for headers in ({"Authorization": f"Bearer {nameless}"}, {**KEY, "Authorization": f"Bearer {nameless}"}):
        attacker = TestClient(app, headers=headers)
        for reply in (
            attacker.get(f"/v1/files/{session}"),
            attacker.get(f"/v1/download/{session}/report.csv"),
            attacker.delete(f"/v1/files/{session}/report.csv"),
            attacker.post("/v1/exec", json={"lang": "py", "code": "print(1)"}),
        ):
            assert reply.status_code == 401 and "sub" in reply.json()["details"]
    assert server.get(f"/v1/download/{session}/report.csv").content == b"a,b\n"
    still_serves(server)
    still_serves(TestClient(app, headers={"Authorization": f"Bearer {librechat_token(issuer)}"}))


# Issue 23, item 8: Cancel markers for runs that never existed; a key caller that cannot cancel.


def test_cancels_are_bounded_and_reach_every_run_they_may(api: httpx.Client, sandbox_root: Path) -> None:
    cancel = "/v1/exec/programmatic/cancel"
    statuses = [api.post(cancel, json={"request_id": f"never-{i}"}).status_code for i in range(1200)]
    markers = len(os.listdir(sandbox_root / ".cancel"))
    # One caller's cancels waiting for runs are capped (32), whatever others wait.
    assert markers <= 32 and statuses.count(200) == markers and set(statuses) == {200, 429}
    # A run of the organization's server, for the user its body names: the key alone
    # (what the client sends on abort) still stops it, with the marker store full.
    request_id = "5c7a0f2d-8b64-4e1f-8b9f-1d2e3f4a5b6c"
    body = {"code": "import time\ntime.sleep(8)\nprint('never')", "tools": [], "user_id": "alice"}
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        headers = {"X-LibreChat-Code-Request-ID": request_id}
        running = pool.submit(api.post, "/v1/exec/programmatic", json=body, headers=headers)
        time.sleep(1.5)
        assert api.post(cancel, json={"request_id": request_id}).status_code == 200
        reply = running.result().json()
    assert (reply["status"], reply["error"]) == ("error", "Execution was cancelled")
    assert time.monotonic() - started < 6 and "never" not in reply["stdout"]
    assert len(os.listdir(sandbox_root / ".runs")) == 0  # the run's entry went with it


# Issue 23, item 9: The idle clock counted from a call's start.


def test_a_run_longer_than_the_idle_limit_leaves_a_live_session(api: httpx.Client, app: FastAPI) -> None:
    session = exec_(api, "sleep 3; echo done > out.txt", "bash")["session_id"]
    report = reap(app.state.service.sandboxes, idle_timeout=2)  # right after it answered
    assert report.failed == 0
    listing = api.get(f"/v1/files/{session}", params={"detail": "summary"})
    assert listing.status_code == 200 and [f["path"] for f in listing.json()] == ["out.txt"]
