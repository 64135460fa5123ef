"""The Helm chart (deploy/helm/codeexec) rendered without a cluster, and what the chart's
tests read of the objects: tests/deploy/test_helm.py and tests/deploy/test_monitoring.py.

helm comes from `make helm-tools` (.tools/bin), which `make test` reaches.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
CHART = ROOT / "deploy" / "helm" / "codeexec"
HELM = ROOT / ".tools" / "bin" / "helm"
VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
# The chart's profiles (values-<profile>.yaml): a ci/ file named <profile>-...values.yaml
# is rendered over its profile, as `helm install -f values-<profile>.yaml -f yours.yaml`.
PROFILES = {p.stem.removeprefix("values-"): p for p in CHART.glob("values-*.yaml")}
# 1.30: the chart's floor (Chart.yaml kubeVersion, the AppArmor field); 1.35: kubectl's own.
MINORS = ("1.30.0", "1.33.0", "1.34.0", "1.35.0")
RELEASE, NAMESPACE = "codeexec", "sandbox"

Obj = dict[str, Any]


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: `make helm-tools` installs it")
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120, check=False)


def layers(values: Path) -> list[Path]:
    """The values files a ci/ file is rendered with: its profile's first, where it names one."""
    profile = PROFILES.get(values.name.split("-")[0])
    return [profile, values] if profile else [values]


def files(values: Path) -> list[str]:
    return [arg for layer in layers(values) for arg in ("-f", str(layer))]


@functools.cache
def render(values: Path, *sets: str) -> tuple[Obj, ...]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *files(values)]
    done = helm(*args, *(arg for s in sets for arg in ("--set", s)))
    assert done.returncode == 0, done.stderr
    return tuple(o for o in yaml.safe_load_all(done.stdout) if o)


def values_of(values: Path) -> Obj:
    """What the files set, the later over the earlier (as Helm merges them)."""
    merged: Obj = {}
    for layer in layers(values):
        merged = _merge(merged, yaml.safe_load(layer.read_text()))
    return merged


def _merge(base: Obj, over: Obj) -> Obj:
    both = {**base, **over}
    return {k: _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
            for k, v in both.items()}  # fmt: skip


def one(objects: tuple[Obj, ...], kind: str, component: str | None = None) -> Obj:
    found = [o for o in objects if o["kind"] == kind and (
        component is None or o["metadata"]["labels"].get("app.kubernetes.io/component") == component)]
    assert len(found) == 1, f"{len(found)} {kind} objects ({component})"
    return found[0]


def container(workload: Obj) -> Obj:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    c: Obj = only
    return c


def env(workload: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container(workload)["env"]}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pod_labels(workload: Obj) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels
