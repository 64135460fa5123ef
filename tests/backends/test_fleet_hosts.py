"""A fleet of three real runners, each on a simulated host of its own (a network namespace,
its own sandbox root and sandbox uid), behind two service replicas (issue 31): a runner
killed, frozen (SIGSTOP) and cut off by its link, each answered 503 with a retry hint in
time while the others see no error, and back with its files when it returns; each runner
reaping its own sessions; and LibreChat uploading a file again after its host died, then
running with it through the real @librechat/agents 3.9.2."""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest
from fastapi.testclient import TestClient

from codeexec import ids
from codeexec.api.app import create_app
from codeexec.reaper import reap
from codeexec.sandbox.local import btrfs
from codeexec.sandbox.local.storage import Storage
from codeexec.sandbox.remote import protocol
from codeexec.sandbox.remote.fleet import HEALTH_INTERVAL_SECONDS
from codeexec.settings import Settings

from ..calls import run, session_on_runner, upload
from ..conftest import API_KEY
from ..helpers.contract import drive_g2_client
from ..helpers.g2 import KID, g2_settings
from ..helpers.tokens import Issuer
from ..hosts import Host, available, hosts
from ..serving import RUNNER_KEY, Services, fleet_settings, serving

pytestmark = [pytest.mark.root, pytest.mark.skipif(not available(), reason="needs root and iproute2")]

PORT = 8080
IDLE_SECONDS = 12  # each runner's own reaper ends a session idle this long
CALLER = {"X-API-Key": API_KEY, "User-Id": "64f0c0ffee0000000000abcd"}
CLIENTS = Path(__file__).parents[1] / "contract_g2"
SKILLS = Path(__file__).parents[1] / "skills"


class HostRunner:
    """`python -m codeexec.runner` on a host, as runner `index` of the fleet."""

    def __init__(self, host: Host, root: Path, output: IO[str]) -> None:
        self.host, self.root = host, root
        self.url = f"http://{host.address}:{PORT}"
        self.process: subprocess.Popen[str] | None = None
        self.output = output  # what it logs, every start of it

    def said(self) -> str:
        self.output.seek(0)
        return self.output.read()

    def start(self) -> None:
        uid = str(61001 + self.host.index)
        env = {
            "PATH": os.environ["PATH"], "RUNNER_KEY": RUNNER_KEY, "RUNNER_HOST": self.host.address,
            "RUNNER_PORT": str(PORT), "RUNNER_INDEX": str(self.host.index), "SANDBOX_ROOT": str(self.root),
            "SANDBOX_UID": uid, "SANDBOX_GID": uid, "WARM_PYTHON": "0", "WARM_SANDBOXES": "0", "WARM_SCIENTIFIC": "0",
            "IDLE_TIMEOUT_SECONDS": str(IDLE_SECONDS), "REAP_INTERVAL_SECONDS": "1",
            # The library under test, where it is not the one installed (a worktree's).
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        }  # fmt: skip
        self.process = self.host.start([sys.executable, "-m", "codeexec.runner"], env, self.output)
        deadline = time.monotonic() + 30
        while not self.answers():
            assert self.process.poll() is None, self.said()
            assert time.monotonic() < deadline, "the runner did not start"
            time.sleep(0.2)

    def answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def signal(self, number: int) -> None:
        assert self.process is not None
        self.process.send_signal(number)


def sandbox_root(index: int, gid: int) -> Path:
    """A host's own btrfs root, which its sandbox uid may enter (a root in the shared test
    storage would not let it: that is the first runner's gid's), made once and kept."""
    root = Path(f"/var/tmp/codeexec-fleet-host-{index}")
    Storage.prepare(root, session_bytes=1 << 28, sandbox_gid=gid, image_bytes=1 << 30)
    return root


def remove_root(root: Path) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for entry in root.iterdir():
        if ids.is_session_id(entry.name) or entry.name.startswith(".ended-"):
            with contextlib.suppress(OSError):
                btrfs.destroy_subvolume(fd, entry.name)
    os.close(fd)


@pytest.fixture(scope="module")
def runners() -> Iterator[list[HostRunner]]:
    with hosts(3) as made, contextlib.ExitStack() as logs:
        output = [logs.enter_context(tempfile.TemporaryFile("w+")) for _ in made]
        started = [HostRunner(host, sandbox_root(host.index, 61001 + host.index), output[host.index]) for host in made]
        try:
            for runner in started:
                runner.start()
            yield started
        finally:
            for runner in started:
                if runner.process and runner.process.poll() is None:
                    runner.signal(signal.SIGCONT)
                    runner.kill()
                remove_root(runner.root)


@pytest.fixture
def replicas(settings: Settings, runners: list[HostRunner], services: Services) -> Iterator[list[TestClient]]:
    configured = fleet_settings(settings, [r.url for r in runners])
    yield [TestClient(create_app(services(configured)), headers=CALLER) for _ in range(2)]
    for runner in runners:  # each test leaves every runner up again
        runner.host.mend()
        if runner.process and runner.process.poll() is None:
            runner.signal(signal.SIGCONT)
        else:
            runner.start()




def timed_503(client: TestClient, session: str) -> float:
    started = time.monotonic()
    answer = client.get(f"/v1/files/{session}")
    took = time.monotonic() - started
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "5" and answer.json()["retry_after_seconds"] == 5
    return took


def back_with_files(client: TestClient, session: str, within: float = 10) -> None:
    deadline = time.monotonic() + within
    while client.get(f"/v1/files/{session}").status_code != 200:
        assert time.monotonic() < deadline, "the runner's sessions did not come back"
        time.sleep(0.2)
    assert client.get(f"/v1/download/{session}/a.txt").content == b"kept"


def test_new_sessions_spread_and_each_replica_reaches_every_runner(replicas: list[TestClient]) -> None:
    first, second = replicas
    made = [upload(first if n % 2 else second, "a.txt", b"kept")["session_id"] for n in range(30)]
    assert {ids.runner_of(s) for s in made} == {0, 1, 2}
    for session in made:
        assert second.get(f"/v1/download/{session}/a.txt").content == b"kept"


@pytest.mark.parametrize("fault", ["killed", "frozen", "cut off"])
def test_a_runner_that_fails_is_a_503_in_time_and_the_others_see_nothing(
    replicas: list[TestClient], runners: list[HostRunner], fault: str
) -> None:
    client, other_replica = replicas
    failing, kept = session_on_runner(client, 1, b"kept"), session_on_runner(client, 2, b"kept")
    runner = runners[1]
    {"killed": runner.kill, "frozen": lambda: runner.signal(signal.SIGSTOP), "cut off": runner.host.cut}[fault]()

    took = timed_503(client, failing)
    assert took < (1.0 if fault == "killed" else 3.0), took
    assert timed_503(other_replica, failing) < 3.0
    assert timed_503(client, failing) < 0.5  # marked down by now: no wait at all
    assert run(client, "cat a.txt", "bash", session_id=kept, user_id=CALLER["User-Id"])["stdout"] == "kept"
    new = [upload(client, "n.txt", b"n")["session_id"] for _ in range(8)]
    assert all(ids.runner_of(s) != 1 for s in new)  # new sessions avoid it

    {"killed": runner.start, "frozen": lambda: runner.signal(signal.SIGCONT), "cut off": runner.host.mend}[fault]()
    back_with_files(client, failing)
    back_with_files(other_replica, failing)


def test_a_frozen_runner_that_wakes_serves_again_within_one_health_interval(
    replicas: list[TestClient], runners: list[HostRunner]
) -> None:
    """Downloads of its session from both replicas all along: 503s while it is frozen, and
    only 200s once it is back (a call cut or silent while it was frozen keeps it down no
    longer than its next /health, and its log, which nobody read, never blocks it)."""
    frozen = session_on_runner(replicas[0], 1, b"kept")
    answers: list[tuple[float, int]] = []
    stop = threading.Event()

    def fetch(client: TestClient) -> None:
        while not stop.is_set():
            answers.append((time.monotonic(), client.get(f"/v1/download/{frozen}/a.txt").status_code))

    fetching = [threading.Thread(target=fetch, args=(replicas[n % 2],)) for n in range(4)]
    for thread in fetching:
        thread.start()
    time.sleep(0.5)
    runners[1].signal(signal.SIGSTOP)
    time.sleep(2 * protocol.SILENT_SECONDS)  # its /health asked, and unanswered, twice
    runners[1].signal(signal.SIGCONT)
    back = time.monotonic() + HEALTH_INTERVAL_SECONDS + 0.5  # an ask under way, then one more
    time.sleep(HEALTH_INTERVAL_SECONDS + 2)
    stop.set()
    for thread in fetching:
        thread.join()
    assert {status for _, status in answers} == {200, 503}
    after = [status for at, status in answers if at > back]
    assert len(after) > 10 and set(after) == {200}, after


def test_downloads_of_made_up_ids_in_a_large_session_cost_no_other_user_a_call(
    replicas: list[TestClient], runners: list[HostRunner], caplog: pytest.LogCaptureFixture
) -> None:
    """One user's 12 downloads at once of ids that name nothing, in its own session of
    30,000 files, for as long as another user makes 40 calls on the same runner: each was
    a listing of the session (about 0.3 s), no answer was kept alive, and the first one
    silent for 2.5 s marked the runner down for everyone."""
    attacker, other = (TestClient(replicas[0].app, headers={**CALLER, "User-Id": user})
                       for user in ("64f0c0ffee00000000000bad", "64f0c0ffee0000000000900d"))  # fmt: skip
    large = session_on_runner(attacker, 1, b"x")
    many = "for n in range(30000):\n    open(f'f{n}', 'w').close()"
    run(attacker, many, session_id=large, user_id="64f0c0ffee00000000000bad")
    own = session_on_runner(other, 1, b"kept")
    stop = threading.Event()
    refused: list[int] = []

    def made_up(n: int) -> None:
        while not stop.is_set():
            made = ids.derived_id("made up", str(n), str(time.monotonic()))
            refused.append(attacker.get(f"/v1/download/{large}/{made}").status_code)

    attacks = [threading.Thread(target=made_up, args=(n,)) for n in range(12)]
    with caplog.at_level(logging.WARNING, logger="codeexec.runner.fleet"):
        for thread in attacks:
            thread.start()
        answered = []
        for _ in range(40):
            answered.append(other.get(f"/v1/download/{own}/a.txt").status_code)
            time.sleep(0.1)
        stop.set()
        for thread in attacks:
            thread.join()
    assert answered == [200] * 40
    assert refused and set(refused) <= {404, 429}, collections.Counter(refused)
    assert "runner 1" not in caplog.text
    assert other.get("/health").status_code == 200


def test_each_runner_reaps_its_own_and_the_service_lists_no_fleet(
    replicas: list[TestClient], runners: list[HostRunner]
) -> None:
    client = replicas[0]
    sessions = [session_on_runner(client, index, b"kept") for index in range(3)]
    service = client.app.state.service.sandboxes  # type: ignore[attr-defined]
    assert list(service.leases()) == [] and reap(service, IDLE_SECONDS).ended == 0
    time.sleep(IDLE_SECONDS + 4)  # past the idle limit and a reaper pass: one look, since a look touches
    assert [client.get(f"/v1/download/{s}/a.txt").status_code for s in sessions] == [404, 404, 404]


def test_a_skill_on_another_runner_reaches_the_run_through_librechat(
    runners: list[HostRunner], settings: Settings, tmp_path: Path, services: Services
) -> None:
    """A skill's session is the organization's: a colleague's run reads it from another
    runner as it would on one host (it was refused there, and the run went without)."""
    issuer = Issuer(tmp_path / "jwks.json")
    issuer.add_key(KID, "EdDSA")
    app = create_app(services(g2_settings(fleet_settings(settings, [r.url for r in runners]), issuer)))
    with serving(app) as base:
        result = drive_g2_client(f"{base}/v1", issuer, "skills_client.mjs", "elsewhere")
    assert result["client"]["version"] == "3.9.2" and result["status"] == 200
    landed = [ids.runner_of(ran["artifact"]["session_id"]) for ran in result["runs"]]
    assert landed[-1] != ids.runner_of(result["skill_session"]), landed
    scripts = sorted(path.name for path in (SKILLS / "pdf" / "scripts").iterdir())
    size = (SKILLS / "pdf" / "scripts" / "check_fillable_fields.py").stat().st_size
    for ran in result["runs"]:
        assert ran["content"] == "stdout:\n" + "\n".join([*scripts, str(size)]), ran["content"]


def test_librechat_uploads_again_after_its_host_died_and_runs(
    replicas: list[TestClient], runners: list[HostRunner], settings: Settings
) -> None:
    assert (CLIENTS / "node_modules").is_dir(), "run `make test` (it installs the npm client)"
    with serving(replicas[0].app) as base:
        env = {"PATH": os.environ["PATH"], "LIBRECHAT_CODE_BASEURL": f"{base}/v1", "CODE_API_KEY": API_KEY}

        def client(*args: str) -> dict:
            done = subprocess.run(["node", str(CLIENTS / "reupload_client.mjs"), *args], env=env,
                                  capture_output=True, text=True, timeout=90)  # fmt: skip
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        ref = client("upload")["ref"]
        runners[ids.runner_of(ref["storage_session_id"])].kill()
        used = client("run", json.dumps(ref))
    assert used["client"]["version"].startswith("3.9.")
    assert used["checked"]["status"] == 503 and used["uploaded_again"] is True
    assert ids.runner_of(used["ref"]["storage_session_id"]) != ids.runner_of(ref["storage_session_id"])
    assert used["content"].startswith("stdout:\nnorth,3"), used["content"]
