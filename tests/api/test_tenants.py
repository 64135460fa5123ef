"""Tenants from bearer tokens, through the app: a token beside the service key names the
organization, and a session of one organization does not exist for any other."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..calls import file_id
from ..conftest import API_KEY
from ..helpers.tokens import AUDIENCE, ISSUER, Issuer
from ..serving import Services

DEPLOYMENT = "deployment-org"


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    made = Issuer(tmp_path / "jwks.json")
    made.add_key("rsa-1", "RS256")
    return made


def with_tokens(settings: Settings, jwks_url: str, **more: object) -> Settings:
    update = {"code_exec_jwt_jwks_url": jwks_url, "code_exec_jwt_issuer": ISSUER, "code_exec_jwt_audience": AUDIENCE}
    return settings.model_copy(update={**update, "code_exec_org": DEPLOYMENT, **more})


@pytest.fixture
def app(settings: Settings, issuer: Issuer, services: Services) -> FastAPI:
    return create_app(services(with_tokens(settings, issuer.url)))


def caller(app: FastAPI, issuer: Issuer, org: str | None) -> TestClient:
    """A hanzo.chat-like caller: the service key, plus the end user's token when it has one."""
    headers = {"X-API-Key": API_KEY}
    if org is not None:
        headers["Authorization"] = f"Bearer {issuer.token('rsa-1', org)}"
    return TestClient(app, headers=headers)


def upload(client: TestClient, name: str, data: bytes) -> str:
    reply = client.post("/v1/upload", files={"file": (name, data)})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["session_id"])


def run(client: TestClient, code: str, **extra: object) -> dict:
    reply = client.post("/v1/exec", json={"lang": "py", "code": code, **extra})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_token_names_the_org_and_no_token_is_the_deployment_org(app: FastAPI, issuer: Issuer) -> None:
    org_a, deployment = caller(app, issuer, "org-a"), caller(app, issuer, None)
    session = upload(org_a, "a.txt", b"A")
    assert org_a.get(f"/v1/files/{session}").json() == [f"{session}/{file_id(session, 'a.txt')}"]
    assert deployment.get(f"/v1/files/{session}").status_code == 404
    # The organization is the token's, not anything the body says.
    body = run(org_a, "print(open('a.txt').read())", org="org-b", files=[{"id": "a.txt", "session_id": session}])
    assert body["stdout"] == "A\n"


@pytest.mark.parametrize(("owner", "intruder"), [("org-a", "org-b"), ("org-a", None), (None, "org-a")])
def test_another_orgs_session_does_not_exist_on_any_route(
    app: FastAPI, issuer: Issuer, owner: str | None, intruder: str | None
) -> None:
    mine, theirs = caller(app, issuer, owner), caller(app, issuer, intruder)
    session = upload(mine, "mine.txt", b"secret")

    for reply in (
        theirs.get(f"/v1/files/{session}", params={"detail": "summary"}),
        theirs.get(f"/v1/download/{session}/mine.txt"),
        theirs.delete(f"/v1/files/{session}/mine.txt"),
        theirs.post("/v1/upload", files={"file": ("x.txt", b"x")}, params={"session_id": session}),
        theirs.post("/v1/upload/batch", files={"file": ("x.txt", b"x")}, params={"session_id": session}),
        theirs.get(f"/v1/sessions/{session}/objects/mine.txt", params={"kind": "user", "id": "u"}),
        theirs.delete(f"/v1/sessions/{session}/objects/mine.txt"),
    ):
        assert reply.status_code == 404, (reply.request.method, reply.url)
        assert b"secret" not in reply.content

    # A run naming the session gets a new session of its own.
    assert run(theirs, "print(1)", session_id=session)["session_id"] != session
    # An input file ref into the session is "not available", under every spelling.
    for ref in (
        {"id": "mine.txt", "name": "mine.txt", "session_id": session},
        {"id": "mine.txt", "name": "mine.txt", "storage_session_id": session, "kind": "user", "resource_id": "r"},
    ):
        body = run(theirs, "import os; print(os.path.exists('mine.txt'))", files=[ref])
        assert body["stdout"] == "False\n"
        assert 'File "mine.txt" is not available' in body["stderr"]
        assert body["session_id"] != session

    # Nothing the intruder did reached the owner's session.
    assert mine.get(f"/v1/download/{session}/mine.txt").content == b"secret"
    assert mine.get(f"/v1/files/{session}").json() == [f"{session}/{file_id(session, 'mine.txt')}"]


def test_a_bad_token_beside_a_good_key_is_a_401_never_a_fall_back(app: FastAPI, issuer: Issuer) -> None:
    good = issuer.token("rsa-1", "org-a")
    header, _, signature = good.split(".")
    bad_tokens = {
        "expired": issuer.token("rsa-1", exp=1_000),
        "issuer": issuer.token("rsa-1", iss="https://elsewhere.example.test"),
        "audience": issuer.token("rsa-1", aud="another-service"),
        "tenant_id": issuer.token("rsa-1", tenant_id=None),
        "signature": f"{header}.{issuer.token('rsa-1', 'org-b').split('.')[1]}.{signature}",
        "malformed": "not-a-jwt",
    }
    for reason, token in bad_tokens.items():
        headers = {"X-API-Key": API_KEY, "Authorization": f"Bearer {token}"}
        reply = TestClient(app).post("/v1/exec", json={"lang": "py", "code": "print(1)"}, headers=headers)
        assert reply.status_code == 401, reason
        assert reply.json()["error"] == "Unauthorized"
        assert reason in reply.json()["details"], reply.json()
        assert token not in reply.text


def test_a_wrong_key_is_a_401_even_with_a_valid_token(app: FastAPI, issuer: Issuer) -> None:
    headers = {"X-API-Key": API_KEY + "x", "Authorization": f"Bearer {issuer.token('rsa-1')}"}
    assert TestClient(app).get("/v1/files/AAAAAAAAAAAAAAAAAAAAA", headers=headers).status_code == 401


def test_tokens_are_never_logged(app: FastAPI, issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    good, expired = issuer.token("rsa-1"), issuer.token("rsa-1", exp=1_000)
    caplog.set_level(logging.DEBUG)
    for token in (good, expired):
        TestClient(app).post(
            "/v1/exec",
            json={"lang": "py", "code": "print(1)"},
            headers={"X-API-Key": API_KEY, "Authorization": f"Bearer {token}"},
        )
    assert caplog.records  # something was logged, and none of it is a token
    for token in (good, expired):
        assert token not in caplog.text
        assert token.split(".")[2] not in caplog.text


def test_without_token_settings_a_bearer_beside_the_key_names_no_tenant(settings: Settings, services: Services) -> None:
    # A one-tenant deployment: the bearer hanzo.chat forwards is not a credential here.
    app = create_app(services(settings.model_copy(update={"code_exec_org": DEPLOYMENT})))
    headers = {"X-API-Key": API_KEY, "Authorization": "Bearer anything"}
    session = upload(TestClient(app, headers=headers), "a.txt", b"A")
    assert TestClient(app, headers={"X-API-Key": API_KEY}).get(f"/v1/files/{session}").status_code == 200


def test_an_unreachable_key_set_is_a_503_not_a_401(settings: Settings, issuer: Issuer, services: Services) -> None:
    app = create_app(services(with_tokens(settings, "http://127.0.0.1:9/jwks.json")))
    reply = caller(app, issuer, "org-a").post("/v1/exec", json={"lang": "py", "code": "print(1)"})
    assert reply.status_code == 503
    assert "CODE_EXEC_JWT_JWKS_URL" in reply.json()["details"]


def test_health_says_what_is_accepted(app: FastAPI) -> None:
    assert TestClient(app).get("/health").json()["auth"] == "accepts X-API-Key (+ tenant bearer token)"
