"""Clients that hold the service's connections without doing anything: an upload that drips
a byte at a time is cut once it falls below the minimum rate (after its grace), and no one
without a key keeps an idle connection open after its answer."""

from __future__ import annotations

import socket
import time

import pytest
from fastapi.testclient import TestClient

from codeexec.api import gate

from ..calls import run
from ..conftest import API_KEY


def connect(live_server: str) -> socket.socket:
    host, port = live_server.removeprefix("http://").removesuffix("/v1").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def answer(sock: socket.socket) -> bytes:
    """One whole answer (its headers and a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = (line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    length = int(next(lengths))
    while len(body) < length:
        body += sock.recv(65536)
    return head


def closed(sock: socket.socket) -> bool:
    sock.settimeout(3)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_a_dripping_upload_is_cut_below_the_minimum_rate(
    live_server: str, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same rule on a shorter clock: after 1 s, 200 bytes a second on average.
    monkeypatch.setattr(gate, "BODY_GRACE_SECONDS", 1.0)
    monkeypatch.setattr(gate, "BODY_MIN_RATE", 200)
    boundary = "b0undary"
    start = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="drip.txt"\r\n\r\n'
    sock = connect(live_server)
    sock.sendall(
        f"POST /v1/upload HTTP/1.1\r\nHost: x\r\nX-API-Key: {API_KEY}\r\nContent-Length: 100000\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n{start}".encode()
    )
    began = time.monotonic()
    head = b""
    sock.settimeout(0.2)
    while time.monotonic() - began < 10:  # a byte every 0.2 s: well under the rate, never idle
        try:
            sock.sendall(b"x")
            head = sock.recv(65536)
            break
        except TimeoutError:
            continue
        except OSError:
            break
    elapsed = time.monotonic() - began
    assert head.startswith(b"HTTP/1.1 408"), head
    assert elapsed < 5, elapsed  # cut soon after the grace, never left to drip for long
    sock.close()
    assert client.get("/health").status_code == 200
    assert run(client, "print(6 * 7)")["stdout"] == "42\n"


def test_no_idle_connection_is_kept_for_a_caller_without_a_key(live_server: str) -> None:
    for request in (
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /v1/files/AAAAAAAAAAAAAAAAAAAAA HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /v1/files/AAAAAAAAAAAAAAAAAAAAA HTTP/1.1\r\nHost: x\r\nX-API-Key: wrong-key-0123456789\r\n\r\n",
    ):
        sock = connect(live_server)
        sock.sendall(request)
        head = answer(sock)
        assert b"connection: close" in head.lower(), head
        assert closed(sock), request  # the service closed it: nothing is left to hold
        sock.close()
    # With the key, a connection is kept alive for the next call, as clients expect.
    keyed = connect(live_server)
    for _ in range(2):
        keyed.sendall(f"GET /v1/files/{'A' * 21} HTTP/1.1\r\nHost: x\r\nX-API-Key: {API_KEY}\r\n\r\n".encode())
        head = answer(keyed)
        assert head.startswith(b"HTTP/1.1 404") and b"connection: close" not in head.lower(), head
    keyed.close()
