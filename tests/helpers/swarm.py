"""A Docker Swarm of three nodes on one machine (FACTS "Many hosts on one machine"): three
engines, each in a network namespace of its own with its own host name, on one bridge; the
first the manager. Node 0 runs on the data root the project's image was built in
(sam-local/dockerd.sh's), the others on data roots of their own, kept between runs like
that one, which get the image by `docker save | docker load` when theirs is not the same.
Every engine's default seccomp profile is the runner's (deploy/runner-seccomp.json), as
docs/swarm.md asks of a node that runs one."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import engines
from .runner_container import SECCOMP

BRIDGE, NET = "cxswarm0", "172.30.98"
NODES = 3
BUILD_DATA_ROOT = Path("/var/lib/codeexec-docker")  # sam-local/dockerd.sh's
_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


def node_ip(i: int) -> str:
    return f"{NET}.{10 + i}"


def data_root(i: int) -> Path:
    return BUILD_DATA_ROOT if i == 0 else Path(f"/var/lib/codeexec-swarm-node{i}")


@dataclass(frozen=True)
class Swarm:
    nodes: list[engines.Engine]

    @property
    def manager(self) -> engines.Engine:
        return self.nodes[0]

    def stop(self, i: int) -> None:
        """Node i's engine stopped, as a host's Docker stopping: its containers stop with it."""
        engines.stop(self.nodes[i])

    def start(self, i: int) -> None:
        # The containers' resolver for names the swarm does not know: the node's (below).
        engines.start(self.nodes[i], data_root(i), seccomp=SECCOMP, dns=node_ip(i))

    def node_of_tasks(self, service: str) -> list[int]:
        """The nodes that run the service's tasks now."""
        names = self.manager.docker(
            "service", "ps", service, "--filter", "desired-state=running", "--format", "{{.Node}}"
        ).split()
        return sorted(int(name.removeprefix("cx-node")) for name in names)


@contextlib.contextmanager
def swarm(image: str) -> Iterator[Swarm]:
    """Three nodes, node i labelled codeexec.runner=i, each with `image`; all taken down after."""
    run = Path(tempfile.mkdtemp(prefix="cxs-", dir="/tmp"))
    nodes = [engines.Engine(f"cx-node{i}", run / str(i), f"cx-node{i}") for i in range(NODES)]
    made = Swarm(nodes)
    try:
        _network()
        for i in range(NODES):
            threading.Thread(target=_resolver, args=(i,), daemon=True).start()
        for i in range(NODES):
            made.start(i)
            made.nodes[i].docker("swarm", "leave", "--force", check=False)  # a last run's swarm
        with ThreadPoolExecutor() as loads:  # the two loads at once: each writes the image's gigabytes
            list(loads.map(lambda node: _same_image(nodes[0], node, image), nodes[1:]))
        manager = made.manager
        manager.docker("swarm", "init", "--advertise-addr", node_ip(0))
        token = manager.docker("swarm", "join-token", "-q", "worker")
        for i in range(1, NODES):
            nodes[i].docker("swarm", "join", "--token", token, "--advertise-addr", node_ip(i), f"{node_ip(0)}:2377")
        for i in range(NODES):
            manager.docker("node", "update", "--label-add", f"codeexec.runner={i}", nodes[i].name)
        yield made
    finally:
        for node in reversed(nodes):
            if node.pid() is not None:
                engines.remove_containers(node)
                node.docker("swarm", "leave", "--force", check=False)
                engines.stop(node)
        _network_down()
        engines.unmount_beneath(run)  # each node's exec root keeps its netns/default mounted
        shutil.rmtree(run, ignore_errors=True)


def _same_image(source: engines.Engine, target: engines.Engine, image: str) -> None:
    wanted = source.docker("image", "inspect", "--format", "{{.Id}}", image)
    if target.docker("image", "inspect", "--format", "{{.Id}}", image, check=False) == wanted:
        return
    # A node holds this image alone: whatever an earlier run left (images, build layers) goes
    # first, or the gigabytes of each changed image pile up on the machine's disk.
    target.docker("system", "prune", "--all", "--force")
    saved = subprocess.Popen(["docker", "save", image], env=source.env, stdout=subprocess.PIPE)
    loaded = subprocess.run(["docker", "load"], env=target.env, stdin=saved.stdout, capture_output=True, timeout=1800)
    assert saved.wait(timeout=60) == 0 and loaded.returncode == 0, loaded.stderr[-2000:]


def _network() -> None:
    """The bridge, and each node's namespace on it with its address; the machine is .1."""
    _network_down()
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{NET}.1/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    for i in range(NODES):
        ns, veth = f"cx-node{i}", f"cxs-node{i}"
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", veth, "master", BRIDGE, "up")
        for command in (["addr", "add", f"{node_ip(i)}/24", "dev", "eth0"], ["link", "set", "eth0", "up"],
                        ["link", "set", "lo", "up"], ["route", "add", "default", "via", f"{NET}.1"]):  # fmt: skip
            _ip("-n", ns, *command)


def _resolver(i: int) -> None:
    """Node i's DNS server, as a host's network has one: it knows no name (NXDOMAIN at
    once). Swarm's own resolver asks it for a name that is not the swarm's, such as a
    stopped node's runner; with none, each such lookup would wait 10 s for an answer. It
    listens in the node's namespace, where its containers' queries arrive (no NAT here)."""
    namespace = os.open(f"/var/run/netns/cx-node{i}", os.O_RDONLY)
    assert _libc.setns(namespace, _CLONE_NEWNET) == 0, "setns"  # this thread's alone
    os.close(namespace)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind((node_ip(i), 53))
        server.settimeout(1)
        while Path(f"/var/run/netns/cx-node{i}").exists():  # until the swarm is taken down
            with contextlib.suppress(TimeoutError):
                query, peer = server.recvfrom(512)
                if len(query) >= 12:  # the query back as its answer: QR, RD, RA, NXDOMAIN, no records
                    server.sendto(query[:2] + b"\x81\x83" + query[4:6] + b"\x00\x00" * 3 + query[12:], peer)


def _network_down() -> None:
    for i in range(NODES):
        subprocess.run(["ip", "netns", "del", f"cx-node{i}"], capture_output=True)
        subprocess.run(["ip", "link", "del", f"cxs-node{i}"], capture_output=True)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    assert done.returncode == 0, (args, done.stderr)
