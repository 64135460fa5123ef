"""The boundary to one runner (`python -m codeexec.runner`): HTTP in, the port's errors out.

Every failure becomes one of `codeexec.errors` here, as `agentcore/api.py` does for AWS:
an error the runner answered in its own words crosses as itself (a missing file is a
FileNotFound on both sides), a runner that cannot be reached, falls silent or answers
otherwise is the backend being unavailable (`Unreachable`), which the caller may retry.
One that takes no connection at all is `Refused`: only that, or its /health failing,
tells a fleet the runner is down (a call that was slow, or cut, tells nothing of the
others). Nothing logged here quotes a body, or a path but its route's template.

A late answer (protocol.LATE_HEADER: the runner kept the call alive with spaces ahead of
it) carries its error, if any, in the body: the client raises it as an early one.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO, cast

import httpx

from ...errors import BackendUnavailable, ServiceError
from ...telemetry import calls
from . import protocol

log = logging.getLogger("codeexec.runner.client")


class Unreachable(BackendUnavailable):
    """The runner did not take the connection, broke it, or fell silent: not an answer."""


class Refused(Unreachable):
    """The runner took no connection (refused, or none within the connect timeout)."""


class TimedOut(Unreachable):
    """The runner said nothing within the client's read timeout."""


class RunnerClient:
    def __init__(
        self,
        base_url: str,
        key: str,
        timeout: httpx.Timeout,
        headers: Callable[[], Mapping[str, str]] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._extra_headers = headers
        self._http = httpx.Client(
            base_url=self.base_url, headers={protocol.KEY_HEADER: key}, timeout=timeout, transport=transport
        )

    def call(self, target: protocol.Target, timeout: float | None = None, **kwargs: Any) -> Any:
        """One request; its JSON answer."""
        with self.stream(target, timeout, **kwargs) as response:
            response.read()
            return protocol.answered(response.json())

    def fetch(self, target: protocol.Target, **kwargs: Any) -> tuple[dict[str, Any], BinaryIO]:
        """One request answered with bytes: its head, and the bytes as a file the caller
        reads and closes (closing it ends the request)."""
        stack, response = self.opened(target, **kwargs)
        try:
            body = io.BufferedReader(ResponseReader(stack, response, target), protocol.CHUNK)
            with _mapped(target):
                head = protocol.answered(json.loads(body.readline(_MAX_HEAD)))
        except BaseException:
            stack.close()
            raise
        return head, cast(BinaryIO, body)

    def opened(self, target: protocol.Target, **kwargs: Any) -> tuple[contextlib.ExitStack, httpx.Response]:
        """One request whose answer the caller reads later: closing the stack ends it."""
        stack = contextlib.ExitStack()
        try:
            return stack, stack.enter_context(self.stream(target, **kwargs))
        except BaseException:
            stack.close()
            raise

    @contextlib.contextmanager
    def stream(
        self, target: protocol.Target, timeout: float | None = None, **kwargs: Any
    ) -> Iterator[httpx.Response]:
        """One request whose answer is read by the caller as it arrives: every request to
        a runner is made here."""
        if timeout is not None:
            kwargs["timeout"] = timeout
        headers = dict(self._extra_headers()) if self._extra_headers else {}
        call = calls.current()
        if call is not None:  # the runner's log lines of this call carry the same id
            headers[calls.REQUEST_ID_HEADER] = call.request_id
        method, path = target.route.method, target.path
        with _mapped(target), self._http.stream(method, path, headers=headers, **kwargs) as response:
            if response.status_code >= 400:
                response.read()
                raise protocol.error_of(response.status_code, _json_or_none(response))
            yield response

    def close(self) -> None:
        self._http.close()


# An answer's head is a file's stat: far less than this.
_MAX_HEAD = 1 << 20


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


@contextlib.contextmanager
def _mapped(target: protocol.Target) -> Iterator[None]:
    # The route's template only: session ids and paths stay out of the logs. A failed
    # /health is the fleet's to tell (once, when the runner goes down), not every second.
    route = target.route
    say = log.debug if route is protocol.HEALTH else log.warning
    try:
        yield
    except ServiceError:
        raise
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        say("runner %s %s: no connection (%s)", route.method, route.path, type(exc).__name__)
        raise Refused("the sandbox runner could not be reached", retry_after=5) from exc
    except httpx.TimeoutException as exc:
        say("runner %s %s timed out", route.method, route.path)
        raise TimedOut("the sandbox runner did not answer in time", retry_after=5) from exc
    except httpx.HTTPError as exc:
        say("runner %s %s failed: %s", route.method, route.path, type(exc).__name__)
        raise Unreachable("the sandbox runner could not be reached", retry_after=5) from exc
    except ValueError as exc:  # an answer that is not the wire's
        say("runner %s %s answered what is not JSON", route.method, route.path)
        raise Unreachable("the sandbox runner answered what it should not", retry_after=5) from exc


class ResponseReader(io.RawIOBase):
    """A streamed answer's body as a file the caller reads and closes; closing it ends the
    request. Bytes arrive as the caller reads them, never held whole."""

    def __init__(self, stack: contextlib.ExitStack, response: httpx.Response, target: protocol.Target) -> None:
        self._stack = stack
        self._chunks = response.iter_raw()
        self._target = target
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with _mapped(self._target):
            while not self._left:
                chunk = next(self._chunks, None)
                if chunk is None:
                    return 0
                self._left = chunk
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size

    def close(self) -> None:
        if not self.closed:
            self._stack.close()
        super().close()
