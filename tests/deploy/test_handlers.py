"""The Lambda handlers, invoked with the sample events of events/ (HTTP API payload 2.0 and
the reaper's schedule), on the local backend."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from botocore.exceptions import ClientError

from codeexec.errors import BackendUnavailable
from codeexec.sandbox.agentcore import api as agentcore_api
from codeexec.sandbox.microvm import api as microvm_api
from codeexec.settings import get_settings

from .. import monitoring
from ..calls import file_id
from ..emf import problems as emf_problems
from ..lambda_events import (
    EVENTS,
    SAM_LOCAL_KEY,
    SAMPLE_SESSION,
    Context,
    Functions,
    body_of,
    json_of,
    load_event,
    printed,
    written,
)

CSV = b"fruit,count\napple,3\npear,4\n"  # what events/upload.json uploads
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, sandbox_root: Path) -> Iterator[dict]:
    monkeypatch.delenv("CODE_EXEC_API_KEY_SECRET_ARN", raising=False)
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    yield {
        "SANDBOX_BACKEND": "local",
        "SANDBOX_ROOT": str(sandbox_root),
        "CODE_EXEC_API_KEY": SAM_LOCAL_KEY,
        "RUN_TIMEOUT_SECONDS": "20",
        "POWERTOOLS_METRICS_NAMESPACE": "codeexec-test",
    }
    get_settings.cache_clear()


@pytest.fixture
def api(env: dict, functions: Functions) -> ModuleType:
    return functions("handlers.api", env)


def call(api: ModuleType, name: str, replace: dict[str, str] | None = None) -> dict[str, Any]:
    return api.handler(load_event(name, replace), Context())


def upload(api: ModuleType) -> str:
    reply = call(api, "upload")
    assert reply["statusCode"] == 200, reply
    return json_of(reply)["session_id"]


@pytest.mark.parametrize("event", ["health", "v1-health"])
def test_health(api: ModuleType, event: str) -> None:
    reply = call(api, event)
    assert reply["statusCode"] == 200
    assert json_of(reply)["backend"] == "local"


def test_a_session_through_every_route(api: ModuleType) -> None:
    reply = call(api, "upload")
    assert reply["statusCode"] == 200
    body = json_of(reply)
    session = body["session_id"]
    uploaded = [{"fileId": file_id(session, "data.csv"), "filename": "data.csv"}]
    assert (body["message"], body["files"]) == ("success", uploaded)
    in_session = {SAMPLE_SESSION: session}

    listing = call(api, "files", in_session)
    assert listing["statusCode"] == 200
    [entry] = json_of(listing)
    data = file_id(session, "data.csv")
    assert (entry["name"], entry["path"], entry["size"]) == (f"{session}/{data}", "data.csv", len(CSV))

    csv = call(api, "download", {**in_session, "chart.png": "data.csv"})
    assert csv["statusCode"] == 200
    assert body_of(csv) == CSV
    assert csv["headers"]["content-disposition"] == 'attachment; filename="data.csv"'

    # The run finds the upload through its file reference and lands in that session.
    run = call(api, "exec", in_session)
    assert run["statusCode"] == 200
    result = json_of(run)
    assert (result["session_id"], result["stdout"], result["stderr"]) == (session, "7\n", "")
    assert [f["name"] for f in result["files"]] == ["chart.png"]

    chart = call(api, "download", in_session)
    assert chart["statusCode"] == 200
    assert chart["headers"]["content-type"] == "image/png"
    assert chart["isBase64Encoded"] is True  # binary bodies travel base64-encoded through API Gateway
    assert body_of(chart).startswith(PNG_SIGNATURE)

    assert call(api, "delete-file", in_session)["statusCode"] == 200
    assert [f["path"] for f in json_of(call(api, "files", in_session))] == ["chart.png"]


def test_a_g2_session_through_its_routes(api: ModuleType) -> None:
    reply = call(api, "upload-batch")
    assert reply["statusCode"] == 200
    body = json_of(reply)
    session = body["storage_session_id"]
    assert ([f["filename"] for f in body["files"]], body["succeeded"]) == (["data.csv", "helper.py"], 2)
    in_session = {SAMPLE_SESSION: session}

    info = call(api, "object", in_session)
    assert info["statusCode"] == 200
    assert {k: json_of(info)[k] for k in ("path", "size")} == {"path": "data.csv", "size": len(CSV)}

    assert call(api, "delete-object", in_session)["statusCode"] == 200
    assert call(api, "object", in_session)["statusCode"] == 404


def test_the_sample_session_is_unknown_here(api: ModuleType) -> None:
    reply = call(api, "files")
    assert reply["statusCode"] == 404
    assert json_of(reply)["error"] == "Session not found"


def test_a_wrong_key_is_401(api: ModuleType) -> None:
    reply = call(api, "upload", {SAM_LOCAL_KEY: "not-the-key"})
    assert reply["statusCode"] == 401
    assert json_of(reply)["error"] == "Unauthorized"


def test_a_response_too_large_for_lambda_is_a_413(api: ModuleType) -> None:
    session = upload(api)
    event = load_event("exec", {SAMPLE_SESSION: session})
    code = "import os; open('big.bin', 'wb').write(os.urandom(5_000_000))"
    user = json.loads(event["body"])["user_id"]  # the user the sample upload was made for
    event["body"] = json.dumps({"lang": "py", "code": code, "session_id": session, "user_id": user})
    assert api.handler(event, Context())["statusCode"] == 200
    reply = call(api, "download", {SAMPLE_SESSION: session, "chart.png": "big.bin"})
    assert reply["statusCode"] == 413
    assert json_of(reply)["error"] == "Payload too large"


def test_logs_carry_the_request_id_and_no_body_or_key(api: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    session = upload(api)
    event = load_event("exec", {SAMPLE_SESSION: session})
    api.handler(event, Context())
    out = capsys.readouterr().out
    logs, _ = printed(out)
    [answered] = [line for line in logs if line["message"] == "call" and line["route"] == "/v1/exec"]
    assert answered["request_id"] == event["requestContext"]["requestId"]  # API Gateway's, as no X-Request-Id came
    told = (answered["status"], answered["lang"], answered["outcome"], answered["session"])
    assert told == (200, "py", "ok", session)
    for secret in (SAM_LOCAL_KEY, "csv.DictReader", "apple,3"):
        assert secret not in out


def test_metrics_count_runs_and_failures(
    api: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    session = upload(api)
    call(api, "exec", {SAMPLE_SESSION: session})
    _, metrics = printed(capsys.readouterr().out)
    assert (metrics[-1]["Runs"], metrics[-1]["Failures"], metrics[-1]["RunTimeouts"]) == (1, 0, 0)
    [by_language] = [m for m in metrics if "RunsByLanguage" in m]
    assert (by_language["Language"], by_language["Outcome"]) == ("py", "ok")

    def unavailable(*args: object, **kwargs: object) -> None:
        raise BackendUnavailable("the backend is down")

    monkeypatch.setattr(api.service.sandboxes, "create", unavailable)
    assert call(api, "upload")["statusCode"] == 503
    _, metrics = printed(capsys.readouterr().out)
    assert metrics[-1]["Failures"] == 1
    assert "Runs" not in metrics[-1]


def test_the_emf_check_refuses_what_cloudwatch_would_not_extract(
    api: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    call(api, "health")
    [line] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert emf_problems(line) == []
    [directive] = line["_aws"]["CloudWatchMetrics"]

    def broken(change: Callable[[dict[str, Any]], None]) -> list[str]:
        document = copy.deepcopy(line)
        change(document)
        return emf_problems(document)

    def too_many_dimensions(document: dict[str, Any]) -> None:
        names = [f"d{i}" for i in range(31)]
        document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] = [names]
        document.update(dict.fromkeys(names, "x"))

    assert broken(too_many_dimensions)
    assert broken(lambda d: d["_aws"].pop("Timestamp"))
    assert broken(lambda d: d["_aws"]["CloudWatchMetrics"][0]["Metrics"][0].update(Unit="Requests"))
    metric, dimension = directive["Metrics"][0]["Name"], directive["Dimensions"][0][0]
    assert broken(lambda d: d.pop(metric))  # a metric's value missing from the root
    assert broken(lambda d: d.update({metric: "1"}))
    assert broken(lambda d: d.update({metric: [1.0] * 101}))
    assert broken(lambda d: d.update({dimension: 7}))
    assert broken(lambda d: d.update({dimension: ""}))


def _microvms_throttled(*args: object, **kwargs: object) -> None:
    with microvm_api._mapped("RunMicrovm"):  # AWS's launch rate, as the MicroVM backend meets it
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "RunMicrovm")


def _agentcore_refused(*args: object, **kwargs: object) -> None:
    with agentcore_api._mapped("StartCodeInterpreterSession"):
        raise ClientError({"Error": {"Code": "ServiceQuotaExceededException"}}, "StartCodeInterpreterSession")


def test_the_stacks_alarms_and_dashboard_read_what_the_functions_write(
    api: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    env: dict,
    capsys: pytest.CaptureFixture[str],
    functions: Functions,
) -> None:
    # Every kind of call the alarms and the dashboard count: a run, a 401, the backends' 429
    # and 503, and a reaper pass.
    session = upload(api)
    assert call(api, "exec", {SAMPLE_SESSION: session})["statusCode"] == 200
    assert call(api, "upload", {SAM_LOCAL_KEY: "not-the-key"})["statusCode"] == 401
    for failure, status in ((_microvms_throttled, 429), (_agentcore_refused, 503)):
        monkeypatch.setattr(api.service.sandboxes, "create", failure)
        assert call(api, "upload")["statusCode"] == status
    functions("handlers.reaper", env).handler(load_event("reaper"), Context())
    out = capsys.readouterr().out
    metrics, (lines, _) = written(out), printed(out)

    namespace = env["POWERTOOLS_METRICS_NAMESPACE"]
    filed = {(m.name, frozenset(name for name, _ in m.dimensions)) for m in metrics}
    values = {pair for m in metrics for pair in m.dimensions}
    for parameters in ({}, {"SandboxBackend": "microvm"}):
        stack = monitoring.stack(namespace, parameters)
        assert monitoring.namespace(stack) == namespace  # the functions write under the stack's name
        body = monitoring.dashboard(stack)
        read = {metric for metric in monitoring.read(stack) if metric.namespace == namespace}
        assert read and read <= metrics, read - metrics  # name, dimensions and their values
        for search in monitoring.searches(body):
            assert search.namespace == namespace
            assert (search.name, search.dimensions) in filed, search
            assert set(search.picked.items()) <= values, search
        for query in monitoring.queries(body):
            if query.group == stack.value({"Ref": "LogGroup"}):
                assert query.fields <= set().union(*lines), query.fields - set().union(*lines)
                for field, pattern in query.patterns:
                    assert any(re.search(pattern, str(line.get(field, ""))) for line in lines), (field, pattern)


def test_the_local_backend_refuses_to_start_inside_lambda(env: dict, functions: Functions) -> None:
    with pytest.raises(RuntimeError, match="refuses to run inside AWS Lambda"):
        functions("handlers.api", {**env, "AWS_LAMBDA_FUNCTION_NAME": "codeexec-ApiFunction"})


def test_the_reaper_ends_idle_sessions_only(
    api: ModuleType, env: dict, capsys: pytest.CaptureFixture[str], functions: Functions
) -> None:
    session = upload(api)
    schedule = load_event("reaper")

    reaper = functions("handlers.reaper", env)
    report = reaper.handler(schedule, Context())
    assert (report["seen"], report["ended"], report["skipped"], report["failed"]) == (1, 0, 0, 0)
    assert call(api, "files", {SAMPLE_SESSION: session})["statusCode"] == 200

    reaper = functions("handlers.reaper", {**env, "IDLE_TIMEOUT_SECONDS": "0"})
    capsys.readouterr()
    assert reaper.handler(schedule, Context())["ended"] == 1
    assert call(api, "files", {SAMPLE_SESSION: session})["statusCode"] == 404

    logs, metrics = printed(capsys.readouterr().out)
    [reaped] = [m for m in metrics if "SessionsReaped" in m]
    assert (reaped["SessionsReaped"], reaped["ReapFailures"]) == (1, 0)
    passes = [line for line in logs if line["message"].startswith("reaper pass")]
    assert passes[-1]["correlation_id"] == schedule["executionId"]


def test_a_programmatic_run_through_the_handler_across_two_invocations(api: ModuleType) -> None:
    asked = json_of(call(api, "programmatic"))
    assert asked["status"] == "tool_call_required"
    assert asked["tool_calls"] == [{"id": "call_001", "name": "get_weather", "input": {"city": "Paris"}}]
    event = load_event("programmatic")
    answers = [{"call_id": "call_001", "result": {"sky": "clear"}, "is_error": False}]
    event["body"] = json.dumps({"continuation_token": asked["continuation_token"], "tool_results": answers})
    done = json_of(api.handler(event, Context()))
    assert (done["status"], done["stdout"]) == ("completed", "{'sky': 'clear'}\n")
    assert json_of(call(api, "programmatic-cancel"))["status"] == "cancelled"


def test_every_sample_event_is_exercised() -> None:
    exercised = {"health", "v1-health", "upload", "files", "download", "exec", "delete-file"}
    exercised |= {"upload-batch", "object", "delete-object", "reaper", "env", "programmatic", "programmatic-cancel"}
    assert {p.stem for p in EVENTS.glob("*.json")} == exercised, "a new sample event needs a test here"



def test_the_functions_import_no_server(env: dict) -> None:
    """The functions' layer (lib/requirements.txt) carries no uvicorn: what the handlers
    import must not need it (Lambda would answer every call 'Unable to import module')."""
    code = "import sys, handlers.api, handlers.reaper; print({'uvicorn', 'prometheus_client'} & set(sys.modules))"
    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, env={**os.environ, **env}, cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "set()"
