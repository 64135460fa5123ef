"""Issue 41, item 1 (its API; the page in a browser: tests/api/test_console_page.py): the console
behind its own key, what its one call answers, and what it costs: one request to each runner
of a fleet per refresh, nothing when nobody asks."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.api.service import Service
from codeexec.settings import Settings

from ..calls import run
from ..conftest import API_KEY
from ..serving import Services

ADMIN_KEY = "admin-key-0123456789"
ADMIN = {"X-Admin-Key": ADMIN_KEY}


@pytest.fixture
def console(settings: Settings, services: Services) -> tuple[Service, TestClient]:
    service = services(settings.model_copy(update={"code_exec_admin_key": SecretStr(ADMIN_KEY)}))
    return service, TestClient(create_app(service), headers={"X-API-Key": API_KEY})


def test_without_an_admin_key_there_is_no_console(client: TestClient) -> None:
    for path in ("/admin", "/admin/console.js", "/admin/api/overview"):
        answer = client.get(path, headers=ADMIN)
        assert answer.status_code == 404 and answer.json()["error"] == "Not found"


def test_only_the_admin_key_opens_the_api_and_it_takes_nothing_it_does_not_expect(
    console: tuple[Service, TestClient],
) -> None:
    _, client = console
    for headers in ({}, {"X-Admin-Key": "wrong"}, {"X-Admin-Key": API_KEY}):  # the service key opens nothing here
        refused = client.get("/admin/api/overview", headers=headers)
        assert refused.status_code == 401 and set(refused.json()) == {"error", "details"}
    assert client.get("/admin/api/overview?x=1", headers=ADMIN).status_code == 400
    assert client.post("/admin/api/overview", headers=ADMIN, content=b"{}").status_code == 400
    assert client.post("/admin/api/overview", headers=ADMIN).status_code == 405
    assert client.get("/admin/api/other", headers=ADMIN).status_code == 404
    assert client.get("/admin/../v1/health", headers=ADMIN).status_code in (200, 404)


def test_the_page_comes_from_the_package_under_a_strict_policy(console: tuple[Service, TestClient]) -> None:
    _, client = console
    page = client.get("/admin", headers={"X-API-Key": ""})  # a browser sends no key for the page
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy and "connect-src 'self'" in policy
    assert "set-cookie" not in page.headers
    assert client.get("/admin/console.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/admin/index.html").status_code == 404  # only the named assets


def test_the_overview_shows_hosts_runs_failures_usage_keys_and_no_secret(
    console: tuple[Service, TestClient],
) -> None:
    service, client = console
    run(client, "print(1)", user_id="alice")
    failed = run(client, "raise ValueError('bad <input>')", user_id="bob")
    client.post("/v1/upload", files={"file": ("big.bin", b"x" * 300_000)}, headers={"User-Id": "carol"})
    service.sandboxes.usage.refresh()  # type: ignore[attr-defined]
    shown = client.get("/admin/api/overview", headers=ADMIN)
    assert shown.status_code == 200
    view = shown.json()
    [host] = view["hosts"]
    assert (host["name"], host["state"], host["answered"]) == ("local", "up", True)
    assert host["sessions"] >= 3 and 0 < host["bytes_used"] <= host["bytes_limit"]
    [minute] = view["minutes"]
    assert (minute["runs"], minute["failures"]) == (2, {"error": 1}) and 0 < minute["p50"] <= minute["p95"]
    [failure] = view["failures"]
    assert (failure["lang"], failure["outcome"], failure["session"]) == ("py", "error", failed["session_id"])
    assert failure["stderr"] == "ValueError: bad <input>"  # a traceback's error line, not its header
    users = view["usage"]["users"]
    assert users[0]["bytes"] >= 300_000 and sum(u["runs"] for u in users) == 2
    assert {k["name"] for k in view["keys"]} == {"default"}
    assert view["settings"]["backend"] == "local"
    for secret in (API_KEY, ADMIN_KEY, "alice", "carol"):
        assert secret not in json.dumps(view)
