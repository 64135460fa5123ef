"""`sam local start-api` for real, with no AWS account and no registry: a Docker engine of
our own, the stand-in Lambda base image bootstrapped from Debian (sam-local/base-image.sh),
the runner on the host, and the API function in its container leasing from it. An exec,
an upload, a listing and a download go through the emulated API Gateway; every daemon the
test started (dockerd, the runner, sam) is stopped again."""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .docker_engine import docker_engine
from .serving import free_port
from .test_sam import python312_bin

ROOT = Path(__file__).parent.parent
SAM = ROOT / ".venv-sam" / "bin" / "sam"
BRIDGE_IP = "172.30.99.1"  # sam-local/dockerd.sh's bridge: the host, as the functions see it
ARCH = {"x86_64": "x86_64", "aarch64": "arm64"}[platform.machine()]
KEY = "sam-local-key"  # what events/env.json gives the API function

pytestmark = pytest.mark.skipif(
    not (SAM.exists() and shutil.which("dockerd") and shutil.which("debootstrap") and os.geteuid() == 0),
    reason="needs root, dockerd, debootstrap and the SAM CLI: `make sam-local-deps` installs them",
)


def _stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture
def docker_host() -> Iterator[str]:
    with docker_engine() as host:
        yield host


@pytest.fixture
def runner_url(docker_host: str, sandbox_root: Path) -> Iterator[str]:
    """`python -m codeexec.runner` on the bridge, as a developer starts it (`make runner`)."""
    port = free_port(BRIDGE_IP)
    env = {**os.environ, "RUNNER_HOST": BRIDGE_IP, "RUNNER_PORT": str(port), "SANDBOX_ROOT": str(sandbox_root)}
    env["RUNNER_KEY"] = json.loads((ROOT / "events" / "env.json").read_text())["ApiFunction"]["RUNNER_KEY"]
    process = subprocess.Popen([sys.executable, "-m", "codeexec.runner"], env=env, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None and b"Sandbox runner on" in process.stdout.readline()
        yield f"http://{BRIDGE_IP}:{port}"
    finally:
        _stop(process)


@pytest.fixture
def sam_api(docker_host: str, runner_url: str, tmp_path: Path) -> Iterator[str]:
    python312 = python312_bin()
    assert python312, "the functions run on python3.12: sam build and the stand-in image need one (README)"
    env = {**os.environ, "DOCKER_HOST": docker_host, "SAM_CLI_TELEMETRY": "0"}
    env["PATH"], env["PYTHON312_PREFIX"] = f"{python312}:{env['PATH']}", str(python312.parent)
    image = subprocess.run(
        [ROOT / "sam-local" / "base-image.sh", ARCH], env=env, capture_output=True, text=True, timeout=900
    )
    assert image.returncode == 0, image.stdout + image.stderr
    build, overrides = tmp_path / "build", ["--parameter-overrides", f"Architecture={ARCH}"]
    built = subprocess.run(
        [SAM, "build", "--build-dir", build, *overrides], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stdout + built.stderr
    # events/env.json as it is, but for the port this test's runner got.
    variables = json.loads((ROOT / "events" / "env.json").read_text())
    for function in variables.values():
        function["RUNNER_URL"] = runner_url
    (tmp_path / "env.json").write_text(json.dumps(variables))
    port = free_port()
    log = (tmp_path / "sam.log").open("wb")
    sam = subprocess.Popen(
        [SAM, "local", "start-api", "-t", build / "template.yaml", "--skip-pull-image", "--port", str(port),
         "--env-vars", tmp_path / "env.json", "--warm-containers", "EAGER", *overrides],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            assert sam.poll() is None, (tmp_path / "sam.log").read_text()
            try:
                if httpx.get(f"{base}/health", timeout=60).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "sam.log").read_text()
            time.sleep(1)
        yield f"{base}/v1"
    finally:
        _stop(sam, signal.SIGINT)  # sam removes its warm containers on an interrupt


def test_exec_upload_list_download_through_sam_local(sam_api: str) -> None:
    headers = {"X-API-Key": KEY}
    http = httpx.Client(headers=headers, timeout=120)
    health = http.get(sam_api.removesuffix("/v1") + "/health").json()
    assert "py" in json.dumps(health)

    # sam's emulator hands a request body to the function as UTF-8 text: an HTTP API's
    # implicit routes declare no binary media types (README "sam local"). So a CSV goes up,
    # and binary bytes come down (the response is base64 both on AWS and here).
    csv = "a,b\n1,2\n"
    up = http.post(f"{sam_api}/upload", files={"file": ("data.csv", csv.encode())}, headers={"User-Id": "u1"})
    assert up.status_code == 200, up.text
    session, csv_id = up.json()["session_id"], up.json()["files"][0]["fileId"]

    code = "import sys; data = open('data.csv').read(); open('out.png', 'wb').write(bytes(range(256)) * 4); print(data)"
    ref = {"id": csv_id, "session_id": session, "name": "data.csv"}
    ran = http.post(f"{sam_api}/exec", json={"lang": "py", "code": code, "user_id": "u1", "files": [ref]})
    assert ran.status_code == 200, ran.text
    body = ran.json()
    assert (body["stdout"], body["stderr"], body["session_id"]) == (csv + "\n", "", session)
    [out] = body["files"]
    assert out["name"] == "out.png"

    listing = http.get(f"{sam_api}/files/{session}", params={"detail": "summary"})
    assert sorted((f["path"], f["size"]) for f in listing.json()) == [("data.csv", len(csv)), ("out.png", 1024)]

    assert http.get(f"{sam_api}/download/{session}/{csv_id}").text == csv
    download = http.get(f"{sam_api}/download/{session}/{out['id']}")
    assert download.status_code == 200
    assert download.content == bytes(range(256)) * 4
