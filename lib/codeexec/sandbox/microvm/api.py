"""The boundary to the AWS Lambda MicroVMs control plane (boto3 `lambda-microvms`).

One client per process. Every AWS error becomes one of the port's errors here, logged by
its code only (a message may quote the request, and RunMicrovm's carries the runner key).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError  # type: ignore[import-untyped]

from ...errors import BackendUnavailable, RateLimited, SessionNotFound

log = logging.getLogger("codeexec.microvm")

# What the caller is told to wait, in seconds, when AWS names no time: a quota of running
# VMs frees up as sessions end; capacity comes back within seconds.
_RETRY_AFTER = {"ServiceQuotaExceededException": 30, "InsufficientCapacityException": 5, "ConflictException": 1}
TOKEN_MINUTES = 60  # CreateMicrovmAuthToken's longest


class MicrovmApi:
    def __init__(self, endpoint_url: str | None) -> None:
        # "standard" retries throttling a few times, with backoff, before we see it: a
        # burst of launches past the rate limit mostly gets through a moment later.
        config = Config(connect_timeout=10, read_timeout=30, retries={"mode": "standard", "max_attempts": 3})
        region = os.environ.get("AWS_REGION") or None
        try:
            self.client: Any = boto3.client(
                "lambda-microvms", region_name=region, endpoint_url=endpoint_url, config=config
            )
        except NoRegionError as exc:
            raise RuntimeError("SANDBOX_BACKEND=microvm needs a region: set AWS_REGION") from exc

    def launch(self, **request: Any) -> dict[str, Any]:
        with _mapped("RunMicrovm"):
            return self.client.run_microvm(**request)  # type: ignore[no-any-return]

    def get(self, vm_id: str) -> dict[str, Any]:
        with _mapped("GetMicrovm", vm_id):
            return self.client.get_microvm(microvmIdentifier=vm_id)  # type: ignore[no-any-return]

    def terminate(self, vm_id: str) -> None:
        with contextlib.suppress(SessionNotFound), _mapped("TerminateMicrovm", vm_id):
            self.client.terminate_microvm(microvmIdentifier=vm_id)

    def auth_token(self, vm_id: str, port: int) -> str:
        with _mapped("CreateMicrovmAuthToken", vm_id):
            answer = self.client.create_microvm_auth_token(
                microvmIdentifier=vm_id, expirationInMinutes=TOKEN_MINUTES, allowedPorts=[{"port": port}]
            )
        return str(answer["authToken"]["X-aws-proxy-auth"])

    def microvms(self, image: str) -> Iterator[dict[str, Any]]:
        """Every MicroVM of the image, page by page."""
        token: dict[str, str] = {}
        while True:
            with _mapped("ListMicrovms"):
                page = self.client.list_microvms(imageIdentifier=image, maxResults=50, **token)
            yield from page["items"]
            if not page.get("nextToken"):
                return
            token = {"nextToken": page["nextToken"]}


@contextlib.contextmanager
def _mapped(operation: str, vm_id: str | None = None) -> Iterator[None]:
    try:
        yield
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code") or "Unknown")
        log.warning("MicroVMs %s failed: %s", operation, code)
        if code == "ResourceNotFoundException" and vm_id is not None:
            raise SessionNotFound() from exc
        if code in ("ThrottlingException", "TooManyRequestsException"):
            raise RateLimited(retry_after=_retry_after(exc.response), reason="launches") from exc
        raise BackendUnavailable(f"MicroVMs {operation} failed: {code}", retry_after=_RETRY_AFTER.get(code)) from exc
    except BotoCoreError as exc:
        log.warning("MicroVMs %s failed: %s", operation, type(exc).__name__)
        raise BackendUnavailable(f"MicroVMs {operation} could not be reached", retry_after=5) from exc


def _retry_after(response: dict[str, Any]) -> int:
    """AWS's own hint (the Retry-After header of a ThrottlingException), else one second."""
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    try:
        return max(1, int(float(headers.get("retry-after", 1))))
    except ValueError:
        return 1
