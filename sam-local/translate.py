"""template.yaml as CloudFormation receives it: the SAM transform done here, offline.

cfn-lint skips its IAM checks on a template with the SAM transform, and what SAM
generates (roles, invoke permissions, the schedule) is only visible after it. So `make
sam` lints this output, and tests/test_sam.py reads it. Run with the SAM venv's Python
(samtranslator is the SAM CLI's): `.venv-sam/bin/python sam-local/translate.py [TEMPLATE]`.

Local code paths become placeholders in S3, as `sam package` would make them; the region
is any one (the translation only needs one to exist).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

_PLACEHOLDER = "s3://packaged-by-sam/key"
_LOCAL_PATHS = ("CodeUri", "ContentUri")


class _NoManagedPolicyNames:
    """The template names managed policies by ARN only: nothing to look up in IAM."""

    def load(self) -> dict[str, str]:
        return {}


def packaged(template: dict[str, Any]) -> dict[str, Any]:
    sections = [template.get("Globals", {}).get("Function", {})]
    sections += [resource.get("Properties", {}) for resource in template["Resources"].values()]
    for properties in sections:
        for key in _LOCAL_PATHS:
            if isinstance(properties.get(key), str) and not properties[key].startswith("s3://"):
                properties[key] = _PLACEHOLDER
    return template


def translated(path: str) -> dict[str, Any]:
    with open(path) as source:
        template = packaged(yaml_parse(source.read()))
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return transform(template, {}, _NoManagedPolicyNames())  # type: ignore[no-any-return]


if __name__ == "__main__":
    json.dump(translated(sys.argv[1] if len(sys.argv) > 1 else "template.yaml"), sys.stdout, indent=1)
