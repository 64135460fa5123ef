"""The same API-level behaviour from every backend: `local` (bubblewrap on this host) and
`agentcore` (through the local fake of the AgentCore data plane)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.reaper import reap
from codeexec.settings import Settings

from .calls import file_id, names, run, upload
from .conftest import API_KEY
from .serving import Services

BINARY = bytes(range(256)) * 40 + b"\r\n\x00\xff"


@pytest.fixture(params=["local", "agentcore"])
def backend_settings(request: pytest.FixtureRequest) -> Settings:
    common = {"code_exec_api_key": SecretStr(API_KEY), "run_timeout_seconds": 20}
    if request.param == "local":
        return Settings(sandbox_root=request.getfixturevalue("sandbox_root"), **common)
    fake = request.getfixturevalue("agentcore_fake")
    return Settings(sandbox_backend="agentcore", agentcore_endpoint_url=fake.url, **common)


@pytest.fixture
def app(backend_settings: Settings, services: Services) -> FastAPI:
    return create_app(services(backend_settings))


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, headers={"X-API-Key": API_KEY}) as client:
        yield client


@pytest.mark.parametrize(
    ("lang", "code", "stdout"),
    [
        ("py", "import sys; print(6 * 7, sys.argv[1:])", "42 ['a b', 'c']\n"),
        ("js", "console.log(6 * 7, process.argv.slice(2))", "42 [ 'a b', 'c' ]\n"),
        ("ts", "const n: number = 6 * 7; console.log(n, process.argv.slice(2));", "42 [ 'a b', 'c' ]\n"),
        ("bash", 'echo "$((6 * 7))" "$1|$2"', "42 a b|c\n"),
    ],
)
def test_each_language_runs_with_its_args(client: TestClient, app: FastAPI, lang: str, code: str, stdout: str) -> None:
    if lang not in app.state.service.sandboxes.languages:
        pytest.skip(f"this host lacks the {lang} toolchain")
    body = run(client, code, lang=lang, args=["a b", "c"])
    assert (body["stdout"], body["stderr"]) == (stdout, "")


def test_a_failing_program_is_a_200_with_its_stderr(client: TestClient) -> None:
    body = run(client, "raise SystemExit('boom')")
    assert body["stdout"] == ""
    assert "boom" in body["stderr"]


def test_upload_list_exec_download_byte_for_byte(client: TestClient) -> None:
    up = upload(client, "blob.bin", BINARY)
    session = up["session_id"]
    blob = file_id(session, "blob.bin")
    assert up["files"] == [{"fileId": blob, "filename": "blob.bin"}]

    listing = client.get(f"/v1/files/{session}", params={"detail": "summary"}).json()
    assert [(f["name"], f["id"], f["path"], f["size"]) for f in listing] == [
        (f"{session}/{blob}", blob, "blob.bin", len(BINARY))
    ]
    modified = datetime.fromisoformat(listing[0]["lastModified"].replace("Z", "+00:00"))
    assert abs(modified.timestamp() - time.time()) < 3600  # the real modification time, not 1970

    code = (
        "import os\nos.makedirs('out', exist_ok=True)\n"
        "open('out/rev.zip', 'wb').write(open('blob.bin', 'rb').read()[::-1])"
    )
    files = {"id": blob, "session_id": session, "name": "blob.bin"}
    body = run(client, code, files=[files])
    assert body["session_id"] == session
    assert names(body) == ["out/rev.zip"], body  # not the source, not the unchanged input
    rev = body["files"][0]["id"]

    assert client.get(f"/v1/download/{session}/{blob}").content == BINARY
    assert client.get(f"/v1/download/{session}/{rev}").content == BINARY[::-1]
    simple = client.get(f"/v1/files/{session}").json()
    assert sorted(simple) == sorted([f"{session}/{blob}", f"{session}/{rev}"])


def test_delete_and_unknown_files(client: TestClient) -> None:
    session = upload(client, "a.txt", b"x")["session_id"]
    assert client.delete(f"/v1/files/{session}/{file_id(session, 'a.txt')}").status_code == 200
    assert client.get(f"/v1/download/{session}/a.txt").status_code == 404
    assert client.get(f"/v1/files/{session}").json() == []


def test_the_time_limit_stops_a_run_with_a_note(backend_settings: Settings, services: Services) -> None:
    app = create_app(services(backend_settings.model_copy(update={"run_timeout_seconds": 1})))
    body = run(TestClient(app, headers={"X-API-Key": API_KEY}), "sleep 30", lang="bash")
    assert "exceeded its 1 s time limit" in body["stderr"]


def test_the_reaper_ends_idle_sessions_only(client: TestClient, app: FastAPI) -> None:
    sandboxes = app.state.service.sandboxes
    session = upload(client, "a.txt", b"x")["session_id"]
    now = time.time()

    report = reap(sandboxes, idle_timeout=600, clock=lambda: now + 60)
    assert (report.ended, report.failed) == (0, 0)
    assert client.get(f"/v1/files/{session}").status_code == 200  # that call touched it again

    report = reap(sandboxes, idle_timeout=600, clock=lambda: time.time() + 601)
    assert (report.ended, report.failed) == (1, 0)
    assert client.get(f"/v1/files/{session}").status_code == 404
    assert list(sandboxes.leases()) == []


def test_the_object_route_answers_the_files_real_modification_time(client: TestClient) -> None:
    session = upload(client, "data.csv", b"a,b\n")["session_id"]
    listed = client.get(f"/v1/files/{session}", params={"detail": "summary"}).json()[0]
    info = client.get(f"/v1/sessions/{session}/objects/{file_id(session, 'data.csv')}").json()
    # LibreChat takes a file older than 23 hours for gone and uploads it again.
    assert info["lastModified"] == listed["lastModified"]
    modified = datetime.fromisoformat(info["lastModified"].replace("Z", "+00:00"))
    assert abs(modified.timestamp() - time.time()) < 3600
    assert (info["size"], info["contentType"]) == (4, "text/csv")


def test_two_concurrent_execs_in_one_session_each_report_their_own_file(client: TestClient) -> None:
    session = run(client, "echo ready", lang="bash")["session_id"]

    def write(name: str) -> dict:
        return run(client, f"sleep 0.5; echo {name} > {name}.txt", lang="bash", session_id=session)

    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(write, ["first", "second"]))
    assert [names(reply) for reply in replies] == [["first.txt"], ["second.txt"]]
    assert {reply["session_id"] for reply in replies} == {session}


def test_an_input_copied_during_a_run_is_not_that_runs_output(client: TestClient) -> None:
    """A second exec into a session copies an input in while the first one runs: the copy
    waits for the first run, so the first reply lists only what its own run wrote."""
    session = run(client, "echo ready", lang="bash")["session_id"]
    elsewhere = upload(client, "input.csv", b"1,2\n")["session_id"]
    ref = {"id": "input.csv", "name": "input.csv", "session_id": elsewhere}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(run, client, "import time; time.sleep(2)", session_id=session)
        time.sleep(0.7)
        second = pool.submit(run, client, "print(open('input.csv').read())", session_id=session, files=[ref])
        assert first.result()["files"] == []
        assert second.result()["stdout"] == "1,2\n\n"


# LibreChat tells the model its files are in /mnt/data, and its own read_file and
# write_file helpers use absolute paths: every language and bash must find them there.
MNT_DATA = [
    ("py", "open('/mnt/data/from_py.txt', 'w').write('py')", "from_py.txt"),
    ("js", "require('fs').writeFileSync('/mnt/data/from_js.txt', 'js')", "from_js.txt"),
    ("ts", "import * as fs from 'fs'; fs.writeFileSync('/mnt/data/from_ts.txt', 'ts');", "from_ts.txt"),
    ("bash", "echo -n bash > /mnt/data/from_bash.txt", "from_bash.txt"),
]


def test_every_language_reads_and_writes_mnt_data_by_absolute_path(client: TestClient, app: FastAPI) -> None:
    session = upload(client, "data.csv", b"a,b\n")["session_id"]
    for lang, code, name in MNT_DATA:
        if lang not in app.state.service.sandboxes.languages:
            continue
        body = run(client, code, lang=lang, session_id=session)
        assert names(body) == [name], (lang, body)
        assert body["files"][0]["id"] == file_id(session, name)  # ids and names as on every backend
        assert client.get(f"/v1/download/{session}/{body['files'][0]['id']}").text == name.split("_")[1][:-4]
    read = "print(open('/mnt/data/data.csv').read(), open('/mnt/data/from_bash.txt').read())"
    assert run(client, read, session_id=session)["stdout"] == "a,b\n bash\n"
    assert run(client, "cat /mnt/data/from_py.txt; pwd", lang="bash", session_id=session)["stdout"] == "py/mnt/data\n"


@pytest.mark.parametrize("lang", ["js", "ts"])
def test_javascript_runs_on_node(client: TestClient, app: FastAPI, lang: str) -> None:
    if lang not in app.state.service.sandboxes.languages:
        pytest.skip(f"this host lacks the {lang} toolchain")
    body = run(client, "console.log(typeof Deno, typeof require, typeof process.versions.node)", lang=lang)
    assert body["stdout"] == "undefined function string\n"


def test_bash_answers_stdout_and_stderr_apart_byte_for_byte(client: TestClient) -> None:
    code = "echo one; echo two >&2; printf 'crlf\\r\\nno newline'; printf '\\x01 tab\\t' >&2; exit 3"
    body = run(client, code, lang="bash")
    assert (body["stdout"], body["stderr"]) == ("one\ncrlf\r\nno newline", "two\n\x01 tab\t")


@pytest.mark.parametrize(
    ("lang", "code"),
    [
        ("py", "import time\nwhile True:\n    open('ticks.txt', 'a').write('.'); time.sleep(0.05)"),
        ("js", "const fs = require('fs'); for (;;) { fs.appendFileSync('ticks.txt', '.'); }"),
        ("bash", "while true; do printf . >> ticks.txt; sleep 0.05; done"),
    ],
)
def test_a_run_past_its_time_limit_is_stopped_not_abandoned(
    backend_settings: Settings, lang: str, code: str, services: Services
) -> None:
    app = create_app(services(backend_settings.model_copy(update={"run_timeout_seconds": 1})))
    client = TestClient(app, headers={"X-API-Key": API_KEY})
    body = run(client, code, lang=lang)
    assert "exceeded its 1 s time limit" in body["stderr"]
    assert "may still be running" not in body["stderr"]
    session = body["session_id"]

    def ticks() -> int:
        return len(client.get(f"/v1/download/{session}/ticks.txt").content)

    counted = ticks()
    time.sleep(1)
    assert ticks() == counted > 0  # nothing writes any more


def test_a_run_whose_stdout_was_cut_says_ol(backend_settings: Settings, services: Services) -> None:
    """LibreChat's own file tools read images over /exec in windows and read `status: "OL"`
    as "the window overflowed": without it, a cut window is base64 that does not parse."""
    app = create_app(services(backend_settings.model_copy(update={"max_output_bytes": 1000})))
    client = TestClient(app, headers={"X-API-Key": API_KEY})
    cut = run(client, "print('x' * 5000)")
    assert (cut["status"], len(cut["stdout"])) == ("OL", 1000)
    assert "stdout exceeded 1000 bytes" in cut["stderr"]
    whole = run(client, "import sys; print('y' * 900); sys.stderr.write('z' * 5000)")
    assert "status" not in whole and whole["stdout"] == "y" * 900 + "\n"  # a cut stderr is no overflow of stdout
