"""The reaper function: one pass of codeexec.reaper, run by an EventBridge schedule.

The pass logs its counts itself (through the "codeexec" logger), the service's telemetry
writes them as CloudWatch metrics, and the function returns them.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from codeexec.api.service import Service
from codeexec.settings import get_settings
from codeexec.telemetry import CallLog, Telemetry
from codeexec.telemetry.cloudwatch import CloudWatchMetrics

logger = Logger(service="codeexec")
metrics = Metrics(service="codeexec")

# Never started: the schedule is this function's timer, and each event is one pass.
service = Service(get_settings(), telemetry=Telemetry(CloudWatchMetrics(metrics), CallLog()))


# executionId: the schedule's Input in template.yaml carries the scheduler's execution id.
@logger.inject_lambda_context(correlation_id_path="executionId", log_event=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, float]:
    return service.reap().as_dict()
