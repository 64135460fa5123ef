"""The embedded service (`python -m codeexec.server`) as a process of its own: what a
crash leaves, or what a process inherits from whoever started it, is the point; and what a
fresh interpreter imports, which a test process that has imported everything cannot tell."""

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

from ..conftest import API_KEY


@contextlib.contextmanager
def service(
    sandbox_root: Path, port: int, env: Mapping[str, str] = {}, prefix: Sequence[str] = ()
) -> Iterator[subprocess.Popen[bytes]]:
    """The service on 127.0.0.1:port over sandbox_root, once /health answers; killed at
    the end if still running. `prefix` is a command line it is started under."""
    environment = {
        **os.environ, "SANDBOX_ROOT": str(sandbox_root), "CODE_EXEC_API_KEY": API_KEY, "PORT": str(port), **env,
    }  # fmt: skip
    process = subprocess.Popen(
        [*prefix, sys.executable, "-m", "codeexec.server"],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "the service did not start"
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
