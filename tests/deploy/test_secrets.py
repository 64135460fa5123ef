"""The service key from AWS Secrets Manager (moto, in-process): read once per cold start."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws

from codeexec.settings import get_settings

from ..lambda_events import SAM_LOCAL_KEY, Context, Functions, load_event

KEY = "key-from-secrets-manager-0123456789"
ROTATED = "rotated-key-9876543210"


@pytest.fixture
def secret_arn(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield boto3.client("secretsmanager").create_secret(Name="codeexec-key", SecretString=KEY)["ARN"]


@pytest.fixture
def env(secret_arn: str, sandbox_root: Path) -> Iterator[dict[str, str]]:
    yield {
        "CODE_EXEC_API_KEY_SECRET_ARN": secret_arn,
        "CODE_EXEC_API_KEY": "",  # as the template declares it
        "SANDBOX_BACKEND": "local",
        "SANDBOX_ROOT": str(sandbox_root),
        "POWERTOOLS_METRICS_NAMESPACE": "codeexec-test",
    }
    get_settings.cache_clear()


def upload_with(api: ModuleType, key: str) -> int:
    reply = api.handler(load_event("upload", {SAM_LOCAL_KEY: key}), Context())
    return reply["statusCode"]


def test_the_key_comes_from_the_secret(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], functions: Functions
) -> None:
    api = functions("handlers.api", env)
    assert upload_with(api, KEY) == 200
    assert upload_with(api, "wrong-key") == 401
    assert upload_with(api, SAM_LOCAL_KEY) == 401
    assert KEY not in capsys.readouterr().out


def test_the_secret_is_read_once_per_cold_start(env: dict[str, str], functions: Functions) -> None:
    api = functions("handlers.api", env)
    assert upload_with(api, KEY) == 200
    boto3.client("secretsmanager").put_secret_value(SecretId=env["CODE_EXEC_API_KEY_SECRET_ARN"], SecretString=ROTATED)

    # Later requests of the same environment use the key it read, not a fresh read.
    assert upload_with(api, KEY) == 200
    assert upload_with(api, ROTATED) == 401

    api = functions("handlers.api", env)
    assert upload_with(api, ROTATED) == 200
    assert upload_with(api, KEY) == 401


def test_the_key_is_read_after_init_so_not_kept_in_a_snapshot(
    env: dict[str, str], functions: Functions
) -> None:
    """With SnapStart every new environment resumes from one snapshot taken after init:
    a key read at init would be that snapshot's forever. It is read on the first request."""
    api = functions("handlers.api", env)  # the init phase: what a snapshot holds
    boto3.client("secretsmanager").put_secret_value(SecretId=env["CODE_EXEC_API_KEY_SECRET_ARN"], SecretString=ROTATED)
    assert upload_with(api, ROTATED) == 200  # the first request after the restore reads it
    assert upload_with(api, KEY) == 401


def test_init_makes_nothing_unique(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], functions: Functions) -> None:
    """Nothing drawn from the system's randomness at init (ids, tokens, seeds), which
    every environment restored from one snapshot would share: the deployed configuration,
    the AgentCore backend and the large-files bucket included."""
    drawn: list[str] = []

    def recording(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def draw(*args: Any, **kwargs: Any) -> Any:
            drawn.append(name)
            return real(*args, **kwargs)

        return draw

    for owner, name in [(os, "urandom"), (uuid, "uuid4"), (random.SystemRandom, "getrandbits"),
                        (random.SystemRandom, "random")]:  # fmt: skip
        monkeypatch.setattr(owner, name, recording(name, getattr(owner, name)))
    deployed = {"SANDBOX_BACKEND": "agentcore", "AWS_REGION": "us-east-1", "LARGE_FILES_BUCKET": "large"}
    api = functions("handlers.api", env | deployed)
    assert drawn == []
    assert api.service.sessions.large_files.bucket == "large"
    # The recorder sees draws: a request makes some (the AgentCore session's client token).
    upload_with(api, KEY)
    assert "uuid4" in drawn
