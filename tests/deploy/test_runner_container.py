"""The runner in a container with what Swarm gives it and nothing more (tests/helpers/
runner_container.py): at its start it makes /proc and its own cgroup usable
(codeexec.runner.container), so that runs get a /proc, a memory and a process cgroup of
their own inside the container's, and the preloaded server. `make test-container` runs the
hostile suites against such a runner."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..conftest import API_KEY
from ..helpers import engines
from ..helpers.runner_container import runner_container
from ..serving import RUNNER_KEY, Services, runner_settings

pytestmark = [
    pytest.mark.docker,
    pytest.mark.root,
    pytest.mark.skipif(not shutil.which("dockerd") or os.geteuid() != 0, reason="needs root and dockerd"),
]


@pytest.fixture
def runner(runner_engine: tuple[engines.Engine, str], settings: Settings) -> Iterator[tuple[str, Settings]]:
    warm = settings.model_copy(update={"warm_python": 1, "warm_sandboxes": 1, "runner_key": SecretStr(RUNNER_KEY)})
    with runner_container(*runner_engine, warm) as url:
        yield url, runner_settings(warm, url)


def run(client: httpx.Client, code: str) -> dict:
    answer = client.post("/v1/exec", json={"lang": "py", "code": code}, timeout=120)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_runs_get_cgroups_of_their_own_inside_the_container(runner: tuple[str, Settings], services: Services) -> None:
    url, settings = runner
    with TestClient(create_app(services(settings)), headers={"X-API-Key": API_KEY}) as client:
        own = run(client, "print(open('/proc/self/cgroup').read())")["stdout"]
        cgroups = dict(line.split(":", 2)[1:] for line in own.split())
        # Made by the runner in its container's cgroup (the container sees its own as /).
        assert cgroups["memory"].startswith("/codeexec-") and cgroups["pids"].startswith("/codeexec-"), own
        bomb = run(client, "x = bytearray(4 << 30)\nprint('allocated')")
        assert "exceeded its memory limit" in bomb["stderr"] and "allocated" not in bomb["stdout"], bomb
        forks = run(client, "import os\nwhile True:\n    os.fork()")
        assert "process" in forks["stderr"].lower(), forks
        # Forked from the preloaded server once it is up (a run before that is a cold one):
        # pandas is imported before the program imports it.
        code = "import sys\nbefore = 'pandas' in sys.modules\nimport pandas\nprint(before)"
        deadline = time.monotonic() + 90
        while (preloaded := run(client, code))["stdout"] != "True\n":
            assert time.monotonic() < deadline, preloaded
            time.sleep(1)
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
