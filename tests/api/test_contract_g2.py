"""Contract: the REAL @librechat/agents 3.9.2 code tool (LibreChat v0.8.6+, bearer JWT
alone) against the service on loopback, and the G1 client against the same deployment."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..calls import file_id
from ..conftest import API_KEY
from ..helpers.contract import assert_languages, drive_g1_client, drive_g2_client
from ..helpers.g2 import KID
from ..helpers.tokens import Issuer
from ..serving import Services


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    made = Issuer(tmp_path / "jwks.json")
    made.add_key(KID, "EdDSA")
    return made


@pytest.fixture(params=["local", "agentcore"])
def app(request: pytest.FixtureRequest, settings: Settings, issuer: Issuer, services: Services) -> FastAPI:
    """One deployment for both generations, G1's key and LibreChat's tokens alone, on
    each backend."""
    if request.param == "agentcore":
        fake = request.getfixturevalue("agentcore_fake")
        settings = settings.model_copy(update={"sandbox_backend": "agentcore", "agentcore_endpoint_url": fake.url})
    both = {
        "code_exec_auth_modes": frozenset({"key", "jwt"}),
        "code_exec_jwt_jwks_url": issuer.url,
        "code_exec_jwt_issuer": "librechat",
        "code_exec_jwt_audience": "codeapi",
    }
    return create_app(services(settings.model_copy(update=both)))


def test_g2_client_runs_writes_downloads_and_reads_back(live_server: str, issuer: Issuer) -> None:
    result = drive_g2_client(live_server, issuer)
    assert result["client"]["version"].startswith("3.9.")
    token, file_token = result["tokens"]["stdout"], result["tokens"]["file"]

    first = result["first"]
    assert first["threw"] is False, first["error"]
    assert first["content"].startswith(f"stdout:\n{token}\n")
    assert "Session files: 1 persisted file(s) are available in /mnt/data" in first["content"]
    session = first["artifact"]["session_id"]
    out = file_id(session, "out.txt")
    assert [(f["id"], f["name"], f["storage_session_id"]) for f in first["artifact"]["files"]] == [
        (out, "out.txt", session)
    ]

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
        assert [(f["id"], f["storage_session_id"], f["inherited"]) for f in echoed] == [(out, session, True)]

    # Another tenant's token: the file is not available, and the run happens elsewhere.
    other = result["other_tenant"]
    assert 'File "out.txt" is not available' in other["content"]
    assert other["artifact"]["session_id"] != session

    assert result["expired"]["threw"] is True
    assert "Code execution is not authorized" in result["expired"]["error"]
    assert_languages(result["languages"], g2=True)


def test_a_g1_client_and_a_g2_client_share_one_deployment(live_server: str, issuer: Issuer) -> None:
    g2 = drive_g2_client(live_server, issuer)
    g1 = drive_g1_client(live_server, API_KEY)
    assert g1["second"]["content"] == f"stdout:\n{g1['tokens']['file']}"
    assert g2["second"]["content"] == f"stdout:\n{g2['tokens']['file']}"
    # Each generation's sessions belong to its own organization: the key's is the
    # deployment's, the token's is its tenant.
    g2_session = g2["first"]["artifact"]["session_id"]
    as_g1 = httpx.get(f"{live_server}/files/{g2_session}", headers={"X-API-Key": API_KEY})
    assert as_g1.status_code == 404


ID = re.compile(r"^[A-Za-z0-9_-]{21}$")  # LibreChat's isValidID, for sessions and files alike
AWKWARD = ["Q3 #1.csv", "what?.txt", "100% done.txt", "résumé final.txt"]


def test_skills_two_users_and_awkward_names_as_librechat_meets_them(live_server: str, issuer: Issuer) -> None:
    result = drive_g2_client(live_server, issuer, "files_client.mjs")
    assert result["client"]["version"].startswith("3.9.")

    # The skill bundle keeps its nested paths: the reply echoes each, two READMEs included.
    skill = result["skill_upload"]
    assert skill["status"] == 200, skill
    assert [f["filename"] for f in skill["body"]["files"]] == [
        "skills/pdf/SKILL.md", "skills/pdf/scripts/__init__.py", "skills/pdf/scripts/pages.py",
        "skills/pdf/lib/__init__.py", "skills/pdf/lib/names.py", "skills/pdf/a/README.md", "skills/pdf/b/README.md",
    ]  # fmt: skip
    assert len({f["fileId"] for f in skill["body"]["files"]}) == 7

    # Alice's run imports from both packages and reads both READMEs, at the paths it was told.
    alice = result["alice"]
    assert alice["threw"] is False, alice
    assert alice["content"].startswith("stdout:\nreport 7 first readme second readme\n"), alice["content"]
    artifact = alice["artifact"]
    session = artifact["session_id"]
    assert ID.match(session) and session != skill["body"]["storage_session_id"]
    made = [f for f in artifact["files"] if not f.get("inherited")]
    # Outputs by their path; no __pycache__ (py_compile made one); the skill file the run
    # changed is read-only, so it is echoed as the skill's own ref, never a new output.
    assert sorted(f["name"] for f in made) == sorted(["alice_notes.txt", "plots/a.svg", *AWKWARD])
    echoed = {f["name"] for f in artifact["files"] if f.get("inherited")}
    assert "skills/pdf/scripts/pages.py" in echoed
    assert all(ID.match(f["id"]) for f in artifact["files"])

    # Every output downloads and is fresh through URLs built without encoding, and each
    # would pass LibreChat's fallback route; the name travels in Content-Disposition.
    fetched = result["alice_fetched"]
    assert set(fetched) == {f["name"] for f in made}
    for name, got in fetched.items():
        assert (got["status"], got["object_status"], got["fallback_route_ok"]) == (200, 200, True), name
        if name in AWKWARD:
            assert got["body"] == name
            assert got["content_disposition"] == f"attachment; filename*=utf-8''{quote(name)}"
        modified = datetime.fromisoformat(got["last_modified"].replace("Z", "+00:00"))
        assert abs(modified.timestamp() - time.time()) < 3600

    # Bob, same tenant, same skill refs: his run is elsewhere and sees none of Alice's files.
    bob = result["bob"]
    assert bob["threw"] is False, bob
    assert bob["artifact"]["session_id"] not in (session, skill["body"]["storage_session_id"])
    assert "alice_notes" not in bob["content"] and "skills/pdf/scripts/pages.py" in bob["content"]
    # Nor can he list, read or download them, by her session or through the skill's.
    reads = result["bob_reads"]
    assert (reads["listing"], reads["download"], reads["object"], reads["via_skill_session"]) == (404,) * 4
    assert reads["skill_file"] == "def count():\n    return 7\n"  # the shared copy, unchanged by Alice's run

    # Alice's next turn lands in her own session; the file she removes is named as deleted.
    again = result["again"]
    assert again["threw"] is False, again
    assert again["artifact"]["session_id"] == session
    assert again["content"] == "stdout:\nalice secret"
    assert again["artifact"]["deleted_files"] == ["what?.txt"]


def test_programmatic_tools_and_the_stateful_profile_through_the_real_tools(
    live_server: str, issuer: Issuer, request: pytest.FixtureRequest
) -> None:
    result = drive_g2_client(live_server, issuer, "ptc_client.mjs")
    assert result["client"]["version"] == "3.9.2"

    # The package ran each tool the program called; results came back as Python values.
    python = result["python"]
    assert python["content"].startswith("stdout:\ncaught: boom from failing-tool\nclear Oslo ['Rome', 'Lima']\n")
    assert [f["name"] for f in python["artifact"]["files"]] == ["report.txt"]
    assert ID.match(python["artifact"]["session_id"]) and all(ID.match(f["id"]) for f in python["artifact"]["files"])
    called = python["called"]
    assert called[:2] == [["get_weather", "Paris"], ["get_weather", "Oslo"]]
    assert sorted(map(tuple, called[2:4])) == [("get_weather", "Lima"), ("get_weather", "Rome")]
    assert called[4:] == [["failing-tool"]]

    # Two runs at once, each continued with its own results.
    assert [p["content"] for p in result["parallel"]] == ["stdout:\nCairo", "stdout:\nQuito"]
    assert len({p["artifact"]["session_id"] for p in result["parallel"]}) == 2

    bash = result["bash"]
    assert bash["content"].startswith(
        'stdout:\ngot {"city":"NY","sky":"clear"}\nfailed with 1\n\nstderr:\nboom from failing-tool\n'
    ), bash
    assert [f["name"] for f in bash["artifact"]["files"]] == ["weather.json"]
    assert bash["called"] == [["get_weather", "NY"], ["failing-tool"]]

    # runTimeoutMs 2000: the round after the tool call is stopped, in the client's words.
    timeout = result["timeout"]
    assert timeout["threw"]["message"].startswith(
        "Programmatic execution failed: Code execution failed. Execution exceeded the time limit."
    ), timeout
    assert timeout["ms"] < 8000

    if request.node.callspec.params["app"] == "agentcore":
        # No session can be named ahead on AgentCore: the profile is refused as the client
        # expects, a permanent capability mismatch it does not retry (docs/api.md).
        for name in ("prewarm", "stateful_write", "aborted"):
            assert "does not provide the requested execution profile" in result[name]["threw"]["message"], name
        return

    # One conversation, one /mnt/data, with no file re-sent; another user's is their own.
    prewarm, write, read = result["prewarm"], result["stateful_write"], result["stateful_read"]
    session = prewarm["artifact"]["runtime_session_id"]
    assert (prewarm["artifact"]["runtime_status"], prewarm["artifact"]["session_id"]) == ("new", session)
    assert [f["name"] for f in write["artifact"]["files"]] == ["note.txt"]
    assert (read["content"], read["artifact"]["session_id"], read["artifact"]["runtime_status"]) == (
        "stdout:\nkept", session, "reused"
    )
    other = result["other_user"]
    assert other["artifact"]["session_id"] != session and other["content"].startswith("stdout:\nmissing\n")

    # The abort reached the service as /cancel {request_id}: the run stopped in its sleep,
    # before its late write and its tool call; what it wrote first is still there.
    assert result["aborted"]["threw"]["name"] == "AbortError" and result["aborted"]["ms"] < 3000
    assert result["after_abort"]["content"] == "stdout:\nnote.txt\nstarted.txt"
    assert result["called_after_abort"] == []
