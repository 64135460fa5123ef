"""Contract: the REAL @librechat/agents 3.1.63 code tool (X-API-Key) against the service on
loopback, then LibreChat's own download of what the run wrote."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..conftest import API_KEY
from ..helpers.contract import assert_languages, assert_librechat_file_calls, drive_g1_client
from ..serving import Services


@pytest.fixture(params=["local", "agentcore"])
def app(request: pytest.FixtureRequest, settings: Settings, services: Services) -> FastAPI:
    """The deployment under test, on each backend (G1's runs are Python, which both run)."""
    if request.param == "local":
        return create_app(services(settings))
    fake = request.getfixturevalue("agentcore_fake")
    return create_app(
        services(settings.model_copy(update={"sandbox_backend": "agentcore", "agentcore_endpoint_url": fake.url}))
    )


def test_g1_client_runs_writes_downloads_and_reads_back(live_server: str) -> None:
    result = drive_g1_client(live_server, API_KEY)
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


def test_g1_programmatic_tool_runs_the_agents_tools(live_server: str) -> None:
    result = drive_g1_client(live_server, API_KEY, "ptc_client.mjs")
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


def test_librechat_uploads_lists_and_downloads_around_the_g1_client(live_server: str) -> None:
    assert_librechat_file_calls(drive_g1_client(live_server, API_KEY, "files_client.mjs"))
