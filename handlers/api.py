"""The API function: the ASGI app behind API Gateway (HTTP API, payload 2.0), via Mangum.

The app is built once per cold start. The service key comes from AWS Secrets Manager when
CODE_EXEC_API_KEY_SECRET_ARN names a secret, else from CODE_EXEC_API_KEY (sam local).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from mangum import Mangum
from mangum.types import LambdaContext

from codeexec.api.app import create_app
from codeexec.api.routers.execute import EXEC_PATH

# The library logs under "codeexec": a Logger of that name makes its lines structured too.
logger = Logger(service="codeexec")
metrics = Metrics(service="codeexec")

# Fetched on first use, then cached for longer than an execution environment usually
# lives: in effect once per cold start. A rotated key arrives with the next cold start.
KEY_MAX_AGE_SECONDS = 24 * 3600
# Lambda's cap on a synchronous response. Beyond it API Gateway answers a bare 500 of its
# own, so the function answers the service's 413 instead.
RESPONSE_LIMIT_BYTES = 6 * 1024 * 1024
HEADERS_ROOM_BYTES = 16 * 1024
EXEC_ROUTE = f"POST {EXEC_PATH}"


def _api_key() -> Callable[[], str | None] | None:
    secret_arn = os.environ.get("CODE_EXEC_API_KEY_SECRET_ARN")
    if not secret_arn:
        return None  # create_app reads CODE_EXEC_API_KEY
    # Imported only when a secret is named: it brings boto3, the largest share of a cold import.
    from aws_lambda_powertools.utilities import parameters

    return lambda: parameters.get_secret(secret_arn, max_age=KEY_MAX_AGE_SECONDS)


asgi = Mangum(create_app(api_key=_api_key()), lifespan="off")


# Never log the event: it carries request bodies and the caller's key.
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, log_event=False)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    response = _within_limit(asgi(event, context))
    route, status = event.get("routeKey"), response["statusCode"]
    logger.info("answered", extra={"route": route, "status": status})
    # Emitted on every request (0 or 1), so its average is the failure rate.
    metrics.add_metric(name="Failures", unit=MetricUnit.Count, value=int(status >= 500))
    if route == EXEC_ROUTE and status == 200:
        metrics.add_metric(name="Runs", unit=MetricUnit.Count, value=1)
    return response


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
