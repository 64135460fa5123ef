"""The SAM application: template.yaml agrees with the app and with events/, and
`sam validate --lint` and `sam build` (no container) turn it into a deployable bundle."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from codeexec.large_files import KEY_PREFIX, URL_SECONDS
from codeexec.settings import Settings

from .. import monitoring
from ..cloudformation import SAM_PYTHON, STACK_ID, TEMPLATE, Stack, translated
from ..fakes.models import check_request
from ..lambda_events import EVENTS

ROOT = Path(__file__).parents[2]
SAM = ROOT / ".venv-sam" / "bin" / "sam"  # where `make sam` installs it
ELF_MACHINE = {"arm64": 183, "x86_64": 62}



def functions() -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in TEMPLATE["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}


def http_routes() -> dict[str, dict[str, Any]]:
    """Every HttpApi event of every function, by route key ("POST /v1/exec")."""
    events = [e["Properties"] for f in functions().values() for e in f.get("Events", {}).values()]
    return {f"{e['Method']} {e['Path']}": e for e in events if "ApiId" in e}


def test_the_template_routes_are_the_apps_routes(app: FastAPI) -> None:
    served = {f"{method.upper()} {path}" for path, item in app.openapi()["paths"].items() for method in item}
    # A file id is a path (plots/a.png): API Gateway hands over the rest of the URL as the
    # greedy `{proxy+}` (the one name SAM's invoke permissions understand), the app's file_id.
    assert {key.replace("{proxy+}", "{file_id}") for key in http_routes()} == served, "one route per app route"
    for key, route in http_routes().items():
        assert route["ApiId"] == {"Ref": "HttpApi"}
        assert route["PayloadFormatVersion"] == "2.0"
        assert "{file_id}" not in key


def test_every_route_has_a_sample_event() -> None:
    samples = [json.loads(p.read_text()) for p in EVENTS.glob("*.json")]
    assert {e["routeKey"] for e in samples if "routeKey" in e} == set(http_routes())


def test_env_json_sets_only_variables_the_template_declares() -> None:
    # sam local silently ignores a variable the template does not declare for the function.
    env = json.loads((EVENTS / "env.json").read_text())
    global_vars = set(TEMPLATE["Globals"]["Function"]["Environment"]["Variables"])
    for function, variables in env.items():
        declared = global_vars | set(functions()[function].get("Environment", {}).get("Variables", {}))
        assert set(variables) <= declared, function


def test_the_functions_run_on_python_3_12_with_snapstart_on_the_api() -> None:
    runtime = TEMPLATE["Globals"]["Function"]["Runtime"]
    assert runtime == "python3.12"  # SnapStart for Python needs 3.12 or later; cfn-lint does not say so
    assert all("Runtime" not in f for f in functions().values())  # none overrides it
    layer = TEMPLATE["Resources"]["CodeExecLayer"]
    assert layer["Properties"]["CompatibleRuntimes"] == [runtime] and layer["Metadata"]["BuildMethod"] == runtime
    api = functions()["ApiFunction"]
    assert api["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    assert api["AutoPublishAlias"]  # SnapStart applies to published versions only: the routes reach the alias
    assert "SnapStart" not in functions()["ReaperFunction"]  # a pass every 5 minutes: nothing to gain


def _bucket_statements(function: str) -> list[dict[str, Any]]:
    statements = [s for p in functions()[function]["Policies"] if "Statement" in p for s in p["Statement"]]
    return [s for s in statements if any(a.startswith("s3:") for a in s["Action"])]


def test_the_large_files_bucket_is_private_short_lived_and_reached_by_the_api_alone() -> None:
    bucket = TEMPLATE["Resources"]["LargeFilesBucket"]["Properties"]
    assert set(bucket["PublicAccessBlockConfiguration"].values()) == {True}
    [rule] = bucket["LifecycleConfiguration"]["Rules"]
    assert (rule["Status"], rule["ExpirationInDays"], rule["AbortIncompleteMultipartUpload"]) == (
        "Enabled", 1, {"DaysAfterInitiation": 1},
    )  # fmt: skip
    # Exactly what the API function does with it: put (presigned, or a multipart upload it
    # may abort) and get (presigned), under the key prefix it uses; the reaper nothing.
    [statement] = _bucket_statements("ApiFunction")
    assert sorted(statement["Action"]) == ["s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject"]
    assert statement["Resource"] == {"Fn::Sub": f"${{LargeFilesBucket.Arn}}/{KEY_PREFIX}*"}
    assert _bucket_statements("ReaperFunction") == []
    variables = functions()["ApiFunction"]["Environment"]["Variables"]
    assert variables["LARGE_FILES_BUCKET"] == {"Ref": "LargeFilesBucket"}
    # Every download from the threshold on is redirected; below it, a binary file's base64
    # still fits Lambda's 6 MB response.
    assert Settings().large_files_from_bytes * 4 / 3 < int(variables["GATEWAY_REQUEST_BYTES"]) == 6 * 1024 * 1024
    assert URL_SECONDS <= 600


def python312_bin() -> Path | None:
    """A directory holding a working python3.12, for `sam build` (no container): pyenv's
    3.12 on these machines, else one on the PATH."""
    pyenv = shutil.which("pyenv")
    if pyenv:
        versions = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True).stdout.split()
        for version in sorted(v for v in versions if v.startswith("3.12")):
            prefix = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True).stdout.strip()
            if prefix and (Path(prefix) / "bin" / "python3.12").exists():
                return Path(prefix) / "bin"
    found = shutil.which("python3.12")
    if found and subprocess.run([found, "-c", "pass"], capture_output=True).returncode == 0:
        return Path(found).parent
    return None


@pytest.mark.skipif(not (SAM.exists() or shutil.which("sam")), reason="no SAM CLI: `make sam` installs it")
def test_sam_validates_and_builds_a_bundle(tmp_path: Path) -> None:
    sam = str(SAM) if SAM.exists() else "sam"
    python312 = python312_bin()
    if python312 is None:  # root's pyenv has one here; a user of the light tier may have none
        pytest.skip("sam build for python3.12 needs a python3.12 on the PATH (pyenv install 3.12, docs/aws.md)")
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0", "PATH": f"{python312}:{os.environ['PATH']}"}
    for args in (["validate", "--lint"], ["build", "--build-dir", str(tmp_path / "build")]):
        done = subprocess.run([sam, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr

    build = tmp_path / "build"
    assert (build / "ApiFunction" / "api.py").is_file()
    assert (build / "ReaperFunction" / "reaper.py").is_file()
    layer = build / "CodeExecLayer" / "python"
    for module in ("api/app.py", "api/routers/files.py", "sessions/__init__.py", "sandbox/agentcore/vm.py"):
        assert (layer / "codeexec" / module).is_file(), module
    installed = {_normalized(p.name.split("-")[0]) for p in layer.glob("*.dist-info")}
    required = {_normalized(re.split(r"[<>=!~\[; ]", line)[0]) for line in _requirements()}
    assert required <= installed
    # Native code is built for the functions' architecture, not this machine's.
    assert TEMPLATE["Globals"]["Function"]["Architectures"] == [{"Ref": "Architecture"}]
    architecture = TEMPLATE["Parameters"]["Architecture"]["Default"]
    machines = {int.from_bytes(so.read_bytes()[18:20], "little") for so in layer.rglob("*.so")}
    assert machines == {ELF_MACHINE[architecture]}
    # ... and for the functions' Python: pydantic's core is a CPython 3.12 extension.
    assert [so.name for so in layer.glob("pydantic_core/*.so")] == ["_pydantic_core.cpython-312-aarch64-linux-gnu.so"]


def _requirements() -> list[str]:
    lines = (ROOT / "lib" / "requirements.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _microvm_actions(function: str) -> set[str]:
    """The lambda: actions the template grants the function when SandboxBackend=microvm."""
    actions: set[str] = set()
    for policy in functions()[function]["Policies"]:
        if "Fn::If" in policy and policy["Fn::If"][0] == "UseMicrovm":
            for statement in policy["Fn::If"][1].get("Statement", []):  # AgentCore's grants: no branch here
                granted = statement["Action"]
                actions |= {granted} if isinstance(granted, str) else set(granted)
    return actions


def test_each_function_is_granted_exactly_the_microvm_calls_it_makes() -> None:
    # The API function leases (Run, then Get while the VM boots), opens (Get, a token for
    # the runner) and ends a failed upload's session; the reaper lists, re-reads and ends.
    # RunMicrovm passes the VM its network connectors, which takes PassNetworkConnector.
    assert _microvm_actions("ApiFunction") == {
        "lambda:RunMicrovm", "lambda:GetMicrovm", "lambda:CreateMicrovmAuthToken", "lambda:TerminateMicrovm",
        "lambda:PassNetworkConnector",
    }  # fmt: skip
    assert _microvm_actions("ReaperFunction") == {"lambda:ListMicrovms", "lambda:GetMicrovm", "lambda:TerminateMicrovm"}
    resources = TEMPLATE["Resources"]
    assert resources["EgressConnector"]["Properties"]["Configuration"]["VpcEgressConfiguration"]["SecurityGroupIds"]
    egress = resources["MicrovmSecurityGroup"]["Properties"]["SecurityGroupEgress"]
    assert [rule["CidrIp"] for rule in egress] == ["127.0.0.1/32"]  # no way out
    env = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    assert env["MICROVM_EGRESS_CONNECTOR"] == {"Fn::If": ["UseMicrovm", {"Fn::GetAtt": "EgressConnector.Arn"}, ""]}


# -- the template SAM makes of it, as CloudFormation gets it ------------------------------

needs_translator = pytest.mark.skipif(not SAM_PYTHON.exists(), reason="no SAM venv: `make sam` installs it")
MICROVM = {
    "SandboxBackend": "microvm", "MicrovmArtifactUri": "s3://artifacts/codeexec/runner.zip",
    "MicrovmBaseImageArn": "arn:aws:lambda:us-east-1:aws:microvm-image:al2023-1", "MicrovmVpcId": "vpc-0123",
    "MicrovmSubnetIds": "subnet-0a,subnet-0b",
}  # fmt: skip
STACKS = {
    "the built-in interpreter": {},
    "an interpreter of yours": {"CodeInterpreterId": "myInterpreter-AbC123xyZ9"},
    "the stack's own interpreter": {"CreateCodeInterpreter": "true"},
    "microvm": MICROVM,
}


def iam_data() -> dict[str, Any]:
    """AWS's IAM data (the service authorization reference: each action's resource types
    and their ARN formats) as cfn-lint ships it."""
    [policies] = (ROOT / ".venv-sam" / "lib").glob("python3*/site-packages/cfnlint/data/AdditionalSpecs/Policies.json")
    return json.loads(policies.read_text())  # type: ignore[no-any-return]


def statements(stack: Stack) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every statement of every inline policy of every role the stack creates."""
    for name, role in stack.resources("AWS::IAM::Role").items():
        for policy in role.get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                yield name, statement


def arn_format(arn: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\$\\\{[A-Za-z]+\\\}", "[^:/]*", re.escape(arn).replace(r"\.\*", ".*")))


def listed(value: str | list[str]) -> list[str]:
    return value if isinstance(value, list) else [value]


@needs_translator
@pytest.mark.parametrize("parameters", STACKS.values(), ids=STACKS.keys())
def test_every_grant_names_resources_of_the_types_iam_authorizes_the_action_on(parameters: dict[str, str]) -> None:
    data, stack = iam_data(), Stack(translated(), parameters)
    for role, statement in statements(stack):
        assert statement["Effect"] == "Allow" and "Condition" not in statement, role
        granted = listed(statement["Resource"])
        for action in listed(statement["Action"]):
            service, name = action.split(":")
            types = data[service]["Actions"][name.lower()].get("Resources", [])
            if not types:  # no resource-level permission: IAM matches only "*"
                assert granted == ["*"], f"{role}: {action} on {granted}"
                continue
            formats = [arn_format(f) for t in types for f in data[service]["Resources"][t.lower()]["ARNFormats"]]
            for resource in granted:
                assert any(f.fullmatch(resource) for f in formats), f"{role}: {action} is not authorized on {resource}"


AGENTCORE_STACKS = {name: parameters for name, parameters in STACKS.items() if name != "microvm"}


@needs_translator
@pytest.mark.parametrize("parameters", AGENTCORE_STACKS.values(), ids=AGENTCORE_STACKS.keys())
def test_agentcore_is_granted_on_the_interpreter_the_functions_use(parameters: dict[str, str]) -> None:
    stack = Stack(translated(), parameters)
    functions = stack.resources("AWS::Lambda::Function").values()
    [interpreter] = {f["Environment"]["Variables"]["AGENTCORE_CODE_INTERPRETER_ID"] for f in functions}
    granted = {
        resource
        for _, statement in statements(stack)
        if any(action.startswith("bedrock-agentcore:") for action in listed(statement["Action"]))
        for resource in listed(statement["Resource"])
    }
    # The built-in interpreter is AWS's (account `aws`); any other is `code-interpreter-custom`.
    kind = "aws:code-interpreter" if interpreter == "aws.codeinterpreter.v1" else "123456789012:code-interpreter-custom"
    assert granted == {f"arn:aws:bedrock-agentcore:us-east-1:{kind}/{interpreter}"}


@needs_translator
def test_a_microvm_stack_is_granted_nothing_of_agentcore() -> None:
    stack = Stack(translated(), MICROVM)
    actions = {action for _, statement in statements(stack) for action in listed(statement["Action"])}
    assert "lambda:RunMicrovm" in actions
    assert not [action for action in actions if action.startswith("bedrock-agentcore:")]


@needs_translator
@pytest.mark.parametrize("route", sorted(http_routes()))
def test_api_gateway_may_invoke_the_function_on_every_route(route: str) -> None:
    # API Gateway invokes with the request's own path in its source ARN; a permission whose
    # path keeps a placeholder literally (SAM's for any greedy name but `proxy`) refuses it.
    method, path = route.split(" ")
    request = re.sub(r"\{\w+\+\}", "plots/a.png", path.replace("{session_id}", "Uakgb_J5m9g-0JDMbcJqL"))
    source = f"arn:aws:execute-api:us-east-1:123456789012:HttpApi-physical/$default/{method}{request}"
    stack = Stack(translated(), {})
    allowed = [p["SourceArn"] for p in stack.resources("AWS::Lambda::Permission").values()]
    assert any(fnmatch.fnmatchcase(source, arn) for arn in allowed), (source, allowed)


@needs_translator
def test_the_reapers_schedule_is_named_per_stack() -> None:
    # Schedule names are unique in an account and region: two stacks of this template in one
    # must not both be `ReaperFunctionSchedule` (SAM's name whatever the stack).
    other = re.sub(r"stack/.*", "stack/other/5a8e2c10-0f1b-11f0-9d3c-0a1b2c3d4e5f", STACK_ID)
    names = [
        schedule["Name"]
        for stack_id in (STACK_ID, other)
        for schedule in Stack(translated(), {}, stack_id).resources("AWS::Scheduler::Schedule").values()
    ]
    assert len(names) == len(set(names)) == 2
    assert all(re.fullmatch(r"[0-9a-zA-Z-_.]{1,64}", name) for name in names)


# -- what the operator sees: alarms, the dashboard, the access log ------------------------

# The metrics AWS documents for HTTP APIs and for functions, by the dimension the stack
# reads them by (docs.aws.amazon.com: apigateway "http-api-metrics", lambda "monitoring-metrics").
AWS_METRICS = {
    ("AWS/ApiGateway", "ApiId"): {"4xx", "5xx", "Count", "IntegrationLatency", "Latency", "DataProcessed"},
    ("AWS/Lambda", "FunctionName"): {
        "Invocations", "Errors", "Throttles", "Duration", "ConcurrentExecutions", "DeadLetterErrors",
        "DestinationDeliveryFailures", "RecursiveInvocationsDropped", "PostRuntimeExtensionsDuration",
    },
}  # fmt: skip
# The variables API Gateway documents for an HTTP API's access log ("http-api-logging-variables").
ACCESS_LOG_VARIABLES = {
    f"$context.{name}"
    for name in [
        "accountId", "apiId", "authorizer.error", "authorizer.principalId", "awsEndpointRequestId",
        "awsEndpointRequestId2", "customDomain.basePathMatched", "dataProcessed", "domainName", "domainPrefix",
        "error.message", "error.messageString", "error.responseType", "extendedRequestId", "httpMethod",
        "identity.sourceIp", "identity.userAgent", "integration.error", "integration.integrationStatus",
        "integration.latency", "integration.requestId", "integration.status", "integrationErrorMessage",
        "integrationLatency", "integrationStatus", "path", "protocol", "requestId", "requestTime",
        "requestTimeEpoch", "responseLatency", "responseLength", "routeKey", "stage", "status",
    ]
}  # fmt: skip
TOPIC = "arn:aws:sns:us-east-1:123456789012:operators"


@pytest.mark.parametrize("parameters", [{}, MICROVM], ids=["agentcore", "microvm"])
def test_the_dashboard_is_one_valid_body_that_shows_every_alarm(parameters: dict[str, str]) -> None:
    stack = monitoring.stack(parameters=parameters)
    body = monitoring.dashboard(stack)  # JSON once substituted, whichever backend
    taken: set[tuple[int, int]] = set()
    for widget in body["widgets"]:
        x, y, width, height = (widget[k] for k in ("x", "y", "width", "height"))
        cells = {(x + i, y + j) for i in range(width) for j in range(height)}
        assert x >= 0 and x + width <= 24 and not cells & taken, widget  # the grid is 24 wide
        taken |= cells
        assert widget["type"] in ("text", "alarm", "metric", "log")
        assert widget["type"] in ("text", "alarm") or widget["properties"]["region"] == "us-east-1"
    [alarms] = monitoring.widgets(body, "alarm")
    arn = "arn:aws:cloudwatch:us-east-1:123456789012:alarm:{}-physical"
    assert sorted(alarms["alarms"]) == sorted(arn.format(name) for name in stack.resources("AWS::CloudWatch::Alarm"))


@pytest.mark.parametrize("parameters", [{}, MICROVM], ids=["agentcore", "microvm"])
def test_what_the_stack_reads_of_aws_is_what_aws_writes_of_its_own_resources(parameters: dict[str, str]) -> None:
    stack = monitoring.stack(parameters=parameters)
    own = {"ApiId": {stack.value({"Ref": "HttpApi"})}, "FunctionName": {f"{f}-physical" for f in functions()}}
    read = [metric for metric in monitoring.read(stack) if metric.namespace != monitoring.namespace(stack)]
    assert read
    for metric in read:
        [(dimension, value)] = metric.dimensions
        assert metric.name in AWS_METRICS[(metric.namespace, dimension)], metric
        assert value in own[dimension], metric


@pytest.mark.parametrize("topic", ["", TOPIC], ids=["the stack's topic", "a topic of yours"])
def test_every_alarm_is_well_formed_and_tells_the_topic_when_it_fires_and_clears(topic: str) -> None:
    stack = monitoring.stack(parameters={"AlarmTopicArn": topic})
    assert bool(stack.resources("AWS::SNS::Topic")) == (not topic)
    alarms = stack.resources("AWS::CloudWatch::Alarm")
    assert len(alarms) == 8
    for name, alarm in alarms.items():
        check_request("cloudwatch", "PutMetricAlarm", {"AlarmName": name} | alarm)  # CloudWatch's model of an alarm
        # The model says only "a string" of this one; CloudWatch takes these four.
        assert alarm["TreatMissingData"] in ("breaching", "notBreaching", "ignore", "missing"), name
        assert alarm["AlarmActions"] == alarm["OKActions"] == [topic or "AlarmTopic-physical"], name
        assert 'docs/aws.md "Alarms"' in alarm["AlarmDescription"], name
        if "Metrics" in alarm:  # metric math: one result, of queries it names
            [result] = [query for query in alarm["Metrics"] if query["ReturnData"]]
            ids = {query["Id"] for query in alarm["Metrics"]} - {result["Id"]}
            assert set(re.findall(r"\b[a-z]\w*\b", result["Expression"])) - {"IF"} == ids, name


def test_the_reaper_alarm_fires_when_no_pass_came_in_twice_the_schedules_interval() -> None:
    schedule = functions()["ReaperFunction"]["Events"]["Schedule"]["Properties"]["ScheduleExpression"]
    minutes = int(re.fullmatch(r"rate\((\d+) minutes\)", schedule)[1])  # type: ignore[index]
    stopped = TEMPLATE["Resources"]["ReaperStoppedAlarm"]["Properties"]
    assert (stopped["MetricName"], stopped["Statistic"], stopped["ComparisonOperator"], stopped["Threshold"]) == (
        "ReaperPasses", "Sum", "LessThanThreshold", 1,
    )  # fmt: skip
    assert stopped["Period"] * stopped["EvaluationPeriods"] == 2 * minutes * 60
    assert stopped["TreatMissingData"] == "breaching"  # no pass writes nothing: that is the symptom


def test_api_gateway_writes_a_json_access_log_with_the_ids_that_find_a_call() -> None:
    stack = monitoring.stack()
    [api] = stack.resources("AWS::Serverless::HttpApi").values()
    settings = api["AccessLogSettings"]
    group = stack.value({"Ref": "AccessLogGroup"})
    assert settings["DestinationArn"] == f"arn:aws:logs:us-east-1:123456789012:log-group:{group}"
    groups = stack.resources("AWS::Logs::LogGroup")
    assert groups["AccessLogGroup"]["RetentionInDays"] == groups["LogGroup"]["RetentionInDays"] == "30"
    line = json.loads(settings["Format"])  # one JSON object a request
    assert set(line.values()) <= ACCESS_LOG_VARIABLES, set(line.values()) - ACCESS_LOG_VARIABLES
    assert line["requestId"] == "$context.requestId"  # the function's correlation_id
    assert line["integrationRequestId"] == "$context.integration.requestId"  # the function's function_request_id
    assert "$context.path" not in line.values()  # a path names the user's files
    # The dashboard's queries of it read fields it has.
    reads = [query for query in monitoring.queries(monitoring.dashboard(stack)) if query.group == group]
    assert reads and all(query.fields <= set(line) for query in reads)
