"""Downloads larger than a Lambda response: through the API handler, a 302 to a presigned
GET of the large-files bucket (moto's S3 served on loopback), which the real client
(axios, as LibreChat downloads) follows, byte for byte, on both backends. On AgentCore
the VM itself PUTs the file (curl to a presigned URL)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from codeexec.large_files import KEY_PREFIX

from ..apigateway import ApiGateway
from ..conftest import API_KEY, free_port
from ..helpers.contract import G2_CLIENTS
from ..lambda_events import Functions

TWENTY_MB = 20 << 20


@pytest.fixture
def bucket() -> str:
    return f"codeexec-large-files-{uuid.uuid4().hex[:12]}"  # moto keeps its buckets per process


@pytest.fixture
def s3(aws_env: None, monkeypatch: pytest.MonkeyPatch, bucket: str) -> Iterator[str]:
    """moto's S3 on 127.0.0.1, holding the bucket; yields its endpoint."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)  # the AWS SDK's own setting
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)
    yield endpoint
    server.stop()


@pytest.fixture(params=["local", "agentcore"])
def api(
    request: pytest.FixtureRequest,
    s3: str,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    sandbox_root: Path,
    functions: Functions,
) -> ModuleType:
    """The API function as Lambda imports it, with the template's large-files settings."""
    monkeypatch.delenv("CODE_EXEC_API_KEY_SECRET_ARN", raising=False)
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    env = {
        "SANDBOX_BACKEND": request.param,
        "SANDBOX_ROOT": str(sandbox_root),
        "CODE_EXEC_API_KEY": API_KEY,
        "LARGE_FILES_BUCKET": bucket,
        "MAX_UPLOAD_BYTES": "4194304",  # what template.yaml sets
        "GATEWAY_REQUEST_BYTES": "6291456",
        "POWERTOOLS_METRICS_NAMESPACE": "codeexec-test",
    }
    if request.param == "agentcore":
        env["AGENTCORE_ENDPOINT_URL"] = request.getfixturevalue("agentcore_fake").url
    return functions("handlers.api", env)


def download_with_axios(base_url: str, path: str) -> dict:
    env = {"PATH": os.environ["PATH"], "LIBRECHAT_CODE_BASEURL": base_url, "LIBRECHAT_CODE_API_KEY": API_KEY}
    done = subprocess.run(
        ["node", str(G2_CLIENTS / "download_client.mjs")],
        env=env | {"DOWNLOAD_PATH": path}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_20_mb_file_downloads_byte_for_byte_through_a_redirect(api: ModuleType, s3: str, bucket: str) -> None:
    code = (
        "import hashlib, os\n"
        f"data = os.urandom({TWENTY_MB})\n"
        "open('/mnt/data/big.zip', 'wb').write(data)\n"
        "open('/mnt/data/small.csv', 'w').write('a,b\\n')\n"
        "print(hashlib.sha256(data).hexdigest())"
    )
    with ApiGateway(api.handler) as base, httpx.Client(base_url=base, headers={"X-API-Key": API_KEY}) as client:
        ran = client.post("/exec", json={"lang": "py", "code": code}, timeout=60)
        assert ran.status_code == 200, ran.text
        body = ran.json()
        session, digest = body["session_id"], body["stdout"].strip()
        ids = {f["name"]: f["id"] for f in body["files"]}

        # The function answers a redirect to the bucket, never the bytes (or a 413).
        direct = client.get(f"/download/{session}/{ids['big.zip']}")
        assert direct.status_code == 302
        assert direct.headers["location"].startswith(f"{s3}/{bucket}/{KEY_PREFIX}")
        assert direct.headers["cache-control"] == "no-store"
        assert "X-Amz-Expires=300" in direct.headers["location"]  # minutes, not days

        # A small file still comes straight from the function.
        small = client.get(f"/download/{session}/{ids['small.csv']}")
        assert (small.status_code, small.content) == (200, b"a,b\n")

    # LibreChat's axios follows it to S3 and gets the bytes, with the headers a direct
    # answer would carry (LibreChat forwards them to the browser).
    with ApiGateway(api.handler) as base:
        got = download_with_axios(base, f"/download/{session}/{ids['big.zip']}")
    assert (got["status"], got["size"], got["sha256"]) == (200, TWENTY_MB, digest)
    assert got["redirects"] == 1 and got["final_url"].startswith(f"{s3}/{bucket}/")
    assert got["content_type"] == "application/zip"
    assert got["content_disposition"] == 'attachment; filename="big.zip"'
    stored = boto3.client("s3", region_name="us-east-1").list_objects_v2(Bucket=bucket)["Contents"]
    # One object a download, under a key nobody could guess.
    assert [(o["Key"].startswith(KEY_PREFIX), o["Size"]) for o in stored] == [(True, TWENTY_MB)] * 2



def test_uploads_past_what_lambda_carries_are_refused_saying_why(api: ModuleType) -> None:
    with ApiGateway(api.handler) as base:
        def upload(size: int) -> httpx.Response:
            files = {"file": ("big.zip", b"x" * size)}
            return httpx.post(f"{base}/upload", headers={"X-API-Key": API_KEY}, files=files, timeout=60)

        # Over the function's limit, within what reaches it: the service's own 413 says why.
        refused = upload(4_300_000)
        assert refused.status_code == 413
        assert "cannot be uploaded to it at all" in refused.json()["details"]
        # Over 6 MB (base64-encoded) the function never sees it: the gateway answers alone.
        assert upload(5_000_000).status_code == 413
        assert upload(4_000_000).status_code == 200
