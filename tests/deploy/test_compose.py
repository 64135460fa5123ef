"""The Docker Compose set-up for self-hosters, for real: the image built from the project on
a Debian base bootstrapped from Debian's packages (no registry), compose.yaml brought up
in an engine of the test's own, and the real @librechat/agents 3.9.2 client answered
through it. Everything is taken down again, the engine included."""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest
import yaml

from ..docker_engine import docker_engine
from ..helpers.contract import G2_CLIENTS, assert_g2_round_trip, drive_g2_client
from ..helpers.g2 import KID
from ..helpers.tokens import Issuer
from ..serving import free_port

ROOT = Path(__file__).parents[2]
IMAGE = "codeexec/runner:test"

pytestmark = [
    pytest.mark.docker,
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("dockerd") and shutil.which("debootstrap") and shutil.which("docker-compose"))
        or os.geteuid() != 0,
        reason="needs root, dockerd, debootstrap and docker-compose: `make sam-local-deps` installs them",
    ),
]


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    with docker_engine() as host:
        env = {**os.environ, "DOCKER_HOST": host}
        # On a Debian base bootstrapped from Debian's packages: no registry is reachable here.
        build = [ROOT / "docker" / "build-image.sh", IMAGE]
        built = subprocess.run(build, env=env, capture_output=True, text=True, timeout=3600)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        yield host


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    made = Issuer(tmp_path / "config" / "jwks.json")
    (tmp_path / "config").mkdir()
    made.add_key(KID, "EdDSA")
    return made


def compose_up(config: dict, project: str, env: dict[str, str]) -> list[str]:
    """compose.yaml brought up as Compose v2 (`docker compose up`) does, with the docker CLI:
    Debian 12's docker-compose is 1.29, which resolves the file (`config`) but cannot pass
    `systempaths=unconfined` to the engine; the docker CLI can. Services start in the order
    of their `depends_on`, each once its dependencies meet their conditions (a healthy one
    waits for the dependency's healthcheck), with their restart policies and healthchecks.
    Returns what to take down."""
    made: list[str] = []

    def docker(*args: str) -> str:
        done = subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout.strip()

    # Compose makes the project's default network whether the file names it or not.
    for name, network in {"default": {}, **(config.get("networks") or {})}.items():
        docker("network", "create", *(["--internal"] if network.get("internal") else []), f"{project}_{name}")
        made.append(f"network:{project}_{name}")
    for name in config.get("volumes") or {}:
        docker("volume", "create", f"{project}_{name}")
        made.append(f"volume:{project}_{name}")
    services = config["services"]
    for name in _started_in_order(services):
        service, container = services[name], f"{project}_{name}"
        for dependency, condition in _depends_on(service).items():
            _await_condition(docker, f"{project}_{dependency}", condition)
        networks = list(service.get("networks") or ["default"])
        args = ["run", "-d", "--name", container, "--network", f"{project}_{networks[0]}", "--network-alias", name]
        docker(*args, *_run_options(service, project), service["image"], *(service.get("command") or []))
        made.insert(0, f"container:{container}")
        for network in networks[1:]:
            docker("network", "connect", "--alias", name, f"{project}_{network}", container)
    return made


def _depends_on(service: dict) -> dict[str, str]:
    """`depends_on` as {service: condition}, whichever form the file uses."""
    named = service.get("depends_on") or {}
    if isinstance(named, list):
        return {name: "service_started" for name in named}
    return {name: options["condition"] for name, options in named.items()}


def _started_in_order(services: dict) -> list[str]:
    started: list[str] = []
    while len(started) < len(services):
        ready = [n for n in sorted(services) if n not in started and set(_depends_on(services[n])) <= set(started)]
        assert ready, "depends_on goes round in a circle"
        started += ready
    return started


def _await_condition(docker: Callable[..., str], container: str, condition: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while condition == "service_healthy":
        health = docker("inspect", "--format", "{{.State.Health.Status}}", container)
        if health == "healthy":
            return
        assert time.monotonic() < deadline, f"{container}: {health}, {docker('logs', '--tail', '50', container)}"
        time.sleep(1)


def _run_options(service: dict, project: str) -> list[str]:
    """A service's environment, security options, capabilities, volumes, ports, restart
    policy and healthcheck as `docker run` takes them."""
    args: list[str] = []
    if service.get("restart"):
        args += ["--restart", service["restart"]]
    check = service.get("healthcheck") or {}
    if check.get("test"):
        kind, *command = check["test"]  # ["CMD", argv...] or ["CMD-SHELL", "a line"]
        args += ["--health-cmd", shlex.join(command) if kind == "CMD" else command[0]]
        for key in ("interval", "timeout", "retries", "start_period"):
            if key in check:
                args += [f"--health-{key.replace('_', '-')}", str(check[key])]
    for key, value in (service.get("environment") or {}).items():
        args += ["-e", f"{key}={value if value is not None else ''}"]
    for opt in service.get("security_opt") or []:
        args += ["--security-opt", opt]
    for cap in service.get("cap_add") or []:
        args += ["--cap-add", cap]
    for volume in service.get("volumes") or []:  # "source:target:mode"; a named volume's is the project's
        source, rest = volume.split(":", 1)
        args += ["-v", f"{source if source.startswith('/') else f'{project}_{source}'}:{rest}"]
    for port in service.get("ports") or []:  # "host ip:published:target/tcp"
        args += ["-p", port]
    return args


def compose_down(made: list[str], env: dict[str, str]) -> None:
    for thing in made:
        kind, name = thing.split(":", 1)
        command = {"container": ["rm", "-f"], "network": ["network", "rm"], "volume": ["volume", "rm", "-f"]}[kind]
        subprocess.run(["docker", *command, name], env=env, capture_output=True, timeout=120)


class Deployment(NamedTuple):
    base: str  # the service's base URL, ending in /v1
    key: str
    project: str  # Compose's project: containers are <project>_<service>
    env: dict[str, str]  # DOCKER_HOST and the settings


@pytest.fixture
def service(engine: str, issuer: Issuer, sandbox_root: Path) -> Iterator[Deployment]:
    """compose.yaml up, as a self-hoster with LibreChat v0.8.6+ sets it."""
    port, key, project = free_port(), secrets.token_urlsafe(24), f"cx{secrets.token_hex(4)}"
    sessions = sandbox_root / "compose-sessions"  # on btrfs, as `make compose-storage` makes it
    env = {
        **os.environ,
        "DOCKER_HOST": engine,
        "CODEEXEC_IMAGE": IMAGE,
        "CODEEXEC_PORT": str(port),
        "CODEEXEC_CONFIG_DIR": str(issuer.path.parent),
        "RUNNER_KEY": secrets.token_urlsafe(24),
        "CODEEXEC_SESSIONS": str(sessions),
        "CODE_EXEC_API_KEY": key,
        "CODE_EXEC_AUTH_MODES": "key,jwt",
        "CODE_EXEC_JWT_JWKS_URL": "file:///etc/codeexec/jwks.json",
        "CODE_EXEC_JWT_ISSUER": "librechat",
        "CODE_EXEC_JWT_AUDIENCE": "codeapi",
    }
    resolved = subprocess.run(
        ["docker-compose", "-p", project, "-f", str(ROOT / "compose.yaml"), "config"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr
    config = yaml.safe_load(resolved.stdout)
    assert "networks" in config["services"]["codeexec"]
    made: list[str] = []
    try:
        made = compose_up(config, project, env)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                logs = subprocess.run(
                    ["docker", "logs", f"{project}_codeexec"], env=env, capture_output=True, text=True
                )
                raise AssertionError(logs.stdout[-3000:] + logs.stderr[-3000:])
            time.sleep(1)
        yield Deployment(f"{base}/v1", key, project, env)
    finally:
        compose_down(made, env)


def test_the_g2_client_runs_through_the_compose_set_up(service: Deployment, issuer: Issuer) -> None:
    assert (G2_CLIENTS / "node_modules").is_dir(), "run `make test` (it installs the npm client)"
    result = drive_g2_client(service.base, issuer)
    assert result["client"]["version"].startswith("3.9.")
    assert_g2_round_trip(result)


def test_a_run_in_the_runner_container_reaches_no_network(service: Deployment) -> None:
    base, key = service.base, service.key
    code = """
import socket
for host, port in [("codeexec", 8000), ("codeexec-runner", 8080), ("127.0.0.1", 8080), ("deb.debian.org", 80)]:
    try:
        socket.create_connection((host, port), timeout=2)
        print(host, "REACHED")
    except OSError as exc:
        print(host, "refused", type(exc).__name__)
"""
    answer = httpx.post(f"{base}/exec", headers={"X-API-Key": key}, json={"lang": "py", "code": code}, timeout=60)
    assert answer.status_code == 200, answer.text
    lines = answer.json()["stdout"].splitlines()
    assert len(lines) == 4 and not [line for line in lines if "REACHED" in line], lines
    # Every language's toolchain is in the image.
    languages = httpx.get(f"{base.removesuffix('/v1')}/health").json()
    assert len(languages.get("languages", [])) == 13, languages


def test_the_service_rides_out_its_runner_stopping_and_coming_back(service: Deployment) -> None:
    def docker(*args: str) -> str:
        return subprocess.run(["docker", *args], env=service.env, capture_output=True, text=True, timeout=120).stdout

    def run() -> httpx.Response:
        body = {"lang": "py", "code": "print(6 * 7)"}
        return httpx.post(f"{service.base}/exec", headers={"X-API-Key": service.key}, json=body, timeout=60)

    started = docker("inspect", "--format", "{{.State.StartedAt}}", f"{service.project}_codeexec")
    docker("stop", f"{service.project}_codeexec-runner")
    stopped = run()
    assert stopped.status_code == 503 and stopped.json()["retry_after_seconds"] >= 1  # said, with a retry hint
    docker("start", f"{service.project}_codeexec-runner")
    deadline = time.monotonic() + 120
    while (answer := run()).status_code != 200:
        assert answer.status_code == 503 and time.monotonic() < deadline, answer.text
        time.sleep(1)
    assert answer.json()["stdout"] == "42\n"
    # The service itself went on: never restarted, never exited.
    assert docker("inspect", "--format", "{{.State.StartedAt}}", f"{service.project}_codeexec") == started
