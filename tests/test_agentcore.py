"""The agentcore backend against botocore's Stubber, which checks every request (and every
stubbed reply) against the real service model, then against the local fake."""

from __future__ import annotations

import base64
import io
import logging
import random
import re
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
from codeexec.errors import BackendUnavailable, FileNotFound, SessionNotFound
from codeexec.reaper import is_due
from codeexec.sandbox.agentcore import AgentCoreConfig, AgentCoreSandboxes, sandboxes
from codeexec.sandbox.agentcore.session_ids import from_wire, to_wire
from codeexec.sandbox.port import Limit, LimitHit, Owner, Program
from codeexec.settings import Settings

from .conftest import API_KEY
from .fakes import eventstream
from .fakes.agentcore import RunningFake

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


TOUCHED = "mkdir -p .codeexec && touch .codeexec/touched; "


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    """The run token (the watchdog's pid file), made predictable."""
    monkeypatch.setattr(sandboxes.secrets, "token_hex", lambda n: "feedface")
    return ".codeexec/run-feedface"


def expect_watchdog(stub: Stubber, pid_file: str, seconds: str) -> None:
    pid = f"$(cat {pid_file} 2>/dev/null)"
    command = f'{TOUCHED}sleep {seconds}; p={pid} && rm -f {pid_file} && kill -KILL "$p"'
    expect_invoke(stub, "startCommandExecution", {"command": command}, {"structuredContent": {"taskId": "t1"}})


def test_create_names_the_org_and_caps_the_lease_at_eight_hours(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    stub.add_response(
        "start_code_interpreter_session",
        {"codeInterpreterIdentifier": CI, "sessionId": SID, "createdAt": CREATED},
        {"codeInterpreterIdentifier": CI, "name": ACME, "sessionTimeoutSeconds": 28800},
    )
    # Its first command touches it and links /mnt/data; the write then carries no touch.
    expect_invoke(stub, "executeCommand", {"command": sandboxes._SETUP}, ran())
    expect_invoke(stub, "writeFiles", {"content": [{"path": "a.bin", "blob": b"\x00\xff"}]})
    with backend.create(ACME_OWNER.tag()) as sandbox:
        assert sandbox.id == WIRE  # AgentCore's id, spelled for the wire
        assert sandbox.lease.owner == ACME_OWNER.tag()
        sandbox.write_file("a.bin", io.BytesIO(b"\x00\xff"), limit=10)


def test_open_refuses_other_owners_ended_and_unknown_sessions(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    bob = Owner("bob").tag()
    expect_get(stub, name=f"codeexec-28800-u-{bob.org}-{bob.user}")
    expect_get(stub, status="TERMINATED")
    expect_get(stub, name="someone-elses-session")
    expect_get(stub, name="codeexec-28800-mfrw2zi")  # an older release's name
    stub.add_client_error("get_code_interpreter_session", "ResourceNotFoundException", http_status_code=404)
    for _ in range(5):
        with pytest.raises(SessionNotFound), backend.open(WIRE, acme):
            pass
    for malformed in (SID, "has-dashes_and_is_not_a_wire_id", "Uakgb_J5m9g-0JDMbcJq"):
        with pytest.raises(SessionNotFound), backend.open(malformed, acme):
            pass  # refused before any call: the stubber holds no reply for it


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
    with pytest.raises(BackendUnavailable, match="not a ULID"), backend.create(ACME_OWNER.tag()):
        pass


def test_a_read_stats_the_file_with_its_touch_then_reads_it(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    expect_get(stub)
    blob = bytes(range(256))
    stat = TOUCHED + "test -f ./a.bin && ! test -L ./a.bin && stat -c '%s %.9Y' ./a.bin 2>/dev/null"
    expect_invoke(stub, "executeCommand", {"command": stat}, ran("256 1767322800.250000000\n"))
    expect_invoke(
        stub,
        "readFiles",
        {"paths": ["a.bin"]},
        {"content": [{"type": "resource", "resource": {"type": "blob", "uri": "file:///w/a.bin", "blob": blob}}]},
    )
    with backend.open(WIRE, acme) as sandbox:
        reader, info = sandbox.open_file("a.bin")
    assert reader.read() == blob
    assert (info.size, info.mtime_ns) == (256, 1_767_322_800_250_000_000)  # the real time, never a made-up one


def test_missing_and_hidden_files_are_not_found(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    expect_get(stub)
    expect_invoke(stub, "executeCommand", {"command": ANY}, ran(exit_code=1))
    with backend.open(WIRE, acme) as sandbox:
        with pytest.raises(FileNotFound):
            sandbox.open_file("gone.csv")
        for reserved in (".codeexec/touched", "log/interpreter.log"):
            with pytest.raises(FileNotFound):
                sandbox.open_file(reserved)


def test_listing_is_one_command_carrying_the_touch(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    expect_get(stub)
    listing = b"5 1767322800.5000000000 data.csv\x0012 1767322801.0000000000 plots/a b.png\x00"
    # base64, because the terminal answers in CRLF lines (and may break long ones)
    encoded = base64.b64encode(listing).decode()
    answer = ran(f"{encoded[:9]}\r\n{encoded[9:]}")
    expect_invoke(stub, "executeCommand", {"command": TOUCHED + sandboxes._LIST}, answer)
    with backend.open(WIRE, acme) as sandbox:
        found = sandbox.list_files()
    assert [(f.path, f.size, f.mtime_ns) for f in found] == [
        ("data.csv", 5, 1_767_322_800_500_000_000),
        ("plots/a b.png", 12, 1_767_322_801_000_000_000),
    ]


def test_python_runs_natively_under_a_watchdog_with_its_args(
    backend: AgentCoreSandboxes, stub: Stubber, token: str
) -> None:
    expect_get(stub)
    expect_watchdog(stub, token, "30")
    # Its first line writes its pid where the watchdog looks, then sets the arguments.
    first = f'__import__("builtins").open("{token}", "w").write(str(__import__("os").getpid())); '
    code = first + '__import__("sys").argv[1:] = ["--n", "it\'s"]\nprint(1)'
    expect_invoke(stub, "executeCode", {"language": "python", "code": code, "clearContext": True}, ran("1\n"))
    # The next command removes the pid file: the watchdog then finds nothing to kill.
    expect_invoke(stub, "executeCommand", {"command": f"rm -f {token}; " + sandboxes._LIST}, ran(""))
    with backend.open(WIRE, acme) as sandbox:
        result = sandbox.run(Program("py", "print(1)", ("--n", "it's"), 30))
        assert sandbox.list_files() == []
    assert (result.stdout, result.exit_code, result.hits) == ("1\n", 0, ())


def test_bash_runs_in_mnt_data_under_a_time_limit_and_answers_apart(backend: AgentCoreSandboxes, stub: Stubber) -> None:
    expect_get(stub)
    command = (
        "cd /mnt/data 2>/dev/null; mkdir -p .codeexec/run; "
        "timeout -k 1 7 bash -c 'echo \"$1\"' main.sh 'a b' </dev/null >.codeexec/run/out 2>.codeexec/run/err; rc=$?; "
        "printf 'CODEEXEC-RUN:%s:' $rc; head -c 65 .codeexec/run/out | base64 -w0; printf :; "
        "head -c 65 .codeexec/run/err | base64 -w0; rm -f .codeexec/run/out .codeexec/run/err"
    )
    # What a terminal answers: something before the marker, the rest broken into CRLF lines.
    out, err = base64.b64encode(b"a b\n").decode(), base64.b64encode(b"warned\r\n").decode()
    answer = f"bash: no job control\r\nCODEEXEC-RUN:0:{out[:3]}\r\n{out[3:]}:{err}"
    expect_invoke(stub, "executeCommand", {"command": TOUCHED + command}, ran(answer))
    expect_invoke(stub, "executeCommand", {"command": command}, ran("CODEEXEC-RUN:124::"))
    with backend.open(WIRE, acme) as sandbox:
        result = sandbox.run(Program("bash", 'echo "$1"', ("a b",), 7))
        assert (result.stdout, result.stderr, result.exit_code, result.hits) == ("a b\n", "warned\r\n", 0, ())
        result = sandbox.run(Program("bash", 'echo "$1"', ("a b",), 7))
    assert result.exit_code is None
    assert result.hits == (LimitHit(Limit.TIME, 7),)


def test_javascript_runs_on_node_and_its_output_is_capped(
    backend: AgentCoreSandboxes, stub: Stubber, token: str
) -> None:
    expect_get(stub)
    expect_watchdog(stub, token, "30")
    first = '(process.getBuiltinModule ? process.getBuiltinModule("fs") : require("fs"))'
    first += f'.writeFileSync("{token}", String(process.pid)); '
    arguments = {"language": "javascript", "code": first + "\nx", "clearContext": True, "runtime": "nodejs"}
    expect_invoke(stub, "executeCode", arguments, ran("y" * 100))
    with backend.open(WIRE, acme) as sandbox:
        result = sandbox.run(Program("js", "x", (), 30))
    assert result.stdout == "y" * 64
    assert result.hits == (LimitHit(Limit.OUTPUT, 64, stopped=False, stream="stdout"),)


@pytest.mark.parametrize(
    ("code", "retry_after"),
    [("ThrottlingException", 2), ("ServiceQuotaExceededException", 30), ("InternalServerException", None)],
)
def test_aws_errors_become_unavailable_with_a_hint_and_are_logged_without_payload(
    backend: AgentCoreSandboxes, stub: Stubber, caplog: pytest.LogCaptureFixture, code: str, retry_after: int | None
) -> None:
    stub.add_client_error("start_code_interpreter_session", code, "secret-looking message", http_status_code=429)
    owner = ACME_OWNER.tag()
    with pytest.raises(BackendUnavailable) as raised, caplog.at_level(logging.WARNING), backend.create(owner):
        pass
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
    with pytest.raises(BackendUnavailable) as raised, backend.open(WIRE, acme) as sandbox:
        sandbox.list_files()
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
def fake_client(agentcore_fake: RunningFake) -> TestClient:
    settings = Settings(
        sandbox_backend="agentcore",
        agentcore_endpoint_url=agentcore_fake.url,
        code_exec_api_key=SecretStr(API_KEY),
    )
    return TestClient(create_app(settings), headers={"X-API-Key": API_KEY})


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
    calls = agentcore_fake.fake.calls
    session = upload(fake_client, "a.txt", b"x")
    # Its first command touches it and links /mnt/data.
    assert calls == ["PUT sessions/start", "invoke executeCommand", "invoke writeFiles"]
    calls.clear()
    assert fake_client.get(f"/v1/download/{session}/a.txt").content == b"x"
    assert calls == ["GET sessions/get", "invoke executeCommand", "invoke readFiles"]  # the stat carries it
    calls.clear()
    fake_client.post("/v1/exec", json={"lang": "py", "code": "print(1)", "session_id": session})
    hold, listing, release = ["invoke executeCommand"] * 3
    watchdog = "invoke startCommandExecution"
    assert calls == ["GET sessions/get", hold, listing, watchdog, "invoke executeCode", listing, release]


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
