"""The reaper function: one pass of codeexec.reaper, run by an EventBridge schedule.

The pass logs its counts itself (through the "codeexec" logger); the function returns
them and emits them as metrics.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from codeexec.reaper import reap
from codeexec.sandbox import make_sandboxes
from codeexec.settings import get_settings

logger = Logger(service="codeexec")
metrics = Metrics(service="codeexec")

settings = get_settings()
sandboxes = make_sandboxes(settings)


# executionId: the schedule's Input in template.yaml carries the scheduler's execution id.
@logger.inject_lambda_context(correlation_id_path="executionId", log_event=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    report = reap(sandboxes, settings.idle_timeout_seconds)
    metrics.add_metric(name="SessionsReaped", unit=MetricUnit.Count, value=report.ended)
    metrics.add_metric(name="ReapFailures", unit=MetricUnit.Count, value=report.failed)
    return report.as_dict()
