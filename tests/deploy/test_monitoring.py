"""Issue 40: what an operator watches codeexec with. The alert rules (the chart's
files/alerts.yaml) pass promtool's check and its tests (deploy/prometheus/alerts_test.yaml),
each alert has its runbook in docs/operations.md, and every series the rules and the Grafana
dashboard read is one the processes export. The chart's opt-in monitoring objects (a
PodMonitor, a PrometheusRule, the dashboard's ConfigMap, a NetworkPolicy letting Prometheus
in) are linted, rendered and validated strictly, as tests/deploy/test_helm.py does the rest of the
chart: the Prometheus Operator's kinds against its CRDs' models (cloudcoil's).

tests/deploy/test_prometheus.py runs the rules and the dashboard's queries in a real Prometheus.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client.metrics_core import Metric

from codeexec.sandbox.port import HostLoad, PoolLoad
from codeexec.telemetry.metrics import Metrics

from ..helpers.helm import CHART, MINORS, VALUES, Obj, container, env, helm, matches, one, pod_labels, render
from ..helpers.prometheus import ALERTS, tool

ROOT = CHART.parent.parent.parent
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yaml"
SWARM_PROMETHEUS = ROOT / "deploy" / "swarm" / "prometheus.yml"
DASHBOARD = CHART / "files" / "dashboard.json"
OPERATIONS = ROOT / "docs" / "operations.md"
(DEFAULT,) = [v for v in VALUES if v.name == "default-values.yaml"]
PROMETHEUS_PODS = "metrics.allowFrom[0].podSelector.matchLabels.app=prometheus"
ON = ("metrics.podMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
      "metrics.grafanaDashboard.enabled=true", PROMETHEUS_PODS)  # fmt: skip
OPERATOR_KINDS = {"PodMonitor", "PrometheusRule"}


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def test_promtool_passes_the_rules_and_their_tests() -> None:
    for args in (["check", "rules", str(ALERTS)], ["test", "rules", str(ALERT_TESTS)]):
        done = subprocess.run([tool("promtool"), *args], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_swarm_stacks_prometheus_configuration_is_one(tmp_path: Path) -> None:
    """deploy/swarm/prometheus.yml, with the alerts beside it as docs/swarm.md mounts them."""
    shutil.copy(SWARM_PROMETHEUS, tmp_path / "prometheus.yml")
    shutil.copy(ALERTS, tmp_path / "alerts.yaml")
    done = subprocess.run([tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in done.stdout


def test_every_alert_fires_in_a_test_and_has_its_runbook() -> None:
    names = [rule["alert"] for rule in alert_rules()]
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for test in tests for case in test["alert_rule_test"] if not case["exp_alerts"]}
    assert fired == quiet == set(names)  # each fires in a test, and each is shown not to fire
    alerts = OPERATIONS.read_text().split("\n## Alerts\n", 1)[1]
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert f"\n### {rule['alert']}\n" in alerts, f"docs/operations.md \"Alerts\" has no runbook of {rule['alert']}"


def exported() -> set[str]:
    """The name of every series the service and a runner export, histograms' and counters'
    included, with a host holding a warm pool."""
    pool = {"py": PoolLoad(ready=1, hits=1, misses=1)}
    metrics = Metrics("service", lambda: [HostLoad("0", "up", pools=pool)])
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    families: list[Metric] = list(metrics.registry.collect())
    return {f.name + suffix for f in families for suffix in suffixes.get(f.type, ("",))} | {"up"}


@pytest.mark.parametrize("where", ["alerts", "dashboard"])
def test_every_series_read_is_one_the_processes_export(where: str) -> None:
    exprs = [rule["expr"] for rule in alert_rules()] if where == "alerts" else dashboard_exprs()
    read = {name for expr in exprs for name in re.findall(r"\b(?:codeexec|process)_[a-z_]+\b|\bup\b", expr)}
    assert read and read <= exported(), read - exported()


def test_the_dashboard_is_grafanas_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    taken: set[tuple[int, int]] = set()
    for panel in panels:
        box = panel["gridPos"]
        assert box["x"] >= 0 and box["x"] + box["w"] <= 24
        cells = {(x, y) for x in range(box["x"], box["x"] + box["w"]) for y in range(box["y"], box["y"] + box["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        assert all(t["expr"] and t["datasource"] == panel["datasource"] for t in panel["targets"])


def strictly(obj: Obj) -> None:
    """The Operator's kinds: what their CRD's model makes of them, and nothing dropped (a
    field the CRD does not know is dropped, where the API server refuses it)."""
    # Imported here: building its models takes seconds, which collecting the suite should not.
    from cloudcoil.models.prometheus_operator import v1 as operator

    made = getattr(operator, obj["kind"]).model_validate(obj)
    assert made.model_dump(mode="json", by_alias=True, exclude_unset=True) == obj


def test_monitoring_is_opt_in_and_the_listeners_always_on() -> None:
    objects = render(DEFAULT)
    assert not {"PodMonitor", "PrometheusRule"} & {o["kind"] for o in objects}
    assert not [o for o in objects if o["kind"] == "ConfigMap" and "codeexec.json" in o.get("data", {})]
    assert [o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("-metrics")] == []
    for kind, variable, port in (("Deployment", "METRICS_PORT", 9464), ("StatefulSet", "RUNNER_METRICS_PORT", 9465)):
        workload = one(objects, kind)
        assert env(workload)[variable]["value"] == str(port)
        assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container(workload)["ports"]


def test_lint_with_monitoring_on() -> None:
    done = helm("lint", "--strict", str(CHART), "-f", str(DEFAULT), *(a for s in ON for a in ("--set", s)))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("minor", MINORS)
def test_every_object_is_valid_with_monitoring_on(minor: str) -> None:
    objects = render(DEFAULT, *ON)
    assert {o["kind"] for o in objects} >= OPERATOR_KINDS
    for obj in objects:
        if obj["kind"] in OPERATOR_KINDS:
            strictly(obj)
        else:
            kubernetes_validate.validate(obj, minor, strict=True)


def test_strict_validation_catches_an_unknown_field_of_the_operators_kinds() -> None:
    monitor = one(render(DEFAULT, *ON), "PodMonitor")
    strictly(monitor)
    misspelt = json.loads(json.dumps(monitor))
    misspelt["spec"]["podMetricsEndpoints"][0]["scrapeTimout"] = "10s"
    with pytest.raises(AssertionError):
        strictly(misspelt)


def test_the_pod_monitor_scrapes_both_workloads_on_their_metrics_port() -> None:
    objects = render(DEFAULT, *ON)
    monitor = one(objects, "PodMonitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["interval"] == "30s"
    for kind, variable in (("Deployment", "METRICS_PORT"), ("StatefulSet", "RUNNER_METRICS_PORT")):
        workload = one(objects, kind)
        assert matches(monitor["spec"]["selector"]["matchLabels"], pod_labels(workload))
        (port,) = [p for p in container(workload)["ports"] if p["name"] == endpoint["port"]]
        assert str(port["containerPort"]) == env(workload)[variable]["value"]


def test_the_rule_and_the_dashboard_are_the_files_as_they_are() -> None:
    objects = render(DEFAULT, *ON)
    assert one(objects, "PrometheusRule")["spec"] == yaml.safe_load(ALERTS.read_text())
    (board,) = [o for o in objects if o["kind"] == "ConfigMap" and "codeexec.json" in o.get("data", {})]
    assert json.loads(board["data"]["codeexec.json"]) == json.loads(DASHBOARD.read_text())
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"


@pytest.mark.parametrize("policies", [True, False])
def test_prometheus_alone_is_let_in_and_only_to_the_metrics_ports(policies: bool) -> None:
    objects = render(DEFAULT, *ON, f"networkPolicy.enabled={str(policies).lower()}")
    opened = [o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("-metrics")]
    if not policies:
        assert opened == []
        return
    (policy,) = opened
    for kind in ("Deployment", "StatefulSet"):
        assert matches(policy["spec"]["podSelector"]["matchLabels"], pod_labels(one(objects, kind)))
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{
        "from": [{"podSelector": {"matchLabels": {"app": "prometheus"}}}],
        "ports": [{"port": "metrics", "protocol": "TCP"}],
    }]  # fmt: skip
    # No policy of the chart opens the metrics port to anyone else.
    others = [o for o in objects if o["kind"] == "NetworkPolicy" and o is not policy]
    assert all(p["port"] != "metrics" for o in others for r in o["spec"]["ingress"] for p in r["ports"])


def test_a_listener_turned_off_has_no_port() -> None:
    objects = render(DEFAULT, *ON, "metrics.servicePort=0")
    service = one(objects, "Deployment")
    assert env(service)["METRICS_PORT"]["value"] == "0"
    assert [p["name"] for p in container(service)["ports"]] == ["http"]
    assert "metrics" in [p["name"] for p in container(one(objects, "StatefulSet"))["ports"]]


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (("metrics.podMonitor.enabled=true",), "name its pods in metrics.allowFrom"),
        (("metrics.runnerPort=8080",), "metrics.runnerPort must differ"),
        (("metrics.servicePort=8000",), "metrics.servicePort must differ"),
        (("metrics.podMonitor.interval=30 seconds",), "interval"),
        (("metrics.podMonitor.enabeld=true",), "enabeld"),
    ],
)
def test_bad_monitoring_values_are_refused_with_a_sentence(sets: tuple[str, ...], says: str) -> None:
    done = helm("template", "codeexec", str(CHART), "-f", str(DEFAULT), *(a for s in sets for a in ("--set", s)))
    assert done.returncode != 0
    assert says in done.stderr

