"""Docker engines of the tests' own, each beside any other on the machine: its own data
root, run directory (socket, containerd), containerd namespace and bridge, or none; and,
for a simulated host, its own network namespace and host name (FACTS: "Many hosts on one
machine"). Stopped again with their containers."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Engine:
    name: str
    run: Path  # its socket, pid file, log and containerd state
    netns: str | None  # the network namespace it runs in; None: the machine's

    @property
    def host(self) -> str:
        return f"unix://{self.run}/docker.sock"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host}

    def docker(self, *args: str, timeout: float = 120, check: bool = True, stdin: bytes | None = None) -> str:
        done = subprocess.run(["docker", *args], env=self.env, input=stdin, capture_output=True, timeout=timeout)
        out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        assert done.returncode == 0 or not check, (self.name, args, err[-3000:])
        return out.strip()

    def ready(self) -> bool:
        asked = ["docker", "version", "--format", "{{.Server.Version}}"]
        try:  # a daemon busy starting may take the connection and answer late
            return subprocess.run(asked, env=self.env, capture_output=True, timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def pid(self) -> int | None:
        pidfile = self.run / "dockerd.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text())
            return pid if Path(f"/proc/{pid}").exists() else None
        return None

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.run / "dockerd.log").read_text(errors="replace").splitlines()[-lines:])
        return ""


def start(
    engine: Engine,
    data_root: Path,
    bridge: str = "none",
    seccomp: Path | None = None,
    dns: str | None = None,
    userns: bool = False,
) -> None:
    """Starts its dockerd (again: a stopped engine keeps its data root, containers and swarm).
    `userns`: every container in a user namespace of its own, its root the host's uid
    remapped_root() (as a Kubernetes pod with `hostUsers: false`)."""
    engine.run.mkdir(parents=True, exist_ok=True)
    data_root.mkdir(parents=True, exist_ok=True)
    argv = [
        "dockerd", "--data-root", str(data_root), "--exec-root", str(engine.run / "exec"),
        "--pidfile", str(engine.run / "dockerd.pid"), "-H", engine.host, "--bridge", bridge,
        "--iptables=false", "--ip-masq=false", "--containerd-namespace", f"cx-{engine.name}",
        "--containerd-plugins-namespace", f"cx-{engine.name}-plugins",
        *(["--seccomp-profile", str(seccomp)] if seccomp else []), *(["--dns", dns] if dns else []),
        *(["--userns-remap", "default"] if userns else []),
    ]  # fmt: skip
    if engine.netns:  # a host of its own: its network namespace and its own host name
        # nsenter, not `ip netns exec`: that one mounts a /sys of its own, without cgroups.
        argv = ["nsenter", f"--net=/var/run/netns/{engine.netns}", "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', engine.name, *argv]  # fmt: skip
    with open(engine.run / "dockerd.log", "ab") as log:
        # A session of its own: an interrupt meant for pytest leaves it to stop().
        subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 60
    while not engine.ready():
        assert time.monotonic() < deadline, f"dockerd {engine.name} did not start: {engine.log_tail()}"
        time.sleep(0.3)


def stop(engine: Engine, kill: bool = False) -> None:
    """Stops its dockerd; its containers die with it (no live restore)."""
    pid = engine.pid()
    if pid is None:
        return
    os.kill(pid, 9 if kill else 15)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists():
        with contextlib.suppress(ChildProcessError):  # ours: reaped here, or it stays a zombie
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        assert time.monotonic() < deadline, f"dockerd {engine.name} ({pid}) did not stop"
        time.sleep(0.2)


def remapped_root() -> int:
    """The host uid that is root in a container of an engine started with `userns` (dockerd
    adds the user `dockremap` and its range to /etc/subuid, the same for gids)."""
    for line in Path("/etc/subuid").read_text().splitlines():
        user, first, _ = line.split(":")
        if user == "dockremap":
            return int(first)
    raise AssertionError("no dockremap range in /etc/subuid: was the engine started with userns?")


@contextlib.contextmanager
def engine(name: str, seccomp: Path | None = None, userns: bool = False) -> Iterator[Engine]:
    """One engine with a data root of its own, on the machine's network, removed afterwards."""
    # Short: containerd's sockets live under the run directory, and a socket path holds 108 bytes.
    run = Path(tempfile.mkdtemp(prefix="cxe-", dir="/tmp"))
    data_root = Path(tempfile.mkdtemp(prefix=f"codeexec-engine-{name}-", dir="/var/tmp"))
    made = Engine(name, run, None)
    try:
        start(made, data_root, seccomp=seccomp, userns=userns)
        yield made
    finally:
        remove_containers(made)
        stop(made)
        # With `userns`, dockerd also makes <run>.<uid>.<gid> beside it, for the remapped root.
        for path in (run, *run.parent.glob(f"{run.name}.*")):
            unmount_beneath(path)  # its exec root's netns/default, which dockerd leaves mounted
            shutil.rmtree(path, ignore_errors=True)
        remove_data_root(data_root)


def remove_containers(engine: Engine) -> None:
    if engine.pid() is None:
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError, AssertionError):
        if leftovers := engine.docker("ps", "-aq", check=False).split():
            engine.docker("rm", "-f", *leftovers, check=False)
        engine.docker("network", "prune", "--force", check=False)  # a bridge outlives its engine


def remove_data_root(data_root: Path) -> None:
    # overlay2 leaves mounts under it (and dockerd its own bind of it) when its engine
    # died: unmount before removing.
    unmount_beneath(data_root)
    shutil.rmtree(data_root, ignore_errors=True)


def unmount_beneath(path: Path) -> None:
    """Every mount at `path` or below it, deepest first."""
    for line in reversed(Path("/proc/self/mounts").read_text().splitlines()):
        point = line.split()[1]
        if point == str(path) or point.startswith(f"{path}/"):
            subprocess.run(["umount", "--lazy", point], capture_output=True)


def empty_image(engine: Engine, tag: str = "codeexec/empty:test") -> str:
    """An image with nothing in it: a container of it sees what is mounted into it only."""
    nothing = subprocess.run(["tar", "-c", "-T", "/dev/null"], capture_output=True, check=True).stdout
    engine.docker("import", "-", tag, stdin=nothing)
    return tag
