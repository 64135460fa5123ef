"""The four routes through the app, emulating LibreChat's own file calls (G1)."""

from __future__ import annotations

import asyncio
import json

from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..calls import file_id, run, upload
from ..conftest import API_KEY
from ..helpers.processes import modules_imported
from ..serving import Services


def test_health_needs_no_key(memory_settings: Settings, services: Services) -> None:
    reply = TestClient(create_app(services(memory_settings))).get("/health")  # no root: the memory backend
    assert reply.status_code == 200
    assert {"py", "bash"} <= set(reply.json()["languages"])


def test_exec_prints_and_reports_written_files(client: TestClient) -> None:
    body = run(client, "print('token-42')\nopen('out.txt', 'w').write('hi')")
    assert body["stdout"] == "token-42\n"
    assert body["stderr"] == ""
    session = body["session_id"]
    assert len(session) == 21
    out = file_id(session, "out.txt")
    assert body["files"] == [{"id": out, "name": "out.txt", "session_id": session, "storage_session_id": session}]
    assert client.get(f"/v1/download/{session}/{out}").content == b"hi"
    assert client.get(f"/v1/download/{session}/out.txt").content == b"hi"  # a raw path, as older clients stored


def test_js_and_bash_run(client: TestClient) -> None:
    assert run(client, "console.log(6 * 7)", lang="js")["stdout"] == "42\n"
    assert run(client, 'echo "$1-$2"', lang="bash", args=["a", "b"])["stdout"] == "a-b\n"


def test_args_may_be_one_string(client: TestClient) -> None:
    assert run(client, "import sys; print(sys.argv[1:])", args="--flag")["stdout"] == "['--flag']\n"


def test_failed_program_is_a_200_with_stderr(client: TestClient) -> None:
    body = run(client, "raise SystemExit('boom')")
    assert body["stdout"] == ""
    assert "boom" in body["stderr"]


def test_program_runs_in_mnt_data_and_source_is_not_an_output(client: TestClient) -> None:
    body = run(client, "import os; print(os.getcwd()); print(sorted(os.listdir('.')))")
    assert body["stdout"] == "/mnt/data\n[]\n"
    assert body["files"] == []


def test_unknown_language_is_a_400(client: TestClient) -> None:
    reply = client.post("/v1/exec", json={"lang": "cobol", "code": "x"})
    assert reply.status_code == 400
    assert "cobol" in reply.json()["details"]


def test_malformed_exec_is_a_400_without_echoing_the_body(client: TestClient) -> None:
    reply = client.post("/v1/exec", json={"code": "secret-code-text"})
    assert reply.status_code == 400
    assert reply.json()["error"] == "Bad request"
    assert "secret-code-text" not in reply.text


def test_librechat_upload_list_exec_download(client: TestClient) -> None:
    up = upload(client, "data.csv", b"a,b\n1,2\n3,4\n")
    assert up["message"] == "success"
    session, data_id = up["session_id"], up["files"][0]["fileId"]
    assert up["files"] == [{"fileId": file_id(session, "data.csv"), "filename": "data.csv"}]

    listing = client.get(f"/v1/files/{session}", params={"detail": "summary"}).json()
    assert isinstance(listing, list)
    assert listing[0]["name"].startswith(f"{session}/{data_id}")
    assert listing[0]["lastModified"].endswith("Z") and listing[0]["size"] == 12

    code = "print(open('data.csv').read().count('\\n'))"
    for spelling in ("session_id", "storage_session_id"):
        ref = {"id": data_id, "name": "data.csv", spelling: session}
        body = run(client, code, files=[ref])
        assert body["stdout"] == "3\n", spelling
        assert body["stderr"] == ""
        assert body["files"] == []  # an unchanged input is not an output

    download = client.get(f"/v1/download/{session}/{data_id}", params={"entity_id": "asst_1"})
    assert download.status_code == 200
    assert download.content == b"a,b\n1,2\n3,4\n"
    assert download.headers["content-type"].startswith("text/csv")
    assert download.headers["content-length"] == "12"
    assert download.headers["content-disposition"] == 'attachment; filename="data.csv"'


def test_inputs_are_copied_into_the_run_session(client: TestClient) -> None:
    first = upload(client, "a.txt", b"from-a")
    other = run(client, "print('new session')")
    body = run(
        client,
        "print(open('a.txt').read())",
        session_id=other["session_id"],
        files=[{"id": "a.txt", "name": "a.txt", "session_id": first["session_id"]}],
    )
    assert body["session_id"] == other["session_id"]
    assert body["stdout"] == "from-a\n"


def test_missing_input_is_named_and_the_run_still_happens(client: TestClient) -> None:
    ref = {"id": "gone.csv", "name": "gone.csv", "session_id": "AAAAAAAAAAAAAAAAAAAAA"}
    body = run(client, "print('ran')", files=[ref])
    assert body["stdout"] == "ran\n"
    assert 'File "gone.csv" is not available' in body["stderr"]


def test_listing_details(client: TestClient) -> None:
    body = run(client, "import os; os.mkdir('plots'); open('plots/a.png','wb').write(b'x')")
    session = body["session_id"]
    png = file_id(session, "plots/a.png")
    assert (body["files"][0]["id"], body["files"][0]["name"]) == (png, "plots/a.png")
    assert client.get(f"/v1/files/{session}").json() == [f"{session}/{png}"]
    full = client.get(f"/v1/files/{session}", params={"detail": "full"}).json()
    assert (full[0]["path"], full[0]["contentType"]) == ("plots/a.png", "image/png")
    assert full[0]["metadata"] == {"content-type": "image/png", "original-filename": "plots/a.png"}
    assert client.get(f"/v1/download/{session}/{png}").content == b"x"


def test_delete_one_file(client: TestClient) -> None:
    session = upload(client, "x.txt", b"x")["session_id"]
    assert client.delete(f"/v1/files/{session}/{file_id(session, 'x.txt')}").status_code == 200
    assert client.get(f"/v1/download/{session}/x.txt").status_code == 404
    assert client.delete(f"/v1/files/{session}/x.txt").status_code == 404


def test_upload_into_a_named_session(client: TestClient) -> None:
    session = upload(client, "one.txt", b"1")["session_id"]
    assert upload(client, "two.txt", b"2", session_id=session)["session_id"] == session
    listing = client.get(f"/v1/files/{session}", params={"detail": "summary"}).json()
    assert [f["path"] for f in listing] == ["one.txt", "two.txt"]


def test_upload_keeps_a_relative_path_and_refuses_one_that_escapes(client: TestClient) -> None:
    up = upload(client, "skills/pdf/SKILL.md", b"# pdf")
    skill_md = file_id(up["session_id"], "skills/pdf/SKILL.md")
    assert up["files"] == [{"fileId": skill_md, "filename": "skills/pdf/SKILL.md"}]
    for name in ("../../etc/evil.txt", "a/../../evil.txt", ".codeexec/hold"):
        reply = client.post("/v1/upload", files={"file": (name, b"x")})
        assert reply.status_code == 400, name
        assert reply.json()["error"] == "Bad request"


def test_upload_too_large_is_a_413_and_leaves_nothing(client: TestClient, settings) -> None:
    big = b"x" * (settings.max_upload_bytes + 1)
    session = upload(client, "keep.txt", b"k")["session_id"]
    reply = client.post("/v1/upload", files={"file": ("big.bin", big)}, params={"session_id": session})
    assert reply.status_code == 413
    assert reply.json()["error"] == "Payload too large"
    assert client.get(f"/v1/files/{session}").json() == [f"{session}/{file_id(session, 'keep.txt')}"]


def test_unknown_session_is_a_404_everywhere(client: TestClient) -> None:
    unknown = "AAAAAAAAAAAAAAAAAAAAA"
    for reply in (
        client.get(f"/v1/files/{unknown}", params={"detail": "summary"}),
        client.get(f"/v1/download/{unknown}/x.txt"),
        client.delete(f"/v1/files/{unknown}/x.txt"),
        client.post("/v1/upload", files={"file": ("a", b"a")}, params={"session_id": unknown}),
    ):
        assert reply.status_code == 404, reply.url
        assert reply.json()["error"] in ("Session not found", "File not found")


def test_malformed_session_id_never_reaches_the_filesystem(client: TestClient) -> None:
    for bad in ("..", "short", "A" * 22, "AAAAAAAAAAAAAAAAAAA%2E%2E"):
        reply = client.get(f"/v1/files/{bad}")
        assert reply.status_code == 404, bad


def test_download_ids_that_escape_are_refused(client: TestClient) -> None:
    session = run(client, "import os; os.symlink('/etc/passwd', 'link')")["session_id"]
    for bad in ("link", "..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", "a%00b"):
        reply = client.get(f"/v1/download/{session}/{bad}")
        assert reply.status_code in (400, 404), bad
        assert b"root:" not in reply.content


def test_auth_fails_closed(settings, sandbox_root, services: Services) -> None:
    open_app = create_app(services(settings.model_copy(update={"code_exec_api_key": None})))
    reply = TestClient(open_app).post("/v1/exec", json={"lang": "py", "code": "print(1)"}, headers={"X-API-Key": ""})
    assert reply.status_code == 401
    assert TestClient(open_app).get("/health").status_code == 200


def test_missing_or_wrong_key_is_a_401(app) -> None:
    anonymous = TestClient(app)
    assert anonymous.post("/v1/exec", json={"lang": "py", "code": "1"}).status_code == 401
    wrong = anonymous.get("/v1/files/AAAAAAAAAAAAAAAAAAAAA", headers={"X-API-Key": API_KEY + "x"})
    assert wrong.status_code == 401
    assert wrong.json()["error"] == "Unauthorized"


def test_another_orgs_session_is_a_404(settings, sandbox_root, client: TestClient, services: Services) -> None:
    session = upload(client, "mine.txt", b"secret")["session_id"]
    other = TestClient(
        create_app(services(settings.model_copy(update={"code_exec_org": "other-org"}))), headers={"X-API-Key": API_KEY}
    )
    assert other.get(f"/v1/files/{session}").status_code == 404
    assert other.get(f"/v1/download/{session}/mine.txt").status_code == 404
    body = other.post("/v1/exec", json={"lang": "py", "code": "print(1)", "session_id": session}).json()
    assert body["session_id"] != session
    ref = {"id": "mine.txt", "session_id": session}
    body = other.post("/v1/exec", json={"lang": "py", "code": "print(1)", "files": [ref]}).json()
    assert "is not available" in body["stderr"]


def test_chunked_upload_without_a_length_stops_at_the_limit(app, settings) -> None:
    # Straight through ASGI: the test client would buffer the whole body before the app
    # saw it, hiding how much the service actually reads.
    chunk = b"x" * (1 << 16)
    head = b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n'
    handed_out = 0
    replies: list[dict] = []

    async def receive() -> dict:
        nonlocal handed_out
        handed_out += 1
        body = head if handed_out == 1 else chunk
        return {"type": "http.request", "body": body, "more_body": handed_out < 1000}  # 64 MB in all

    async def send(message: dict) -> None:
        replies.append(message)

    headers = [(b"content-type", b"multipart/form-data; boundary=XyZ"), (b"x-api-key", API_KEY.encode())]
    scope = {"type": "http", "method": "POST", "path": "/v1/upload", "headers": headers, "query_string": b"",
             "http_version": "1.1", "scheme": "http", "server": ("test", 80), "client": ("test", 1), "root_path": ""}
    asyncio.run(app(scope, receive, send))
    assert replies[0]["status"] == 413
    assert json.loads(replies[1]["body"])["error"] == "Payload too large"
    assert handed_out * len(chunk) < 2 * settings.max_upload_bytes  # it stopped reading at the limit


def test_each_route_holds_a_body_to_its_own_limit(client: TestClient, settings: Settings) -> None:
    # Issue 44, item 4: each route declares its limit (api/body_limits.py): an upload is held
    # to the file's (MAX_UPLOAD_BYTES), a program to the request's (MAX_REQUEST_BYTES).
    assert settings.max_upload_bytes < 6_000_000 < settings.max_request_bytes
    program = b'{"lang": "py", "code": "print(42)"}' + b" " * 6_000_000
    reply = client.post("/v1/exec", content=program, headers={"Content-Type": "application/json"})
    assert (reply.status_code, reply.json()["stdout"]) == (200, "42\n")
    for path in ("/v1/upload", "/v1/upload/batch"):
        refused = client.post(path, content=program, headers={"Content-Type": "multipart/form-data; boundary=x"})
        assert refused.status_code == 413 and "byte limit" in refused.json()["details"], path


def test_the_domain_reads_no_request_shape() -> None:
    """Issue 44, item 4: the API turns a request into the domain's own command
    (api/commands.py); sessions and programmatic workflows import neither the wire nor the API."""
    domain = "codeexec.sessions, codeexec.programmatic"
    assert modules_imported(domain, ("fastapi", "codeexec.api", "codeexec.wire")) == []
