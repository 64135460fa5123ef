"""A Docker engine of the test's own (sam-local/dockerd.sh), stopped again with its containers."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parent.parent
DOCKERD = ROOT / "sam-local" / "dockerd.sh"


@contextlib.contextmanager
def docker_engine() -> Iterator[str]:
    """Yields its DOCKER_HOST. Images stay in its data root between runs (a rebuild is cached)."""
    # Short: containerd's sockets live under it, and a socket path holds 108 bytes at most.
    run = Path(tempfile.mkdtemp(prefix="cxd-", dir="/tmp"))
    host = f"unix://{run}/docker.sock"
    try:
        started = subprocess.run([DOCKERD, "start", run], capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        yield host
    finally:
        env = {**os.environ, "DOCKER_HOST": host}
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            leftovers = subprocess.run(["docker", "ps", "-aq"], env=env, capture_output=True, text=True, timeout=60)
            if leftovers.stdout.split():
                subprocess.run(["docker", "rm", "-f", *leftovers.stdout.split()], env=env, timeout=120)
        subprocess.run([DOCKERD, "stop", run], timeout=60, check=True)
        pidfile = run / "dockerd.pid"
        pid = pidfile.read_text().strip() if pidfile.exists() else ""
        shutil.rmtree(run, ignore_errors=True)
        assert not pid or not Path(f"/proc/{pid}").exists(), "dockerd is still running"
