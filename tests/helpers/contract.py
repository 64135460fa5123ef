"""The real npm clients (tests/contract: @librechat/agents 3.1.63, G1; tests/contract_g2:
3.9.2, G2) driven against a deployment, and what they must see on any of them."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

from .g2 import KID, USER
from .tokens import Issuer

G1_CLIENTS = Path(__file__).parent.parent / "contract"


def drive_g1_client(base_url: str, api_key: str, script: str = "g1_client.mjs") -> dict:
    assert (G1_CLIENTS / "node_modules").is_dir(), "run `make test` (it installs the npm client)"
    env = {"PATH": os.environ["PATH"], "LIBRECHAT_CODE_BASEURL": base_url, "LIBRECHAT_CODE_API_KEY": api_key}
    done = subprocess.run(["node", str(G1_CLIENTS / script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# What each of contract_shared.mjs's LANGUAGE_PROGRAMS answers through the real client,
# line for line, on every backend: as on `local`, where /mnt/data is the session's own.
LANGUAGE_ANSWERS = {
    "py": ("stdout:\nfrom py\n", ["py.txt"]),
    "js": ("stdout:\nundefined function from js\n", ["js.txt"]),
    "ts": ("stdout:\nundefined from ts 42\n", ["ts.txt"]),
    "bash": ("stdout:\none\ttab\nargs: 0\n2\n/mnt/data\nlast line\nstderr:\nwarned", []),
}


def assert_languages(answers: dict, g2: bool) -> None:
    assert set(answers) == set(LANGUAGE_ANSWERS)
    for lang, (content, written) in LANGUAGE_ANSWERS.items():
        answer = answers[lang]
        assert answer["content"].split("\n")[: content.count("\n") + 1] == content.split("\n"), (lang, answer)
        files = (answer["artifact"] or {}).get("files", [])
        assert [f["name"] for f in files] == written, lang
        if written and not g2:  # G1's content names each generated file at its /mnt/data path
            assert f"- /mnt/data/{written[0]} |" in answer["content"], lang


def assert_librechat_file_calls(result: dict) -> None:
    """What files_client.mjs (G1 LibreChat's uploads, listing and downloads around the
    real 3.1.63 tool) must see on any deployment."""
    assert result["client"]["version"] == "3.1.63"
    session, file_id = result["identifier"].split("/")
    run = result["run"]
    assert run["content"].startswith("stdout:\na,b\n1,2\n"), run["content"]
    assert [f["name"] for f in run["artifact"]["files"]] == ["out.png"]
    assert result["listed"]["name"] == f"{session}/{file_id}" and result["listed"]["size"] == len("a,b\n1,2\n")
    download = result["downloads"]["out.png"]
    assert download["status"] == 200 and base64.b64decode(download["base64"]) == bytes(range(256)) * 4
    assert download["contentType"] == "image/png"
    assert download["disposition"] == 'attachment; filename="out.png"'


G2_CLIENTS = Path(__file__).parent.parent / "contract_g2"
G2_TENANT = "tenant-g2"


def drive_g2_client(base_url: str, issuer: Issuer, script: str = "g2_client.mjs", *args: str) -> dict:
    assert (G2_CLIENTS / "node_modules").is_dir(), "run `make test` (it installs the npm client)"
    env = {
        "PATH": os.environ["PATH"],
        "LIBRECHAT_CODE_BASEURL": base_url,
        "G2_PRIVATE_KEY_PEM": issuer.private_pem(KID),
        "G2_KID": KID,
        "G2_ALG": "EdDSA",
        "G2_TENANT": G2_TENANT,
        "G2_USER_ID": USER,
    }
    done = subprocess.run(
        ["node", str(G2_CLIENTS / script), *args], env=env, capture_output=True, text=True, timeout=150
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def assert_g2_round_trip(result: dict) -> None:
    """What g2_client.mjs's run, download and second run through a deployment must show."""
    first = result["first"]
    assert first["threw"] is False, first["error"]
    assert first["content"].startswith(f"stdout:\n{result['tokens']['stdout']}\n")
    assert result["downloaded"][0]["status"] == 200
    assert result["second"]["content"] == f"stdout:\n{result['tokens']['file']}"
