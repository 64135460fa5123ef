"""Issue 40: what the service and the runner tell an operator. Metrics on a listener of their
own that no credential opens and that takes nothing in; runs, refusals and auth failures
counted by bounded labels (the series do not grow with users or sessions); one log line per
call carrying one request id from the service to its runner and back to the caller."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from codeexec.api.app import create_app
from codeexec.api.service import Service
from codeexec.settings import Settings
from codeexec.telemetry import logs
from codeexec.telemetry.exporter import Exporter

from ..calls import run
from ..conftest import API_KEY
from ..serving import Services, runner_settings, running_runner, serving


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the listener answers, by name and labels."""
    answer = httpx.get(f"{url}/metrics")
    assert answer.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def metrics_url(service: Service) -> Iterator[str]:
    assert service.telemetry.metrics is not None
    with serving(Exporter(service.telemetry.metrics)) as url:
        yield url


def test_runs_refusals_and_auth_failures_are_counted_by_bounded_labels(
    client: TestClient, metrics_url: str
) -> None:
    before = scrape(metrics_url)
    assert run(client, "print(1)")["stdout"] == "1\n"
    assert "ZeroDivisionError" in run(client, "1 / 0")["stderr"]
    assert client.get("/v1/files/x", headers={"X-API-Key": "wrong"}).status_code == 401
    assert client.get("/v1/files/x", headers={"X-API-Key": ""}).status_code == 401
    after = scrape(metrics_url)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("codeexec_runs_total", lang="py", outcome="ok") == 1
    assert grew("codeexec_runs_total", lang="py", outcome="error") == 1
    assert grew("codeexec_auth_failures_total", reason="bad_key") == 1
    assert grew("codeexec_auth_failures_total", reason="missing") == 1
    assert grew("codeexec_requests_total", route="/v1/exec", status="200", key="default") == 2
    assert sample(after, "codeexec_run_seconds_count", lang="py", start="cold") >= 2
    assert sample(after, "codeexec_sessions", runner="local") >= 1
    assert sample(after, "codeexec_disk_limit_bytes", runner="local") > 0
    # Nothing of a caller, a session or a file is a label.
    session = run(client, "print(2)")["session_id"]
    assert session not in httpx.get(f"{metrics_url}/metrics").text


def test_a_429_is_counted_by_route_and_the_share_it_passed(settings: Settings, services: Services) -> None:
    service = services(settings.model_copy(update={"max_concurrent_uploads": 1}))
    client = TestClient(create_app(service), headers={"X-API-Key": API_KEY})
    assert service.telemetry.metrics is not None
    with serving(Exporter(service.telemetry.metrics)) as metrics_url, service.admission.upload("someone", None):
        refused = client.post("/v1/upload", files={"file": ("a.txt", b"a")})
        assert refused.status_code == 429
        samples = scrape(metrics_url)
    assert sample(samples, "codeexec_rate_limited_total", route="/v1/upload", reason="full") == 1


def test_the_listener_needs_no_key_takes_no_body_and_is_not_a_route_of_the_api(
    client: TestClient, metrics_url: str
) -> None:
    assert httpx.get(f"{metrics_url}/metrics").status_code == 200  # no credential at all
    assert httpx.post(f"{metrics_url}/metrics", content=b"x" * 10).status_code == 413
    assert httpx.post(f"{metrics_url}/metrics").status_code == 405
    assert httpx.get(f"{metrics_url}/v1/exec").status_code == 404
    assert client.get("/metrics").status_code == 404  # the API's key opens nothing there
    assert client.get("/metrics", headers={"X-API-Key": ""}).status_code == 401
    # A body that never comes holds nothing: refused from its declared length alone.
    host, port = metrics_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as stalled:
        stalled.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
        assert stalled.recv(4096).startswith(b"HTTP/1.1 413")
        assert httpx.get(f"{metrics_url}/metrics").status_code == 200


def test_the_series_do_not_grow_with_users_or_sessions(client: TestClient, service: Service) -> None:
    """1,000 sessions of 200 users: the series after are those after the first ten."""
    assert service.telemetry.metrics is not None

    def series() -> int:
        return sum(len(family.samples) for family in service.telemetry.metrics.registry.collect())

    def upload(i: int) -> None:
        made = client.post("/v1/upload", files={"file": (f"f{i}.txt", b"x")}, headers={"User-Id": f"user-{i % 200}"})
        assert made.status_code == 200

    for i in range(10):
        upload(i)
    first = series()
    for i in range(10, 1000):
        upload(i)
    assert series() == first


def test_one_request_id_names_a_call_on_the_service_its_runner_and_its_answer(
    settings: Settings, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "codeexec.calls")
    with running_runner(settings) as (url, _):
        client = TestClient(create_app(services(runner_settings(settings, url))), headers={"X-API-Key": API_KEY})
        answer = client.post("/v1/exec", json={"lang": "py", "code": "print(1)"}, headers={"X-Request-Id": "lc-42.a"})
        made = client.post("/v1/exec", json={"lang": "py", "code": "print(1)"}, headers={"X-Request-Id": "bad\x01id"})
    assert answer.headers["X-Request-Id"] == "lc-42.a"
    lines = [record for record in caplog.records if getattr(record, "request_id", None) == "lc-42.a"]
    assert {(r.route, r.status) for r in lines} == {("/v1/exec", 200), ("/runs", 200)}
    assert {getattr(r, "outcome", None) for r in lines} == {"ok"}
    # A malformed id is replaced, on both sides, and never echoed.
    replaced = made.headers["X-Request-Id"]
    assert replaced != "bad\x01id" and len(replaced) == 32
    assert {r.route for r in caplog.records if getattr(r, "request_id", None) == replaced} == {"/v1/exec", "/runs"}


def test_a_json_line_per_call_names_the_call_and_never_the_key(
    client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    kept = root.handlers[:], root.level
    logs.configure("json", "INFO")
    try:
        ran = run(client, "print('secret-body')", user_id="alice")
    finally:
        root.handlers[:], _ = kept[0], root.setLevel(kept[1])
    out = capsys.readouterr().err
    [line] = [json.loads(text) for text in out.splitlines() if '"route":"/v1/exec"' in text]
    assert (line["message"], line["status"], line["lang"], line["outcome"]) == ("call", 200, "py", "ok")
    assert line["session"] == ran["session_id"] and len(line["request_id"]) == 32
    assert line["tenant"] and line["user"] and "alice" not in out
    for secret in (API_KEY, "secret-body"):
        assert secret not in out


def test_the_warm_pools_are_counted_by_kind(settings: Settings, services: Services) -> None:
    service = services(settings.model_copy(update={"warm_python": 0, "warm_sandboxes": 1, "warm_scientific": 0}))
    client = TestClient(create_app(service), headers={"X-API-Key": API_KEY})
    assert service.telemetry.metrics is not None
    with serving(Exporter(service.telemetry.metrics)) as metrics_url:
        assert run(client, "echo warm", lang="bash")["stdout"] == "warm\n"
        samples = scrape(metrics_url)
    assert sample(samples, "codeexec_warm_runs_total", runner="local", kind="bare", result="hit") == 1
    assert sample(samples, "codeexec_warm_ready", runner="local", kind="bare") <= 1
    assert sample(samples, "codeexec_run_seconds_count", lang="bash", start="warm") == 1
