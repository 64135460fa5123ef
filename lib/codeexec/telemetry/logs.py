"""The process's log: one JSON object a line (LOG_FORMAT=json, what log collectors read) or a
line of text for a terminal, at LOG_LEVEL; every line written during a call carries its
request id, so one grep finds a call on the service replica and on its runner.

JSON lines are Powertools for AWS Lambda's (its formatter, used on every process, not only
on Lambda), so the service, the runner and the functions write one shape. uvicorn's own
lines go through the same handler; its access log is off: each call's line is ours
(`call_line`), with what an access log lacks (the run's outcome, the session, the caller's
digests) and nothing it must not have (no query string, no path naming a file).
"""

from __future__ import annotations

import logging
from typing import Any

from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from ..reaper import ReapReport
from .calls import Call, current

CALLS = logging.getLogger("codeexec.calls")
# Asked every second by each replica of a fleet, and by every probe: their lines are DEBUG's
# unless something went wrong, so that the log says what callers did.
QUIET_ROUTES = frozenset({"/health", "/v1/health"})
_TEXT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


def configure(fmt: str, level: str) -> None:
    handler = logging.StreamHandler()  # stderr; stdout says where the server listens
    handler.setFormatter(LambdaPowertoolsFormatter(service="codeexec", utc=True) if fmt == "json" else _Text(_TEXT))
    handler.addFilter(RequestId())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


class RequestId(logging.Filter):
    """Each line written during a call gets the call's request id."""

    def filter(self, record: logging.LogRecord) -> bool:
        call = current()
        if call is not None and not hasattr(record, "request_id"):
            record.request_id = call.request_id
        return True


# What every record has: anything else on one was given as `extra`.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message", "asctime", "request_id", "color_message",  # uvicorn's own colored copy of its message
}


class _Text(logging.Formatter):
    """A line of text, then the record's extra fields as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "request_id"):
            record.request_id = "-"
        extra = "".join(f" {k}={v}" for k, v in record.__dict__.items() if k not in _STANDARD)
        return super().format(record) + extra


class CallLog:
    """A sink of the process's telemetry: the one line of each call, when its answer has ended."""

    def called(self, call: Call) -> None:
        call_line(call)

    def reaped(self, report: ReapReport) -> None:
        return None  # the reaper logs its own line (reaper.py)


def call_line(call: Call) -> None:
    """The one line of a call, when its answer has ended."""
    level = logging.DEBUG if call.route in QUIET_ROUTES and call.status < 400 else logging.INFO
    if not CALLS.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "method": call.method, "route": call.route, "status": call.status, "ms": round(call.seconds() * 1000, 1),
        "bytes_in": call.received, "bytes_out": call.sent,
    }  # fmt: skip
    optional = {
        "session": call.session,
        "tenant": call.owner and call.owner.org[:12],
        "user": call.owner and call.owner.user[:12],
        "key": call.key,
        "lang": call.run.lang if call.run else call.lang,
        "outcome": call.run.outcome if call.run else None,
        "start": call.run.start if call.run else None,
        "reason": call.refused,
    }
    fields.update((name, value) for name, value in optional.items() if value)
    CALLS.log(level, "call", extra={"request_id": call.request_id, **fields})
