"""CloudWatch's Embedded Metric Format, as its specification words it: a document is checked
against the specification's JSON schema (with today's limits: 30 dimension keys a set, 100
metrics a directive, a storage resolution of 1 or 60), then for what a schema cannot say:
every key a directive names is a member of the root, a dimension's a non-empty string, a
metric's a number or at most 100 of them.

https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
"""

from __future__ import annotations

import math
from typing import Any

from jsonschema import Draft7Validator

MAX_DIMENSIONS = 30  # keys in one dimension set
MAX_METRICS = 100  # definitions in one directive
MAX_VALUES = 100  # values of one metric in one document

UNITS = (
    "Seconds|Microseconds|Milliseconds|Bytes|Kilobytes|Megabytes|Gigabytes|Terabytes|Bits|Kilobits|Megabits|"
    "Gigabits|Terabits|Percent|Count|Bytes/Second|Kilobytes/Second|Megabytes/Second|Gigabytes/Second|"
    "Terabytes/Second|Bits/Second|Kilobits/Second|Megabits/Second|Gigabits/Second|Terabits/Second|Count/Second|None"
)
_NAME = {"type": "string", "minLength": 1, "maxLength": 255}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["_aws"],
    "properties": {
        "_aws": {
            "type": "object",
            "required": ["Timestamp", "CloudWatchMetrics"],
            "properties": {
                "Timestamp": {"type": "integer", "minimum": 0},
                "CloudWatchMetrics": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["Namespace", "Dimensions", "Metrics"],
                        "properties": {
                            "Namespace": {**_NAME, "pattern": r"\S"},
                            "Dimensions": {
                                "type": "array",
                                "minItems": 1,
                                "items": {"type": "array", "maxItems": MAX_DIMENSIONS, "items": _NAME},
                            },
                            "Metrics": {
                                "type": "array",
                                "maxItems": MAX_METRICS,
                                "items": {
                                    "type": "object",
                                    "required": ["Name"],
                                    "properties": {
                                        "Name": _NAME,
                                        "Unit": {"type": "string", "pattern": f"^({UNITS})$"},
                                        "StorageResolution": {"enum": [1, 60]},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}
_VALIDATOR = Draft7Validator(SCHEMA)


def problems(document: dict[str, Any]) -> list[str]:
    """What makes `document` not an EMF document CloudWatch extracts metrics from; none: it is one."""
    found = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _VALIDATOR.iter_errors(document)]
    if found:
        return found
    for directive in document["_aws"]["CloudWatchMetrics"]:
        names = [metric["Name"] for metric in directive["Metrics"]]
        if len(set(names)) != len(names):
            found.append(f"a metric defined twice in one directive: {names}")
        for dimension in {key for dimension_set in directive["Dimensions"] for key in dimension_set}:
            found += _dimension_problems(dimension, document.get(dimension))
            if dimension in names:
                found.append(f"{dimension}: both a dimension and a metric")
        for name in names:
            found += _metric_problems(name, document.get(name))
    return found


def _dimension_problems(key: str, value: object) -> list[str]:
    if not isinstance(value, str):
        return [f"dimension {key}: {value!r} is not a string member of the root"]
    if not (1 <= len(value) <= 1024 and value.isascii() and value.strip()):
        return [f"dimension {key}: {value!r} is not 1 to 1024 ASCII characters, some not blank"]
    return []


def _metric_problems(name: str, value: object) -> list[str]:
    values = value if isinstance(value, list) else [value]
    if not 1 <= len(values) <= MAX_VALUES:
        return [f"metric {name}: {len(values)} values, not 1 to {MAX_VALUES}"]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        return [f"metric {name}: {value!r} is not a number or a list of numbers at the root"]
    return []
