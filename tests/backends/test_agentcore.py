"""The agentcore backend against botocore's Stubber, which checks every request (and every
stubbed reply) against the real service model, then against the local fake."""

from __future__ import annotations

import base64
import io
import json
import logging
import random
import re
import shlex
import string
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.eventstream import EventStream
from botocore.parsers import EventStreamJSONParser
from botocore.stub import ANY, Stubber
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.errors import BackendUnavailable, BadRequest, FileNotFound, SessionNotFound, TooLarge
from codeexec.reaper import is_due
from codeexec.sandbox.agentcore import AgentCoreConfig, AgentCoreSandboxes, sandboxes
from codeexec.sandbox.agentcore.session_ids import from_wire, to_wire
from codeexec.sandbox.port import Access, FileInfo, Intent, Limit, LimitHit, Owner, Placement, Program, Run
from codeexec.settings import Settings

from ..conftest import API_KEY
from ..fakes import eventstream
from ..fakes.agentcore import RunningFake
from ..serving import Services

CI = "aws.codeinterpreter.v1"
SID = "01JABCDEFGHJKMNPQRSTVWXYZ0"  # AgentCore's own id
WIRE = "BkpbGufCMp0ra-M63zvvg"  # the same session on the wire
OTHER = "01JZZZZZZZZZZZZZZZZZZZZZZZ"
CREATED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
ACME_OWNER = Owner("acme")
# "codeexec-<ttl>-<u|s>-<org digest>-<user digest>": a user's session of org "acme", 8 hours
ACME = f"codeexec-28800-u-{ACME_OWNER.tag().org}-{ACME_OWNER.tag().user}"


def acme(lease: object) -> bool:
    return getattr(lease, "owner", None) == ACME_OWNER.tag()


class _Raw:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self) -> Iterator[bytes]:
        yield self._data

    def close(self) -> None:
        pass


@pytest.fixture
def backend(aws_env: None) -> AgentCoreSandboxes:
    config = AgentCoreConfig(
        interpreter_id=CI, endpoint_url=None, lease_ttl_seconds=86400, run_timeout_seconds=30, max_output_bytes=64
    )
    return AgentCoreSandboxes(config)


@pytest.fixture
def stub(backend: AgentCoreSandboxes) -> Iterator[Stubber]:
    client = backend.api.client
    # Stubber hands an event stream back as the one event dict it validated; make it the
    # real thing, framed and parsed by botocore as a reply off the wire would be.
    shape = client.meta.service_model.operation_model("InvokeCodeInterpreter").output_shape.members["stream"]

    def to_stream(parsed: dict[str, Any], **_: Any) -> None:
        ((kind, content),) = parsed["stream"].items()
        raw = eventstream.event(kind, content) if kind == "result" else eventstream.exception(kind, content)
        parsed["stream"] = EventStream(_Raw(raw), shape, EventStreamJSONParser(), "InvokeCodeInterpreter")

    client.meta.events.register("after-call.bedrock-agentcore.InvokeCodeInterpreter", to_stream)
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def expect_get(stub: Stubber, name: str = ACME, status: str = "READY", session_id: str = SID) -> None:
    reply = {"codeInterpreterIdentifier": CI, "sessionId": session_id, "name": name, "createdAt": CREATED}
    stub.add_response(
        "get_code_interpreter_session",
        reply | {"status": status, "sessionTimeoutSeconds": 28800},
        {"codeInterpreterIdentifier": CI, "sessionId": session_id},
    )


def expect_invoke(
    stub: Stubber, tool: str, arguments: dict[str, Any], result: dict[str, Any] | None = None, session_id: str = SID
) -> None:
    stream = {"result": {"content": [], **(result or {})}}
    stub.add_response(
        "invoke_code_interpreter",
        {"sessionId": session_id, "stream": stream},
        {"codeInterpreterIdentifier": CI, "sessionId": session_id, "name": tool, "arguments": arguments},
    )


def ran(stdout: str = "", stderr: str = "", exit_code: int = 0) -> dict[str, Any]:
    return {"structuredContent": {"stdout": stdout, "stderr": stderr, "exitCode": exit_code}, "isError": exit_code != 0}


def vm_answer(answer: dict[str, Any], before: str = "bash: no job control\r\n") -> dict[str, Any]:
    """What executeCommand answers for a vm.py step: output, then the answer after the mark,
    broken into CRLF lines as a terminal does."""
    encoded = base64.b64encode(json.dumps(answer).encode()).decode()
    return ran(f"{before}{sandboxes._VM_MARK}{encoded[:9]}\r\n{encoded[9:]}")


class Step:
    """The command of a vm.py step, as the stubber expects it; its arguments read back."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.args: dict[str, Any] = {}

    def __eq__(self, command: object) -> bool:
        assert isinstance(command, str)
        head, _, rest = command.rpartition("\nCODEEXEC_ARGS")
        script, _, arguments = head.rpartition("\n")
        if rest or not script == f"python3 -c {shlex.quote(sandboxes._VM)} {self.name} <<'CODEEXEC_ARGS'":
            return False
        self.args = json.loads(arguments)
        return True

    __hash__ = None  # type: ignore[assignment]


class Captured:
    """Any value, kept for the test to look at."""

    value: Any = None

    def __eq__(self, other: object) -> bool:
        self.value = other
        return True

    __hash__ = None  # type: ignore[assignment]


def expect_step(stub: Stubber, name: str, answer: dict[str, Any]) -> Step:
    step = Step(name)
    expect_invoke(stub, "executeCommand", {"command": step}, vm_answer(answer))
    return step


CHANGE = Access(ACME_OWNER.tag(), Intent.CHANGE)
READ = Access(ACME_OWNER.tag(), Intent.READ)
NOTHING_CHANGED = {"changes": {"created": [], "modified": [], "deleted": []}, "placed": {}}


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    """The run's token, made predictable."""
    monkeypatch.setattr(sandboxes.secrets, "token_hex", lambda n: "feedface")
    return "feedface"


def test_an_upload_into_a_new_session_names_its_owner_and_caps_the_lease_at_eight_hours(
    backend: AgentCoreSandboxes, stub: Stubber
) -> None:
    stub.add_response(
        "start_code_interpreter_session",
        {"codeInterpreterIdentifier": CI, "sessionId": SID, "createdAt": CREATED},
        {"codeInterpreterIdentifier": CI, "name": ACME, "sessionTimeoutSeconds": 28800},
    )
    staged = Captured()
    expect_invoke(stub, "writeFiles", {"content": staged})
    commit = expect_step(stub, "commit", {"ok": True})
    assert backend.write_files(Placement(CHANGE), [("a.bin", io.BytesIO(b"\x00\xff"))], 10) == WIRE
    [(name, path)] = commit.args["staged"]
    # Staged under .codeexec/ first, then moved in all together: the set-up rides with it.
    assert staged.value == [{"path": name, "blob": b"\x00\xff"}] and name.startswith(".codeexec/")
    assert (path, commit.args["fresh"], commit.args["session"]) == ("a.bin", True, WIRE)


def test_an_upload_over_its_limit_or_reserved_never_reaches_a_session(
    backend: AgentCoreSandboxes, stub: Stubber
) -> None:
    with pytest.raises(TooLarge):
        backend.write_files(Placement(CHANGE), [("a.bin", io.BytesIO(b"x" * 11))], 10)
    with pytest.raises(BadRequest, match="reserved"):
        backend.write_files(Placement(CHANGE), [("log/a.txt", io.BytesIO(b"x"))], 10)


def test_open_refuses_other_owners_ended_and_unknown_sessions(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    bob = Owner("bob").tag()
    expect_get(stub, name=f"codeexec-28800-u-{bob.org}-{bob.user}")
    expect_get(stub, status="TERMINATED")
    expect_get(stub, name="someone-elses-session")
    expect_get(stub, name="codeexec-28800-mfrw2zi")  # an older release's name
    stub.add_client_error("get_code_interpreter_session", "ResourceNotFoundException", http_status_code=404)
    for _ in range(5):
        with pytest.raises(SessionNotFound):
            backend.list_files(WIRE, READ)
    for malformed in (SID, "has-dashes_and_is_not_a_wire_id", "Uakgb_J5m9g-0JDMbcJq"):
        with pytest.raises(SessionNotFound):
            backend.list_files(malformed, READ)  # refused before any call: the stubber holds no reply for it


def test_a_session_whose_id_is_not_a_ulid_is_stopped_and_refused(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    odd = "2ZZZZZZZZZZZZZZZZZZZZZZZZZ"  # 128 bits with the top ones set: no ULID of before 4199
    stub.add_response(
        "start_code_interpreter_session", {"codeInterpreterIdentifier": CI, "sessionId": odd, "createdAt": CREATED}
    )
    stub.add_response(
        "stop_code_interpreter_session",
        {"codeInterpreterIdentifier": CI, "sessionId": odd, "lastUpdatedAt": CREATED},
        {"codeInterpreterIdentifier": CI, "sessionId": odd},
    )
    with pytest.raises(BackendUnavailable, match="not a ULID"):
        backend.write_files(Placement(CHANGE), [("a.txt", io.BytesIO(b"x"))], 10)


def test_a_read_finds_the_file_in_one_step_then_reads_it(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    expect_get(stub)
    blob = bytes(range(256))
    stat = expect_step(stub, "stat", {"file": ["a.bin", 256, 1_767_322_800_250_000_000]})
    expect_invoke(
        stub,
        "readFiles",
        {"paths": ["a.bin"]},
        {"content": [{"type": "resource", "resource": {"type": "blob", "uri": "file:///w/a.bin", "blob": blob}}]},
    )
    opened = backend.read_file(WIRE, READ, "a.bin")
    assert opened.reader is not None and opened.reader.read() == blob
    assert (opened.info.size, opened.info.mtime_ns) == (256, 1_767_322_800_250_000_000)  # the real time
    assert stat.args == {"file_id": "a.bin", "session": WIRE}


def test_a_file_the_vm_does_not_find_is_not_found(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    expect_get(stub)
    expect_step(stub, "stat", {"missing": True})
    with pytest.raises(FileNotFound):
        backend.read_file(WIRE, READ, "gone.csv")


def test_listing_is_one_step(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    expect_get(stub)
    files = [["data.csv", 5, 1_767_322_800_500_000_000], ["plots/a b.png", 12, 1_767_322_801_000_000_000]]
    expect_step(stub, "list", {"files": files})
    found = backend.list_files(WIRE, READ)
    assert [(f.path, f.size, f.mtime_ns) for f in found] == [tuple(f) for f in files]


def run_of(program: Program, session: str = WIRE) -> Run:
    return Run(program, Placement(Access(ACME_OWNER.tag(), Intent.LAND), (session,), new=False))


def boot_of(code: str) -> str:
    """The step a native run's first line runs, decoded."""
    first = code.split("\n", 1)[0]
    encoded = re.search(r"[A-Za-z0-9+/=]{40,}", first)
    assert encoded is not None
    return base64.b64decode(encoded[0]).decode()


def test_python_runs_natively_its_first_line_the_step_before(
    backend: AgentCoreSandboxes, stub: Stubber, token: str
) -> None:
    expect_get(stub)
    code = Captured()
    expect_invoke(stub, "executeCode", {"language": "python", "code": code, "clearContext": True}, ran("1\n"))
    post = expect_step(stub, "post", NOTHING_CHANGED | {"changes": {"created": [["out.txt", 2, 7]], "modified": [],
                                                                   "deleted": ["old.txt"]}})
    ran_ = backend.execute(run_of(Program("py", "print(1)", ("--n", "it's"), 30)))
    assert (ran_.result.stdout, ran_.result.exit_code, ran_.result.hits) == ("1\n", 0, ())
    assert (ran_.changes.created, ran_.changes.deleted) == ((FileInfo("out.txt", 2, 7),), ("old.txt",))
    # One line before the program, so a traceback's line numbers move by one only.
    assert code.value.split("\n", 1)[1] == "print(1)"
    boot = boot_of(code.value)
    assert "'pre'" in boot and '["--n", "it\'s"]' in boot and "feedface" in boot
    assert post.args == {"token": token, "pid_file": f".codeexec/run-{token}.pid", "session": WIRE}


def test_a_run_the_session_is_too_busy_for_is_a_503_to_retry(
    backend: AgentCoreSandboxes, stub: Stubber, token: str
) -> None:
    expect_get(stub)
    expect_invoke(stub, "executeCode", {"language": "python", "code": ANY, "clearContext": True}, ran(exit_code=1))
    expect_step(stub, "post", {"refused": "busy"})
    with pytest.raises(BackendUnavailable, match="busy") as raised:
        backend.execute(run_of(Program("py", "print(1)")))
    assert raised.value.retry_after == 2


def test_bash_runs_whole_in_one_step_and_answers_apart(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    expect_get(stub)
    out, err = base64.b64encode(b"a b\n").decode(), base64.b64encode(b"warned\r\n").decode()
    result = {"stdout": out, "stderr": err, "exit_code": 0}
    step = expect_step(stub, "run", NOTHING_CHANGED | {"result": result})
    expect_get(stub)
    expect_step(stub, "run", NOTHING_CHANGED | {"result": {"stdout": "", "stderr": "", "exit_code": None}})
    ran_ = backend.execute(run_of(Program("bash", 'echo "$1"', ("a b",), 7)))
    assert (ran_.result.stdout, ran_.result.stderr, ran_.result.exit_code, ran_.result.hits) == (
        "a b\n", "warned\r\n", 0, ()
    )
    assert (step.args["code"], step.args["args"], step.args["timeout"], step.args["max_output"]) == (
        'echo "$1"', ["a b"], 7, 64
    )
    ran_ = backend.execute(run_of(Program("bash", "sleep 9", (), 7)))
    assert ran_.result.exit_code is None
    assert ran_.result.hits == (LimitHit(Limit.TIME, 7),)


def test_javascript_runs_on_node_and_its_output_is_capped(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    expect_get(stub)
    arguments = {"language": "javascript", "code": ANY, "clearContext": True, "runtime": "nodejs"}
    expect_invoke(stub, "executeCode", arguments, ran("y" * 100))
    expect_step(stub, "post", NOTHING_CHANGED)
    ran_ = backend.execute(run_of(Program("js", "x", (), 30)))
    assert ran_.result.stdout == "y" * 64
    assert ran_.result.hits == (LimitHit(Limit.OUTPUT, 64, stopped=False, stream="stdout"),)


@pytest.mark.parametrize(
    ("code", "retry_after"),
    [("ThrottlingException", 2), ("ServiceQuotaExceededException", 30), ("InternalServerException", None)],
)
def test_aws_errors_become_unavailable_with_a_hint_and_are_logged_without_payload(
    backend: AgentCoreSandboxes, stub: Stubber, caplog: pytest.LogCaptureFixture, code: str, retry_after: int | None
) -> None:
    stub.add_client_error("start_code_interpreter_session", code, "secret-looking message", http_status_code=429)
    with pytest.raises(BackendUnavailable) as raised, caplog.at_level(logging.WARNING):
        backend.execute(Run(Program("py", "1"), Placement(Access(ACME_OWNER.tag(), Intent.LAND))))
    assert raised.value.retry_after == retry_after
    assert code in caplog.text
    assert "secret-looking" not in caplog.text


def test_an_error_event_inside_the_stream_is_an_error_of_the_call(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    expect_get(stub)
    stub.add_response(
        "invoke_code_interpreter",
        {"sessionId": SID, "stream": {"throttlingException": {"message": "slow down"}}},
        {"codeInterpreterIdentifier": CI, "sessionId": SID, "name": "executeCommand", "arguments": {"command": ANY}},
    )
    with pytest.raises(BackendUnavailable) as raised:
        backend.list_files(WIRE, READ)
    assert raised.value.retry_after == 2


def test_leases_come_from_the_listing_and_the_touched_clock(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    item = {"codeInterpreterIdentifier": CI, "status": "READY", "createdAt": CREATED}
    stub.add_response(
        "list_code_interpreter_sessions",
        {"items": [item | {"sessionId": SID, "name": ACME}], "nextToken": "p2"},
        {"codeInterpreterIdentifier": CI, "status": "READY", "maxResults": 100},
    )
    stub.add_response(
        "list_code_interpreter_sessions",
        {"items": [item | {"sessionId": OTHER, "name": "not-ours"}]},
        {"codeInterpreterIdentifier": CI, "status": "READY", "maxResults": 100, "nextToken": "p2"},
    )
    stat = {"command": "stat -c %Y .codeexec/touched 2>/dev/null"}
    expect_invoke(stub, "executeCommand", stat, ran("1767323045\r\n"))
    (lease,) = backend.leases()
    assert (lease.session_id, lease.owner, lease.shared, lease.ttl_seconds) == (WIRE, ACME_OWNER.tag(), False, 28800)
    assert lease.leased_at == CREATED.timestamp()
    assert lease.touched_at == 1767323045


def test_end_if_rereads_the_lease_and_stops_only_when_still_due(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    touched = CREATED.timestamp() + 100
    for _ in range(2):
        expect_get(stub)
        stat = {"command": "stat -c %Y .codeexec/touched 2>/dev/null"}
        expect_invoke(stub, "executeCommand", stat, ran(f"{touched:.0f}\n"))
    stub.add_response(
        "stop_code_interpreter_session",
        {"codeInterpreterIdentifier": CI, "sessionId": SID, "lastUpdatedAt": CREATED},
        {"codeInterpreterIdentifier": CI, "sessionId": SID},
    )
    assert not backend.end_if(WIRE, lambda lease: is_due(lease, touched + 3599, 3600))
    assert backend.end_if(WIRE, lambda lease: is_due(lease, touched + 3600, 3600))


def test_ulids_and_wire_ids_map_one_to_one() -> None:
    recorded = "01K1PPWYE373Z99SS2A8ABW0TX"  # a session id from recorded AgentCore output
    wire = to_wire(recorded)
    assert wire is not None and re.fullmatch(r"[A-Za-z0-9_-]{21}", wire)
    assert from_wire(wire) == recorded
    # The ends of the range: every ULID whose top two bits are zero (until the year 4199).
    assert (to_wire("0" * 26), to_wire("1" + "Z" * 25)) == ("A" * 21, "_" * 21)
    for _ in range(200):  # and every wire id names one of them
        some = "".join(random.choice(string.ascii_letters + string.digits + "_-") for _ in range(21))
        agentcore = from_wire(some)
        assert agentcore is not None and agentcore[0] in "01" and to_wire(agentcore) == some


@pytest.mark.parametrize(
    "unmappable",
    [
        "2ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # 128 bits: a timestamp past 4199
        "01k1ppwye373z99ss2a8abw0tx",  # lower case: not the spelling AgentCore answered
        "01K1PPWYE373Z99SS2A8ABW0TI",  # I is not Crockford's
        "abc123",  # another id scheme
        "01K1PPWYE373Z99SS2A8ABW0TXX",
    ],
)
def test_other_ids_have_no_wire_id(unmappable: str) -> None:
    assert to_wire(unmappable) is None


# -- through the app, against the fake --------------------------------------------------


@pytest.fixture
def fake_client(agentcore_fake: RunningFake, services: Services) -> TestClient:
    settings = Settings(
        sandbox_backend="agentcore",
        agentcore_endpoint_url=agentcore_fake.url,
        code_exec_api_key=SecretStr(API_KEY),
    )
    return TestClient(create_app(services(settings)), headers={"X-API-Key": API_KEY})


def run(client: TestClient, code: str, lang: str = "py") -> dict:
    reply = client.post("/v1/exec", json={"lang": lang, "code": code})
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def upload(client: TestClient, name: str, data: bytes) -> str:
    reply = client.post("/v1/upload", files={"file": (name, data)})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["session_id"])


def test_throttling_is_a_503_with_retry_after(
    fake_client: TestClient, agentcore_fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = upload(fake_client, "a.txt", b"x")
    agentcore_fake.fake.faults.append(("ThrottlingException", True))  # inside the stream: never retried
    reply = fake_client.get(f"/v1/files/{session}")
    assert reply.status_code == 503
    assert reply.headers["Retry-After"] == "2"
    assert reply.json()["retry_after_seconds"] == 2  # what the G2 client reads


def test_a_vanished_session_is_a_404(fake_client: TestClient, agentcore_fake: RunningFake) -> None:
    session = upload(fake_client, "a.txt", b"x")
    agentcore_fake.fake.sessions[str(from_wire(session))].stopped = True  # AgentCore ended it: its timeout, say
    assert fake_client.get(f"/v1/download/{session}/a.txt").status_code == 404
    assert fake_client.get(f"/v1/files/{session}").status_code == 404


def test_round_trips_per_call(fake_client: TestClient, agentcore_fake: RunningFake) -> None:
    """What each call costs, in order (tests/backends/test_round_trips.py counts every route)."""
    calls = agentcore_fake.fake.calls
    session = upload(fake_client, "a.txt", b"x")
    # The bytes staged, then moved in under the hold by one step, which also links /mnt/data.
    assert calls == ["PUT sessions/start", "invoke writeFiles", "invoke executeCommand"]
    calls.clear()
    assert fake_client.get(f"/v1/download/{session}/a.txt").content == b"x"
    assert calls == ["GET sessions/get", "invoke executeCommand", "invoke readFiles"]
    calls.clear()
    fake_client.post("/v1/exec", json={"lang": "py", "code": "print(1)", "session_id": session})
    # The step before the run rides in its first line; the step after it lists and lets go.
    assert calls == ["GET sessions/get", "invoke executeCode", "invoke executeCommand"]
    calls.clear()
    fake_client.post("/v1/exec", json={"lang": "bash", "code": "echo 1", "session_id": session})
    assert calls == ["GET sessions/get", "invoke executeCommand"]


def test_a_language_agentcore_lacks_is_a_clear_400(fake_client: TestClient) -> None:
    reply = fake_client.post("/v1/exec", json={"lang": "c", "code": "int main(){}"})
    assert reply.status_code == 400
    assert reply.json()["details"] == "lang 'c' is not available here; available: bash, js, py, ts"


def test_a_session_agentcore_names_otherwise_is_stopped_and_refused_clearly(
    fake_client: TestClient, agentcore_fake: RunningFake
) -> None:
    agentcore_fake.fake.next_ids.append("01k1ppwye373z99ss2a8abw0tx")
    reply = fake_client.post("/v1/upload", files={"file": ("a.txt", b"x")})
    assert reply.status_code == 503
    assert "not a ULID" in reply.json()["details"]
    assert not agentcore_fake.fake.sessions["01k1ppwye373z99ss2a8abw0tx"].ready()  # stopped, not leaked
    assert upload(fake_client, "a.txt", b"x")  # the next session is a ULID again


def test_the_environments_log_folder_is_never_listed_nor_written(fake_client: TestClient) -> None:
    session = run(fake_client, "import os; print(sorted(os.listdir('/mnt/data')))")
    assert "'log'" in session["stdout"]  # it is there, for programs to see
    assert session["files"] == []
    assert fake_client.get(f"/v1/files/{session['session_id']}").json() == []
    reply = fake_client.post(
        "/v1/upload", data={"session_id": session["session_id"]}, files={"file": ("log/mine.txt", b"x")}
    )
    assert reply.status_code == 400
    assert "reserved" in reply.json()["details"]


def test_js_and_ts_run_on_node_not_deno(fake_client: TestClient, agentcore_fake: RunningFake) -> None:
    probe = "console.log(typeof Deno, typeof require)"
    for lang in ("js", "ts"):
        assert run(fake_client, probe, lang=lang)["stdout"] == "undefined function\n", lang
    assert [call.get("runtime") for call in agentcore_fake.fake.executed] == ["nodejs", "nodejs"]


def test_the_fake_runs_javascript_on_deno_unless_told_otherwise(agentcore_fake: RunningFake) -> None:
    """What the backend must send runtime for: AgentCore's default is Deno, which has no require."""
    fake = agentcore_fake.fake
    session = fake.start(CI, {})["sessionId"]
    probe = {"language": "javascript", "code": "console.log(typeof Deno, typeof require)"}
    assert fake.invoke(CI, session, {"name": "executeCode", "arguments": probe})["structuredContent"]["stdout"] == (
        "object undefined\n"
    )
    command = {"command": "echo out; echo err >&2"}
    answer = fake.invoke(CI, session, {"name": "executeCommand", "arguments": command})["structuredContent"]
    assert (answer["stdout"], answer["stderr"]) == ("out\r\nerr\r\n", "")  # a terminal's
