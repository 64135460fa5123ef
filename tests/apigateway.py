"""A stand-in for API Gateway's HTTP API on loopback, for tests: each request becomes a
payload 2.0 event for a Lambda handler, and the handler's answer the HTTP response, as
API Gateway does it (a binary body travels base64-encoded both ways). So real HTTP
clients (node's axios) can call a handler function."""

from __future__ import annotations

import asyncio
import base64
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .lambda_events import Context

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
# API Gateway and Lambda carry at most this much of a request, as JSON.
REQUEST_LIMIT_BYTES = 6 * 1024 * 1024


class _Http(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
        self._invoke()

    do_POST = do_PUT = do_DELETE = do_GET  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _invoke(self) -> None:
        url = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        encoded = base64.b64encode(body).decode()
        if len(encoded) > REQUEST_LIMIT_BYTES:
            return self._answer(413, {"content-type": "application/json"}, b'{"message":"Request Entity Too Large"}')
        event = {
            "version": "2.0",
            "routeKey": f"{self.command} {url.path}",
            "rawPath": url.path,
            "rawQueryString": url.query,
            "headers": headers,
            "queryStringParameters": dict(parse_qsl(url.query)) or None,
            "requestContext": {
                "http": {"method": self.command, "path": url.path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"},
                "requestId": str(uuid.uuid4()),
                "stage": "$default",
            },
            "body": encoded,
            "isBase64Encoded": True,
        }
        reply = self.server.handler(event, Context())
        data = reply.get("body") or ""
        payload = base64.b64decode(data) if reply.get("isBase64Encoded") else data.encode()
        self._answer(reply["statusCode"], reply.get("headers") or {}, payload)

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "transfer-encoding"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(HTTPServer):
    """One request at a time, on one thread, as one execution environment serves them."""

    def __init__(self, handler: Handler) -> None:
        super().__init__(("127.0.0.1", 0), _Http)
        self.handler = handler

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())  # Mangum runs on the thread's loop
        super().serve_forever(poll_interval)


class ApiGateway:
    """`with ApiGateway(handler) as url:` the handler served at url (ending in /v1)."""

    def __init__(self, handler: Handler) -> None:
        self._server = _Server(handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
