"""The MicroVM hook app (runner/hooks.py), attacked on its own port: a body past its small
limit is refused before it is read whole, JSON nested deeper than the parser goes is a
400, and the hook still takes a real payload after both."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.types import Message, Receive, Scope, Send

from codeexec.runner.build import build_runner
from codeexec.runner.hooks import HOOKS, MAX_BODY, create_hook_app
from codeexec.settings import Settings

from ..serving import serving


def test_the_run_hook_reads_a_bounded_body_and_refuses_deep_json(
    settings: Settings, client: TestClient, request: pytest.FixtureRequest
) -> None:
    runner = build_runner(settings)
    request.addfinalizer(runner.close)
    hook_app = create_hook_app(runner, ready=lambda: True)
    reads: list[int] = []  # the size of each body message the hook app took in

    async def counted(scope: Scope, receive: Receive, send: Send) -> None:
        async def counting() -> Message:
            message = await receive()
            reads.append(len(message.get("body", b"")))
            return message

        await hook_app(scope, counting, send)

    def endless() -> Iterator[bytes]:  # 64 MiB, a chunk at a time, no length declared
        for _ in range(1024):
            yield b"[" * (1 << 16)

    with serving(counted) as url:
        try:
            big = httpx.post(f"{url}{HOOKS}/run", content=endless(), timeout=30)
            assert big.status_code == 413 and str(MAX_BODY) in big.json()["details"]
        except httpx.TransportError:
            pass  # refused and closed while the client was still sending: as good
        # The hook asks for no more once past its limit. The last message's size is the
        # server's (uvicorn hands over what it buffered, up to a socket read past its
        # high-water mark), so it is bounded by a MiB, not by MAX_BODY.
        assert sum(reads[:-1]) <= MAX_BODY and sum(reads) < 1 << 20, reads
        declared = httpx.post(f"{url}{HOOKS}/run", content=b" " * (MAX_BODY + 1))
        assert declared.status_code == 413
        deep = httpx.post(f"{url}{HOOKS}/run", content=b"[" * 30_000 + b"]" * 30_000)
        assert deep.status_code == 400 and deep.json()["error"] == "Bad request"
        envelope = {"runHookPayload": "[" * 50_000}
        assert httpx.post(f"{url}{HOOKS}/run", json=envelope).status_code == 400
        payload = json.dumps({"runner_key": "a-runner-key-0123456789"}).encode()
        assert httpx.post(f"{url}{HOOKS}/run", content=payload).status_code == 200
        assert runner.authorized("a-runner-key-0123456789")
    assert client.get("/health").status_code == 200
