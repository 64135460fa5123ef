"""A programmatic round hands the client at most 200 tool calls in all (the reference
server's limit): a program asking for more in one round is refused before the client runs
any of them. A continuation counts against its session's calls in flight, as an exec does."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from fastapi.testclient import TestClient

from codeexec.sandbox.port import SESSION_CALLS

from ..calls import run
from ..conftest import API_KEY

TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def ask(count: int) -> str:
    return f"import asyncio\nawait asyncio.gather(*(get_weather(city=str(n)) for n in range({count})))\nprint('done')\n"


def test_a_round_asking_for_more_than_200_calls_hands_the_client_none(client: TestClient) -> None:
    many = client.post("/v1/exec/programmatic", json={"code": ask(201), "tools": [TOOL]})
    assert many.status_code == 400, many.text[:300]
    assert "more than 200 tool calls" in many.json()["details"]
    within = client.post("/v1/exec/programmatic", json={"code": ask(200), "tools": [TOOL]})
    assert within.status_code == 200 and len(within.json()["tool_calls"]) == 200, within.text[:300]
    assert client.get("/health").status_code == 200
    assert run(client, "print(6 * 7)")["stdout"] == "42\n"


def test_a_continuation_counts_against_its_sessions_calls_in_flight(client: TestClient, live_server: str) -> None:
    first = client.post("/v1/exec/programmatic", json={"code": ask(1), "tools": [TOOL]}).json()
    session, token = first["session_id"], first["continuation_token"]
    answers = {"continuation_token": token, "tool_results": [{"call_id": "call_001", "result": "sunny"}]}
    hold = {"lang": "py", "code": "import time\ntime.sleep(2)", "session_id": session}
    headers = {"X-API-Key": API_KEY}
    with ThreadPoolExecutor(SESSION_CALLS) as pool:  # the session's calls in flight: one runs, the rest wait
        held = [pool.submit(httpx.post, f"{live_server}/exec", json=hold, headers=headers, timeout=30) for _ in
                range(SESSION_CALLS)]  # fmt: skip
        time.sleep(0.5)
        refused = client.post("/v1/exec/programmatic", json=answers)
        assert all(call.result().status_code == 200 for call in held)
    assert refused.status_code == 429, refused.text[:300]
    assert "this session has" in refused.json()["details"]
    finished = client.post("/v1/exec/programmatic", json=answers)  # its session free again, it runs
    assert finished.status_code == 200 and finished.json()["stdout"] == "done\n", finished.text[:300]
    assert client.get("/health").status_code == 200
