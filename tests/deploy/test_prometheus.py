"""Issue 40: a real Prometheus (Debian's) scrapes the service and a fleet of three runners,
each on its metrics listener, every second, and evaluates the chart's alert rules. Asked
over its HTTP API, it finds the runs the test made, the 429 it provoked, and the runner it
killed marked down from the first scrape after; the runner-down alerts go pending, every
rule evaluates without error, and every query of the Grafana dashboard answers.

The alerts' `for` (a minute and more) is not waited out here: promtool's tests
(deploy/prometheus/alerts_test.yaml, tests/deploy/test_monitoring.py) show each alert firing after
it and not before.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.runner.app import Runner
from codeexec.settings import Settings
from codeexec.telemetry.exporter import Exporter

from ..calls import run, upload
from ..conftest import API_KEY
from ..helpers.helm import CHART
from ..helpers.prometheus import ALERTS, Prometheus, running_prometheus
from ..serving import Services, fleet_settings, running_runner, serving

DASHBOARD = CHART / "files" / "dashboard.json"
RUNS = 4
# Panels with no series here: these runners keep no warm pools (the tests' WARM_* are 0), so
# nothing counts codeexec_warm_ready and codeexec_warm_runs (tests/api/test_telemetry.py does).
NOT_YET_FED = {"Warm runs ready", "Warm hits"}


class Fleet:
    """Three runners in this process, each with its API and its metrics listener, each of
    which can be killed alone: both its listeners closed at once."""

    def __init__(self, settings: Settings, stack: contextlib.ExitStack) -> None:
        self.urls: list[str] = []
        self.metrics: list[str] = []  # host:port of each runner's metrics listener
        self._runners: list[contextlib.ExitStack] = []
        for index in range(3):
            runner = stack.enter_context(contextlib.ExitStack())
            url, made = runner.enter_context(running_runner(settings.model_copy(update={"runner_index": str(index)})))
            self.urls.append(url)
            self.metrics.append(self._listen(runner, made))
            self._runners.append(runner)

    @staticmethod
    def _listen(stack: contextlib.ExitStack, runner: Runner) -> str:
        assert runner.telemetry.metrics is not None
        return stack.enter_context(serving(Exporter(runner.telemetry.metrics))).removeprefix("http://")

    def kill(self, index: int) -> None:
        self._runners[index].close()


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as made:
        yield made


def test_prometheus_finds_the_runs_a_429_and_a_killed_runner(
    settings: Settings, services: Services, stack: contextlib.ExitStack, tmp_path: Path
) -> None:
    fleet = Fleet(settings, stack)
    # One upload at a time, so that the test can hold the one slot and be refused a second.
    service = services(fleet_settings(settings, fleet.urls).model_copy(update={"max_concurrent_uploads": 1}))
    assert service.telemetry.metrics is not None
    service_metrics = stack.enter_context(serving(Exporter(service.telemetry.metrics))).removeprefix("http://")
    prometheus = stack.enter_context(
        running_prometheus(tmp_path, {"service": [service_metrics], "runners": fleet.metrics})
    )
    client = TestClient(create_app(service), headers={"X-API-Key": API_KEY})

    for n in range(RUNS):
        assert run(client, f"print({n})")["stdout"] == f"{n}\n"
    upload(client, "a.txt", b"a")
    assert client.get("/v1/files/x", headers={"X-API-Key": "wrong"}).status_code == 401
    with service.admission.upload("someone", None):
        assert client.post("/v1/upload", files={"file": ("b.txt", b"b")}).status_code == 429

    # The service counts what its callers asked, the runners what they ran: the same runs.
    ran = 'sum(codeexec_runs_total{job="%s", lang="py", outcome="ok"}) == %d'
    prometheus.wait(ran % ("service", RUNS))
    prometheus.wait(ran % ("runners", RUNS))
    prometheus.wait('codeexec_rate_limited_total{job="service", route="/v1/upload", reason="full"} == 1')
    assert prometheus.value('sum(codeexec_requests_total{job="service", status="429"})') == 1
    prometheus.wait('count(codeexec_runner_up{job="service"} == 1) == 3')
    # Every runner scraped once at least: CodeexecProcessDown is for a process that exported
    # its metrics (the sums above would hold with runner 1 not yet scraped, under load).
    prometheus.wait('count(codeexec_process_info{job="runners"}) == 3')

    fleet.kill(1)
    killed = time.time()  # both its listeners closed by now
    # Every scrape that began after the kill found it down (Prometheus stamps a sample with
    # its scrape's start): the first one, and those after it.
    after = scrapes_after(prometheus, f'up{{instance="{fleet.metrics[1]}"}}', killed)
    assert {value for _, value in after} == {0.0}
    # The service's view of it: down once its health check has failed, at the next scrape.
    prometheus.wait('codeexec_runner_up{job="service", runner="1"} == 0')
    seen = time.time() - killed
    assert prometheus.value('codeexec_runner_state{job="service", runner="1", state="down"}') == 1
    print(f"runner 1 killed: its scrape down {after[0][0] - killed:.2f} s after, the service's view {seen:.2f} s")

    # The real rules, on the real series: pending (their `for` not yet passed), none firing.
    prometheus.wait('ALERTS{alertname="CodeexecRunnerDown", runner="1", alertstate="pending"}')
    prometheus.wait(f'ALERTS{{alertname="CodeexecProcessDown", instance="{fleet.metrics[1]}", alertstate="pending"}}')
    assert prometheus.query('ALERTS{alertstate="firing"}') == []
    rules = prometheus.rules()
    assert {r["name"] for r in rules} == {r["alert"] for r in yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]}
    assert {r["health"] for r in rules} == {"ok"}, rules

    check_the_dashboard(prometheus)


def scrapes_after(prometheus: Prometheus, selector: str, since: float) -> list[tuple[float, float]]:
    """The samples of one series scraped after `since`, once there is one."""
    deadline = time.monotonic() + 15
    while True:
        (series,) = prometheus.query(f"{selector}[30s]")
        after = [(float(stamp), float(value)) for stamp, value in series["values"] if float(stamp) > since]
        if after:
            return after
        assert time.monotonic() < deadline, f"no scrape of {selector} after the kill"
        time.sleep(0.1)


def check_the_dashboard(prometheus: Prometheus) -> None:
    """Every query of every panel answers without an error, and each has series but those
    of what nothing counts yet."""
    empty = set()
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            if not prometheus.query(target["expr"].replace("$__rate_interval", "10s")):
                empty.add((panel["title"], target["legendFormat"]))
    assert {title for title, _ in empty} <= NOT_YET_FED, empty
