"""On Lambda, the figures the servers export to Prometheus, as CloudWatch metrics: Embedded
Metric Format lines written by Powertools for AWS Lambda, which CloudWatch Logs turns into
metrics in the stack's namespace (POWERTOOLS_METRICS_NAMESPACE). template.yaml's alarms and
dashboard read them (docs/operations.md lists them).

Each figure is written once by the service alone (Powertools' `service` dimension, which
is what an alarm or a percentile across languages reads: CloudWatch matches a metric's
dimensions exactly) and, where it has any, once more by them, under a name of its own
(...By...) and in a line of its own (a Powertools metric set has one set of dimensions).
The dimensions are the Prometheus labels' bounded values.
"""

from __future__ import annotations

from aws_lambda_powertools.metrics import Metrics as PowertoolsMetrics
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from ..reaper import ReapReport
from .calls import Call


class CloudWatchMetrics:
    def __init__(self, metrics: PowertoolsMetrics) -> None:
        """`metrics`: the function's, flushed at the end of each invocation by its decorator."""
        self._metrics = metrics

    def called(self, call: Call) -> None:
        self._add("Calls", 1)
        self._add("Failures", int(call.status >= 500))  # written on every call: its average is the failure rate
        run = call.run
        if run is not None:
            self._add("Runs", 1)
            self._add("RunTimeouts", int(run.outcome == "timeout"))
            self._by("RunsByLanguage", MetricUnit.Count, 1, Language=run.lang, Outcome=run.outcome)
            milliseconds = run.seconds * 1000
            self._metrics.add_metric(name="RunDuration", unit=MetricUnit.Milliseconds, value=milliseconds)
            self._by("RunDurationByLanguage", MetricUnit.Milliseconds, milliseconds, Language=run.lang, Start=run.start)
        if call.status == 429:
            self._add("RateLimited", 1)
            self._by("RateLimitedByReason", MetricUnit.Count, 1, Route=call.route, Reason=call.refused or "")
        elif call.status == 401:
            self._add("AuthFailures", 1)
            self._by("AuthFailuresByReason", MetricUnit.Count, 1, Reason=call.refused or "")

    def reaped(self, report: ReapReport) -> None:
        self._add("ReaperPasses", 1)
        self._add("SessionsReaped", report.ended)
        self._add("ReapFailures", report.failed)
        self._metrics.add_metric(name="ReapDuration", unit=MetricUnit.Milliseconds, value=report.seconds * 1000)

    def _add(self, name: str, value: float) -> None:
        self._metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

    def _by(self, name: str, unit: MetricUnit, value: float, **dimensions: str) -> None:
        with single_metric(name=name, unit=unit, value=value, namespace=self._metrics.namespace) as metric:
            for dimension, label in dimensions.items():
                metric.add_dimension(name=dimension, value=label or "none")
