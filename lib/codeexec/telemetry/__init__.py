"""What a process tells about itself: one log line per call with its request id (logs.py,
edge.py, calls.py), and its figures: Prometheus metrics on the servers (metrics.py, scraped
from a listener of their own: exporter.py) and their last hour for the console (history.py),
the same as CloudWatch metrics on Lambda (cloudwatch.py).

One `Telemetry` per process, owned by the process's owner (the service's: api/service.py;
the runner's: runner/app.py), told of each call when its answer has ended and of each
reaper pass. Its sinks are chosen where the process is made, so a Lambda function never
imports prometheus_client, and a server never Powertools' metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..reaper import ReapReport
from ..sandbox.port import HostLoad
from .calls import Call
from .logs import CallLog

if TYPE_CHECKING:
    from .history import History
    from .metrics import Metrics

__all__ = ["CallLog", "Sink", "Telemetry"]


class Sink(Protocol):
    """Where the figures go: what each call and each reaper pass adds to them."""

    def called(self, call: Call) -> None: ...

    def reaped(self, report: ReapReport) -> None: ...


class Telemetry:
    def __init__(self, *sinks: Sink) -> None:
        self.sinks = sinks

    @classmethod
    def for_server(cls, process: str, hosts: Callable[[], list[HostLoad]]) -> Telemetry:
        """A server's: Prometheus metrics (`hosts`: what its backend holds now), and its
        last hour for the console."""
        from .history import History
        from .metrics import Metrics

        return cls(Metrics(process, hosts), History(), CallLog())

    @property
    def metrics(self) -> Metrics | None:
        """The Prometheus metrics, for the listener that exposes them, where there are any."""
        from .metrics import Metrics

        return next((sink for sink in self.sinks if isinstance(sink, Metrics)), None)

    @property
    def history(self) -> History | None:
        """The last hour, for the console, where it is kept (a server's)."""
        from .history import History

        return next((sink for sink in self.sinks if isinstance(sink, History)), None)

    def called(self, call: Call) -> None:
        for sink in self.sinks:
            sink.called(call)

    def reaped(self, report: ReapReport) -> None:
        for sink in self.sinks:
            sink.reaped(report)
