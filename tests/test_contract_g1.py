"""Contract: the REAL @librechat/agents 3.1.63 code tool (X-API-Key) against the service on
loopback, then LibreChat's own download of what the run wrote."""

from __future__ import annotations

import base64
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

CLIENTS = Path(__file__).parent / "contract"


def drive_client(base_url: str, api_key: str, script: str = "g1_client.mjs") -> dict:
    assert (CLIENTS / "node_modules").is_dir(), "run `make test` (it installs the npm client)"
    env = {"PATH": os.environ["PATH"], "LIBRECHAT_CODE_BASEURL": base_url, "LIBRECHAT_CODE_API_KEY": api_key}
    done = subprocess.run(["node", str(CLIENTS / script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(params=["local", "agentcore"])
def app(request: pytest.FixtureRequest, settings: Settings) -> FastAPI:
    """The deployment under test, on each backend (G1's runs are Python, which both run)."""
    if request.param == "local":
        return create_app(settings)
    fake = request.getfixturevalue("agentcore_fake")
    return create_app(settings.model_copy(update={"sandbox_backend": "agentcore", "agentcore_endpoint_url": fake.url}))


def test_g1_client_runs_writes_downloads_and_reads_back(live_server: str) -> None:
    result = drive_client(live_server, API_KEY)
    assert result["client"]["version"] == "3.1.63"
    token, file_token = result["tokens"]["stdout"], result["tokens"]["file"]

    first = result["first"]
    assert first["status"] == "success"
    assert first["content"].startswith(f"stdout:\n{token}\n")
    assert "- /mnt/data/out.txt | File is already downloaded by the user" in first["content"]
    session = first["artifact"]["session_id"]
    assert [f["name"] for f in first["artifact"]["files"]] == ["out.txt"]

    # What LibreChat's processCodeOutput does next: download each generated file.
    [out] = first["artifact"]["files"]
    download = httpx.get(
        f"{live_server}/download/{session}/{out['id']}",
        headers={"X-API-Key": API_KEY, "User-Agent": "LibreChat/1.0"},
        params={"entity_id": "asst_1"},
    )
    assert download.status_code == 200
    assert download.text == file_token
    assert download.headers["content-disposition"] == 'attachment; filename="out.txt"'

    # A later turn: the client injects the first run's file, and the run reads it.
    for later in ("second", "injected", "session_only"):
        assert result[later]["content"] == f"stdout:\n{file_token}", later
        assert result[later]["artifact"]["session_id"] == session, later

    # Every language, absolute /mnt/data paths in its program, as on every backend.
    assert_languages(result["languages"], g2=False)

    # The same client with a wrong key: the service's 401 surfaces as the client's error.
    assert result["bad_key"]["threw"] is True
    assert result["bad_key"]["error"].endswith("HTTP error! status: 401")


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


def test_g1_programmatic_tool_runs_the_agents_tools(live_server: str) -> None:
    result = drive_client(live_server, API_KEY, "ptc_client.mjs")
    assert result["client"]["version"] == "3.1.63"
    python = result["python"]
    assert python["content"] == (
        "stdout:\ncaught: boom from failing-tool\nclear ['Rome', 'Lima']\n\n"
        "Generated files:\n- /mnt/data/report.txt | File is already downloaded by the user\n\n"
        "Note: Files from previous executions are automatically available and can be modified."
    )
    assert [f["name"] for f in python["artifact"]["files"]] == ["report.txt"]
    called = [call[-1] for call in python["called"]]
    assert called[0] == "Paris" and sorted(called[1:3]) == ["Lima", "Rome"] and called[3:] == ["failing-tool"]
    assert [p["content"] for p in result["parallel"]] == ["stdout:\nCairo", "stdout:\nQuito"]
    # The program's own exit status, after a tool call, in 3.1.63's words.
    assert result["failing"]["threw"]["message"] == (
        "Programmatic execution failed: Execution error: Sandbox exited with code 3"
    )


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


def test_librechat_uploads_lists_and_downloads_around_the_g1_client(live_server: str) -> None:
    assert_librechat_file_calls(drive_client(live_server, API_KEY, "files_client.mjs"))
