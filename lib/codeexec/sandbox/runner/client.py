"""The boundary to one runner (`python -m codeexec.runner`): HTTP in, the port's errors out.

Every failure becomes one of `codeexec.errors` here, as `agentcore/api.py` does for AWS:
an error the runner answered in its own words crosses as itself (a missing file is a
FileNotFound on both sides), a runner that cannot be reached, falls silent or answers
otherwise is the backend being unavailable (`Unreachable`), which the caller may retry.
Nothing logged here quotes a body.

A late answer (protocol.LATE_HEADER: the runner kept the call alive with spaces ahead of
its JSON) carries its error, if any, in the body: `call` raises it as an early one would.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from ...errors import BackendUnavailable, ServiceError
from ...telemetry import calls
from . import protocol

log = logging.getLogger("codeexec.runner.client")


class Unreachable(BackendUnavailable):
    """The runner did not take the connection, broke it, or fell silent: not an answer."""


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

    def call(self, method: str, path: str, timeout: float | None = None, **kwargs: Any) -> Any:
        """One request; its JSON answer."""
        with self.stream(method, path, timeout, **kwargs) as response:
            response.read()
            answer = response.json()
        late = isinstance(answer, dict) and answer.get(protocol.LATE_ERROR)
        if late:
            raise protocol.error_of(int(late["status"]), late["body"])
        return answer

    def raw(self, method: str, path: str, **kwargs: Any) -> bytes:
        """One request; its answer's bytes."""
        with self.stream(method, path, **kwargs) as response:
            return response.read()

    def opened(self, method: str, path: str, **kwargs: Any) -> tuple[contextlib.ExitStack, httpx.Response]:
        """One request whose answer the caller reads later: closing the stack ends it."""
        stack = contextlib.ExitStack()
        try:
            return stack, stack.enter_context(self.stream(method, path, **kwargs))
        except BaseException:
            stack.close()
            raise

    @contextlib.contextmanager
    def stream(self, method: str, path: str, timeout: float | None = None, **kwargs: Any) -> Iterator[httpx.Response]:
        """One request whose answer is read by the caller as it arrives."""
        if timeout is not None:
            kwargs["timeout"] = timeout
        headers = dict(self._extra_headers()) if self._extra_headers else {}
        call = calls.current()
        if call is not None:  # the runner's log lines of this call carry the same id
            headers[calls.REQUEST_ID_HEADER] = call.request_id
        with _mapped(method, path), self._http.stream(method, path, headers=headers, **kwargs) as response:
            if response.status_code >= 400:
                response.read()
                raise protocol.error_of(response.status_code, _json_or_none(response))
            yield response

    def close(self) -> None:
        self._http.close()


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


@contextlib.contextmanager
def _mapped(method: str, path: str) -> Iterator[None]:
    # The route's first segment only: session ids and paths stay out of the logs. A failed
    # /health is the fleet's to tell (once, when the runner goes down), not every second.
    route = path.split("/")[1] if "/" in path else path
    say = log.debug if route == "health" else log.warning
    try:
        yield
    except ServiceError:
        raise
    except httpx.TimeoutException as exc:
        say("runner %s /%s timed out", method, route)
        raise TimedOut("the sandbox runner did not answer in time", retry_after=5) from exc
    except httpx.HTTPError as exc:
        say("runner %s /%s failed: %s", method, route, type(exc).__name__)
        raise Unreachable("the sandbox runner could not be reached", retry_after=5) from exc


class ResponseReader(io.RawIOBase):
    """A streamed answer's body as a file the caller reads and closes; closing it ends the
    request. Bytes arrive as the caller reads them, never held whole."""

    def __init__(self, stack: contextlib.ExitStack, response: httpx.Response) -> None:
        self._stack = stack
        self._chunks = response.iter_raw()
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with _mapped("read", "/sessions"):
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
