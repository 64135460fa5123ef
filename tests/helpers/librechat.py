"""LibreChat's side of docs/librechat.md, for the tests: both sides' settings from
`python -m codeexec.keys`, and the real @librechat/agents 3.9.2 tool run with LibreChat's
half of them (tests/contract_g2/env_client.mjs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CLIENTS = Path(__file__).parent.parent / "contract_g2"


def keys_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m codeexec.keys ARGS`, as the page runs it."""
    return subprocess.run(
        [sys.executable, "-m", "codeexec.keys", *args],
        env={"PATH": os.environ["PATH"], **(env or {})}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def both_sides(output: str) -> tuple[dict[str, str], dict[str, str]]:
    """LibreChat's .env lines and this service's, from the keys command's output (two
    blocks, a blank line between)."""
    blocks = output.strip().split("\n\n")
    assert len(blocks) == 2, output
    librechat, service = (dict(line.split("=", 1) for line in b.splitlines() if line[:1] != "#") for b in blocks)
    return librechat, service


def drive_with_env(librechat_env: dict[str, str]) -> dict:
    """The real client, configured by LibreChat's .env lines alone."""
    assert (CLIENTS / "node_modules").is_dir(), "run `make test` (it installs the npm client)"
    env = {"PATH": os.environ["PATH"], **librechat_env}
    script = str(CLIENTS / "env_client.mjs")
    done = subprocess.run(["node", script], env=env, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    result: dict = json.loads(done.stdout)
    return result
