"""Contract: the REAL @librechat/agents 3.9.2 code tool (LibreChat v0.8.6+, bearer JWT
alone) against the service on loopback, and the G1 client against the same deployment."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from codeexec.api.app import create_app
from codeexec.settings import Settings

from .conftest import API_KEY
from .test_contract_g1 import drive_client as drive_g1_client
from .test_tokens import Issuer

CLIENT = Path(__file__).parent / "contract_g2" / "g2_client.mjs"
KID = "lc-codeapi-2026-05"
TENANT = "tenant-g2"
USER = "64f0c0ffee0000000000abcd"


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    made = Issuer(tmp_path / "jwks.json")
    made.add_key(KID, "EdDSA")
    return made


@pytest.fixture
def app(settings: Settings, issuer: Issuer) -> FastAPI:
    """One deployment for both generations: G1's key, and LibreChat's tokens alone."""
    both = {
        "code_exec_auth_modes": frozenset({"key", "jwt"}),
        "code_exec_jwt_jwks_url": issuer.url,
        "code_exec_jwt_issuer": "librechat",
        "code_exec_jwt_audience": "codeapi",
    }
    return create_app(settings.model_copy(update=both))


def drive_client(base_url: str, issuer: Issuer) -> dict:
    assert (CLIENT.parent / "node_modules").is_dir(), "run `make test` (it installs the npm client)"
    env = {
        "PATH": os.environ["PATH"],
        "LIBRECHAT_CODE_BASEURL": base_url,
        "G2_PRIVATE_KEY_PEM": issuer.private_pem(KID),
        "G2_KID": KID,
        "G2_ALG": "EdDSA",
        "G2_TENANT": TENANT,
        "G2_USER_ID": USER,
    }
    done = subprocess.run(["node", str(CLIENT)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_g2_client_runs_writes_downloads_and_reads_back(live_server: str, issuer: Issuer) -> None:
    result = drive_client(live_server, issuer)
    assert result["client"]["version"].startswith("3.9.")
    token, file_token = result["tokens"]["stdout"], result["tokens"]["file"]

    first = result["first"]
    assert first["threw"] is False, first["error"]
    assert first["content"].startswith(f"stdout:\n{token}\n")
    assert "Session files: 1 persisted file(s) are available in /mnt/data" in first["content"]
    session = first["artifact"]["session_id"]
    assert [(f["id"], f["storage_session_id"]) for f in first["artifact"]["files"]] == [("out.txt", session)]

    # LibreChat's download of the generated file, with ?kind=user&id= and the bearer.
    assert result["downloaded"] == [
        {"status": 200, "body": file_token, "content_disposition": 'attachment; filename="out.txt"'}
    ]

    # A later turn (primed files) and the same turn (injected files) read the file back;
    # the unchanged input comes back inherited, so the client reports no new file.
    for later in ("second", "injected"):
        assert result[later]["threw"] is False, result[later]["error"]
        assert result[later]["content"] == f"stdout:\n{file_token}", later
        assert result[later]["artifact"]["session_id"] == session, later
        echoed = result[later]["artifact"]["files"]
        assert [(f["id"], f["storage_session_id"], f["inherited"]) for f in echoed] == [("out.txt", session, True)]

    # Another tenant's token: the file is not available, and the run happens elsewhere.
    other = result["other_tenant"]
    assert 'File "out.txt" is not available' in other["content"]
    assert other["artifact"]["session_id"] != session

    assert result["expired"]["threw"] is True
    assert "Code execution is not authorized" in result["expired"]["error"]


def test_a_g1_client_and_a_g2_client_share_one_deployment(live_server: str, issuer: Issuer) -> None:
    g2 = drive_client(live_server, issuer)
    g1 = drive_g1_client(live_server, API_KEY)
    assert g1["second"]["content"] == f"stdout:\n{g1['tokens']['file']}"
    assert g2["second"]["content"] == f"stdout:\n{g2['tokens']['file']}"
    # Each generation's sessions belong to its own organization: the key's is the
    # deployment's, the token's is its tenant.
    g2_session = g2["first"]["artifact"]["session_id"]
    as_g1 = httpx.get(f"{live_server}/files/{g2_session}", headers={"X-API-Key": API_KEY})
    assert as_g1.status_code == 404
