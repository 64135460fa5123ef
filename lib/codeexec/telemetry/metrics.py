"""The process's Prometheus metrics (prometheus_client), in a registry of its own.

What is counted as it happens (calls, runs, refusals, transfers, reaper passes, calls to
runners) is recorded from each call's record (calls.py) when its answer ends; what is a
state (sessions held, their bytes, the disk, warm runs ready, each runner's state) is read
at scrape time from what the backend already knows (`Sandboxes.hosts()`), never by a walk
of the disk.

Every label value comes from a small set: routes (their templates, never a path), statuses,
languages, outcomes, reasons, server kinds, runner indexes and the operator's key names. No
user, session or file ever is one, so the number of series does not grow with users or
sessions. docs/operations.md says what each metric means.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from ..reaper import ReapReport
from ..sandbox.port import HostLoad
from .calls import Call

# From a program that prints one line (10 ms) to the longest run with its set-up (minutes).
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
RUN_ROUTES = frozenset({"/v1/exec", "/v1/exec/programmatic", "/runs"})
# The routes that move files: the service's, and the runner's it calls for them.
TRANSFERS = {
    "/v1/upload": "upload", "/v1/upload/batch": "upload", "/v1/download/{session_id}/{file_id:path}": "download",
    "/writes": "upload", "/sessions/{sid}/file": "download",
}  # fmt: skip


class Metrics:
    def __init__(self, process: str, hosts: Callable[[], list[HostLoad]]) -> None:
        """`process`: service or runner; `hosts`: what the backend holds now, by host."""
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        Gauge("codeexec_process_info", "which process this is", ["process"], registry=registry).labels(process).set(1)
        self.requests = Counter(
            "codeexec_requests", "calls answered, by route, status and service key", ["route", "status", "key"],
            registry=registry,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "codeexec_request_seconds", "how long calls took, to the end of their answer", ["route"],
            buckets=SECONDS, registry=registry,
        )  # fmt: skip
        self.runs = Counter("codeexec_runs", "runs, by language and outcome", ["lang", "outcome"], registry=registry)
        self.run_seconds = Histogram(
            "codeexec_run_seconds", "how long programs ran, by language and launch (warm, cold, remote)",
            ["lang", "start"], buckets=SECONDS, registry=registry,
        )  # fmt: skip
        self.rate_limited = Counter(
            "codeexec_rate_limited", "calls refused with a 429, by route and the share they passed",
            ["route", "reason"], registry=registry,
        )  # fmt: skip
        self.auth_failures = Counter(
            "codeexec_auth_failures", "calls refused for their credentials, by what was wrong", ["reason"],
            registry=registry,
        )  # fmt: skip
        self.quota_refusals = Counter(
            "codeexec_quota_refusals", "uploads and runs refused for a storage quota", ["scope"], registry=registry
        )
        self.transfers = Counter("codeexec_transfers", "uploads and downloads", ["direction"], registry=registry)
        self.reaper_passes = Counter("codeexec_reaper_passes", "reaper passes", registry=registry)
        self.reaper_ended = Counter("codeexec_reaper_sessions_ended", "sessions the reaper ended", registry=registry)
        self.reaper_failed = Counter("codeexec_reaper_failures", "sessions the reaper could not end", registry=registry)
        self.reaper_seconds = Histogram(
            "codeexec_reaper_pass_seconds", "how long a reaper pass took", buckets=SECONDS, registry=registry
        )
        self.transfer_bytes = Counter(
            "codeexec_transfer_bytes", "bytes uploaded and downloaded", ["direction"], registry=registry
        )
        registry.register(_Hosts(hosts))

    def called(self, call: Call) -> None:
        route, key = call.route or "unmatched", call.key or ""
        self.requests.labels(route, str(call.status), key).inc()
        self.request_seconds.labels(route).observe(call.seconds())
        if call.run is not None:
            self.runs.labels(call.run.lang, call.run.outcome).inc()
            self.run_seconds.labels(call.run.lang, call.run.start).observe(call.run.seconds)
        elif route in RUN_ROUTES and call.status in (413, 429, 503):
            self.runs.labels(call.lang or "", "refused").inc()
        if call.status == 429:
            self.rate_limited.labels(route, call.refused or "").inc()
        elif call.status == 401:
            self.auth_failures.labels(call.refused or "").inc()
        elif call.status == 413 and call.refused in ("user", "tenant", "key"):
            self.quota_refusals.labels(call.refused).inc()
        direction = TRANSFERS.get(route)
        if direction and call.status < 300:
            self.transfers.labels(direction).inc()
            self.transfer_bytes.labels(direction).inc(call.received if direction == "upload" else call.sent)

    def reaped(self, report: ReapReport) -> None:
        self.reaper_passes.inc()
        self.reaper_ended.inc(report.ended)
        self.reaper_failed.inc(report.failed)
        self.reaper_seconds.observe(report.seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _Hosts(Collector):
    """What each host of sandboxes holds now, read at scrape time from the backend: its own
    state on `local` and on a runner, each runner's last report on a fleet's service."""

    def __init__(self, hosts: Callable[[], list[HostLoad]]) -> None:
        self._hosts = hosts

    def collect(self) -> Iterator[Metric]:
        hosts = self._hosts()
        runner = ["runner"]
        up = GaugeMetricFamily("codeexec_runner_up", "1 when the host answers as it should", labels=runner)
        state = GaugeMetricFamily(
            "codeexec_runner_state", "1 for the host's state (up, down, refused: it claims another index)",
            labels=["runner", "state"],
        )  # fmt: skip
        runs = GaugeMetricFamily("codeexec_runs_in_progress", "runs under way on the host", labels=runner)
        sessions = GaugeMetricFamily("codeexec_sessions", "sessions the host holds", labels=runner)
        used = GaugeMetricFamily("codeexec_session_bytes", "bytes the host's sessions take on its disk", labels=runner)
        limit = GaugeMetricFamily("codeexec_disk_limit_bytes", "the size of the host's sessions' disk", labels=runner)
        ready = GaugeMetricFamily("codeexec_warm_ready", "runs made ahead, ready now", labels=["runner", "kind"])
        taken = CounterMetricFamily(
            "codeexec_warm_runs", "runs that wanted a warm server: a hit was served by one, a miss ran cold",
            labels=["runner", "kind", "result"],
        )  # fmt: skip
        calls = CounterMetricFamily(
            "codeexec_runner_calls",
            "calls the service made to a fleet's runner, by result (failed: no connection, cut, silent)",
            labels=["runner", "result"],
        )
        noticed = GaugeMetricFamily(
            "codeexec_runner_down_noticed_seconds",
            "from the last answer of a fleet's runner to the service marking it down, the last time it went down",
            labels=runner,
        )
        for host in hosts:
            name = host.name
            if host.calls_answered is not None:
                calls.add_metric([name, "answered"], host.calls_answered)
                calls.add_metric([name, "failed"], host.calls_failed)
            if host.noticed_down_seconds is not None:
                noticed.add_metric([name], host.noticed_down_seconds)
            up.add_metric([name], float(host.state == "up"))
            for each in ("up", "down", "refused"):
                state.add_metric([name, each], float(host.state == each))
            runs.add_metric([name], host.runs)
            sessions.add_metric([name], host.sessions)
            used.add_metric([name], host.bytes_used)
            limit.add_metric([name], host.bytes_limit)
            for kind, pool in sorted(host.pools.items()):
                ready.add_metric([name, kind], pool.ready)
                taken.add_metric([name, kind, "hit"], pool.hits)
                taken.add_metric([name, kind, "miss"], pool.misses)
        yield from (up, state, runs, sessions, used, limit, ready, taken, calls, noticed)

    def describe(self) -> Iterable[Metric]:
        return []  # read at scrape time: no fixed set of series to declare ahead
