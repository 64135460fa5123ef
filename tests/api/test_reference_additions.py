"""The reference server's small additions LibreChat may lean on (CONTRACT.md, G2): the
language names it takes, `artifact_truncation`, a client's `timeout`, and two inputs of
one name in one run."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.languages import ALIASES, LANGUAGES
from codeexec.settings import Settings

from ..conftest import API_KEY
from ..serving import Services

# One program per language that only that language runs, printing "ok".
OK = {
    "py": "print('ok')",
    "js": "console.log(typeof require === 'function' ? 'ok' : 'no node')",
    "ts": "const said: string = 'ok';\nconsole.log(said);",
    "bash": "echo ok",
    "c": '#include <stdio.h>\nint main(void) { puts("ok"); return 0; }',
    "cpp": '#include <iostream>\nint main() { std::cout << "ok" << std::endl; }',
    "java": 'public class Main { public static void main(String[] a) { System.out.println("ok"); } }',
    "php": '<?php echo "ok\\n";',
    "rs": 'fn main() { println!("ok"); }',
    "go": 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("ok") }\n',
    "d": 'import std.stdio;\nvoid main() { writeln("ok"); }',
    "f90": "program p\n  print '(a)', 'ok'\nend program p\n",
    "r": 'cat("ok\\n")',
}


def test_every_alias_names_a_language_of_the_contract() -> None:
    assert set(OK) == set(LANGUAGES)
    assert set(ALIASES.values()) <= set(LANGUAGES)
    assert not set(ALIASES) & set(LANGUAGES)
    for name in ("python", "python3", "javascript", "node", "nodejs", "node-js", "bun", "typescript", "sh", "shell",
                 "rust", "golang", "c++", "fortran"):  # fmt: skip
        assert name in ALIASES, name


@pytest.mark.parametrize(("alias", "lang"), sorted(ALIASES.items()))
def test_an_alias_runs_as_its_language_and_the_reply_names_it_as_sent(
    client: TestClient, alias: str, lang: str
) -> None:
    reply = client.post("/v1/exec", json={"lang": alias, "code": OK[lang]})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["stdout"], body["stderr"], body["language"]) == ("ok\n", "", alias)


def test_a_name_in_capitals_is_the_same_language(client: TestClient) -> None:
    body = client.post("/v1/exec", json={"lang": "Python", "code": OK["py"]}).json()
    assert (body["stdout"], body["language"]) == ("ok\n", "Python")


def test_an_unknown_language_is_a_400_naming_it(client: TestClient) -> None:
    reply = client.post("/v1/exec", json={"lang": "cobol", "code": "DISPLAY 'ok'."})
    assert reply.status_code == 400
    assert "'cobol'" in reply.json()["details"]


@pytest.fixture
def capped(settings: Settings, services: Services) -> TestClient:
    """Three files listed in a reply at most."""
    return TestClient(
        create_app(services(settings.model_copy(update={"max_files_per_run": 3}))), headers={"X-API-Key": API_KEY}
    )


def _truncation_adds_up(cut: dict) -> None:
    assert cut["code"] == "artifact_truncated"
    assert sum(cut["reasons"].values()) == cut["skipped_count"]
    assert len(cut["skipped"]) == min(20, cut["skipped_count"])


def test_outputs_past_the_cap_are_counted_named_and_deletions_still_said(capped: TestClient) -> None:
    uploaded = capped.post("/v1/upload", files={"file": ("old.csv", b"a,b\n")}).json()
    session = uploaded["session_id"]
    code = "import os\nos.remove('old.csv')\nfor i in range(30):\n    open(f'out{i:02}.txt', 'w').write(str(i))\n"
    files = [{"id": uploaded["files"][0]["fileId"], "session_id": session, "name": "old.csv"}]
    body = capped.post("/v1/exec", json={"lang": "py", "code": code, "files": files, "session_id": session}).json()
    listed = [f["name"] for f in body["files"]]
    assert listed == ["out00.txt", "out01.txt", "out02.txt"]
    cut = body["artifact_truncation"]
    _truncation_adds_up(cut)
    assert cut["reasons"] == {"max_files": 27} and cut["skipped_count"] == 27
    assert cut["skipped"] == [f"out{i:02}.txt" for i in range(3, 23)]  # the first 20 left out
    # Both listings are whole: a cut reply still says what the run removed.
    assert body["deleted_files"] == ["old.csv"]


def test_outputs_too_deep_or_too_long_are_counted_by_reason(client: TestClient) -> None:
    code = (
        "import os\n"
        "deep = '/'.join('d' * 11)\nos.makedirs(deep)\nopen(deep + '/deep.txt', 'w').write('x')\n"
        "long = 'l' * 200\nos.makedirs(long)\nopen(long + '/' + 'n' * 60 + '.txt', 'w').write('x')\n"
        "open('fine.txt', 'w').write('x')\nopen('scratch.bin', 'w').write('not an output kind')\n"
    )
    body = client.post("/v1/exec", json={"lang": "py", "code": code}).json()
    assert [f["name"] for f in body["files"]] == ["fine.txt"]
    cut = body["artifact_truncation"]
    _truncation_adds_up(cut)
    assert cut["reasons"] == {"depth": 1, "path": 1}  # an unrecognized kind is a filter, not a cut
    assert sorted(cut["skipped"]) == sorted(["/".join("d" * 11) + "/deep.txt", "l" * 200 + "/" + "n" * 60 + ".txt"])


def test_a_reply_with_everything_in_it_has_no_truncation(client: TestClient) -> None:
    body = client.post("/v1/exec", json={"lang": "py", "code": "open('a.txt', 'w').write('a')"}).json()
    assert [f["name"] for f in body["files"]] == ["a.txt"]
    assert "artifact_truncation" not in body


def test_a_programmatic_reply_carries_the_truncation_too(capped: TestClient) -> None:
    code = "for i in range(5):\n    open(f'p{i}.txt', 'w').write(str(i))\nprint('done')"
    body = capped.post("/v1/exec/programmatic", json={"code": code, "tools": []}).json()
    assert body["status"] == "completed", body
    assert body["artifact_truncation"]["reasons"] == {"max_files": 2}
    assert body["artifact_truncation"]["skipped"] == ["p3.txt", "p4.txt"]


def test_a_clients_timeout_in_milliseconds_is_honoured(client: TestClient) -> None:
    started = time.monotonic()
    body = client.post("/v1/exec", json={"lang": "py", "code": "import time\ntime.sleep(15)", "timeout": 1500}).json()
    took = time.monotonic() - started
    assert "1.5" in body["stderr"] and "time" in body["stderr"].lower(), body["stderr"]
    assert took < 10  # stopped at the client's 1.5 s, not the service's 20 s
    quick = client.post("/v1/exec", json={"lang": "py", "code": "print('in time')", "timeout": 5000}).json()
    assert quick["stdout"] == "in time\n"


def test_a_clients_timeout_never_goes_past_the_services(settings: Settings, services: Services) -> None:
    app = create_app(services(settings.model_copy(update={"run_timeout_seconds": 1.0})))
    short = TestClient(app, headers={"X-API-Key": API_KEY})
    started = time.monotonic()
    body = short.post("/v1/exec", json={"lang": "py", "code": "import time\ntime.sleep(15)", "timeout": 600_000}).json()
    assert time.monotonic() - started < 10
    assert "time" in body["stderr"].lower(), body["stderr"]


@pytest.mark.parametrize("timeout", [0, -5, "soon"])
def test_a_timeout_that_is_no_duration_is_a_400(client: TestClient, timeout: object) -> None:
    reply = client.post("/v1/exec", json={"lang": "py", "code": "print(1)", "timeout": timeout})
    assert reply.status_code == 400, reply.text


@pytest.mark.parametrize("generation", ["g1", "g2"])
def test_two_inputs_of_one_name_run_and_the_reply_says_which_it_has(client: TestClient, generation: str) -> None:
    """A conversation that uploaded data.csv twice (LibreChat #15443): each upload is a
    session of its own, and both refs come with the run."""
    first, second = (client.post("/v1/upload", files={"file": ("data.csv", body)}).json() for body in (b"1\n", b"2\n"))
    spelling = {"g1": {}, "g2": {"kind": "user"}}[generation]
    refs = [
        {"id": up["files"][0]["fileId"], "storage_session_id": up["session_id"], "name": "data.csv", **spelling}
        for up in (first, second)
    ]
    body = client.post("/v1/exec", json={"lang": "py", "code": "print(open('data.csv').read())", "files": refs}).json()
    # It lands in the first upload's session and has that upload's file, so no other
    # bytes are copied over a stored upload; the reply says which of the two it has.
    assert body["session_id"] == first["session_id"]
    assert body["stdout"] == "1\n\n"
    said = f"the run has one of them: file {refs[0]['id']} of session {first['session_id']}."
    assert f'2 inputs are named "data.csv"; {said}' in body["stderr"]
    for up, content in ((first, b"1\n"), (second, b"2\n")):  # both uploads as they were
        assert client.get(f"/v1/download/{up['session_id']}/{up['files'][0]['fileId']}").content == content


def test_the_last_of_two_inputs_of_one_name_when_none_lives_where_the_run_lands(client: TestClient) -> None:
    agent = {"kind": "agent", "id": "agent-1"}
    shared = [
        client.post("/v1/upload", files={"file": ("data.csv", body)}, data=agent).json() for body in (b"1\n", b"2\n")
    ]
    refs = [
        {"id": up["files"][0]["fileId"], "storage_session_id": up["session_id"], "name": "data.csv", "kind": "agent"}
        for up in shared
    ]
    body = client.post("/v1/exec", json={"lang": "py", "code": "print(open('data.csv').read())", "files": refs}).json()
    assert body["session_id"] not in {up["session_id"] for up in shared}  # never in an agent's upload
    assert body["stdout"] == "2\n\n"
    assert f"the run has one of them: file {refs[1]['id']} of session {shared[1]['session_id']}" in body["stderr"]


def test_one_ref_sent_twice_is_one_input_and_no_note(client: TestClient) -> None:
    up = client.post("/v1/upload", files={"file": ("data.csv", b"1\n")}).json()
    ref = {"id": up["files"][0]["fileId"], "session_id": up["session_id"], "name": "data.csv"}
    read = "print(open('data.csv').read())"
    body = client.post("/v1/exec", json={"lang": "py", "code": read, "files": [ref, ref]}).json()
    assert (body["stdout"], body["stderr"]) == ("1\n\n", "")
