"""Simulated hosts on this machine: each a network namespace with a link of its own to this
one, a process started in it, and a link that can be cut. Needs root and iproute2."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import IO

# A /24 per host under 10.231/16, far from what Docker and the swarm tests take.
SUBNET = "10.231"


def available() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class Host:
    """Host `index`: namespace `cx<pid>h<index>`, reached at `address` over its own veth."""

    def __init__(self, index: int) -> None:
        tag = f"{os.getpid() % 100000}h{index}"
        self.index = index
        self.namespace = f"cx{tag}"
        self.link = f"cxl{tag}"  # this side's end of the veth (15 characters at most)
        self.address = f"{SUBNET}.{index}.2"

    def make(self) -> None:
        inside = f"cxi{self.index}"
        _ip("netns", "add", self.namespace)
        _ip("link", "add", self.link, "type", "veth", "peer", "name", inside, "netns", self.namespace)
        _ip("addr", "add", f"{SUBNET}.{self.index}.1/24", "dev", self.link)
        _ip("link", "set", self.link, "up")
        for args in (("addr", "add", f"{self.address}/24", "dev", inside), ("link", "set", inside, "up"),
                     ("link", "set", "lo", "up")):  # fmt: skip
            _ip("-n", self.namespace, *args)

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", self.namespace)  # its end of the veth goes with it, and ours

    def cut(self) -> None:
        """The host's link goes down: packets to it vanish, nothing answers no."""
        _ip("link", "set", self.link, "down")

    def mend(self) -> None:
        _ip("link", "set", self.link, "up")

    def start(self, argv: list[str], env: dict[str, str], output: IO[str]) -> subprocess.Popen[str]:
        """`argv` in the host, its output to a file (a pipe nobody read would fill, and then
        block every log line the process writes)."""
        return subprocess.Popen(
            ["ip", "netns", "exec", self.namespace, *argv], env=env, stdout=output, stderr=subprocess.STDOUT, text=True
        )


@contextlib.contextmanager
def hosts(count: int) -> Iterator[list[Host]]:
    made = [Host(i) for i in range(count)]
    try:
        for host in made:
            host.make()
        yield made
    finally:
        for host in made:
            host.remove()
