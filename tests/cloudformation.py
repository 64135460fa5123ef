"""The stack as CloudFormation would make it, for tests: template.yaml as written
(`TEMPLATE`) or translated by SAM (sam-local/translate.py, in the SAM venv), and its
intrinsic functions evaluated for one set of parameters, with made-up but well-formed ids
and ARNs for what AWS would create."""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).parent.parent
SAM_PYTHON = ROOT / ".venv-sam" / "bin" / "python"
ACCOUNT, REGION = "123456789012", "us-east-1"
STACK_ID = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/codeexec/1c2fa620-982a-11e3-aff7-50e2416294e0"
NO_VALUE = object()


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

# What `Fn::GetAtt` answers for the resources the policies name: (type, attribute) -> ARN,
# `{name}` standing for the resource's physical name.
_ATTRIBUTES = {
    ("AWS::Lambda::MicrovmImage", "ImageArn"): "arn:aws:lambda:{region}:{account}:microvm-image:{name}",
    ("AWS::Lambda::NetworkConnector", "Arn"): "arn:aws:lambda:{region}:{account}:network-connector:{name}",
    ("AWS::BedrockAgentCore::CodeInterpreterCustom", "CodeInterpreterArn"):
        "arn:aws:bedrock-agentcore:{region}:{account}:code-interpreter-custom/{name}",
    ("AWS::BedrockAgentCore::CodeInterpreterCustom", "CodeInterpreterId"): "{name}",
    ("AWS::S3::Bucket", "Arn"): "arn:aws:s3:::{name}",
    ("AWS::Logs::LogGroup", "Arn"): "arn:aws:logs:{region}:{account}:log-group:{name}:*",
    ("AWS::Lambda::Function", "Arn"): "arn:aws:lambda:{region}:{account}:function:{name}",
    ("AWS::IAM::Role", "Arn"): "arn:aws:iam::{account}:role/{name}",
    ("AWS::CloudWatch::Alarm", "Arn"): "arn:aws:cloudwatch:{region}:{account}:alarm:{name}",
}  # fmt: skip
# What `Ref` answers where it is not the physical name.
_REFS = {"AWS::SecretsManager::Secret": "arn:aws:secretsmanager:{region}:{account}:secret:{name}-AbCdEf"}


@cache
def translated() -> dict[str, Any]:
    done = subprocess.run(
        [SAM_PYTHON, ROOT / "sam-local" / "translate.py", ROOT / "template.yaml"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return json.loads(done.stdout)  # type: ignore[no-any-return]


class Stack:
    """The translated template under `parameters` (the rest at their defaults)."""

    def __init__(self, template: dict[str, Any], parameters: dict[str, str], stack_id: str = STACK_ID) -> None:
        self.template = template
        self.parameters = {k: str(v.get("Default", "")) for k, v in template.get("Parameters", {}).items()}
        self.parameters.update(parameters)
        self.pseudo = {
            "AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": "aws", "AWS::StackId": stack_id,
            "AWS::StackName": stack_id.split("/")[1], "AWS::URLSuffix": "amazonaws.com", "AWS::NoValue": NO_VALUE,
        }  # fmt: skip
        self.conditions = {name: self.value(body) for name, body in template.get("Conditions", {}).items()}

    def resources(self, kind: str) -> dict[str, Any]:
        """The resources of a type that this stack creates, their properties evaluated."""
        return {
            name: self.value(resource.get("Properties", {}))
            for name, resource in self.template["Resources"].items()
            if resource["Type"] == kind and self.conditions.get(resource.get("Condition", ""), True)
        }

    def value(self, node: Any) -> Any:  # noqa: C901 - one branch per intrinsic function
        if isinstance(node, list):
            return [v for v in (self.value(item) for item in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        key = next(iter(node), "")
        if len(node) != 1 or not (key in ("Ref", "Condition") or key.startswith("Fn::")):
            return {k: v for k, v in ((k, self.value(v)) for k, v in node.items()) if v is not NO_VALUE}
        ((function, argument),) = node.items()
        if function == "Ref":
            return self._ref(argument)
        if function == "Condition":
            return self.conditions[argument]
        if function == "Fn::If":
            name, then, otherwise = argument
            return self.value(then if self.conditions[name] else otherwise)
        args = self.value(argument) if function != "Fn::Sub" else argument
        if function == "Fn::GetAtt":
            name, attribute = args.split(".", 1) if isinstance(args, str) else args
            return self._attribute(name, attribute)
        if function == "Fn::Sub":
            text, names = (args, {}) if isinstance(args, str) else (args[0], self.value(args[1]))
            return re.sub(r"\$\{([^}!]+)\}", lambda m: str(self._sub(m.group(1), names)), text)
        simple = {
            "Fn::Join": lambda a: a[0].join(a[1]),
            "Fn::Select": lambda a: a[1][int(a[0])],
            "Fn::Split": lambda a: a[1].split(a[0]),
            "Fn::Equals": lambda a: str(a[0]) == str(a[1]),
            "Fn::Not": lambda a: not a[0],
            "Fn::And": all,
            "Fn::Or": any,
            "Fn::Contains": lambda a: a[1] in a[0],
        }
        return simple[function](args)

    def _ref(self, name: str) -> Any:
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.parameters:
            kind = self.template["Parameters"][name]["Type"]
            value = self.parameters[name]
            return value.split(",") if kind == "CommaDelimitedList" else value
        kind = self.template["Resources"][name]["Type"]
        return _REFS.get(kind, "{name}").format(region=REGION, account=ACCOUNT, name=f"{name}-physical")

    def _sub(self, name: str, names: dict[str, Any]) -> Any:
        if name in names:
            return names[name]
        if "." in name:
            return self._attribute(*name.split(".", 1))
        return self._ref(name)

    def _attribute(self, name: str, attribute: str) -> str:
        kind = self.template["Resources"][name]["Type"]
        pattern = _ATTRIBUTES[(kind, attribute)]
        return pattern.format(region=REGION, account=ACCOUNT, name=f"{name}-physical")
