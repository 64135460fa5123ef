"""Round trips per API call, counted where they land: every request that reaches a runner
(the `runner` backend, and each MicroVM's runner behind its endpoint) and every
InvokeCodeInterpreter call that reaches the AgentCore fake.

The port is coarse so that one API call is one operation of a remote backend, whatever
the number of files: at most 2 requests to the runner or the session's MicroVM (one more
per other VM inputs are read from), at most 3 InvokeCodeInterpreter calls. Each call is
checked for what it did as well, so a count cannot be met by doing nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..calls import names
from ..conftest import API_KEY
from ..fakes import microvms
from ..helpers.microvms import trusted_fake
from ..serving import RUNNER_KEY, Services, runner_settings, serving

TARGETS = {"runner": 2, "microvm": 2, "agentcore": 3}
TWENTY = "for i in $(seq 20); do echo $i > out$i.txt; done"


@dataclass
class Counted:
    """An ASGI app that notes each request it is sent."""

    app: Any
    seen: list[str] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append(f"{scope['method']} {scope['path']}")
        await self.app(scope, receive, send)


@dataclass
class Backend:
    name: str
    client: TestClient
    seen: Callable[[], list[str]]

    @contextlib.contextmanager
    def counting(self, label: str, counts: dict[str, list[str]]) -> Iterator[None]:
        before = len(self.seen())
        yield
        counts[label] = self.seen()[before:]


@pytest.fixture(params=["runner", "microvm", "agentcore"])
def backend(
    request: pytest.FixtureRequest, settings: Settings, monkeypatch: pytest.MonkeyPatch, services: Services
) -> Iterator[Backend]:
    with contextlib.ExitStack() as stack:
        if request.param == "runner":
            from codeexec.runner.app import create_runner_app
            from codeexec.runner.build import build_runner

            runner = build_runner(settings.model_copy(update={"runner_key": SecretStr(RUNNER_KEY)}))
            counted = Counted(create_runner_app(runner))
            url = stack.enter_context(serving(counted))
            app = create_app(services(runner_settings(settings, url)))
            seen = lambda: counted.seen  # noqa: E731
        elif request.param == "microvm":
            vms: list[Counted] = []

            def counted_runner(runner: Any) -> Counted:
                from codeexec.runner.app import create_runner_app

                vms.append(Counted(create_runner_app(runner)))
                return vms[-1]

            monkeypatch.setattr(microvms, "create_runner_app", counted_runner)
            request.getfixturevalue("aws_env")
            fake = stack.enter_context(trusted_fake(settings, monkeypatch))
            app = create_app(services(settings.model_copy(update={
                "sandbox_backend": "microvm", "microvm_image": "arn:aws:lambda:us-east-1:1:microvm-image:r",
                "microvm_endpoint_url": fake.base_url, "runner_key": SecretStr("microvm-runner-key-0123"),
            })))  # fmt: skip
            seen = lambda: [r for vm in vms for r in vm.seen]  # noqa: E731
        else:
            fake_ac = request.getfixturevalue("agentcore_fake")
            app = create_app(services(settings.model_copy(update={"sandbox_backend": "agentcore",
                                                          "agentcore_endpoint_url": fake_ac.url})))  # fmt: skip
            seen = lambda: [c for c in fake_ac.fake.calls if c.startswith("invoke ")]  # noqa: E731
        yield Backend(request.param, TestClient(app, headers={"X-API-Key": API_KEY}), seen)


def test_every_route_is_at_most_two_requests_or_three_agentcore_calls(backend: Backend) -> None:
    client, counts = backend.client, {}

    with backend.counting("upload, 1 file", counts):
        one = client.post("/v1/upload", files={"file": ("a.txt", b"a")}).json()
    session = one["session_id"]
    with backend.counting("upload, 10 files", counts):
        ten = client.post(
            "/v1/upload", data={"session_id": session}, files=[("file", (f"in{i}.txt", b"%d" % i)) for i in range(10)]
        ).json()
    assert [f["filename"] for f in ten["files"]] == [f"in{i}.txt" for i in range(10)]
    other = client.post("/v1/upload", files=[("file", (f"o{i}.txt", b"o%d" % i)) for i in range(10)]).json()
    own_refs = [{"id": f["fileId"], "name": f["filename"], "session_id": session} for f in ten["files"]]
    other_refs = [{"id": f["fileId"], "name": f["filename"], "session_id": other["session_id"]} for f in other["files"]]
    count_inputs = "import glob; print(len(glob.glob('in*.txt')), len(glob.glob('o*.txt')))"

    with backend.counting("exec, new session", counts):
        new = client.post("/v1/exec", json={"lang": "py", "code": "print(6 * 7)"}).json()
    assert new["stdout"] == "42\n" and new["session_id"] not in (session, other["session_id"])
    with backend.counting("exec, existing session", counts):
        assert client.post("/v1/exec", json={"lang": "py", "code": "print(1)", "session_id": session}).json()[
            "session_id"
        ] == session
    for label, refs, expected in (
        ("exec, 1 input of its own", own_refs[:1], "10 0\n"),
        ("exec, 10 inputs of its own", own_refs, "10 0\n"),
        ("exec, 1 input of another session", other_refs[:1], "10 1\n"),
        ("exec, 10 inputs of another session", other_refs, "10 10\n"),
    ):
        with backend.counting(label, counts):
            body = {"lang": "py", "code": count_inputs, "session_id": session, "files": refs}
            ran = client.post("/v1/exec", json=body)
        assert (ran.json()["stdout"], ran.json()["stderr"]) == (expected, ""), label
    with backend.counting("exec, writing 20 files", counts):
        wrote = client.post("/v1/exec", json={"lang": "bash", "code": TWENTY, "session_id": session}).json()
    assert sorted(names(wrote)) == sorted(f"out{i}.txt" for i in range(1, 21))
    with backend.counting("list", counts):
        assert len(client.get(f"/v1/files/{session}").json()) == 1 + 10 + 10 + 20
    with backend.counting("download", counts):
        assert client.get(f"/v1/download/{session}/{one['files'][0]['fileId']}").content == b"a"
    with backend.counting("delete", counts):
        assert client.delete(f"/v1/files/{session}/{one['files'][0]['fileId']}").status_code == 200
    assert client.get(f"/v1/download/{session}/a.txt").status_code == 404

    weather = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    with backend.counting("programmatic, first round", counts):
        asked = client.post("/v1/exec/programmatic", json={"code": "print(await get_weather(city='x'))",
                                                           "tools": [weather]}).json()  # fmt: skip
    results = [{"call_id": asked["tool_calls"][0]["id"], "result": "sunny"}]
    with backend.counting("programmatic, next round", counts):
        done = client.post(
            "/v1/exec/programmatic", json={"continuation_token": asked["continuation_token"], "tool_results": results}
        ).json()
    assert (done["status"], done["stdout"]) == ("completed", "sunny\n")

    most = TARGETS[backend.name]
    over = {label: seen for label, seen in counts.items() if len(seen) > most}
    assert not over, f"{backend.name}: over {most}: {over}"
    assert all(counts.values()), counts  # each call reached the backend
