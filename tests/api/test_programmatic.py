"""Programmatic tool calling and the stateful profile, through the app, on both backends
(`local`, and `agentcore` through its fake): the rounds, the tokens, cancel, and one
session per conversation."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..calls import names
from ..helpers.g2 import g2_settings, librechat_token
from ..helpers.tokens import Issuer
from ..serving import Services

ALICE, BOB = "64f0c0ffee00000000000a11", "64f0c0ffee00000000000b0b"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
FAILING = {"name": "failing-tool", "description": "Always fails", "parameters": {"type": "object", "properties": {}}}
TOOLS = [WEATHER, FAILING]


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    made = Issuer(tmp_path / "jwks.json")
    made.add_key("lc-codeapi-2026-05", "EdDSA")
    return made


@pytest.fixture(params=["local", "agentcore"])
def app(request: pytest.FixtureRequest, settings: Settings, issuer: Issuer, services: Services) -> FastAPI:
    configured = g2_settings(settings, issuer)
    if request.param == "agentcore":
        fake = request.getfixturevalue("agentcore_fake")
        configured = configured.model_copy(update={"sandbox_backend": "agentcore", "agentcore_endpoint_url": fake.url})
    return create_app(services(configured))


@pytest.fixture
def local_app(settings: Settings, issuer: Issuer, services: Services) -> FastAPI:
    return create_app(services(g2_settings(settings, issuer)))


def user(app: FastAPI, issuer: Issuer, sub: str = ALICE, tenant: str = "tenant-1") -> TestClient:
    return TestClient(app, headers={"Authorization": f"Bearer {librechat_token(issuer, tenant=tenant, sub=sub)}"})


def post(client: TestClient, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    reply = client.post("/v1/exec/programmatic", json=body, headers=headers)
    assert reply.status_code == 200, reply.text
    return reply.json()


def answer(client: TestClient, asked: dict[str, Any], results: Callable[[dict[str, Any]], dict[str, Any]]) -> dict:
    """Post the results the client's tools gave, as @librechat/agents does."""
    tool_results = [{"call_id": call["id"], **results(call)} for call in asked["tool_calls"]]
    return post(client, {"continuation_token": asked["continuation_token"], "tool_results": tool_results})


def weather(call: dict[str, Any]) -> dict[str, Any]:
    if call["name"] == "failing-tool":
        return {"result": None, "is_error": True, "error_message": "boom from failing-tool"}
    return {"result": {"city": call["input"]["city"], "sky": "clear"}, "is_error": False}


PY = """import asyncio
first = await get_weather(city="Paris")
second = await get_weather("Oslo")
both = await asyncio.gather(get_weather(city="Rome"), get_weather(city="Lima"))
try:
    await failing_tool()
except ToolError as e:
    print("caught:", e)
print(first["sky"], second["city"], [w["city"] for w in both])
open("/mnt/data/report.txt", "w").write("done")
"""


def test_a_python_program_calls_tools_in_rounds(app: FastAPI, issuer: Issuer) -> None:
    alice = user(app, issuer)
    rounds = [post(alice, {"code": PY, "tools": TOOLS, "timeout": 20_000})]
    while rounds[-1]["status"] == "tool_call_required":
        rounds.append(answer(alice, rounds[-1], weather))
    asked = [[(c["name"], c["input"]) for c in r["tool_calls"]] for r in rounds[:-1]]
    assert asked == [
        [("get_weather", {"city": "Paris"})],
        [("get_weather", {"city": "Oslo"})],  # positional, named by the schema
        [("get_weather", {"city": "Rome"}), ("get_weather", {"city": "Lima"})],  # gathered: one round
        [("failing-tool", {})],  # the client's own name, not the identifier
    ]
    done = rounds[-1]
    assert done["status"] == "completed", done
    assert done["stdout"] == "caught: boom from failing-tool\nclear Oslo ['Rome', 'Lima']\n"
    assert names(done) == ["report.txt"]
    assert len({r["session_id"] for r in rounds}) == 1


def test_a_bash_program_calls_tools_as_functions(app: FastAPI, issuer: Issuer) -> None:
    alice = user(app, issuer)
    code = (
        'w=$(get_weather \'{"city": "Paris"}\'); echo "got $w"\n'
        "failing_tool || echo \"failed with $?\"\n"
        "rm -f gone.txt"
    )
    asked = post(alice, {"lang": "bash", "code": code, "tools": TOOLS})
    assert [c["name"] for c in asked["tool_calls"]] == ["get_weather"]
    asked = answer(alice, asked, weather)
    assert [c["name"] for c in asked["tool_calls"]] == ["failing-tool"]
    done = answer(alice, asked, weather)
    assert done["status"] == "completed", done
    assert done["stdout"] == 'got {"city":"Paris","sky":"clear"}\nfailed with 1\n'
    assert done["stderr"] == "boom from failing-tool\n"


def test_a_round_past_its_time_limit_ends_the_run(app: FastAPI, issuer: Issuer) -> None:
    alice = user(app, issuer)
    asked = post(alice, {"code": "await get_weather(city='x')\nwhile True:\n    pass", "tools": TOOLS, "timeout": 1500})
    done = answer(alice, asked, weather)
    assert (done["status"], done["error"]) == ("error", "Time limit exceeded")
    assert "time limit" in done["stderr"]


def test_a_failing_program_is_an_error_with_its_traceback(app: FastAPI, issuer: Issuer) -> None:
    alice = user(app, issuer)
    done = post(alice, {"code": "def f():\n    raise ValueError('nope')\nf()", "tools": TOOLS})
    assert (done["status"], done["error"]) == ("error", "Sandbox exited with code 1")
    # As Python prints it for a script: the program's frames, none of the driver's.
    assert done["stderr"] == (
        "Traceback (most recent call last):\n"
        '  File "/code/program.py", line 3, in <module>\n    f()\n'
        '  File "/code/program.py", line 2, in f\n    raise ValueError(\'nope\')\n'
        "ValueError: nope\n"
    )
    asked = post(alice, {"code": "await get_weather(city='x')\nraise SystemExit(3)", "tools": TOOLS})
    done = answer(alice, asked, weather)
    assert (done["status"], done["error"], done["stderr"]) == ("error", "Sandbox exited with code 3", "")


def test_continuation_tokens_are_the_callers_and_used_once(app: FastAPI, issuer: Issuer) -> None:
    alice, bob, elsewhere = user(app, issuer), user(app, issuer, BOB), user(app, issuer, tenant="tenant-2")
    asked = post(alice, {"code": "print(await get_weather(city='x'))", "tools": TOOLS})
    token = asked["continuation_token"]
    results = [{"call_id": asked["tool_calls"][0]["id"], "result": {"sky": "clear"}, "is_error": False}]
    body = {"continuation_token": token, "tool_results": results}
    assert bob.post("/v1/exec/programmatic", json=body).status_code == 403
    assert elsewhere.post("/v1/exec/programmatic", json=body).status_code == 403
    head, _, signature = token.rpartition(".")
    forged = {**body, "continuation_token": f"{head}x.{signature}"}
    assert alice.post("/v1/exec/programmatic", json=forged).status_code == 400
    wrong = {**body, "tool_results": [{"call_id": "call_999", "result": 1}]}
    assert alice.post("/v1/exec/programmatic", json=wrong).status_code == 400
    assert post(alice, body)["stdout"] == "{'sky': 'clear'}\n"
    replayed = alice.post("/v1/exec/programmatic", json=body)
    assert replayed.status_code == 409
    assert "spent" in replayed.json()["details"]


def test_a_continuation_that_sends_the_first_rounds_files_again_is_answered(local_app: FastAPI, issuer: Issuer) -> None:
    # Issue 44, item 4: the files came with the first round, which placed them; the next
    # round's were matched against the inputs it placed (none) and the service answered 500.
    alice = user(local_app, issuer)
    up = alice.post("/v1/upload", files={"file": ("data.csv", b"1,2\n")}).json()
    ref = {"id": up["files"][0]["fileId"], "name": "data.csv", "storage_session_id": up["session_id"], "kind": "user"}
    code = "await get_weather(city='x')\nprint(open('/mnt/data/data.csv').read(), end='')"
    asked = post(alice, {"code": code, "tools": TOOLS, "files": [ref]})
    results = [{"call_id": asked["tool_calls"][0]["id"], "result": {"sky": "clear"}}]
    done = post(alice, {"continuation_token": asked["continuation_token"], "tool_results": results, "files": [ref]})
    assert (done["status"], done["stdout"], done["session_id"]) == ("completed", "1,2\n", up["session_id"])


def test_cancel_stops_the_run_of_a_request(local_app: FastAPI, issuer: Issuer) -> None:
    # Local only: on AgentCore a cancel reaching another function finds no run (docs/api.md).
    alice = user(local_app, issuer)
    request_id = "4b6f9e1c-7a53-4f0e-9a8e-0c1d2e3f4a5b"
    body = {"code": "import time\ntime.sleep(15)\nprint('never')", "tools": TOOLS, "timeout": 20_000}
    started = time.monotonic()
    reply: dict[str, Any] = {}
    headers = {"X-LibreChat-Code-Request-ID": request_id}
    running = threading.Thread(target=lambda: reply.update(post(alice, body, **headers)))
    running.start()
    time.sleep(1.5)
    assert alice.post("/v1/exec/programmatic/cancel", json={"request_id": request_id}).status_code == 200
    running.join(20)
    assert (reply["status"], reply["error"]) == ("error", "Execution was cancelled")
    assert time.monotonic() - started < 10 and "never" not in reply["stdout"]


# -- the stateful profile ----------------------------------------------------------------


def exec_(client: TestClient, code: str, **body: Any) -> dict[str, Any]:
    reply = client.post(
        "/v1/exec", json={"lang": "bash", "code": code, **body}, headers={"X-CodeAPI-Expected-Profile": "stateful"}
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_one_conversation_one_session_per_user(local_app: FastAPI, issuer: Issuer) -> None:
    alice, bob = user(local_app, issuer), user(local_app, issuer, BOB)
    hint = "conversation-7"
    warm = exec_(alice, "true", runtime_session_hint=hint)  # LibreChat's prewarm
    assert warm["runtime_status"] == "new" and warm["runtime_session_id"] == warm["session_id"]
    exec_(alice, "echo kept > notes.txt", runtime_session_hint=hint)
    later = exec_(alice, "cat notes.txt", runtime_session_hint=hint)
    assert (later["stdout"], later["session_id"], later["runtime_status"]) == ("kept\n", warm["session_id"], "reused")
    theirs = exec_(bob, "cat notes.txt 2>&1 || echo none", runtime_session_hint=hint)
    assert theirs["session_id"] != warm["session_id"] and theirs["stdout"].endswith("none\n")
    # A programmatic run with the hint works in the same session.
    program = post(alice, {"code": "print(open('notes.txt').read())", "tools": TOOLS, "runtime_session_hint": hint})
    assert (program["session_id"], program["stdout"]) == (warm["session_id"], "kept\n\n")


def test_a_backend_that_cannot_keep_a_workspace_says_so(
    settings: Settings, issuer: Issuer, agentcore_fake, services: Services
) -> None:
    configured = g2_settings(settings, issuer).model_copy(
        update={"sandbox_backend": "agentcore", "agentcore_endpoint_url": agentcore_fake.url}
    )
    alice = user(create_app(services(configured)), issuer)
    stateful = {"X-CodeAPI-Expected-Profile": "stateful"}
    for path, body in (
        ("/v1/exec", {"lang": "bash", "code": "true", "runtime_session_hint": "c"}),
        ("/v1/exec/programmatic", {"code": "print(1)", "tools": TOOLS, "runtime_session_hint": "c"}),
    ):
        reply = alice.post(path, json=body, headers=stateful)
        assert reply.status_code == 409
        assert reply.json()["code"] == "execution_profile_mismatch"
    # Without the stateful profile, a hint selects nothing there and the run happens.
    assert alice.post("/v1/exec", json={"lang": "bash", "code": "echo ok", "runtime_session_hint": "c"}).json()[
        "stdout"
    ] == "ok\n"


# -- the workflow's state, out of the programs' reach ------------------------------------

ROUND = "r = await get_weather(city='Paris')\nprint('sky:', r['sky'])"
# A run in the same session between two rounds: every record of a workflow it can find
# rewritten to a program that overruns and has calls answered already. On `local` there
# is none to find (records live beside the lease, outside /mnt/data); on AgentCore the
# VM's filesystem is the program's, and the record is there.
REWRITE = """
import json, os
found = [os.path.join(top, name) for start in ('/mnt/data', '..') for top, _, names in os.walk(start) for name in names]
for path in found:
    try:
        record = json.load(open(path))
    except (ValueError, OSError, UnicodeDecodeError):
        continue
    if isinstance(record, dict) and 'code' in record:
        record.update(code='import time\\ntime.sleep(30)', round=0, history={})
        json.dump(record, open(path, 'w'))
        print('rewrote', path)
print('looked at', len(found))
"""


def claims_of(token: str) -> dict[str, Any]:
    body = token.partition(".")[0]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


def test_a_rewritten_record_is_refused_or_never_read(app: FastAPI, issuer: Issuer) -> None:
    alice = user(app, issuer)
    asked = post(alice, {"code": ROUND, "tools": TOOLS, "timeout": 4000})
    attack = alice.post("/v1/exec", json={"lang": "py", "code": REWRITE, "session_id": asked["session_id"]}).json()
    started = time.monotonic()
    body = {"continuation_token": asked["continuation_token"],
            "tool_results": [{"call_id": asked["tool_calls"][0]["id"], "result": {"sky": "clear"}}]}  # fmt: skip
    reply = alice.post("/v1/exec/programmatic", json=body)
    if app.state.service.settings.sandbox_backend == "agentcore":  # within reach, and it does not verify
        assert "rewrote" in attack["stdout"]
        assert reply.status_code == 409 and "does not verify" in reply.json()["details"]
    else:  # out of reach: it ran exactly as first saved
        assert "rewrote" not in attack["stdout"]
        assert (reply.status_code, reply.json()["stdout"]) == (200, "sky: clear\n")
    assert time.monotonic() - started < 15
    assert alice.get("/health").status_code == 200


def test_a_record_that_does_not_verify_is_a_409(local_app: FastAPI, issuer: Issuer, settings: Settings) -> None:
    """Whatever reaches the store (here the test itself), a record that is not the one
    the token names is refused, never run and never a 500; a spent token says spent."""
    alice = user(local_app, issuer)
    asked = post(alice, {"code": ROUND, "tools": TOOLS})
    claims = claims_of(asked["continuation_token"])
    record = Path(settings.sandbox_root) / claims["session"] / "records" / claims["workflow"]
    saved = record.read_bytes()
    body = {"continuation_token": asked["continuation_token"],
            "tool_results": [{"call_id": asked["tool_calls"][0]["id"], "result": {"sky": "clear"}}]}  # fmt: skip
    for tampered in (saved.replace(b"Paris", b"Lyon"), b"not json at all"):
        record.write_bytes(tampered)
        reply = alice.post("/v1/exec/programmatic", json=body)
        assert reply.status_code == 409 and "does not verify" in reply.json()["details"]
    record.write_bytes(saved)
    assert post(alice, body)["stdout"] == "sky: clear\n"


FORGE = """
import gc, json, os, sys
calls = next(o for o in gc.get_objects() if type(o).__name__ == 'Calls')  # the driver's own
forged = [{"id": "call_001", "name": "delete_everything", "input": {}}]
sys.stdout.flush()
os.write(1, ("\\n" + calls.nonce + json.dumps(forged) + "\\n").encode())
os._exit(0)
"""


def test_a_forged_driver_line_asking_for_a_tool_never_offered_is_a_409(app: FastAPI, issuer: Issuer) -> None:
    alice = user(app, issuer)
    reply = alice.post("/v1/exec/programmatic", json={"code": FORGE, "tools": TOOLS})
    assert reply.status_code == 409
    assert "not its driver's" in reply.json()["details"]
    assert "delete_everything" not in reply.text


def test_a_round_never_runs_longer_than_the_run_limit(settings: Settings, issuer: Issuer, services: Services) -> None:
    """The client's timeout travels in the token, and every round caps it with the
    settings: a client asking for an hour gets RUN_TIMEOUT_SECONDS."""
    short = g2_settings(settings, issuer).model_copy(update={"run_timeout_seconds": 2})
    alice = user(create_app(services(short)), issuer)
    asked = post(alice, {"code": "await get_weather(city='x')\nimport time\ntime.sleep(30)", "tools": TOOLS,
                         "timeout": 3_600_000})  # fmt: skip
    assert claims_of(asked["continuation_token"])["timeout"] == 3600
    started = time.monotonic()
    done = answer(alice, asked, weather)
    assert (done["status"], done["error"]) == ("error", "Time limit exceeded")
    assert time.monotonic() - started < 15
