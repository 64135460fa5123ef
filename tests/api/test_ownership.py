"""A session belongs to an organization and a user; shared uploads are sources, never the
place a run lands. Through the app, for both generations of clients, and the rules for
what a run hands back (outputs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.sessions.outputs import is_output
from codeexec.settings import Settings

from ..calls import file_id, names, run, upload
from ..conftest import API_KEY
from ..helpers.g2 import g2_settings, librechat_token
from ..helpers.tokens import Issuer
from ..serving import Services

ALICE, BOB = "64f0c0ffee00000000000a11", "64f0c0ffee00000000000b0b"


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    made = Issuer(tmp_path / "jwks.json")
    made.add_key("lc-codeapi-2026-05", "EdDSA")
    return made


@pytest.fixture
def app(settings: Settings, issuer: Issuer, services: Services) -> FastAPI:
    return create_app(services(g2_settings(settings, issuer)))


def g2_user(app: FastAPI, issuer: Issuer, user: str) -> TestClient:
    return TestClient(app, headers={"Authorization": f"Bearer {librechat_token(issuer, sub=user)}"})


def g1_server(app: FastAPI) -> TestClient:
    """G1 LibreChat's server: the key, the user named per request."""
    return TestClient(app, headers={"X-API-Key": API_KEY})


def listed(client: TestClient, session: str) -> int:
    return client.get(f"/v1/files/{session}").status_code


def test_g2_users_of_one_tenant_never_reach_each_others_sessions(app: FastAPI, issuer: Issuer) -> None:
    alice, bob = g2_user(app, issuer, ALICE), g2_user(app, issuer, BOB)
    mine = run(alice, "open('notes.txt', 'w').write('alice')")
    session, notes = mine["session_id"], mine["files"][0]["id"]
    for reply in (
        bob.get(f"/v1/files/{session}"),
        bob.get(f"/v1/download/{session}/{notes}"),
        bob.get(f"/v1/sessions/{session}/objects/{notes}"),
        bob.delete(f"/v1/files/{session}/{notes}"),
        bob.post("/v1/upload", files={"file": ("x.txt", b"x")}, params={"session_id": session}),
    ):
        assert reply.status_code == 404, reply.url
    # A run naming her session or her file lands in a session of his own, without her file.
    ref = {"id": notes, "name": "notes.txt", "storage_session_id": session, "kind": "user"}
    body = run(bob, "import os; print(sorted(os.listdir('.')))", session_id=session, files=[ref])
    assert body["session_id"] != session
    assert body["stdout"] == "[]\n" and 'File "notes.txt" is not available' in body["stderr"]
    # Her own next run, by the same refs, is in her session again.
    assert run(alice, "print(open('notes.txt').read())", files=[ref])["session_id"] == session
    assert alice.get(f"/v1/download/{session}/{notes}").content == b"alice"


def test_a_shared_upload_is_read_by_all_and_changed_by_none_but_its_owner(app: FastAPI, issuer: Issuer) -> None:
    alice, bob = g2_user(app, issuer, ALICE), g2_user(app, issuer, BOB)
    form = {"kind": "agent", "id": "agent_1"}
    shared = alice.post("/v1/upload", data=form, files={"file": ("tips.md", b"tip")}).json()["storage_session_id"]
    tips = file_id(shared, "tips.md")
    assert bob.get(f"/v1/download/{shared}/{tips}", params={"kind": "agent", "id": "agent_1"}).content == b"tip"
    assert bob.delete(f"/v1/files/{shared}/{tips}").status_code == 404
    # Not even its owner's run lands in it: the shared copy stays as uploaded.
    ref = {"id": tips, "name": "tips.md", "storage_session_id": shared, "kind": "agent", "resource_id": "agent_1"}
    for user in (alice, bob):
        body = run(user, "open('tips.md', 'a').write(' changed')", session_id=shared, files=[ref])
        assert body["session_id"] != shared
    assert bob.get(f"/v1/download/{shared}/{tips}").content == b"tip"


def test_g1_identity_is_the_body_user_and_the_upload_header(app: FastAPI) -> None:
    server = g1_server(app)
    up = upload(server, "data.csv", b"1,2\n")  # no User-Id: a user of its own
    alices = server.post(
        "/v1/upload", files={"file": ("data.csv", b"3,4\n")}, headers={"User-Id": ALICE}
    ).json()["session_id"]
    ref = {"id": "data.csv", "name": "data.csv", "session_id": alices}
    assert run(server, "print(open('data.csv').read())", files=[ref], user_id=ALICE)["session_id"] == alices
    bobs = run(server, "import os; print(os.path.exists('data.csv'))", files=[ref], user_id=BOB)
    assert (bobs["session_id"] != alices, bobs["stdout"]) == (True, "False\n")
    assert 'File "data.csv" is not available' in bobs["stderr"]
    assert run(server, "print(1)", files=[ref])["session_id"] != alices  # nobody is not Alice
    # The organization's own server names no user when it downloads: it reads them all.
    assert server.get(f"/v1/download/{alices}/data.csv").content == b"3,4\n"
    assert server.get(f"/v1/download/{up['session_id']}/data.csv").content == b"1,2\n"


@pytest.mark.parametrize("form", [{"entity_id": "asst_1"}, {"read_only": "true"}])
def test_g1_agent_files_and_skill_bundles_are_shared(app: FastAPI, form: dict) -> None:
    server = g1_server(app)
    reply = server.post("/v1/upload", data=form, files={"file": ("kb.txt", b"kb")}, headers={"User-Id": ALICE})
    shared = reply.json()["session_id"]
    ref = {"id": "kb.txt", "name": "kb.txt", "session_id": shared}
    for user in (ALICE, BOB):
        body = run(server, "print(open('kb.txt').read())", files=[ref], user_id=user)
        assert body["session_id"] != shared and body["stdout"] == "kb\n"


def test_a_batch_keeps_two_files_of_one_name_and_refuses_one_path_twice(app: FastAPI, issuer: Issuer) -> None:
    alice = g2_user(app, issuer, ALICE)
    parts = [("file", ("a/README.md", b"A")), ("file", ("b/README.md", b"B"))]
    body = alice.post("/v1/upload/batch", data={"kind": "user", "id": ALICE}, files=parts).json()
    session = body["storage_session_id"]
    assert [f["filename"] for f in body["files"]] == ["a/README.md", "b/README.md"]
    contents = [alice.get(f"/v1/download/{session}/{f['fileId']}").content for f in body["files"]]
    assert contents == [b"A", b"B"]
    twice = alice.post("/v1/upload/batch", files=[("file", ("x.txt", b"1")), ("file", ("./x.txt", b"2"))])
    assert twice.status_code == 400


def test_read_only_inputs_are_never_outputs_and_deletions_are_named(app: FastAPI, issuer: Issuer) -> None:
    alice = g2_user(app, issuer, ALICE)
    form = {"kind": "skill", "id": "skill_1", "version": "1", "read_only": "true"}
    skill = alice.post("/v1/upload/batch", data=form, files={"file": ("skills/s/run.py", b"X = 1\n")}).json()
    session = skill["storage_session_id"]
    ref = {"id": skill["files"][0]["fileId"], "name": "skills/s/run.py", "storage_session_id": session,
           "kind": "skill", "resource_id": "skill_1", "version": 1}  # fmt: skip
    code = "open('skills/s/run.py', 'a').write('Y = 2\\n')\nopen('out.txt', 'w').write('o')"
    body = run(alice, code, files=[ref])
    assert [(f["name"], f.get("inherited")) for f in body["files"]] == [("out.txt", None), ("skills/s/run.py", True)]
    gone = run(alice, "import os; os.remove('out.txt')", session_id=body["session_id"])
    assert (gone["files"], gone["deleted_files"]) == ([], ["out.txt"])
    assert "deleted_files" not in run(alice, "print(1)")  # nothing removed, nothing said


@pytest.mark.parametrize(
    ("path", "output"),
    [
        ("report.csv", True), ("plots/a.png", True), (".env", True), ("Dockerfile", True), ("a/b/.gitignore", True),
        ("__pycache__/helper.cpython-311.pyc", False), ("model.pkl", True), ("Makefile", False), ("a.out", False),
        (".cache/x.json", False), ("notes", False), ("/".join("d" * 10) + "/deep.txt", False),
    ],
)  # fmt: skip
def test_what_counts_as_an_output(path: str, output: bool) -> None:
    assert is_output(path) is output


def test_a_hidden_directory_holding_an_input_is_not_hidden(client: TestClient) -> None:
    assert not is_output(".config/app.json")
    assert is_output(".config/app.json", inputs=frozenset({".config/settings.json"}))
    assert names(run(client, "import os; os.makedirs('.x'); open('.x/a.txt', 'w').write('a')")) == []
