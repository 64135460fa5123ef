"""Docker Swarm for real (deploy/swarm/stack.yaml, docs/swarm.md): three engines on one
machine as three hosts (tests/helpers/swarm.py), the project's image on each, a runner
pinned to each labelled node, the service's two replicas wherever Swarm puts them, DNS
round robin throughout. The real @librechat/agents 3.9.2 client through the service; then
one node's engine stopped (its sessions answer 503 at once, the other runners' sessions
never fail, new sessions go elsewhere) and started again (its sessions back, files and all).
Everything is taken down again, the engines included."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from codeexec.sandbox.local import btrfs

from ..docker_engine import docker_engine
from ..helpers.contract import G2_CLIENTS, assert_g2_round_trip, drive_g2_client
from ..helpers.g2 import KID
from ..helpers.swarm import NODES, Swarm, node_ip, swarm
from ..helpers.tokens import Issuer

ROOT = Path(__file__).parents[2]
IMAGE = "codeexec/runner:test"
STACK = ROOT / "deploy" / "swarm" / "stack.yaml"
# A session id's first character names its runner (codeexec.ids).
MARKS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"

pytestmark = [
    pytest.mark.docker,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("dockerd") and shutil.which("debootstrap")) or os.geteuid() != 0,
        reason="needs root, dockerd and debootstrap: `make sam-local-deps` installs them",
    ),
]


class Deployment(NamedTuple):
    swarm: Swarm
    bases: dict[int, str]  # node -> the service replica's base URL there, ending in /v1
    key: str
    issuer: Issuer


@pytest.fixture(scope="module")
def image() -> str:
    """The project's image, in the data root node 0 runs on (a rebuild is cached)."""
    with docker_engine() as host:
        built = subprocess.run(
            [ROOT / "docker" / "build-image.sh", IMAGE], env={**os.environ, "DOCKER_HOST": host},
            capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return IMAGE


@pytest.fixture(scope="module")
def deployed(image: str, sandbox_storage: Path) -> Iterator[Deployment]:
    """The stack deployed as docs/swarm.md says, with LibreChat v0.8.6+'s key set."""
    work = Path(tempfile.mkdtemp(prefix="swarm-", dir=sandbox_storage))  # btrfs, as each node's would be
    issuer = Issuer(work / "jwks.json")
    issuer.add_key(KID, "EdDSA")
    key = secrets.token_urlsafe(24)
    for i in range(NODES):
        (work / f"runner-{i}").mkdir()
    try:
        with swarm(image) as made:
            manager = made.manager
            for name, value in [("codeexec_runner_key", secrets.token_urlsafe(24)), ("codeexec_api_key", key),
                                ("codeexec_token_secret", secrets.token_urlsafe(32))]:  # fmt: skip
                manager.docker("secret", "create", name, "-", stdin=value.encode())
            settings = {
                "CODEEXEC_IMAGE": image,
                "CODEEXEC_SESSIONS": str(work),
                "CODEEXEC_JWKS": str(issuer.path),
                "CODE_EXEC_AUTH_MODES": "key,jwt",
                "CODE_EXEC_JWT_ISSUER": "librechat",
                "CODE_EXEC_JWT_AUDIENCE": "codeapi",
            }
            deploy = ["docker", "stack", "deploy", "--resolve-image", "never", "-c", str(STACK), "cx"]
            done = subprocess.run(deploy, env={**manager.env, **settings}, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            bases = _ready(made)
            yield Deployment(made, bases, key, issuer)
    finally:
        _remove_sessions(work)


def _ready(made: Swarm, seconds: float = 420) -> dict[int, str]:
    """Waits for both replicas to answer with every runner up; their base URLs by node."""
    deadline = time.monotonic() + seconds
    while True:
        nodes = made.node_of_tasks("cx_codeexec")
        healths = {n: _health(f"http://{node_ip(n)}:8000") for n in nodes}
        if len(nodes) == 2 and all(h and all(r["up"] for r in h.get("runners", [])) for h in healths.values()):
            assert all(len(h["runners"]) == NODES for h in healths.values()), healths
            return {n: f"http://{node_ip(n)}:8000/v1" for n in nodes}
        if time.monotonic() > deadline:
            tasks = made.manager.docker("service", "ps", "--no-trunc", "cx_codeexec", "cx_codeexec-runner-0")
            raise AssertionError(f"not ready: {healths}\n{tasks}")
        time.sleep(2)


def _health(base: str) -> dict | None:
    try:
        answer = httpx.get(f"{base}/health", timeout=3)
        return answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _remove_sessions(work: Path) -> None:
    for root in work.glob("runner-*"):
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        for entry in root.iterdir():  # sessions are subvolumes
            with contextlib.suppress(OSError):
                btrfs.destroy_subvolume(fd, entry.name)
        os.close(fd)
    shutil.rmtree(work, ignore_errors=True)


def test_the_g2_client_runs_through_the_swarm(deployed: Deployment) -> None:
    assert (G2_CLIENTS / "node_modules").is_dir(), "run `make test` (it installs the npm client)"
    for base in deployed.bases.values():  # through each replica
        assert_g2_round_trip(drive_g2_client(base, deployed.issuer))


def test_a_stopped_node_fails_its_sessions_alone_and_brings_them_back(deployed: Deployment) -> None:
    headers = {"X-API-Key": deployed.key}
    bases = list(deployed.bases.values())

    def run(base: str, code: str) -> httpx.Response:
        return httpx.post(f"{base}/exec", headers=headers, json={"lang": "py", "code": code}, timeout=60)

    # A session on every runner, each with a file of its own, made through both replicas.
    sessions: dict[int, tuple[str, str]] = {}
    for attempt in range(40):
        if len(sessions) == NODES:
            break
        token = secrets.token_hex(8)
        made = run(bases[attempt % 2], f"open('/mnt/data/note.txt', 'w').write('{token}')")
        assert made.status_code == 200, made.text
        sessions.setdefault(MARKS.index(made.json()["session_id"][0]), (made.json()["session_id"], token))
    assert sorted(sessions) == list(range(NODES)), sessions  # new sessions reach every runner

    def files(base: str, session: str) -> httpx.Response:
        return httpx.get(f"{base}/files/{session}", headers=headers, params={"detail": "full"}, timeout=30)

    # The node that runs no replica of the service: only its runner goes.
    victim = next(i for i in range(NODES) if i not in deployed.bases)
    deployed.swarm.stop(victim)
    for base in bases:
        started = time.monotonic()
        lost = files(base, sessions[victim][0])
        assert lost.status_code == 503 and lost.headers.get("retry-after"), lost.text
        assert time.monotonic() - started < 3
        for i, (session, _) in sessions.items():
            if i != victim:
                assert files(base, session).status_code == 200
    health = httpx.get(f"{bases[0].removesuffix('/v1')}/health", timeout=10).json()
    assert [r["index"] for r in health["runners"] if not r["up"]] == [victim], health
    for base in bases:  # new sessions avoid it
        fresh = run(base, "print(6 * 7)")
        assert fresh.status_code == 200 and MARKS.index(fresh.json()["session_id"][0]) != victim, fresh.text

    deployed.swarm.start(victim)
    session, token = sessions[victim]
    deadline = time.monotonic() + 240
    for base in bases:  # each replica sees it back on its own health clock
        back = _until_not_503(functools.partial(files, base, session), deadline)
        assert [f["path"] for f in back.json()] == ["note.txt"], back.json()
    read = httpx.post(
        f"{bases[1]}/exec", headers=headers, timeout=60,
        json={"lang": "py", "code": "print(open('/mnt/data/note.txt').read())", "session_id": session},
    )  # fmt: skip
    assert read.status_code == 200 and read.json()["stdout"] == f"{token}\n", read.text


def _until_not_503(call: Callable[[], httpx.Response], deadline: float) -> httpx.Response:
    """The call's first answer that is not a 503 (what a runner's session is while its node is
    down), asked every 2 s until the deadline."""
    while (answer := call()).status_code == 503:
        assert time.monotonic() < deadline, answer.text
        time.sleep(2)
    assert answer.status_code == 200, answer.text
    return answer
