"""Round three: each hole issue 23 found, attacked again for real, through the API (and,
where the attack is on the host side, from an unprivileged host user or as a program
would have left things before the seccomp filter refused it). Each asserts that the
attack failed, and, after it, that /health and an ordinary run in a fresh session answer
promptly. Numbered as the issue."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec import connections
from codeexec.api import gate
from codeexec.api.app import create_app
from codeexec.reaper import reap
from codeexec.sandbox.local import btrfs
from codeexec.settings import Settings

from .conftest import API_KEY
from .serving import serving
from .test_g2 import KID, TENANT, g2_settings, librechat_token
from .test_tokens import Issuer

HOST_USER = 4321  # a host user that is neither root nor the sandbox's uid, and owns nothing
PROMPT = 10.0  # seconds: what "answers promptly" allows on a busy 2-core machine
KEY = {"X-API-Key": API_KEY}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"run_timeout_seconds": 10, "max_concurrent_uploads": 4})


def still_serves(client: httpx.Client | TestClient) -> None:
    """After an attack: /health, and an ordinary run in a fresh session, promptly."""
    started = time.monotonic()
    assert client.get("/health").status_code == 200
    body = client.post("/v1/exec", json={"lang": "py", "code": "print(6 * 7)"}).json()
    assert (body["stdout"], body["stderr"]) == ("42\n", "")
    assert time.monotonic() - started < PROMPT


@pytest.fixture
def api(live_server: str) -> Iterator[httpx.Client]:
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


# 1. A program makes a btrfs subvolume in its session.

BTRFS_IOCTLS = """
import fcntl, os, struct
def ioc(direction, number, size=4096):
    return (direction << 30) | (size << 16) | (0x94 << 8) | number
name = bytearray(struct.pack("q", 0) + b"escape".ljust(4088, b"\\0"))
lookup = bytearray(struct.pack("QQ", 0, 256).ljust(4096, b"\\0"))
tries = {
    "create": (ioc(1, 14), name),  # BTRFS_IOC_SUBVOL_CREATE
    "rootref": (ioc(3, 61), bytearray(4096)),  # BTRFS_IOC_GET_SUBVOL_ROOTREF: the subvolumes below
    "lookup": (ioc(3, 18), lookup),  # BTRFS_IOC_INO_LOOKUP: which subvolume this is
    "create, upper bits set": ((0xFFFFFFFF << 32) | ioc(1, 14), name),
}
fd = os.open("/mnt/data", os.O_RDONLY)
for what, (command, arg) in tries.items():
    try:
        fcntl.ioctl(fd, command, arg)
        print(what, "done")
    except OSError as e:
        print(what, e.errno)
open("a", "w").write("a")
a, b = os.open("a", os.O_RDONLY), os.open("b", os.O_WRONLY | os.O_CREAT)
try:
    fcntl.ioctl(b, 0x40049409, a)  # FICLONE
except OSError as e:
    print("clone", e.errno)
print(os.path.exists("escape"))
"""


def test_a_program_makes_no_subvolume_and_a_nested_one_does_not_stop_the_ending(
    api: httpx.Client, app: FastAPI, sandbox_root: Path
) -> None:
    body = exec_(api, BTRFS_IOCTLS)
    eperm = errno.EPERM
    expected = [f"create {eperm}", f"rootref {eperm}", f"lookup {eperm}", f"create, upper bits set {eperm}"]
    assert body["stdout"].splitlines() == [*expected, f"clone {eperm}", "False"]
    copied = exec_(api, "head -c 100000 /dev/urandom > a; cp --reflink=auto a b && cmp a b && echo same", "bash")
    assert copied["stdout"] == "same\n"  # what cp falls back to
    # What a program left before the filter: subvolumes nested in its session, made as the
    # sandbox's uid, one inside the other, with a snapshot.
    session = body["session_id"]
    data = sandbox_root / session / "data"
    made = as_host_user(
        f"cd {data} && btrfs -q subvolume create sub && mkdir sub/d && btrfs -q subvolume create sub/d/deeper"
        " && head -c 1000000 /dev/zero > sub/d/deeper/f && btrfs -q subvolume snapshot sub/d/deeper snap",
        uid=61000,
    )
    assert made.returncode == 0, made.stderr
    sandboxes = app.state.service.sessions.sandboxes
    report = reap(sandboxes, idle_timeout=0, clock=lambda: time.time() + 10)
    assert report.failed == 0 and report.ended >= 1
    assert not (sandbox_root / session).exists()
    assert not list(sandbox_root.glob(".ended-*"))  # nothing left for a later pass to stumble on
    assert api.get(f"/v1/files/{session}").status_code == 404


# 2. One caller takes every run slot.


@contextlib.contextmanager
def served(settings: Settings) -> Iterator[httpx.Client]:
    with serving(create_app(settings)) as base, httpx.Client(base_url=base, headers=KEY, timeout=30) as client:
        yield client
        still_serves(client)


def test_one_user_cannot_take_the_run_slots_from_another(settings: Settings) -> None:
    with served(settings.model_copy(update={"max_concurrent_runs": 4})) as client:
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


def test_calls_waiting_for_their_session_hold_no_run_slot(settings: Settings) -> None:
    with served(settings.model_copy(update={"max_concurrent_runs": 6})) as client:
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


# 3. Uploads spooled to the host's /tmp, with no deadline; headers that never finish.


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


# 4. A sandbox image or root someone else made.


@pytest.fixture
def sticky_dir() -> Iterator[Path]:
    """A directory like /var/tmp: anyone may make names in it, nobody may move another's."""
    made = Path(tempfile.mkdtemp(prefix="codeexec-sticky-", dir="/var/tmp"))
    made.chmod(0o1777)
    assert not btrfs.is_btrfs(str(made))  # so the service would make an image there
    yield made
    for root in made.iterdir():
        if root.is_mount():
            subprocess.run(["umount", "-l", str(root)], check=True)
    subprocess.run(["rm", "-rf", str(made)], check=True)


def test_an_image_or_root_another_user_made_is_refused(api: httpx.Client, settings: Settings, sticky_dir: Path) -> None:
    def at(name: str) -> FastAPI:
        root = {"sandbox_root": sticky_dir / name, "sandbox_image_bytes": 1 << 30}  # sparse: no disk taken
        return create_app(settings.model_copy(update=root))

    planted = as_host_user(f"cd {sticky_dir} && umask 0 && : > first.btrfs && mkdir second && ln -s /var/tmp third")
    assert planted.returncode == 0, planted.stderr
    for name, reason in (("first", "image .* belongs to uid 4321"), ("second", "belongs to uid 4321"),
                         ("third", "not a directory")):  # fmt: skip
        with pytest.raises(RuntimeError, match=f"{reason}.*refusing it"):
            at(name)
    # One the service makes itself is closed from its first moment.
    mine = at("mine")
    secret = exec_(TestClient(mine, headers=KEY), "open('secret.txt', 'w').write('secret')")["session_id"]
    image = sticky_dir / "mine.btrfs"
    assert (image.stat().st_uid, image.stat().st_mode & 0o777) == (0, 0o600)
    peek = as_host_user(f"grep -c secret {image}; ls {sticky_dir}/mine/{secret}")
    assert peek.stdout.strip() == "" and peek.stderr.count("Permission denied") == 2


# 5. No-copy-on-write files and directories.


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


# 6. A bearer token without `sub`.


def test_a_token_without_sub_is_not_the_organizations_server(settings: Settings, tmp_path: Path) -> None:
    issuer = Issuer(tmp_path / "jwks.json")
    issuer.add_key(KID, "EdDSA")
    app = create_app(g2_settings(settings, issuer).model_copy(update={"code_exec_org": TENANT}))
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


# 7. inotify on the shared read-only /usr.


def test_no_program_watches_the_files_of_others(api: httpx.Client) -> None:
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "for name, call in (('inotify_init1', lambda: libc.inotify_init1(0)), ('inotify_init', libc.inotify_init),"
        " ('fanotify_init', lambda: libc.fanotify_init(0, 0))):\n"
        "    print(name, call(), ctypes.get_errno())"
    )
    lines = exec_(api, code)["stdout"].splitlines()
    assert lines == [f"{name} -1 {errno.ENOSYS}" for name in ("inotify_init1", "inotify_init", "fanotify_init")]
    watched = exec_(api, "require('fs').watch('/usr/lib', () => {})", "js")
    assert "ENOSYS" in watched["stderr"]


# 8. Cancel markers for runs that never existed; a key caller that cannot cancel.


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


# 9. The idle clock counted from a call's start.


def test_a_run_longer_than_the_idle_limit_leaves_a_live_session(api: httpx.Client, app: FastAPI) -> None:
    session = exec_(api, "sleep 3; echo done > out.txt", "bash")["session_id"]
    report = reap(app.state.service.sessions.sandboxes, idle_timeout=2)  # right after it answered
    assert report.failed == 0
    listing = api.get(f"/v1/files/{session}", params={"detail": "summary"})
    assert listing.status_code == 200 and [f["path"] for f in listing.json()] == ["out.txt"]
