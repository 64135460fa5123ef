"""The wire between the service, a fork server and a run (forkserver.py): every message
named, and the descriptors each carries named too. Only the standard library: a server
imports this module as a sibling in its /code.

    service -> server    FORK     a ForkOrder; ForkDescriptors
    server  -> service   HELLO    "server": imported, ready to fork
    run     -> service   HELLO    "init", then "program": each where it should be
    service -> program   RUN      a RunOrder; RunDescriptors
    program -> service   STARTED  it has its run, and holds what a cold run's program holds
    init    -> service   EXIT     the program's exit status, as bwrap reports one
    any     -> service   ERROR    what failed before the program ran

A message is one JSON object {kind: value} with its descriptors; each carries its sender's
credentials, which the kernel gives the service as host pids (SO_PASSCRED): how the
service knows whom to kill and renice.
"""

from __future__ import annotations

import array
import contextlib
import errno
import json
import os
import socket
import struct
from dataclasses import asdict, dataclass
from typing import Any

CONFIG = "/code/.forkserver.json"
MAX_FDS = 16  # descriptors one message carries at most
_MESSAGE_BYTES = 1 << 16

FORK, HELLO, RUN, STARTED, EXIT, ERROR = "fork", "hello", "run", "started", "exit", "error"


@dataclass(frozen=True)
class ForkOrder:
    """A run to make: its processes at `nice` from their start (the service gives a run its
    normal priority back at its hand-over)."""

    nice: int


@dataclass(frozen=True)
class ForkDescriptors:
    """What a FORK carries: the run's control socket and its cgroup's `cgroup.procs`
    (one per hierarchy), opened by the service."""

    control: int
    procs: tuple[int, ...]

    def listed(self) -> list[int]:
        return [self.control, *self.procs]

    @classmethod
    def of(cls, fds: list[int]) -> ForkDescriptors:
        control, *procs = fds
        return cls(control, tuple(procs))


@dataclass(frozen=True)
class RunOrder:
    """How a run is run: `argv` exec'd, or `source` with `args` run by the interpreter
    itself (zygote.py), after `files` are written into /code."""

    files: tuple[str, ...]
    argv: tuple[str, ...] = ()
    source: str | None = None
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunDescriptors:
    """What a RUN carries: the session's detached mount, the program's stdout and stderr
    (the write ends of the service's pipes), and the contents of the files it names
    (RunOrder.files), in their order."""

    tree: int
    stdout: int
    stderr: int
    files: tuple[int, ...]

    def listed(self) -> list[int]:
        return [self.tree, self.stdout, self.stderr, *self.files]

    @classmethod
    def of(cls, fds: list[int]) -> RunDescriptors:
        tree, stdout, stderr, *files = fds
        return cls(tree, stdout, stderr, tuple(files))


@dataclass(frozen=True)
class Said:
    """A message as its reader has it: `kind` None at the end of the socket."""

    kind: str | None
    value: Any
    fds: list[int]
    pid: int | None  # its sender's, as the reader sees pids

    def close_fds(self) -> None:
        for fd in self.fds:
            os.close(fd)


def order_fork(server: socket.socket, order: ForkOrder, fds: ForkDescriptors) -> None:
    _send(server, FORK, asdict(order), fds.listed())


def fork_order(said: Said) -> tuple[ForkOrder, ForkDescriptors]:
    return ForkOrder(**said.value), ForkDescriptors.of(said.fds)


def say_hello(sock: socket.socket, who: str) -> None:
    _send(sock, HELLO, who)


def order_run(sock: socket.socket, order: RunOrder, fds: RunDescriptors) -> None:
    _send(sock, RUN, asdict(order), fds.listed())


def run_order(said: Said) -> RunOrder:
    value = said.value
    return RunOrder(tuple(value["files"]), tuple(value["argv"]), value["source"], tuple(value["args"]))


def say_started(sock: socket.socket) -> None:
    _send(sock, STARTED, True)


def say_exit(sock: socket.socket, code: int) -> None:
    _send(sock, EXIT, code)


def say_error(sock: socket.socket, error: BaseException | str) -> None:
    """What failed, to the service, where it can still be said."""
    said = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    with contextlib.suppress(OSError):
        _send(sock, ERROR, said)


def expect(sock: socket.socket, kind: str) -> Said:
    """The next message, which must be `kind`: else OSError with what came instead (an
    error a run reported, another message, or the end), its descriptors closed."""
    said = read(sock)
    if said.kind != kind:
        said.close_fds()
        raise OSError(errno.EIO, f"expected {kind}, got {said.kind}: {said.value}")
    return said


def _send(sock: socket.socket, kind: str, value: Any, fds: list[int] | None = None) -> None:
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([json.dumps({kind: value}).encode()], ancillary)


def read(sock: socket.socket) -> Said:
    """The next message, its descriptors and its sender's pid (where SO_PASSCRED is on)."""
    room = socket.CMSG_SPACE(MAX_FDS * 4) + socket.CMSG_SPACE(12)
    data, ancillary, flags, _ = sock.recvmsg(_MESSAGE_BYTES, room)
    fds: list[int] = []
    pid = None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", payload[: len(payload) - len(payload) % 4]))
        elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = struct.unpack("iII", payload[:12])[0]
    if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC) or not data:
        for fd in fds:
            os.close(fd)
        if data:
            raise OSError(errno.EMSGSIZE, "a message was cut short")
        return Said(None, None, [], pid)
    ((kind, value),) = json.loads(data).items()
    return Said(kind, value, fds, pid)


@dataclass(frozen=True)
class Config:
    """What a server is told once, at its start: server.py writes it from layout.py and
    the pool's policy, the server reads it. Paths name files in the server's /code."""

    ram_disks: tuple[tuple[str, str], ...]  # each run's RAM disks: path, mode
    ram_disk_bytes: int  # the size of each
    proc_covered: tuple[str, ...]  # what is covered read-only in each run's /proc
    cpu: tuple[int, int]  # a run's CPU rlimit
    seccomp: str  # the compiled filter every run loads (seccomp.bpf())
    files: tuple[str, ...]  # copied into each run: into /code, or beside it, read-only (the font cache in /tmp)
    preload: tuple[str, ...]  # the modules the server imports first (zygote.py)
    warm_ups: tuple[str, ...]  # and the first uses it makes of them
    kept_out: tuple[str, ...]  # modules it never imports (what imports them goes without)
    copy_after: float  # seconds a run made ahead waits for its run before it copies the pages runs write first

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()


def load_config(path: str = CONFIG) -> Config:
    with open(path, "rb") as file:
        raw = json.load(file)
    tuples = {key: tuple(tuple(v) if isinstance(v, list) else v for v in value) for key, value in raw.items()
              if isinstance(value, list)}  # fmt: skip
    return Config(**{**raw, **tuples})
