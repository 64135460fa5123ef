"""What the operator's console shows (routers/admin.py serves it), made when it asks, from the
processes and the disk: no store keeps any of it.

Each host reports its load, who holds most on it and its last hour (port.HostReport: the
local backend's own, or one request to each runner of a fleet); this process adds what only
it saw (its 429s, the calls of each service key) and its settings. A restart of a runner
forgets its hour; a restart of this replica, its keys' figures (docs/operations.md).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from ..sandbox.port import HostReport
from ..telemetry.history import percentile
from .service import Service

SHOWN = 10  # users and tenants in each top list
FAILURES = 20


def overview(service: Service) -> dict[str, Any]:
    reports = service.sandboxes.reports()
    history = service.telemetry.history
    own = history.summary() if history else {}
    # A fleet's runners saw every run of every replica; on one host this process ran them.
    hours = [(r.load.name, r.history) for r in reports if r.history is not None]
    hours = hours or [(reports[0].load.name if reports else "", own)]
    return {
        "at": time.time(),
        "hosts": [{**asdict(r.load), "answered": r.usage is not None} for r in reports],
        "minutes": _minutes([hour for _, hour in hours], own),
        "failures": sorted(
            ({**failure, "host": host} for host, hour in hours for failure in hour.get("failures", [])),
            key=lambda failure: failure["at"], reverse=True,
        )[:FAILURES],
        "usage": _usage(reports, [hour for _, hour in hours]),
        "keys": _keys(service, own),
        "settings": settings(service),
    }  # fmt: skip


def _minutes(hours: list[Mapping[str, Any]], own: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each minute of the hour with a run or a refusal, every host's added up, its p50 and
    p95 read from the sum of their duration buckets; the 429s are this replica's own."""
    runs: Counter[int] = Counter()
    failures: dict[int, Counter[str]] = {}
    buckets: dict[int, Counter[int]] = {}
    for hour in hours:
        for minute in hour.get("minutes", []):
            at = int(minute["at"])
            runs[at] += minute["runs"]
            failures.setdefault(at, Counter()).update(minute["failures"])
            buckets.setdefault(at, Counter()).update({int(i): n for i, n in minute["buckets"].items()})
    refused = {int(m["at"]): int(m["rate_limited"]) for m in own.get("minutes", [])}
    return [
        {"at": at, "runs": runs[at], "failures": dict(failures.get(at, {})), "rate_limited": refused.get(at, 0),
         "p50": percentile(buckets.get(at, Counter()), 0.5), "p95": percentile(buckets.get(at, Counter()), 0.95)}
        for at in sorted(runs.keys() | refused.keys())
    ]  # fmt: skip


def _usage(reports: list[HostReport], hours: list[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The users and tenants that hold most, every host's top added up, with their runs in
    the hour. Users are named by their digest (the organization's is in it), tenants by theirs."""
    totals: dict[str, dict[str, Counter[str]]] = {"users": {}, "tenants": {}}
    orgs: dict[str, str] = {}
    for report in reports:
        for scope, rows in (report.usage or {}).items():
            for row in rows:
                who = row["user"] if scope == "users" else row["org"]
                orgs[who] = row["org"]
                totals[scope].setdefault(who, Counter()).update(bytes=row["bytes"], sessions=row["sessions"])
    for scope, by in (("users", "user"), ("tenants", "tenant")):
        for hour in hours:
            for who, count in hour.get("runs_by", {}).get(by, {}).items():
                totals[scope].setdefault(who, Counter())["runs"] += count
    return {
        scope: [
            {"id": who, "org": orgs.get(who, who), "bytes": c["bytes"], "sessions": c["sessions"], "runs": c["runs"]}
            for who, c in sorted(rows.items(), key=lambda item: (item[1]["bytes"], item[1]["runs"]), reverse=True)
        ][:SHOWN]
        for scope, rows in totals.items()
    }


def _keys(service: Service, own: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each service key this replica heard in the hour, and those it knows of, with its limits."""
    limits = {key.name: key for key in service.auth.named_keys()}
    seen = own.get("keys", {})
    return [
        {"name": name, "calls": seen.get(name, {}).get("calls", 0), "runs": seen.get(name, {}).get("runs", 0),
         "rate_limited": seen.get(name, {}).get("rate_limited", 0),
         "limits": limits[name].model_dump(exclude={"name", "sha256"}, exclude_none=True) if name in limits else {}}
        for name in sorted(limits.keys() | seen.keys())
    ]  # fmt: skip


def settings(service: Service) -> dict[str, Any]:
    """The settings that matter to an operator, never a secret (keys, tokens, URLs with credentials)."""
    s = service.settings
    return {
        "backend": s.sandbox_backend,
        "runners": len(s.fleet_urls()) or (1 if s.runner_url else 0),
        "auth_modes": service.auth.modes,
        "named_keys": len(service.auth.named_keys()),
        "lease_ttl_seconds": s.lease_ttl_seconds,
        "idle_timeout_seconds": s.idle_timeout_seconds,
        "reap_interval_seconds": s.reap_interval_seconds,
        "run_timeout_seconds": s.run_timeout_seconds,
        "run_memory_bytes": s.run_memory_bytes,
        "run_cpu_seconds": s.run_cpu_seconds,
        "max_output_bytes": s.max_output_bytes,
        "max_upload_bytes": s.max_upload_bytes,
        "max_session_bytes": s.max_session_bytes,
        "max_user_bytes": s.max_user_bytes,
        "max_tenant_bytes": s.max_tenant_bytes,
        "runs_at_once": service.admission.runs,
        "warm": {"py": s.warm_python, "scientific": s.warm_scientific, "bare": s.warm_sandboxes},
    }
