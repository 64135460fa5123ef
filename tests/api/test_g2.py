"""The second generation of clients (LibreChat v0.8.6+, @librechat/agents 3.2 to 3.9): its
bearer-only auth, its shapes and its routes, served beside G1 by the same deployment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..calls import file_id
from ..conftest import API_KEY
from ..helpers.g2 import KID, USER, g2_settings, librechat_token
from ..helpers.tokens import Issuer
from ..serving import Services


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    made = Issuer(tmp_path / "jwks.json")
    made.add_key(KID, "EdDSA")
    made.add_key("lc-rsa", "RS256")
    return made


@pytest.fixture
def app(settings: Settings, issuer: Issuer, services: Services) -> FastAPI:
    return create_app(services(g2_settings(settings, issuer)))


@pytest.fixture
def g2(app: FastAPI, issuer: Issuer) -> TestClient:
    """What @librechat/agents 3.9 sends: its User-Agent and LibreChat's bearer, no key."""
    headers = {"Authorization": f"Bearer {librechat_token(issuer)}", "User-Agent": "LibreChat/1.0"}
    return TestClient(app, headers=headers)


def run(client: TestClient, code: str, **extra: Any) -> dict:
    reply = client.post("/v1/exec", json={"lang": "py", "code": code, **extra})
    assert reply.status_code == 200, reply.text
    return reply.json()


def g2_upload(client: TestClient, name: str, data: bytes) -> dict:
    # LibreChat v0.8.6's order: kind, id, then the file part.
    reply = client.post("/v1/upload", data={"kind": "user", "id": USER}, files={"file": (name, data)})
    assert reply.status_code == 200, reply.text
    return reply.json()


def user_ref(session: str, name: str) -> dict:
    return {"id": name, "resource_id": USER, "name": name, "storage_session_id": session, "kind": "user"}


def test_a_librechat_token_alone_authenticates_eddsa_or_rs256(app: FastAPI, issuer: Issuer) -> None:
    for kid in (KID, "lc-rsa"):
        client = TestClient(app, headers={"Authorization": f"Bearer {librechat_token(issuer, kid)}"})
        assert run(client, "print('hi')")["stdout"] == "hi\n", kid


def test_auth_modes(settings: Settings, issuer: Issuer, services: Services) -> None:
    bearer = {"Authorization": f"Bearer {librechat_token(issuer)}"}
    key = {"X-API-Key": API_KEY}
    expected = {
        "key,jwt": {"bearer": 200, "key": 200},
        "jwt": {"bearer": 200, "key": 401},
        "key": {"bearer": 401, "key": 200},
    }
    for modes, outcomes in expected.items():
        client = TestClient(create_app(services(g2_settings(settings, issuer, modes))))
        for credential, headers in (("bearer", bearer), ("key", key)):
            reply = client.get("/v1/files/AAAAAAAAAAAAAAAAAAAAA", headers=headers)
            # 404: authenticated, and the session does not exist.
            assert reply.status_code == {200: 404, 401: 401}[outcomes[credential]], (modes, credential)


def test_jwt_mode_with_nothing_configured_serves_nothing(
    settings: Settings, issuer: Issuer, services: Services
) -> None:
    bare = settings.model_copy(update={"code_exec_auth_modes": frozenset({"jwt"})})
    client = TestClient(create_app(services(bare)))
    reply = client.post("/v1/exec", json={"lang": "py", "code": "1"}, headers={"Authorization": "Bearer x.y.z"})
    assert reply.status_code == 401
    assert "CODE_EXEC_JWT_JWKS_URL" in reply.json()["details"]
    assert client.get("/health").json()["auth"] == "nothing configured: every route answers 401"


def test_upload_takes_kind_and_id_and_answers_storage_session_id(g2: TestClient) -> None:
    up = g2_upload(g2, "data.csv", b"a,b\n1,2\n")
    assert up["message"] == "success"
    assert up["storage_session_id"] == up["session_id"]
    session = up["storage_session_id"]
    assert up["files"] == [{"fileId": file_id(session, "data.csv"), "filename": "data.csv"}]
    listing = g2.get(f"/v1/files/{session}").json()
    assert listing == [f"{session}/{file_id(session, 'data.csv')}"]


def test_batch_upload_stores_every_file_in_one_session(g2: TestClient) -> None:
    parts = [("file", ("a.csv", b"1,2\n")), ("file", ("b.txt", b"bee"))]
    reply = g2.post("/v1/upload/batch", data={"kind": "skill", "id": "skill-1", "version": "3"}, files=parts)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    session = body["storage_session_id"]
    assert body == {
        "message": "success",
        "session_id": session,
        "storage_session_id": session,
        "files": [
            {"status": "success", "fileId": file_id(session, "a.csv"), "filename": "a.csv"},
            {"status": "success", "fileId": file_id(session, "b.txt"), "filename": "b.txt"},
        ],
        "succeeded": 2,
        "failed": 0,
    }
    bee = file_id(session, "b.txt")
    assert g2.get(f"/v1/download/{session}/{bee}", params={"kind": "skill", "id": "skill-1"}).content == b"bee"


def test_a_batch_over_the_limit_is_a_413(g2: TestClient, settings: Settings) -> None:
    big = b"x" * (settings.max_upload_bytes + 1)
    reply = g2.post("/v1/upload/batch", files=[("file", ("small.txt", b"s")), ("file", ("big.bin", big))])
    assert reply.status_code == 413
    assert reply.json()["error"] == "Payload too large"


def test_download_takes_the_kind_and_id_query(g2: TestClient) -> None:
    session = g2_upload(g2, "notes.txt", b"hello")["storage_session_id"]
    reply = g2.get(f"/v1/download/{session}/{file_id(session, 'notes.txt')}", params={"kind": "user", "id": USER})
    assert reply.status_code == 200
    assert reply.content == b"hello"
    assert reply.headers["content-disposition"] == 'attachment; filename="notes.txt"'


def test_exec_reads_g2_refs_and_echoes_unchanged_inputs_as_inherited(g2: TestClient) -> None:
    session = g2_upload(g2, "data.csv", b"a,b\n1,2\n")["storage_session_id"]
    skill = {"id": "helper.py", "resource_id": "skill-1", "name": "helper.py", "kind": "skill", "version": 3}
    skill_session = g2.post("/v1/upload/batch", files={"file": ("helper.py", b"X = 41\n")}).json()
    skill["storage_session_id"] = skill_session["storage_session_id"]

    code = "x = int(open('helper.py').read().split('=')[1])\nprint(x + len(open('data.csv').read().splitlines()) - 1)\n"
    code += "open('out.txt', 'w').write('o')"
    body = run(g2, code, files=[user_ref(session, "data.csv"), skill])
    assert body["stdout"] == "42\n"
    run_session = body["session_id"]
    out = file_id(run_session, "out.txt")
    assert body["files"] == [
        {"id": out, "name": "out.txt", "session_id": run_session, "storage_session_id": run_session},
        {**user_ref(session, "data.csv"), "session_id": session, "inherited": True},
        {**skill, "session_id": skill["storage_session_id"], "inherited": True},
    ]


def test_a_changed_input_is_an_output_not_inherited(g2: TestClient) -> None:
    session = g2_upload(g2, "data.csv", b"1\n")["storage_session_id"]
    body = run(g2, "open('data.csv','a').write('2\\n')", files=[user_ref(session, "data.csv")])
    assert [(f["name"], f.get("inherited")) for f in body["files"]] == [("data.csv", None)]
    assert g2.get(f"/v1/download/{body['session_id']}/{body['files'][0]['id']}").content == b"1\n2\n"


def test_the_g1_reply_is_unchanged_beside_g2(app: FastAPI, g2: TestClient) -> None:
    g1 = TestClient(app, headers={"X-API-Key": API_KEY})
    session = g1.post("/v1/upload", files={"file": ("data.csv", b"1\n")}).json()["session_id"]
    ref = {"id": "data.csv", "name": "data.csv", "session_id": session}
    body = run(g1, "open('new.txt','w').write(open('data.csv').read())", files=[ref])
    new = file_id(session, "new.txt")
    assert body["files"] == [{"id": new, "name": "new.txt", "session_id": session, "storage_session_id": session}]


def test_one_object_metadata_and_removal(g2: TestClient) -> None:
    session = g2_upload(g2, "data.csv", b"a,b\n")["storage_session_id"]
    data = file_id(session, "data.csv")
    path = f"/v1/sessions/{session}/objects/{data}"
    info = g2.get(path, params={"kind": "user", "id": USER}).json()
    assert (info["name"], info["path"]) == (f"{session}/{data}", "data.csv")
    assert info["size"] == 4
    assert info["contentType"] == "text/csv"
    assert info["lastModified"].endswith("Z")
    assert g2.get(f"/v1/sessions/{session}/objects/other.csv").status_code == 404

    deleted = g2.delete(path, params={"kind": "user", "id": USER})
    assert deleted.status_code == 200
    assert deleted.json() == {"message": "success", "storage_session_id": session, "fileId": data}
    assert g2.get(path).status_code == 404
    assert g2.delete(path).status_code == 404


def test_error_statuses_the_g2_client_maps(g2: TestClient, app: FastAPI) -> None:
    # The client words 401/403 as "not authorized" and 400/422 as "request rejected".
    forged = TestClient(app, headers={"Authorization": "Bearer e30.e30.e30"})
    assert forged.post("/v1/exec", json={"lang": "py", "code": "1"}).status_code == 401
    assert g2.post("/v1/exec", json={"lang": "cobol", "code": "1"}).status_code == 400
    assert g2.post("/v1/exec", json={"code": "no lang"}).status_code == 400
