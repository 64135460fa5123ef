"""The API function: the ASGI app behind API Gateway (HTTP API, payload 2.0), via Mangum.

The service is made once per cold start and owned by this module for the execution
environment's life: Mangum's lifespan would start and close it around every event, so it
is off, and the service is started here and closed when Lambda ends the environment (it
sends SIGTERM then, where it sends anything). The service key comes from AWS Secrets
Manager when CODE_EXEC_API_KEY_SECRET_ARN names a secret, else from CODE_EXEC_API_KEY (sam local).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging import correlation_paths
from mangum import Mangum
from mangum.types import LambdaContext

from codeexec.api.app import create_app
from codeexec.api.service import Service
from codeexec.settings import get_settings
from codeexec.telemetry import CallLog, Telemetry
from codeexec.telemetry.cloudwatch import CloudWatchMetrics

# The library logs under "codeexec": a Logger of that name makes its lines structured too
# (each call's own line among them: codeexec.telemetry). Its figures go to CloudWatch.
logger = Logger(service="codeexec")
metrics = Metrics(service="codeexec")

# Fetched on first use, then cached for longer than an execution environment usually
# lives: in effect once per cold start. A rotated key arrives with the next cold start.
KEY_MAX_AGE_SECONDS = 24 * 3600
# Lambda's cap on a synchronous response. Beyond it API Gateway answers a bare 500 of its
# own, so the function answers the service's 413 instead.
RESPONSE_LIMIT_BYTES = 6 * 1024 * 1024
HEADERS_ROOM_BYTES = 16 * 1024


def _api_key() -> Callable[[], str | None] | None:
    secret_arn = os.environ.get("CODE_EXEC_API_KEY_SECRET_ARN")
    if not secret_arn:
        return None  # create_app reads CODE_EXEC_API_KEY
    # Imported only when a secret is named: it brings boto3, the largest share of a cold import.
    from aws_lambda_powertools.utilities import parameters

    return lambda: parameters.get_secret(secret_arn, max_age=KEY_MAX_AGE_SECONDS)


telemetry = Telemetry(CloudWatchMetrics(metrics), CallLog())
service = Service(get_settings(), api_key=_api_key(), telemetry=telemetry).start()
asgi = Mangum(create_app(service), lifespan="off")


def _shutdown(signum: int, frame: object) -> None:
    service.close()
    raise SystemExit(0)


signal.signal(signal.SIGTERM, _shutdown)


# Never log the event: it carries request bodies and the caller's key.
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, log_event=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return _within_limit(asgi(event, context))


def _within_limit(response: dict[str, Any]) -> dict[str, Any]:
    # The body is all but a few hundred bytes of the response: measure it rather than
    # serialize every response once more just to count it.
    if len(response.get("body") or "") <= RESPONSE_LIMIT_BYTES - HEADERS_ROOM_BYTES:
        return response
    details = (
        "the response is larger than the 6 MB that API Gateway and Lambda carry "
        "(a binary file counts 4/3 of its size there)"
    )
    return {
        "statusCode": 413,
        "headers": {"content-type": "application/json"},
        "body": json.dumps({"error": "Payload too large", "details": details}),
        "isBase64Encoded": False,
    }
