"""The boundary to AWS Bedrock AgentCore Code Interpreter (boto3 `bedrock-agentcore`).

One client per process. Every AWS error becomes one of the port's errors here, and is
logged by its code only: an AWS message may quote the request, and requests carry code
and file contents.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3  # type: ignore[import-untyped]
import urllib3.exceptions
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError  # type: ignore[import-untyped]
from botocore.exceptions import ReadTimeoutError as BotocoreReadTimeout

from ...errors import BackendUnavailable, SessionNotFound

log = logging.getLogger("codeexec.agentcore")

# Errors the caller may retry, with a hint in seconds: AgentCore throttles per account
# and region, and a quota of concurrent sessions frees up as sessions end.
_RETRY_AFTER = {"ThrottlingException": 2, "ServiceQuotaExceededException": 30, "ConflictException": 1}


class TimedOut(BackendUnavailable):
    """No answer within the client's read timeout."""


@dataclass(frozen=True)
class InvokeResult:
    """What one InvokeCodeInterpreter call answered, its event stream read to the end."""

    content: list[dict[str, Any]]
    structured: dict[str, Any]
    is_error: bool

    def text(self) -> str:
        return "".join(block.get("text", "") for block in self.content if block.get("type") == "text")


class AgentCoreApi:
    def __init__(self, interpreter_id: str, endpoint_url: str | None, read_timeout: float) -> None:
        self.interpreter_id = interpreter_id
        # "standard" retries throttling and transient faults a few times before we see them.
        config = Config(read_timeout=read_timeout, connect_timeout=10, retries={"mode": "standard"})
        # Lambda sets AWS_REGION; botocore itself reads only AWS_DEFAULT_REGION and config files.
        region = os.environ.get("AWS_REGION") or None
        try:
            self.client: Any = boto3.client(
                "bedrock-agentcore", region_name=region, endpoint_url=endpoint_url, config=config
            )
        except NoRegionError as exc:
            raise RuntimeError("SANDBOX_BACKEND=agentcore needs a region: set AWS_REGION") from exc

    def start(self, name: str, timeout_seconds: int) -> dict[str, Any]:
        with _mapped("StartCodeInterpreterSession"):
            return self.client.start_code_interpreter_session(  # type: ignore[no-any-return]
                codeInterpreterIdentifier=self.interpreter_id, name=name, sessionTimeoutSeconds=timeout_seconds
            )

    def get(self, session_id: str) -> dict[str, Any]:
        with _mapped("GetCodeInterpreterSession", session_id):
            return self.client.get_code_interpreter_session(  # type: ignore[no-any-return]
                codeInterpreterIdentifier=self.interpreter_id, sessionId=session_id
            )

    def stop(self, session_id: str) -> None:
        with _mapped("StopCodeInterpreterSession", session_id):
            self.client.stop_code_interpreter_session(
                codeInterpreterIdentifier=self.interpreter_id, sessionId=session_id
            )

    def ready_sessions(self) -> Iterator[dict[str, Any]]:
        """Every READY session of the code interpreter, page by page."""
        token: dict[str, str] = {}
        while True:
            with _mapped("ListCodeInterpreterSessions"):
                page = self.client.list_code_interpreter_sessions(
                    codeInterpreterIdentifier=self.interpreter_id, status="READY", maxResults=100, **token
                )
            yield from page["items"]
            if not page.get("nextToken"):
                return
            token = {"nextToken": page["nextToken"]}

    def invoke(self, session_id: str, tool: str, arguments: dict[str, Any]) -> InvokeResult:
        """Call one tool and read its whole event stream: an error event mid-stream is
        an error of the call, and a half-read stream would hold the connection."""
        content: list[dict[str, Any]] = []
        structured: dict[str, Any] = {}
        is_error = False
        with _mapped(f"InvokeCodeInterpreter {tool}", session_id):
            response = self.client.invoke_code_interpreter(
                codeInterpreterIdentifier=self.interpreter_id, sessionId=session_id, name=tool, arguments=arguments
            )
            for event in response["stream"]:
                result = event.get("result")
                if result is None:
                    continue
                content += result.get("content", [])
                structured |= result.get("structuredContent", {})
                is_error = is_error or bool(result.get("isError"))
        return InvokeResult(content, structured, is_error)


@contextlib.contextmanager
def _mapped(operation: str, session_id: str | None = None) -> Iterator[None]:
    try:
        yield
    except ClientError as exc:  # also an error event inside an event stream (EventStreamError)
        code = str(exc.response.get("Error", {}).get("Code") or "Unknown")
        code = code[:1].upper() + code[1:]  # an error event names its member: throttlingException
        log.warning("AgentCore %s failed: %s", operation, code)
        if code == "ResourceNotFoundException" and session_id is not None:
            raise SessionNotFound() from exc
        raise BackendUnavailable(f"AgentCore {operation} failed: {code}", retry_after=_RETRY_AFTER.get(code)) from exc
    except (BotocoreReadTimeout, urllib3.exceptions.ReadTimeoutError) as exc:
        log.warning("AgentCore %s timed out", operation)
        raise TimedOut(f"AgentCore {operation} did not answer in time", retry_after=1) from exc
    except (BotoCoreError, urllib3.exceptions.HTTPError) as exc:
        log.warning("AgentCore %s failed: %s", operation, type(exc).__name__)
        raise BackendUnavailable(f"AgentCore {operation} could not be reached", retry_after=5) from exc
