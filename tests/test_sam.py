"""The SAM application: template.yaml agrees with the app and with events/, and
`sam validate --lint` and `sam build` (no container) turn it into a deployable bundle."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi import FastAPI

from .lambda_events import EVENTS

ROOT = Path(__file__).parent.parent
SAM = ROOT / ".venv-sam" / "bin" / "sam"  # where `make sam` installs it
ELF_MACHINE = {"arm64": 183, "x86_64": 62}


class _TemplateLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags (!Ref, !Sub, ...) read as {"Ref": ...} etc."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = suffix if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        return {name: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {name: loader.construct_sequence(node, deep=True)}
    return {name: loader.construct_mapping(node, deep=True)}


_TemplateLoader.add_multi_constructor("!", _intrinsic)
TEMPLATE: dict[str, Any] = yaml.load((ROOT / "template.yaml").read_text(), Loader=_TemplateLoader)


def functions() -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in TEMPLATE["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}


def http_routes() -> dict[str, dict[str, Any]]:
    """Every HttpApi event of every function, by route key ("POST /v1/exec")."""
    events = [e["Properties"] for f in functions().values() for e in f.get("Events", {}).values()]
    return {f"{e['Method']} {e['Path']}": e for e in events if "ApiId" in e}


def test_the_template_routes_are_the_apps_routes(app: FastAPI) -> None:
    served = {f"{method.upper()} {path}" for path, item in app.openapi()["paths"].items() for method in item}
    assert {key.replace("+}", "}") for key in http_routes()} == served, "template.yaml: one route per app route"
    for key, route in http_routes().items():
        assert route["ApiId"] == {"Ref": "HttpApi"}
        assert route["PayloadFormatVersion"] == "2.0"
        # A file id is a path (plots/a.png): API Gateway must hand over the rest of the URL.
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


@pytest.mark.skipif(not (SAM.exists() or shutil.which("sam")), reason="no SAM CLI: `make sam` installs it")
def test_sam_validates_and_builds_a_bundle(tmp_path: Path) -> None:
    sam = str(SAM) if SAM.exists() else "sam"
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0"}
    for args in (["validate", "--lint"], ["build", "--build-dir", str(tmp_path / "build")]):
        done = subprocess.run([sam, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr

    build = tmp_path / "build"
    assert (build / "ApiFunction" / "api.py").is_file()
    assert (build / "ReaperFunction" / "reaper.py").is_file()
    layer = build / "CodeExecLayer" / "python"
    for module in ("api/app.py", "api/routers/files.py", "sessions.py", "sandbox/agentcore/sandboxes.py"):
        assert (layer / "codeexec" / module).is_file(), module
    installed = {_normalized(p.name.split("-")[0]) for p in layer.glob("*.dist-info")}
    required = {_normalized(re.split(r"[<>=!~\[; ]", line)[0]) for line in _requirements()}
    assert required <= installed
    # Native code is built for the functions' architecture, not this machine's.
    assert TEMPLATE["Globals"]["Function"]["Architectures"] == [{"Ref": "Architecture"}]
    architecture = TEMPLATE["Parameters"]["Architecture"]["Default"]
    machines = {int.from_bytes(so.read_bytes()[18:20], "little") for so in layer.rglob("*.so")}
    assert machines == {ELF_MACHINE[architecture]}


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
            for statement in policy["Fn::If"][1]["Statement"]:
                granted = statement["Action"]
                actions |= {granted} if isinstance(granted, str) else set(granted)
    return actions


def test_each_function_is_granted_exactly_the_microvm_calls_it_makes() -> None:
    # The API function leases (Run, then Get while the VM boots), opens (Get, a token for
    # the runner) and ends a failed upload's session; the reaper lists, re-reads and ends.
    assert _microvm_actions("ApiFunction") == {
        "lambda:RunMicrovm", "lambda:GetMicrovm", "lambda:CreateMicrovmAuthToken", "lambda:TerminateMicrovm"
    }  # fmt: skip
    assert _microvm_actions("ReaperFunction") == {"lambda:ListMicrovms", "lambda:GetMicrovm", "lambda:TerminateMicrovm"}
    resources = TEMPLATE["Resources"]
    assert resources["EgressConnector"]["Properties"]["Configuration"]["VpcEgressConfiguration"]["SecurityGroupIds"]
    egress = resources["MicrovmSecurityGroup"]["Properties"]["SecurityGroupEgress"]
    assert [rule["CidrIp"] for rule in egress] == ["127.0.0.1/32"]  # no way out
    env = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    assert env["MICROVM_EGRESS_CONNECTOR"] == {"Fn::If": ["UseMicrovm", {"Fn::GetAtt": "EgressConnector.Arn"}, ""]}
