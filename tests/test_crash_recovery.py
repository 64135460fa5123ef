"""The service killed mid-run and mid-upload (kill -9), then started again: the start
sweeps what the crash left (run cgroups, an upload's staging directory, a session half
made) before it serves, and every stored file is still there. Stopped gracefully (SIGTERM),
it leaves no cgroup either. The service runs as a process of its own here: what a crash
leaves is the point."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from codeexec import ids
from codeexec.sandbox.local import btrfs, cgroups

from .conftest import API_KEY
from .helpers.processes import service
from .serving import free_port

pytestmark = [
    pytest.mark.root,
    pytest.mark.cgroups,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or "memory" not in cgroups.detect(), reason="warm sandboxes need root and a memory cgroup"
    ),
]

HEADERS = {"X-API-Key": API_KEY}
WARM = {"WARM_PYTHON": "0", "WARM_SANDBOXES": "1", "RUN_TIMEOUT_SECONDS": "60"}
STORED = {f"kept-{n}.txt": f"file {n}\n".encode() * 1000 for n in range(5)}


def made_by(pid: int) -> list[Path]:
    """The run cgroups a process made (their names carry its pid, sandbox/local/owners.py)."""
    return [path for parent in cgroups.detect().values() for path in parent.path.glob(f"codeexec-{pid}.*")]


def eventually(check: Callable[[], object], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.1)


def drip_upload(port: int) -> socket.socket:
    """An upload whose body stops coming in its second file: the first is staged."""
    boundary = "b0undary"
    first = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="one.txt"\r\n\r\n'
    first += "x" * 100_000 + "\r\n"
    second = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="two.txt"\r\n\r\nyy'
    length = len(first) + len(second) + 200_000
    head = (
        f"POST /v1/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {API_KEY}\r\nContent-Length: {length}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall((head + first + second).encode())
    return sock


def test_a_start_after_kill_9_sweeps_what_the_crash_left_and_keeps_every_file(sandbox_root: Path) -> None:
    port = free_port()
    with service(sandbox_root, port, WARM) as first:
        url = f"http://127.0.0.1:{port}/v1"
        with httpx.Client(base_url=url, headers=HEADERS, timeout=90) as client:
            stored = client.post("/upload/batch", files=[("files", (n, d)) for n, d in STORED.items()]).json()
            session = stored["session_id"]
            long_run = {"lang": "py", "code": "import time\nopen('started', 'w').close()\ntime.sleep(50)"}
            with httpx.Client(base_url=url, headers=HEADERS, timeout=90) as other:
                threading.Thread(target=lambda: _quietly(other.post, "/exec", json=long_run), daemon=True).start()
                dripping = drip_upload(port)
                eventually(lambda: list(sandbox_root.glob("*/data/started")) and list(sandbox_root.glob("*/staging-*")))
                assert made_by(first.pid)  # the run's, the warm server's and its run made ahead
                os.kill(first.pid, signal.SIGKILL)
                first.wait(timeout=10)
                dripping.close()
    staged = list(sandbox_root.glob("*/staging-*"))
    assert staged, "the crash left no staging directory to sweep"
    eventually(lambda: all(not (p / "cgroup.procs").read_text().strip() for p in made_by(first.pid)))
    assert made_by(first.pid), "the crash left no cgroup to sweep"
    # A session whose subvolume was made but not its lease, a minute ago.
    half_made = ids.new_session_id()
    root_fd = os.open(sandbox_root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        btrfs.create_subvolume(root_fd, half_made, 1 << 30)
    finally:
        os.close(root_fd)
    os.utime(sandbox_root / half_made, (time.time() - 120, time.time() - 120))

    with service(sandbox_root, port, WARM) as second:
        assert made_by(first.pid) == []
        assert not any(path.exists() for path in staged) and list(sandbox_root.glob("*/staging-*")) == []
        assert not (sandbox_root / half_made).exists()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/v1", headers=HEADERS, timeout=90) as client:
            for entry in stored["files"]:
                got = client.get(f"/download/{session}/{entry['fileId']}")
                assert got.status_code == 200 and got.content == STORED[entry["filename"]]
            assert client.get("/health").status_code == 200
            assert client.post("/exec", json={"lang": "py", "code": "print(6 * 7)"}).json()["stdout"] == "42\n"
        assert made_by(second.pid)  # its warm server's and its run made ahead, at least
        # A graceful stop ends them and removes their cgroups before the process exits.
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 128 + signal.SIGTERM
        assert made_by(second.pid) == []


def _quietly(call: Callable[..., object], *args: object, **kwargs: object) -> None:
    with contextlib.suppress(httpx.TransportError):  # its service was killed under it
        call(*args, **kwargs)
