"""The fork server: a long-lived interpreter that makes each run's sandbox from a fork.

It runs INSIDE a bubblewrap sandbox of its own (warm.py starts it: no network, /usr
read-only, the sandbox uid), keeping three capabilities inside its own user namespace:
CAP_SYS_ADMIN (namespaces, mounts), CAP_NET_ADMIN (the run's loopback up) and
CAP_SETPCAP (to empty the bounding set). It is pid 1 of a PID namespace of its own, so
that it may give each run a PID namespace and take its own back. It never runs user
code, and no run can reach it. This module is also the protocol both ends speak; the
service imports it for that.

For each run made ahead the service sends one message (`fork`) with its priority, the
run's control socket and its cgroup's `cgroup.procs`, opened by the service. Two
processes follow:

- the run's **init**, pid 1 of a new PID namespace: moves itself into the run's cgroup
  (writing 0 through the service's descriptor), takes the run's priority, unshares mount, network, IPC and UTS
  namespaces, mounts the run's own /proc, /dev/pts, /tmp, /dev/shm and /code, brings up
  the run's loopback and forks the program. At the run it writes the program into /code
  (then read-only), attaches the session's files at /mnt/data (a detached mount the
  service made with open_tree, handed over with the run), says so, drops every
  capability (the bounding set too) and loads the seccomp filter, so that from then on
  it holds what the program holds, as bwrap's init does, and hands the program its run.
  It reaps; when the program ends it kills and reaps what the program left running and
  reports the exit status.
- the **program**, pid 2: right away it drops every capability and loads the seccomp
  filter cold runs load, is made ready by the interpreter (zygote.ready: its own random
  seeds), then waits for its run; one that waits a while has the interpreter do meanwhile
  what can wait (zygote.meanwhile: the pages a run writes first, copied before it comes).
  Only then does it take its stdout and stderr, set its CPU limit (its clock started at
  its fork: a fork's CPU time starts at zero) and run the program: Python in this very
  interpreter (zygote.py), or any command line by exec.

While the init still holds its capabilities the program cannot reach it (the kernel lets
no process trace or read one that holds more than itself), and from before the program
exists it is not dumpable, so that it stays out of reach once it holds no more than the
program. Even so the service takes no word of a run's for its end: a run has ended when
its init has (its pidfd), and the exit status is only what it reports. Each message on the control
socket carries its sender's credentials, which the kernel gives the service as host
pids: how the service knows whom to kill and renice.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import fcntl
import functools
import json
import os
import resource
import select
import signal
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

CONFIG = "/code/.forkserver.json"
CAPABILITIES = ("CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SETPCAP")
MAX_FDS = 16  # descriptors one message carries at most
_MESSAGE_BYTES = 1 << 16

_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC, _CLONE_NEWPID, _CLONE_NEWNET = (
    0x00020000, 0x04000000, 0x08000000, 0x20000000, 0x40000000,
)  # fmt: skip
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18,
)  # fmt: skip
MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x2, 0x4
# The new mount API's calls have one number on every architecture.
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_OPEN_TREE_CLONE, _AT_FDCWD, _AT_EMPTY_PATH, _MOVE_MOUNT_F_EMPTY_PATH = 1, -100, 0x1000, 0x4
_PR_SET_DUMPABLE, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_CAPBSET_READ, _PR_CAPBSET_DROP = 4, 22, 2, 23, 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_SIOCSIFFLAGS, _IFF_UP = 0x8914, 0x1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


# --- the kernel calls, both ends -------------------------------------------------------


def open_tree(path: str) -> int:
    """A detached copy of the mount at path (the service's side, root on the host)."""
    flags = _OPEN_TREE_CLONE | os.O_CLOEXEC
    return _check(_libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, os.fsencode(path), flags), "open_tree")


def restrict(tree: int) -> None:
    """nosuid,nodev on a detached tree, as on a cold run's /mnt/data."""
    attr = ctypes.create_string_buffer(struct.pack("QQQQ", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, 0))
    _check(_libc.syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, attr, len(attr)), "mount_setattr")


def attach(tree: int, target: str) -> None:
    flags = _MOVE_MOUNT_F_EMPTY_PATH
    _check(_libc.syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(target), flags), "move_mount")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encoded = [value if value is None else os.fsencode(value) for value in (source, target, fstype, data)]
    _check(_libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]), f"mount {target}")


# --- the wire: every message between the service, a server and a run, named ---------------
#
#   service -> server    FORK     a ForkOrder; the run's control socket, its cgroup.procs
#   server  -> service   HELLO    "server": imported, ready to fork
#   run     -> service   HELLO    "init", then "program": each where it should be
#   service -> init      RUN      a RunOrder; the session's mount, stdout, stderr, the files
#   init    -> service   STARTED  the program has its run
#   init    -> program   RUN      the same RunOrder; stdout, stderr
#   init    -> service   EXIT     the program's exit status, as bwrap reports one
#   any     -> service   ERROR    what failed before the program ran
#
# A message is one JSON object {kind: value} with descriptors; each carries its sender's
# credentials, which the kernel gives the service as host pids (SO_PASSCRED).

FORK, HELLO, RUN, STARTED, EXIT, ERROR = "fork", "hello", "run", "started", "exit", "error"


@dataclass(frozen=True)
class ForkOrder:
    """A run to make: its processes at `nice` from their start (the service gives a run its
    normal priority back at its hand-over)."""

    nice: int


@dataclass(frozen=True)
class RunOrder:
    """How a run is run: `argv` exec'd, or `source` with `args` run by the interpreter
    itself (zygote.py), after `files` are written into /code."""

    files: tuple[str, ...]
    argv: tuple[str, ...] = ()
    source: str | None = None
    args: tuple[str, ...] = ()


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


def order_fork(server: socket.socket, order: ForkOrder, run_control: int, procs: Sequence[int]) -> None:
    _send(server, FORK, asdict(order), [run_control, *procs])


def say_hello(sock: socket.socket, who: str) -> None:
    _send(sock, HELLO, who)


def order_run(sock: socket.socket, order: RunOrder, fds: Sequence[int]) -> None:
    _send(sock, RUN, asdict(order), fds)


def say_started(sock: socket.socket) -> None:
    _send(sock, STARTED, True)


def say_exit(sock: socket.socket, code: int) -> None:
    _send(sock, EXIT, code)


def say_error(sock: socket.socket, error: BaseException | str) -> None:
    """What failed, to the service, where it can still be said."""
    said = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    with contextlib.suppress(OSError):
        _send(sock, ERROR, said)


def run_order(said: Said) -> RunOrder:
    value = said.value
    return RunOrder(tuple(value["files"]), tuple(value["argv"]), value["source"], tuple(value["args"]))


def expect(sock: socket.socket, kind: str) -> Said:
    """The next message, which must be `kind`: else OSError with what came instead (an
    error a run reported, another message, or the end), its descriptors closed."""
    said = read(sock)
    if said.kind != kind:
        said.close_fds()
        raise OSError(errno.EIO, f"expected {kind}, got {said.kind}: {said.value}")
    return said


def _send(sock: socket.socket, kind: str, value: Any, fds: Sequence[int] = ()) -> None:
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


# --- the server -------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """What a server is told once, at its start: warm.py writes it from layout.py, the
    server reads it. Paths name files in the server's /code."""

    ram_disks: tuple[tuple[str, str], ...]  # each run's RAM disks: path, mode
    ram_disk_bytes: int  # the size of each
    proc_covered: tuple[str, ...]  # what is covered read-only in each run's /proc
    cpu: tuple[int, int]  # a run's CPU rlimit
    seccomp: str  # the compiled filter every run loads (seccomp.bpf())
    files: tuple[str, ...]  # copied into each run: into /code, or beside it, read-only (the font cache in /tmp)
    preload: tuple[str, ...]  # the modules the server imports first (zygote.py)
    warm_ups: tuple[str, ...]  # and the first uses it makes of them

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()


def load_config(path: str = CONFIG) -> Config:
    with open(path, "rb") as file:
        raw = json.load(file)
    tuples = {key: tuple(tuple(v) if isinstance(v, list) else v for v in value) for key, value in raw.items()
              if isinstance(value, list)}  # fmt: skip
    return Config(**{**raw, **tuples})


Interpret = Callable[[str, list[str]], int]  # runs a Python program, returns its exit code
# What the interpreter does in each run: before it is ready, while it waits (until told to
# stop), and its program.
Interpreter = tuple[Callable[[], None], Callable[[Callable[[], bool]], None], Interpret]
# A run made ahead waits this long for its run before it does what can wait. At a chat's
# pace every run waits longer; back to back, the work would share the CPU with the runs
# and, measured, cost a pandas run more (5 %, and its p99) than a chart gained.
_IDLE_SECONDS = 0.5


@dataclass(frozen=True)
class _Loaded:
    """What every fork has from its server: the contents its config names, read once, and
    the interpreter's two parts of a run."""

    config: Config
    seccomp: bytes
    files: dict[str, bytes]
    ready: Callable[[], None]  # in a run, before it says it is ready
    meanwhile: Callable[[Callable[[], bool]], None]  # then, while it waits, until its run comes
    interpret: Interpret


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def own_pid_namespace() -> None:
    """Go on as pid 1 of a PID namespace this process's user namespace owns (bwrap's is
    not): only there may it give a child a PID namespace of its own and then take its
    own back. The process that called it stays behind, waiting."""
    _check(_libc.unshare(_CLONE_NEWPID), "unshare")
    server = os.fork()
    if server:
        os._exit(os.waitstatus_to_exitcode(os.waitpid(server, 0)[1]) & 0xFF)


def serve(control: socket.socket, config: Config, interpreter: Interpreter) -> NoReturn:
    """Fork a run's init for each `fork` message, until the service closes the socket."""
    # Children are reaped by the kernel: the server never waits on a run.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    _bounding_set()
    files = {path: _read(path) for path in config.files}
    loaded = _Loaded(config, _read(config.seccomp), files, *interpreter)
    say_hello(control, "server")
    while True:
        said = read(control)
        if said.kind != FORK:  # the service closed the socket: nothing more to make
            os._exit(0)
        try:
            if _fork_into_new_pid_namespace(own) == 0:
                os.close(own)
                _exit_on_error(said.fds[0], _init, control, said.fds, ForkOrder(**said.value), loaded)
        except OSError as error:  # no fork now (a process limit): that run says so, the server goes on
            with socket.socket(fileno=os.dup(said.fds[0])) as report:
                say_error(report, str(error))
        finally:
            said.close_fds()


def _fork_into_new_pid_namespace(own: int) -> int:
    """fork(), the child pid 1 of a new PID namespace; the server keeps its own."""
    _check(_libc.unshare(_CLONE_NEWPID), "unshare")  # for the next child only
    try:
        child = os.fork()
    except BaseException:
        _check(_libc.setns(own, _CLONE_NEWPID), "setns")
        raise
    if child:
        _check(_libc.setns(own, _CLONE_NEWPID), "setns")
    return child


def _exit_on_error(ctl: int, body: Callable[..., None], *args: Any) -> NoReturn:
    """A process of the run reports what failed on the control socket, then ends."""
    try:
        body(*args)
    except BaseException as error:
        with socket.socket(fileno=os.dup(ctl)) as report:
            say_error(report, error)
    os._exit(0)


def _init(control: socket.socket, fds: list[int], order: ForkOrder, loaded: _Loaded) -> None:
    control.close()
    ctl_fd, *procs = fds
    _quiet()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setpriority(os.PRIO_PROCESS, 0, order.nice)  # the program, forked below, inherits it
    ctl = socket.socket(fileno=ctl_fd)
    for fd in procs:  # into the run's cgroup: every process of the run is born inside
        os.write(fd, b"0")
        os.close(fd)
    say_hello(ctl, "init")
    _check(_libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing of the run's mounts reaches the server, or back
    _mount_run_filesystems(loaded)
    _loopback_up()
    handoff, program_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    program = os.fork()
    if program == 0:
        handoff.close()
        _program(ctl, program_end, loaded)
    program_end.close()
    # Once it drops its capabilities the init holds what the program holds, the same uid:
    # dumpable, the program could take its descriptors (pidfd_getfd) or rewrite it
    # (/proc/1/mem), and with them its control socket. Not dumpable, neither can it; the
    # program, forked before, stays dumpable (its own /proc/self is its own).
    _check(_libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable")
    # Signals from inside its namespace never reach pid 1 unless it handles one: none is.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    said = read(ctl)
    if said.kind is None:  # the run made ahead was closed unused: the program ends with this namespace
        os._exit(0)
    run = run_order(said)
    _hand_over(run, said.fds)
    _drop_privileges(loaded.seccomp)
    say_started(ctl)
    order_run(handoff, run, said.fds[1:3])
    said.close_fds()
    handoff.close()
    code = os.waitstatus_to_exitcode(_reap_until(program))
    _end_the_rest()
    # As bwrap reports a program a signal ended: 128 + the signal's number.
    say_exit(ctl, 128 - code if code < 0 else code)


def _hand_over(order: RunOrder, fds: list[int]) -> None:
    """The program into /code (then read-only), and the session's files at /mnt/data."""
    tree, _, _, *sources = fds
    for name, fd in zip(order.files, sources, strict=True):
        _write(f"/code/{name}", fd)
    mount(None, "/code", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    attach(tree, "/mnt/data")
    # The session's mount must be what the program finds, or it would run in an empty directory.
    inside, given = os.stat("/mnt/data"), os.fstat(tree)
    if (inside.st_dev, inside.st_ino) != (given.st_dev, given.st_ino):
        raise OSError(errno.EIO, "the session's files did not arrive at /mnt/data")


def _write(path: str, source: int) -> None:
    """A file of the program (its name is a file name), copied in the kernel."""
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        size, offset = os.fstat(source).st_size, 0
        while offset < size:
            offset += os.sendfile(out, source, offset, size - offset)
    finally:
        os.close(out)


def _reap_until(pid: int) -> int:
    """As pid 1 reaps every orphan of the run, until the program itself ends."""
    while True:
        reaped, status = os.waitpid(-1, 0)
        if reaped == pid:
            return status


def _end_the_rest() -> None:
    """What the program left running is killed, and reaped: none of it outlives the run's
    reply, as none outlives a cold run's sandbox."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        while True:
            os.waitpid(-1, 0)


def _mount_run_filesystems(loaded: _Loaded) -> None:
    """What a cold run's bwrap mounts of its own: /proc of its PID namespace, a devpts
    instance, the RAM disks, and /code with what every run finds there."""
    config = loaded.config
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in config.proc_covered:
        path = f"/proc/{name}"
        if os.path.exists(path):
            _read_only_bind(path)
    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    for path, mode in config.ram_disks:
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},size={config.ram_disk_bytes}")
    mount("tmpfs", "/code", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for path, content in loaded.files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(content)
        if not path.startswith("/code/"):  # read-only files of their own, as bwrap binds them
            _read_only_bind(path)


def _read_only_bind(path: str) -> None:
    mount(path, path, None, MS_BIND)
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", _IFF_UP))


@functools.cache
def _bounding_set() -> tuple[int, ...]:
    """What the server's bounding set holds (bwrap leaves its three capabilities): read
    once, in the server, and known to every fork."""
    last = int(_read("/proc/sys/kernel/cap_last_cap"))
    return tuple(cap for cap in range(last + 1) if _libc.prctl(_PR_CAPBSET_READ, cap, 0, 0, 0) == 1)


def _drop_privileges(seccomp: bytes) -> None:
    """Every capability gone, the bounding and ambient sets too, and the seccomp filter on:
    from here on this process holds what a cold run's program holds."""
    for cap in _bounding_set():
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "drop the bounding set")
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear the ambient set")
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    _check(_libc.capset(header, bytes(24)), "capset")
    filters = ctypes.create_string_buffer(seccomp, len(seccomp))
    program = struct.pack("@HP", len(seccomp) // 8, ctypes.addressof(filters))  # struct sock_fprog
    _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, program, 0, 0), "seccomp")


def _program(ctl: socket.socket, handoff: socket.socket, loaded: _Loaded) -> NoReturn:
    """Confined at once, made ready (the interpreter's part), then the run: from the moment
    its output is the run's, what fails is the program's to say, on its own stderr. A run
    made ahead that waits a while does the interpreter's work that can wait, as long as
    its run has not come."""
    try:
        _drop_privileges(loaded.seccomp)
        loaded.ready()
        say_hello(ctl, "program")
    except BaseException as error:
        say_error(ctl, error)
        os._exit(0)
    ctl.close()
    if not _readable(handoff, _IDLE_SECONDS):
        loaded.meanwhile(lambda: _readable(handoff, 0))
    said = read(handoff)
    handoff.close()
    if said.kind is None:  # the run made ahead was closed unused
        os._exit(0)
    order = run_order(said)
    os.dup2(said.fds[0], 1)
    os.dup2(said.fds[1], 2)
    said.close_fds()
    try:
        resource.setrlimit(resource.RLIMIT_CPU, loaded.config.cpu)  # its clock started at its fork
        os.chdir("/mnt/data")  # the session's mount, which arrived after this process started
        _default_signals()
        if order.source is not None:
            for ignored in (signal.SIGPIPE, signal.SIGXFSZ):  # as Python ignores them at its start
                signal.signal(ignored, signal.SIG_IGN)
            os._exit(loaded.interpret(order.source, list(order.args)))
        os.execv(order.argv[0], order.argv)  # noqa: S606  # the run's own command line
    except OSError as error:
        os.write(2, f"{error}\n".encode(errors="replace"))
    os._exit(127)


def _readable(sock: socket.socket, timeout: float) -> bool:
    return bool(select.select([sock], [], [], timeout)[0])


def _default_signals() -> None:
    """A run's signals are a new process's, whatever its server was started with or set
    for itself: none blocked, none ignored (Python's own SIGINT handler stays, as in a
    Python started for the run)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for number in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):  # SIGKILL, SIGSTOP
            if signal.getsignal(number) == signal.SIG_IGN:
                signal.signal(number, signal.SIG_DFL)


def _quiet() -> None:
    """The server's stdout and stderr are the service's pipes: nothing of a run writes there."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
