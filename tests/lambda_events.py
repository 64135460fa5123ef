"""The Lambda side of the tests: the sample events of events/, a context, a cold start."""

from __future__ import annotations

import base64
import importlib
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aws_lambda_powertools.utilities import parameters

from codeexec.settings import get_settings

from .emf import problems as emf_problems
from .monitoring import Metric

EVENTS = Path(__file__).parent.parent / "events"
# The session id the sample events carry; tests put a real one in its place.
SAMPLE_SESSION = "Uakgb_J5m9g-0JDMbcJqL"
# The key events/env.json gives sam local, and the one the sample events send.
SAM_LOCAL_KEY: str = json.loads((EVENTS / "env.json").read_text())["ApiFunction"]["CODE_EXEC_API_KEY"]


def load_event(name: str, replace: dict[str, str] | None = None) -> dict[str, Any]:
    """events/<name>.json, with each key of `replace` replaced by its value throughout."""
    text = (EVENTS / f"{name}.json").read_text()
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    return json.loads(text)


@dataclass(frozen=True)
class Context:
    function_name: str = "codeexec-ApiFunction"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:codeexec-ApiFunction"
    aws_request_id: str = "52fdfc07-2182-454f-963f-5f0f9a621d72"


# The `functions` fixture: a cold start of a function's module (tests/conftest.py).
Functions = Callable[[str, dict[str, str]], ModuleType]


def cold_start(monkeypatch: pytest.MonkeyPatch, module: str, env: dict[str, str]) -> ModuleType:
    """A new execution environment: `env` set, caches empty, the handler module imported afresh."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    parameters.clear_caches()
    sys.modules.pop(module, None)
    handler_module = importlib.import_module(module)
    # The function's log handler keeps the stdout of its first import; pytest swaps stdout
    # per test (and per phase), so point it at whichever stdout is current.
    for log_handler in logging.getLogger("codeexec").handlers:
        monkeypatch.setattr(log_handler, "stream", _CurrentStdout())
    return handler_module


class _CurrentStdout:
    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def body_of(response: dict[str, Any]) -> bytes:
    body = response.get("body", "")
    return base64.b64decode(body) if response.get("isBase64Encoded") else body.encode()


def json_of(response: dict[str, Any]) -> Any:
    return json.loads(body_of(response))


def printed(stdout: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The structured log lines a function printed, and its metrics: one dict per EMF
    document, each metric's value and each dimension's."""
    documents = _documents(stdout)
    return [d for d in documents if "_aws" not in d], [_metrics(d) for d in documents if "_aws" in d]


def written(stdout: str) -> set[Metric]:
    """Every metric the EMF documents printed file in CloudWatch: namespace, name, dimensions."""
    found = set()
    for emf in (d for d in _documents(stdout) if "_aws" in d):
        for directive in emf["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                dimensions = frozenset((name, emf[name]) for name in dimension_set)
                found |= {Metric(directive["Namespace"], m["Name"], dimensions) for m in directive["Metrics"]}
    return found


def _documents(stdout: str) -> list[dict[str, Any]]:
    """The JSON lines printed; an EMF one only if it is one as CloudWatch's specification words it."""
    documents = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    for emf in (d for d in documents if "_aws" in d):
        assert not (wrong := emf_problems(emf)), (wrong, emf)
    return documents


def _metrics(emf: dict[str, Any]) -> dict[str, Any]:
    directives = emf["_aws"]["CloudWatchMetrics"]
    names = [m["Name"] for directive in directives for m in directive["Metrics"]]
    dimensions = {d for directive in directives for group in directive["Dimensions"] for d in group}
    return {d: emf[d] for d in dimensions} | {name: _sum(emf[name]) for name in names}


def _sum(value: float | list[float]) -> float:
    return sum(value) if isinstance(value, list) else value
