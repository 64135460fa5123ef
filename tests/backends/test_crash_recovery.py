"""The service, and a runner, killed mid-run and mid-upload (kill -9), then started again
ONCE, at once, the killed process not yet reaped (a zombie, as under a supervisor that has
not waited for it yet) and its runs' processes still dying: within one reaper pass
nothing the crash left is there (run cgroups, an upload's staging directory, sessions half
made), and every stored file still is. Stopped gracefully (SIGTERM), it leaves no cgroup
either. Each runs as a process of its own here: what a crash leaves is the point."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen

import httpx
import pytest

from codeexec import ids
from codeexec.api.app import create_app
from codeexec.sandbox.local import btrfs, cgroups
from codeexec.settings import Settings

from ..conftest import API_KEY
from ..helpers.processes import runner, service
from ..serving import Services, free_port, runner_settings, serving

pytestmark = [
    pytest.mark.root,
    pytest.mark.cgroups,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or "memory" not in cgroups.detect(), reason="warm sandboxes need root and a memory cgroup"
    ),
]

HEADERS = {"X-API-Key": API_KEY}
REAP_SECONDS = 1
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


def drip_upload(url: str) -> socket.socket:
    """An upload whose body stops coming in its second file: the first is staged."""
    boundary = "b0undary"
    first = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="one.txt"\r\n\r\n'
    first += "x" * 300_000 + "\r\n"  # past every reader's buffer on the way (64 KiB)
    second = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="two.txt"\r\n\r\nyy'
    length = len(first) + len(second) + 200_000
    head = (
        f"POST /v1/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {API_KEY}\r\nContent-Length: {length}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", httpx.URL(url).port or 80))
    sock.sendall((head + first + second).encode())
    return sock


@contextlib.contextmanager
def serving_api(
    kind: str, sandbox_root: Path, port: int, settings: Settings, services: Services
) -> Iterator[tuple[Popen[bytes], str]]:
    """The killed kind of process on `port`, and the API's URL: the service itself, or one
    in this process leasing from the runner."""
    if kind == "service":
        with service(sandbox_root, port, {**WARM, "REAP_INTERVAL_SECONDS": str(REAP_SECONDS)}) as process:
            yield process, f"http://127.0.0.1:{port}/v1"
        return
    with runner(sandbox_root, port, {**WARM, "REAP_INTERVAL_SECONDS": str(REAP_SECONDS)}) as process:
        app = create_app(services(runner_settings(settings, f"http://127.0.0.1:{port}")))
        with serving(app) as url:
            yield process, f"{url}/v1"


@pytest.mark.parametrize("kind", ["service", "runner"])
def test_one_start_after_kill_9_sweeps_what_the_crash_left_and_keeps_every_file(
    sandbox_root: Path, settings: Settings, kind: str, services: Services
) -> None:
    port = free_port()
    with serving_api(kind, sandbox_root, port, settings, services) as (first, url):
        with httpx.Client(base_url=url, headers=HEADERS, timeout=90) as client:
            stored = client.post("/upload/batch", files=[("files", (n, d)) for n, d in STORED.items()]).json()
            session = stored["session_id"]
            long_run = {"lang": "py", "code": "import time\nopen('started', 'w').close()\ntime.sleep(50)"}
            with httpx.Client(base_url=url, headers=HEADERS, timeout=90) as other:
                threading.Thread(target=lambda: _quietly(other.post, "/exec", json=long_run), daemon=True).start()
                dripping = drip_upload(url)
                eventually(lambda: list(sandbox_root.glob("*/data/started")) and list(sandbox_root.glob("*/staging-*")))
                assert made_by(first.pid)  # the run's, the warm server's and its run made ahead
                os.kill(first.pid, signal.SIGKILL)
                dripping.close()
        staged = list(sandbox_root.glob("*/staging-*"))
        assert staged, "the crash left no staging directory to sweep"
        assert made_by(first.pid), "the crash left no cgroup to sweep"
        half_made = [made_half(sandbox_root, lease) for lease in (None, b'{"owner": {"org": "de')]

        with serving_api(kind, sandbox_root, port, settings, services) as (second, url):
            # Within a reaper pass of the one start, the killed process unreaped all along.
            eventually(lambda: not made_by(first.pid) and not any(p.exists() for p in [*staged, *half_made]), 10)
            assert zombie(first.pid)
            assert list(sandbox_root.glob("*/staging-*")) == []
            with httpx.Client(base_url=url, headers=HEADERS, timeout=90) as client:
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


def made_half(sandbox_root: Path, lease: bytes | None) -> Path:
    """A session a crash cut while it was made, a minute ago: its subvolume and data, and
    no lease, or a torn one."""
    made = ids.new_session_id()
    root_fd = os.open(sandbox_root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        btrfs.create_subvolume(root_fd, made, 1 << 30)
    finally:
        os.close(root_fd)
    path = sandbox_root / made
    (path / "data").mkdir()
    (path / "data" / "kept.txt").write_bytes(b"x" * 1000)
    if lease is not None:
        (path / "lease.json").write_bytes(lease)
        (path / "lock").touch()
    os.utime(path, (time.time() - 120, time.time() - 120))
    return path


def zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def _quietly(call: Callable[..., object], *args: object, **kwargs: object) -> None:
    with contextlib.suppress(httpx.TransportError):  # its service was killed under it
        call(*args, **kwargs)
