"""The embedded service (`python -m codeexec.server`) and the runner (`python -m
codeexec.runner`) as processes of their own: what a crash leaves, or what a process
inherits from whoever started it, is the point; and what a fresh interpreter imports, which
a test process that has imported everything cannot tell."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx

from codeexec.sandbox.local.warm.server import Server

from ..conftest import API_KEY
from ..serving import RUNNER_KEY


@contextlib.contextmanager
def service(
    sandbox_root: Path, port: int, env: Mapping[str, str] = {}, prefix: Sequence[str] = ()
) -> Iterator[subprocess.Popen[bytes]]:
    """The service on 127.0.0.1:port over sandbox_root, once /health answers; killed at
    the end if still running. `prefix` is a command line it is started under."""
    environment = {"CODE_EXEC_API_KEY": API_KEY, "PORT": str(port), **env}
    with _started("codeexec.server", sandbox_root, port, environment, prefix) as process:
        yield process


@contextlib.contextmanager
def runner(sandbox_root: Path, port: int, env: Mapping[str, str] = {}) -> Iterator[subprocess.Popen[bytes]]:
    """A runner on 127.0.0.1:port over sandbox_root, keyed RUNNER_KEY, as `service`."""
    environment = {"RUNNER_KEY": RUNNER_KEY, "RUNNER_PORT": str(port), **env}
    with _started("codeexec.runner", sandbox_root, port, environment) as process:
        yield process


@contextlib.contextmanager
def _started(
    module: str, sandbox_root: Path, port: int, env: Mapping[str, str], prefix: Sequence[str] = ()
) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [*prefix, sys.executable, "-m", module],
        env={**os.environ, "SANDBOX_ROOT": str(sandbox_root), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None and time.monotonic() < deadline, f"{module} did not start"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def modules_imported(modules: str, under: Sequence[str]) -> list[str]:
    """The modules under the packages `under` that a fresh interpreter holds once it has
    imported `modules` (comma-separated): what a layer drags in."""
    probe = (
        f"import sys, json, {modules}\n"
        f"under = {list(under)!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if any(m == u or m.startswith(u + '.') for u in under))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout))


def family(server: Server) -> list[int]:
    """The host pids of a fork server and of everything it made (runs made ahead, runs)."""
    parents = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
    found = [server.sandbox.proc.pid]
    for pid in found:
        found += [child for child, parent in parents.items() if parent == pid]
    return found
