"""A fleet of runners behind the `runner` backend (issue 31), on loopback: ids that name
their runner, calls routed by the id alone, new sessions spread by load, a stateful hint
on one runner from every replica, inputs carried from other runners in the run's one
request, a runner that stops and comes back, and settings that refuse to start.

The same fleet of three serves the API suites (`make test-runner`); tests/backends/test_fleet_hosts.py
puts each runner on a host of its own (a network namespace) to kill, freeze and cut it off.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr, ValidationError

from codeexec import ids
from codeexec.api.app import create_app
from codeexec.sandbox.remote import FleetConfig, RunnerFleet, protocol
from codeexec.settings import Settings

from ..calls import run, session_on_runner, upload
from ..conftest import API_KEY
from ..helpers.fleet import Fleet
from ..serving import RUNNER_KEY, Services, fleet_settings, free_port

USER_ID = "64f0c0ffee0000000000abcd"
USER = {"user_id": USER_ID}  # an exec's, as G1 LibreChat names its user
CALLER = {"X-API-Key": API_KEY, "User-Id": USER_ID}  # an upload names it in User-Id


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet.running(settings, 3) as made:
        yield made


def replica(settings: Settings, fleet: Fleet, services: Services) -> FastAPI:
    """One service replica of the fleet: each shares the fleet and the token secret."""
    shared = {"code_exec_token_secret": SecretStr("shared-secret")}
    configured = fleet_settings(settings, fleet.urls).model_copy(update=shared)
    return create_app(services(configured))


@pytest.fixture
def client(settings: Settings, fleet: Fleet, services: Services) -> TestClient:
    return TestClient(replica(settings, fleet, services), headers=CALLER)


def test_an_id_names_its_runner_and_keeps_120_random_bits() -> None:
    made = [ids.new_session_id(5) for _ in range(200)]
    assert all(ids.is_session_id(s) and ids.runner_of(s) == 5 for s in made)
    assert len(set(made)) == 200 and len({s[1:] for s in made}) == 200
    assert ids.on_runner(made[0], 9)[1:] == made[0][1:] and ids.runner_of(ids.on_runner(made[0], 9)) == 9
    with pytest.raises(ValueError):
        ids.new_session_id(64)


def test_new_sessions_spread_over_the_runners(client: TestClient) -> None:
    made = [upload(client, f"f{n}.txt", b"x")["session_id"] for n in range(30)]
    made += [run(client, "print(1)", **USER)["session_id"] for _ in range(30)]
    per_runner = collections.Counter(ids.runner_of(s) for s in made)
    assert sorted(per_runner) == [0, 1, 2]
    assert min(per_runner.values()) >= 12, per_runner  # a fair part of 60 each


def test_every_call_goes_to_the_runner_its_id_names(client: TestClient, fleet: Fleet) -> None:
    session = session_on_runner(client, 1, b"a")
    before = fleet.requests()
    listed = client.get(f"/v1/files/{session}", params={"detail": "summary"}).json()
    assert listed[0]["name"] == f"{session}/{ids.file_id(session, 'a.txt')}"
    assert client.get(f"/v1/download/{session}/a.txt").content == b"a"
    assert run(client, "cat a.txt", "bash", session_id=session, **USER)["stdout"] == "a"
    after = fleet.requests()
    assert [a - b for a, b in zip(after, before, strict=True)] == [0, 3, 0]


def test_an_id_that_names_no_runner_is_a_404_asking_nobody(client: TestClient, fleet: Fleet) -> None:
    stranger = ids.runner_mark(7) + "A" * 20  # runner 7 of a fleet of three
    before = fleet.requests()
    assert client.get(f"/v1/files/{stranger}").status_code == 404
    assert client.get(f"/v1/download/{stranger}/a.txt").status_code == 404
    assert client.delete(f"/v1/files/{stranger}/a.txt").status_code == 404
    assert fleet.requests() == before


def test_inputs_from_other_runners_ride_in_the_run_one_request_per_runner(client: TestClient, fleet: Fleet) -> None:
    here, there, also_there = session_on_runner(client, 0, b"a"), session_on_runner(client, 2, b"a"), None
    while also_there is None or also_there == there:
        also_there = session_on_runner(client, 2, b"a")
    upload(client, "b.txt", b"from there", session_id=there)
    upload(client, "c.txt", b"and again", session_id=also_there)
    files = [{"id": "b.txt", "name": "b.txt", "session_id": there}, {"id": "c.txt", "name": "c.txt",
             "session_id": also_there}]  # fmt: skip
    before = fleet.requests()
    reply = run(client, "cat a.txt b.txt c.txt", "bash", session_id=here, files=files, **USER)
    assert (reply["session_id"], reply["stdout"], reply["stderr"]) == (here, "afrom thereand again", "")
    # One request to the run's runner, one to the other that holds both inputs, none else.
    assert [a - b for a, b in zip(fleet.requests(), before, strict=True)] == [1, 0, 1]
    assert fleet.apps[2].paths[-1] == "/reads"


def test_a_hint_lands_on_one_runner_from_every_replica(settings: Settings, fleet: Fleet, services: Services) -> None:
    replicas = [TestClient(replica(settings, fleet, services), headers=CALLER) for _ in range(2)]
    stateful = {"X-CodeAPI-Expected-Profile": "stateful"}
    sessions = []
    for n, replica_client in enumerate(replicas):
        body = {"lang": "bash", "code": f"echo {n} >> seen.txt; cat seen.txt", "runtime_session_hint": "v2:user:1",
                **USER}  # fmt: skip
        reply = replica_client.post("/v1/exec", json=body, headers=stateful)
        assert reply.status_code == 200, reply.text
        sessions.append(reply.json()["session_id"])
    assert sessions[0] == sessions[1]
    assert reply.json()["stdout"] == "0\n1\n"  # the second replica found the first one's workspace


def test_growing_the_fleet_moves_a_hint_only_to_the_new_runner() -> None:
    def fleet_of(count: int) -> RunnerFleet:
        urls = tuple(f"http://127.0.0.1:{free_port()}" for _ in range(count))  # nobody answers there
        return RunnerFleet(FleetConfig(urls, RUNNER_KEY, 30, connect_seconds=0.2))

    three, four = fleet_of(3), fleet_of(4)
    try:
        hints = [ids.derived_id("hint", "org", "user", str(n)) for n in range(2000)]
        before = {h: three._hinted(h)[0].index for h in hints}
        after = {h: four._hinted(h)[0].index for h in hints}
    finally:
        three.close()
        four.close()
    moved = [h for h in hints if before[h] != after[h]]
    assert {after[h] for h in moved} == {3}  # nothing moves between the runners that stayed
    assert 0.18 < len(moved) / len(hints) < 0.32  # about a quarter: the new runner's share


def test_a_programmatic_round_continues_on_another_replica_and_a_cancel_reaches_its_run(
    settings: Settings, fleet: Fleet, services: Services
) -> None:
    first, second = (TestClient(replica(settings, fleet, services), headers=CALLER) for _ in range(2))
    tool = {"name": "echo", "description": "Echo", "parameters": {"type": "object", "properties": {}}}
    asked = first.post("/v1/exec/programmatic", json={"code": "print(await echo())", "tools": [tool]}).json()
    assert asked["status"] == "tool_call_required", asked
    results = [{"call_id": asked["tool_calls"][0]["id"], "result": "hello", "is_error": False}]
    done = second.post("/v1/exec/programmatic", json={"continuation_token": asked["continuation_token"],
                                                      "tool_results": results}).json()  # fmt: skip
    assert (done["status"], done["stdout"]) == ("completed", "hello\n")

    request_id = "4b6f9e1c-7a53-4f0e-9a8e-0c1d2e3f4a5b"
    reply: dict[str, Any] = {}
    body = {"code": "import time\ntime.sleep(15)\nprint('never')", "tools": [tool], "timeout": 20_000}
    headers = {"X-LibreChat-Code-Request-ID": request_id}
    running = threading.Thread(target=lambda: reply.update(first.post("/v1/exec/programmatic", json=body,
                                                                      headers=headers).json()))  # fmt: skip
    running.start()
    time.sleep(1.5)
    assert second.post("/v1/exec/programmatic/cancel", json={"request_id": request_id}).status_code == 200
    running.join(20)
    assert (reply["status"], reply["error"]) == ("error", "Execution was cancelled")


def test_a_runner_that_stops_is_a_quick_503_and_comes_back_with_its_files(
    settings: Settings, fleet: Fleet, client: TestClient
) -> None:
    gone, kept = session_on_runner(client, 1, b"a"), session_on_runner(client, 2, b"a")
    fleet.stop(1)
    started = time.monotonic()
    answer = client.get(f"/v1/files/{gone}")
    assert answer.status_code == 503 and answer.headers["retry-after"] == "5", answer.text
    assert time.monotonic() - started < 1.0
    assert client.get(f"/v1/download/{kept}/a.txt").content == b"a"  # the others see no error
    health = client.get("/health")
    assert health.status_code == 200 and {"index": 1, "up": False} in health.json()["runners"]
    new = [upload(client, "n.txt", b"n")["session_id"] for _ in range(10)]
    assert all(ids.runner_of(s) != 1 for s in new)  # new sessions avoid it

    fleet.start(1)
    deadline = time.monotonic() + 5
    while client.get(f"/v1/files/{gone}").status_code != 200:
        assert time.monotonic() < deadline, "the runner's sessions did not come back"
        time.sleep(0.2)
    assert client.get(f"/v1/download/{gone}/a.txt").content == b"a"


def test_a_runners_calls_and_how_soon_its_fall_was_noticed_are_metrics(
    settings: Settings, fleet: Fleet, services: Services
) -> None:
    """An operator sees a runner's failing calls before the 503s pile up, and how long the
    service went on sending to a runner already gone."""
    service = services(fleet_settings(settings, fleet.urls))
    client = TestClient(create_app(service), headers=CALLER)
    session = session_on_runner(client, 1, b"a")
    fleet.stop(1)
    assert client.get(f"/v1/files/{session}").status_code == 503  # this call finds it gone
    assert client.get(f"/v1/files/{session}").status_code == 503  # this one is not sent
    assert service.telemetry.metrics is not None
    exposition = service.telemetry.metrics.exposition().decode()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }
    calls = "codeexec_runner_calls_total"
    assert samples[(calls, (("result", "answered"), ("runner", "1")))] >= 1  # the upload
    assert samples[(calls, (("result", "failed"), ("runner", "1")))] == 1
    noticed = samples[("codeexec_runner_down_noticed_seconds", (("runner", "1"),))]
    assert 0 <= noticed < 5, noticed  # since its last answer: the upload, or its last /health
    assert ("codeexec_runner_down_noticed_seconds", (("runner", "2"),)) not in samples  # never went down


def test_a_call_that_falls_silent_fails_alone(
    settings: Settings, fleet: Fleet, monkeypatch: pytest.MonkeyPatch, services: Services
) -> None:
    """A runner is down only when it takes no connection or its /health fails: one call
    silent too long was taken for the runner's death, and everyone's calls were 503s."""
    monkeypatch.setattr(protocol, "SILENT_SECONDS", 1.0)  # the client's patience, for a quicker test
    client = TestClient(replica(settings, fleet, services), headers=CALLER)
    session = session_on_runner(client, 1, b"a")
    fleet.apps[1].silent_on = "silent.txt"
    assert client.get(f"/v1/download/{session}/silent.txt").status_code == 503
    assert client.get(f"/v1/download/{session}/a.txt").content == b"a"
    assert {"index": 1, "up": True} in client.get("/health").json()["runners"]


def test_health_is_a_503_when_no_runner_answers(settings: Settings, fleet: Fleet, client: TestClient) -> None:
    for index in range(3):
        fleet.stop(index)
    deadline = time.monotonic() + 5
    while (health := client.get("/health")).status_code != 503:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert [r["up"] for r in health.json()["runners"]] == [False, False, False]
    answer = client.post("/v1/upload", files={"file": ("a", b"a")})
    assert answer.status_code == 503 and "no sandbox runner answers" in answer.json()["details"]


def test_two_runners_claiming_one_index_are_noticed(
    settings: Settings, fleet: Fleet, caplog: pytest.LogCaptureFixture, services: Services
) -> None:
    twice = [fleet.urls[0], fleet.urls[0], fleet.urls[2]]  # the second says it is runner 0
    with caplog.at_level(logging.ERROR, logger="codeexec.runner.fleet"):
        app = create_app(services(fleet_settings(settings, twice)))
    client = TestClient(app, headers=CALLER)
    assert [r["up"] for r in client.get("/health").json()["runners"]] == [True, False, True]
    assert "says it is runner 0 (RUNNER_INDEX), not 1" in caplog.text
    made = [upload(client, "a.txt", b"a")["session_id"] for _ in range(12)]
    assert all(ids.runner_of(s) in (0, 2) for s in made)


@pytest.mark.parametrize(
    ("env", "sentence"),
    [
        ({"RUNNER_URLS": "http://a:1,ftp://b"}, "RUNNER_URLS: 'ftp://b' is not a runner's URL"),
        ({"RUNNER_URLS": "http://a:notaport"}, "RUNNER_URLS: 'http://a:notaport' is not a runner's URL"),
        ({"RUNNER_URL_TEMPLATE": "http://runner-0:8080", "RUNNER_COUNT": "3"}, "has no {i}"),
        ({"RUNNER_URL_TEMPLATE": "http://runner-{i}:8080"}, "go together"),
        ({"RUNNER_URL": "http://a:1", "RUNNER_URLS": "http://b:1"}, "not with RUNNER_URL and RUNNER_URLS"),
        ({"RUNNER_INDEX": "sixty"}, "RUNNER_INDEX must be 0 to 63 or 'ordinal'"),
        ({"RUNNER_INDEX": "64"}, "RUNNER_INDEX must be 0 to 63 or 'ordinal'"),
    ],
)
def test_malformed_runner_settings_refuse_to_start_saying_which(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], sentence: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=sentence.replace("(", r"\(").replace("{", r"\{").replace("}", r"\}")):
        Settings()


def test_a_template_names_every_runner_and_a_pod_knows_its_ordinal(monkeypatch: pytest.MonkeyPatch) -> None:
    template = "http://codeexec-runner-{i}.codeexec-runner:8080"
    monkeypatch.setenv("RUNNER_URL_TEMPLATE", template)
    monkeypatch.setenv("RUNNER_COUNT", "3")
    assert Settings().fleet_urls() == tuple(template.replace("{i}", str(i)) for i in range(3))
    monkeypatch.setattr("socket.gethostname", lambda: "codeexec-runner-2")
    assert Settings(runner_index="ordinal").fleet_index() == 2
    monkeypatch.setattr("socket.gethostname", lambda: "a1b2c3")
    with pytest.raises(ValueError, match="does not end in -<number>"):
        Settings(runner_index="ordinal")
