"""The metrics listener: GET /metrics on a port of its own (METRICS_PORT), beside the API.

A port of its own, not a route of the API, so that a scraper needs no credential and the
API's key opens nothing of it, so that it is reachable only where the operator publishes it
(a pod's port the ServiceMonitor names, never the API Gateway of the SAM stack, where no
process listens at all), and so that a NetworkPolicy can let Prometheus in there alone.

It takes nothing in: a request with a body is refused before any of it is read, and any
other path or method answers at once. The exposition is made in a worker thread (it reads
what the backend holds), so the event loop the API shares with it never waits on it; what
it answers is a few kilobytes, so a scraper that never reads it holds only its own socket.
"""

from __future__ import annotations

from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from .metrics import Metrics

METRICS_PATH = "/metrics"


class Exporter:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # served with no lifespan: it starts and stops nothing
            return
        headers = Headers(scope=scope)
        if int(headers.get("content-length") or 0) or "transfer-encoding" in headers:
            response: Response = PlainTextResponse("the metrics listener takes no body\n", 413)
        elif scope["path"] != METRICS_PATH:
            response = PlainTextResponse("not found: metrics are at /metrics\n", 404)
        elif scope["method"] not in ("GET", "HEAD"):
            response = PlainTextResponse("GET /metrics\n", 405, headers={"Allow": "GET, HEAD"})
        else:
            response = Response(await run_in_threadpool(self._metrics.exposition), media_type=CONTENT_TYPE_LATEST)
        response.headers["Connection"] = "close" if response.status_code != 200 else "keep-alive"
        await response(scope, receive, send)
