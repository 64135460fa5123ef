"""The fakes of AWS held to botocore's service models (tests/fakes/models.py): the check
refuses what AWS never sends, and the fakes answer every call the backends make within
the models. Requests need no check of ours: botocore validates each one before it is
sent, and the backends keep that on."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import boto3
import botocore
import botocore.session
import pytest
from botocore.exceptions import ClientError, EventStreamError

from codeexec.sandbox.agentcore import AgentCoreConfig, AgentCoreSandboxes
from codeexec.sandbox.microvm.api import MicrovmApi

from ..fakes.agentcore import RunningFake
from ..fakes.models import ModelViolation, check_error, check_event, check_reply

AGENTCORE, MICROVMS = "bedrock-agentcore", "lambda-microvms"
SID = "01JABCDEFGHJKMNPQRSTVWXYZ0"
SESSION = {"codeInterpreterIdentifier": "aws.codeinterpreter.v1", "sessionId": SID}
IMAGE = "arn:aws:lambda:us-east-1:123456789012:microvm-image:codeexec-runner"
VM = {"microvmId": "mvm-0a1b", "state": "RUNNING", "imageArn": IMAGE, "imageVersion": "1", "startedAt": 1767323045.0}
RECORD = VM | {"endpoint": "mvm-0a1b.lambda-microvm.us-east-1.on.aws", "maximumDurationInSeconds": 28800}

# (service, operation, a reply AWS sends, the same reply broken, what the check says)
REPLIES = [
    (AGENTCORE, "StartCodeInterpreterSession", SESSION | {"createdAt": "2026-01-02T03:04:05.123Z"},
     SESSION | {"createdAt": "2026-01-02T03:04:05.123+00:00"}, "not ISO 8601"),
    (AGENTCORE, "StartCodeInterpreterSession", SESSION | {"createdAt": "2026-01-02T03:04:05Z"},
     {"codeInterpreterIdentifier": "x", "createdAt": "2026-01-02T03:04:05Z"}, "requires 'sessionId'"),
    (AGENTCORE, "GetCodeInterpreterSession", SESSION | {"createdAt": "2026-01-02T03:04:05Z", "name": "codeexec-1"},
     SESSION | {"createdAt": "2026-01-02T03:04:05Z", "name": None}, "null"),
    (AGENTCORE, "ListCodeInterpreterSessions",
     {"items": [SESSION | {"createdAt": "2026-01-02T03:04:05Z", "status": "READY"}]},
     {"items": [SESSION | {"createdAt": "2026-01-02T03:04:05Z", "status": "RUNNING"}]}, "not one of"),
    (AGENTCORE, "StopCodeInterpreterSession", SESSION | {"lastUpdatedAt": "2026-01-02T03:04:05Z"},
     SESSION | {"lastUpdatedAt": "2026-01-02T03:04:05Z", "stopped": True}, "has no member 'stopped'"),
    (MICROVMS, "GetMicrovm", RECORD, RECORD | {"startedAt": "2026-01-02T03:04:05Z"}, "not a number"),
    (MICROVMS, "RunMicrovm", RECORD, VM | {"maximumDurationInSeconds": 28800}, "requires 'endpoint'"),
    (MICROVMS, "RunMicrovm", RECORD | {"idlePolicy": {"maxIdleDurationSeconds": 600, "suspendedDurationSeconds": 600,
     "autoResumeEnabled": True}}, RECORD | {"idlePolicy": None}, "null"),
    (MICROVMS, "CreateMicrovmAuthToken", {"authToken": {"X-aws-proxy-auth": "t0k"}}, {"authToken": {}}, "outside"),
]  # fmt: skip


@pytest.mark.parametrize(("service", "operation", "good", "bad", "says"), REPLIES)
def test_the_check_passes_what_aws_sends_and_refuses_the_rest(
    service: str, operation: str, good: dict[str, Any], bad: dict[str, Any], says: str
) -> None:
    check_reply(service, operation, good)
    with pytest.raises(ModelViolation, match=re.escape(says)):
        check_reply(service, operation, bad)


def test_the_check_holds_stream_events_and_errors_to_their_shapes() -> None:
    ran = {"content": [{"type": "text", "text": "42\n"}], "structuredContent": {"stdout": "42\n", "exitCode": 0}}
    check_event(AGENTCORE, "InvokeCodeInterpreter", "result", ran)
    with pytest.raises(ModelViolation, match="null"):
        check_event(AGENTCORE, "InvokeCodeInterpreter", "result", ran | {"structuredContent": {"exitCode": None}})
    with pytest.raises(ModelViolation, match="no 'progress' message"):
        check_event(AGENTCORE, "InvokeCodeInterpreter", "progress", ran)

    why = {"message": "x", "reason": "CannotParse"}
    check_error(AGENTCORE, "GetCodeInterpreterSession", "ValidationException", 400, why)
    with pytest.raises(ModelViolation, match="requires 'reason'"):
        check_error(AGENTCORE, "GetCodeInterpreterSession", "ValidationException", 400, {"message": "x"})
    with pytest.raises(ModelViolation, match="never answers ConflictException"):
        check_error(AGENTCORE, "GetCodeInterpreterSession", "ConflictException", 409, {"message": "x"})
    with pytest.raises(ModelViolation, match="status 429"):
        check_error(MICROVMS, "RunMicrovm", "ThrottlingException", 503, {"message": "slow down"})


def test_the_agentcore_fake_answers_every_tool_and_error_within_the_model(agentcore_fake: RunningFake) -> None:
    """Each operation and tool the backend uses, straight through botocore; the fake checks
    each reply as it sends it, and its `with` block fails on any it had to refuse."""
    client = boto3.client(AGENTCORE, endpoint_url=agentcore_fake.url, region_name="us-east-1")
    ci = {"codeInterpreterIdentifier": "aws.codeinterpreter.v1"}
    started = client.start_code_interpreter_session(**ci, name="codeexec-1", sessionTimeoutSeconds=900)
    session = ci | {"sessionId": started["sessionId"]}

    def tool(name: str, **arguments: Any) -> dict[str, Any]:
        stream = client.invoke_code_interpreter(**session, name=name, arguments=arguments)["stream"]
        [event] = list(stream)
        return event["result"]  # type: ignore[no-any-return]

    tool("writeFiles", content=[{"path": "data/a.csv", "text": "a,b\n"}, {"path": "b.bin", "blob": b"\x00\xff"}])
    listing = tool("listFiles", directoryPath=".")["content"]
    assert {b["name"]: b.get("size") for b in listing if b["type"] == "resource_link"} == {
        ".profile": 36, "b.bin": 2, "data": None, "log": None,
    }  # fmt: skip
    read = tool("readFiles", paths=["data/a.csv", "b.bin"])["content"]
    assert [(b["resource"]["type"], b["resource"]["mimeType"]) for b in read] == [
        ("text", "text/csv"), ("blob", "application/octet-stream"),
    ]  # fmt: skip
    assert tool("executeCommand", command="echo hi")["structuredContent"]["exitCode"] == 0
    for language, runtime, code in (("python", "python", "print(1)"), ("typescript", "nodejs", "console.log(1)")):
        ran = tool("executeCode", language=language, runtime=runtime, code=code)
        assert ran["structuredContent"]["stdout"] == "1\n"
    task = tool("startCommandExecution", command="sleep 30")["structuredContent"]["taskId"]
    assert tool("getTask", taskId=task)["structuredContent"]["taskStatus"] == "working"
    assert tool("stopTask", taskId=task)["structuredContent"]["taskStatus"] == "canceled"
    tool("removeFiles", paths=["b.bin"])
    assert client.get_code_interpreter_session(**session)["status"] == "READY"
    [item] = client.list_code_interpreter_sessions(**ci)["items"]
    assert item["lastUpdatedAt"] >= item["createdAt"]
    client.stop_code_interpreter_session(**session)

    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        client.get_code_interpreter_session(**ci, sessionId="01JZZZZZZZZZZZZZZZZZZZZZZZ")
    second = ci | {"sessionId": client.start_code_interpreter_session(**ci)["sessionId"]}
    with pytest.raises(ClientError, match="ValidationException"):  # a path out of the working directory
        client.invoke_code_interpreter(**second, name="readFiles", arguments={"paths": ["/etc/passwd"]})
    agentcore_fake.fake.faults.append(("ValidationException", True))  # an error event after the result
    with pytest.raises(EventStreamError, match="validationException"):  # named as its member
        list(client.invoke_code_interpreter(**second, name="executeCommand", arguments={"command": "true"})["stream"])
    assert agentcore_fake.fake.violations == []


def test_the_agentcore_fake_refuses_a_request_botocore_lets_through(agentcore_fake: RunningFake) -> None:
    # botocore checks types and lower bounds before it sends; not every range the model sets.
    client = boto3.client(AGENTCORE, endpoint_url=agentcore_fake.url, region_name="us-east-1")
    with pytest.raises(ClientError):
        client.start_code_interpreter_session(codeInterpreterIdentifier="x", sessionTimeoutSeconds=99_999)
    assert "sessionTimeoutSeconds: 99999 is outside" in agentcore_fake.fake.violations[0]
    agentcore_fake.fake.violations.clear()  # seen: the fake's `with` would fail on it


def test_the_backends_leave_botocores_request_validation_on(aws_env: None, tmp_path: Path) -> None:
    config = AgentCoreConfig(
        interpreter_id="aws.codeinterpreter.v1", endpoint_url=None, lease_ttl_seconds=900, run_timeout_seconds=30,
        max_output_bytes=64,
    )  # fmt: skip
    for client in (AgentCoreSandboxes(config).api.client, MicrovmApi(None).client):
        assert client.meta.config.parameter_validation is True


# -- the oldest botocore the library declares ----------------------------------------------

ROOT = Path(__file__).parents[2]
# What the backends use that botocore gained late, and the release that brought it (checked
# against botocore's own history: shared/FACTS.md). Every other call they make is older.
LATE_FEATURES = {
    "InvokeCodeInterpreter's runtime (Node for js/ts)": (1, 42, 78),
    "the lambda-microvms client": (1, 43, 35),
}


def has_feature(session: botocore.session.Session, feature: str) -> bool:
    if feature.startswith("InvokeCodeInterpreter"):
        arguments = session.get_service_model(AGENTCORE).operation_model("InvokeCodeInterpreter").input_shape
        return "runtime" in arguments.members["arguments"].members  # type: ignore[attr-defined]
    return MICROVMS in session.get_available_services()


def minimums(text: str) -> dict[str, tuple[int, ...]]:
    found = re.findall(r"\b(boto3|botocore)>=([0-9.]+)", text)
    return {name: tuple(int(part) for part in version.split(".")) for name, version in found}


def test_the_declared_minimum_botocore_has_what_the_backends_call_and_this_one_too() -> None:
    needed = max(LATE_FEATURES.values())
    layer = minimums((ROOT / "lib" / "requirements.txt").read_text())
    assert layer == {"boto3": needed, "botocore": needed}  # boto3 1.x.y pins botocore 1.x.y or later
    extras = (ROOT / "lib" / "pyproject.toml").read_text()
    assert minimums(extras.split("microvm = ")[1]) == layer
    assert minimums(extras.split("agentcore = ")[1].splitlines()[0]) == {"boto3": (1, 42, 78), "botocore": (1, 42, 78)}
    # Run on an older botocore, this fails: the installed one must have every feature.
    installed = tuple(int(part) for part in botocore.__version__.split(".")[:3])
    assert installed >= needed
    session = botocore.session.get_session()
    assert [feature for feature in LATE_FEATURES if not has_feature(session, feature)] == []


def test_a_botocore_without_runtime_is_seen_as_too_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # botocore before 1.42.78, as far as AgentCore goes: the same model without `runtime`.
    session = botocore.session.get_session()
    loader = session.get_component("data_loader")
    model = loader.load_service_model(AGENTCORE, "service-2")
    del model["shapes"]["ToolArguments"]["members"]["runtime"]
    version = session.get_service_model(AGENTCORE).api_version
    (tmp_path / AGENTCORE / version).mkdir(parents=True)
    (tmp_path / AGENTCORE / version / "service-2.json").write_text(json.dumps(model))
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    older = botocore.session.get_session()
    assert not has_feature(older, "InvokeCodeInterpreter's runtime (Node for js/ts)")
