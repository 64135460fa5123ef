"""`make sam-local` for real, with no AWS account and no registry: its one command starts a
Docker engine of its own, the stand-in Lambda base image (sam-local/base-image.sh), the
runner on the engine's bridge, `sam build` and `sam local start-api`. The real 3.1.63
client (an exec, files across turns, every language) and G1 LibreChat's own file calls
(upload, listing, download) go through the emulated API Gateway; an interrupt then stops
everything the command started."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..helpers.contract import assert_languages, assert_librechat_file_calls, drive_g1_client
from ..serving import free_port

ROOT = Path(__file__).parents[2]
SAM = ROOT / ".venv-sam" / "bin" / "sam"
KEY = json.loads((ROOT / "events" / "env.json").read_text())["ApiFunction"]["CODE_EXEC_API_KEY"]

pytestmark = [
    pytest.mark.docker,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (SAM.exists() and shutil.which("dockerd") and shutil.which("debootstrap") and os.geteuid() == 0),
        reason="needs root, dockerd, debootstrap and the SAM CLI: `make sam-local-deps` installs them",
    ),
]


def _ours() -> set[int]:
    """The processes `make sam-local` may leave: anything working in one of its run dirs."""
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if b"/tmp/cxsam-" in (proc / "cmdline").read_bytes():
                found.add(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture
def sam_local(sandbox_root: Path, tmp_path: Path) -> Iterator[str]:
    """`make sam-local` as a developer runs it; yields the API's base URL (ending in /v1)."""
    before = _ours()
    port, runner_port = free_port(), free_port()  # ports nothing here listens on
    env = {**os.environ, "SAM_LOCAL_PORT": str(port), "RUNNER_PORT": str(runner_port)}
    env["SANDBOX_ROOT"] = str(sandbox_root)
    log = tmp_path / "sam-local.log"
    make = subprocess.Popen(
        ["make", "--no-print-directory", "sam-local"], cwd=ROOT, env=env,
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 900  # the stand-in image from nothing takes minutes
        while True:
            assert make.poll() is None, log.read_text()[-5000:]
            try:
                if httpx.get(f"{base}/health", timeout=60).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-5000:]
            time.sleep(1)
        yield f"{base}/v1"
    finally:
        _stop(make)
    assert _ours() <= before, f"make sam-local left processes behind: {log.read_text()[-3000:]}"


def _stop(make: subprocess.Popen[bytes]) -> None:
    """Ctrl-C, as at a terminal; a make still there a minute later is asked again with
    SIGTERM (start.sh stops everything on either), and killed last. Where this process was
    started with SIGINT ignored (a job a script put in the background: `nohup make test &`),
    make and start.sh inherit that and cannot take it back, so SIGTERM goes first."""
    interruptible = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    for asked, seconds in ((signal.SIGINT, 60), (signal.SIGTERM, 60))[0 if interruptible else 1 :]:
        os.killpg(make.pid, asked)
        try:
            make.wait(timeout=seconds)
            return
        except subprocess.TimeoutExpired:
            warnings.warn(f"make sam-local did not stop {seconds} s after {asked.name}", stacklevel=1)
    os.killpg(make.pid, signal.SIGKILL)
    raise AssertionError("make sam-local stopped on neither SIGINT nor SIGTERM")


def test_the_g1_client_and_librechats_file_calls_through_make_sam_local(sam_local: str) -> None:
    health = httpx.get(sam_local.removesuffix("/v1") + "/health", timeout=60).json()
    assert health["backend"] == "runner" and "py" in health["languages"]

    result = drive_g1_client(sam_local, KEY)
    assert result["client"]["version"] == "3.1.63"
    first = result["first"]
    assert first["status"] == "success"
    assert first["content"].startswith(f"stdout:\n{result['tokens']['stdout']}\n")
    session, [out] = first["artifact"]["session_id"], first["artifact"]["files"]
    download = httpx.get(f"{sam_local}/download/{session}/{out['id']}", headers={"X-API-Key": KEY}, timeout=60)
    assert download.text == result["tokens"]["file"]
    for later in ("second", "injected"):  # the file of the first turn, read in later ones
        assert result[later]["content"] == f"stdout:\n{result['tokens']['file']}", later
    assert_languages(result["languages"], g2=False)
    assert result["bad_key"]["error"].endswith("HTTP error! status: 401")

    # G1 LibreChat's own calls: a text upload (sam's emulator hands a body over as UTF-8
    # text, docs/backends.md "sam local"), a run that writes a binary file, the listing, the download.
    assert_librechat_file_calls(drive_g1_client(sam_local, KEY, "files_client.mjs"))
