"""A run's signals are a new process's, whatever its service inherited: started as a
script's background job would start it (SIGINT and SIGQUIT ignored; here a signal blocked
too), the service runs programs that ignore and block nothing, cold and warm, and a Python
program gets its KeyboardInterrupt."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from codeexec.sandbox.local import cgroups

from ..conftest import API_KEY
from ..helpers.processes import service
from ..serving import free_port

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the local backend runs as root"),
]

# coreutils' env, as a shell's `cmd &` (SIGINT, SIGQUIT ignored) or a blocked mask would leave it.
INHERITED = ["/usr/bin/env", "--ignore-signal=INT", "--ignore-signal=QUIT", "--block-signal=USR1"]
PROBE = "trap -p; grep -E '^Sig(Blk|Ign):' /proc/self/status"
INTERRUPTED = (
    "import os, signal\nprint('started', flush=True)\nos.kill(os.getpid(), signal.SIGINT)\nprint('not interrupted')"
)

KINDS = {"cold": {"WARM_PYTHON": "0", "WARM_SANDBOXES": "0", "WARM_SCIENTIFIC": "0"}}
if os.geteuid() == 0 and "memory" in cgroups.detect():
    KINDS["warm"] = {"WARM_PYTHON": "1", "WARM_SANDBOXES": "1"}


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_ignores_and_blocks_nothing_its_service_inherited(sandbox_root: Path, kind: str) -> None:
    port = free_port()
    with service(sandbox_root, port, KINDS[kind], prefix=INHERITED) as process:
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{process.pid}/status").read_text().splitlines())
        # The service did inherit them: SIGQUIT ignored (uvicorn handles SIGINT itself), SIGUSR1 blocked.
        ignored, blocked = int(status["SigIgn"], 16), int(status["SigBlk"], 16)
        assert ignored >> (signal.SIGQUIT - 1) & 1 and blocked >> (signal.SIGUSR1 - 1) & 1
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/v1", headers={"X-API-Key": API_KEY}, timeout=60) as api:
            probe = api.post("/exec", json={"lang": "bash", "code": PROBE}).json()
            assert probe["stdout"] == "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n", probe
            python = api.post("/exec", json={"lang": "py", "code": "import numpy\n" + INTERRUPTED}).json()
            assert python["stdout"] == "started\n" and python["stderr"].endswith("KeyboardInterrupt\n"), python
            assert api.get("/health").status_code == 200
