"""The REAL @librechat/agents 3.9.2 code tool (LibreChat v0.8.6+), driven by a script of
tests/contract_g2 against a service: what it ran, read and downloaded, as JSON."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from .tokens import Issuer

CLIENTS = Path(__file__).parent.parent / "contract_g2"
KID = "lc-codeapi-2026-05"
TENANT = "tenant-g2"
USER = "64f0c0ffee0000000000abcd"


def drive_client(base_url: str, issuer: Issuer, script: str = "g2_client.mjs") -> dict:
    assert (CLIENTS / "node_modules").is_dir(), "run `make test` (it installs the npm client)"
    env = {
        "PATH": os.environ["PATH"],
        "LIBRECHAT_CODE_BASEURL": base_url,
        "G2_PRIVATE_KEY_PEM": issuer.private_pem(KID),
        "G2_KID": KID,
        "G2_ALG": "EdDSA",
        "G2_TENANT": TENANT,
        "G2_USER_ID": USER,
    }
    done = subprocess.run(["node", str(CLIENTS / script)], env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
