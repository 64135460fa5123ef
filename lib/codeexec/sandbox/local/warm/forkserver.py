"""The fork server: a long-lived interpreter that makes each run's sandbox from a fork.

It runs INSIDE a bubblewrap sandbox of its own (server.py starts it: no network, /usr
read-only, the sandbox uid), keeping three capabilities inside its own user namespace:
CAP_SYS_ADMIN (namespaces, mounts), CAP_NET_ADMIN (the run's loopback up) and
CAP_SETPCAP (to empty the bounding set). It is pid 1 of a PID namespace of its own, so
that it may give each run a PID namespace and take its own back. It never runs user
code, and no run can reach it. What it and the service say to each other is wire.py;
the kernel calls it makes, kernel.py.

For each run made ahead the service sends one message (`fork`) with its priority, the
run's control socket and its cgroup's `cgroup.procs`, opened by the service. Two
processes follow:

- the run's **init**, pid 1 of a new PID namespace: moves itself into the run's cgroup
  (writing 0 through the service's descriptor), takes the run's priority, unshares mount,
  network, IPC and UTS namespaces, mounts the run's own /proc, /dev/pts, /tmp, /dev/shm
  and /code, brings up the run's loopback, empties its bounding set and forks the
  program. Then it drops every capability and loads the seccomp filter, so that from
  then on it holds what the program will hold, as bwrap's init does, and reaps; when the
  program ends it kills and reaps what the program left running and reports the exit
  status.
- the **program**, pid 2, keeps the init's capabilities until its run: made ready by the
  interpreter (zygote.ready: its own random seeds), it takes a new process's signals and
  waits; one that waits a while has the interpreter do meanwhile what can wait
  (zygote.meanwhile: the pages a run writes first, copied before it comes). At its run
  it writes the program into /code (then read-only), attaches the session's files at
  /mnt/data (a detached mount the service made with open_tree, handed over with the
  run), drops every capability and loads the seccomp filter cold runs load, and says so.
  Only then does it take its stdout and stderr, set its CPU limit (its clock started at
  its fork: a fork's CPU time starts at zero) and run the program: Python in this very
  interpreter (zygote.py), or any command line by exec. The service's one message goes
  to the process that runs it: no hop through the init on the run's clock.

No program runs while a process of the run holds a capability: the init drops its own
before the run, the program before its own code. The init is not dumpable from before
it drops them, so that it stays out of the program's reach (the kernel lets no process
trace or read one that holds more than itself; the same uid with no more, it could).
Even so the service takes no word of a run's for its end: a run has ended when its init
has (its pidfd), and the exit status is only what it reports.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import select
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING or __package__:
    from . import kernel, wire
else:  # inside a server's sandbox, where this is a sibling of zygote.py in /code, and so are they
    import kernel
    import wire

Interpret = Callable[[str, list[str]], int]  # runs a Python program, returns its exit code
# What the interpreter does in each run: before it is ready, while it waits (until told to
# stop), and its program.
Interpreter = tuple[Callable[[], None], Callable[[Callable[[], bool]], None], Interpret]


@dataclass(frozen=True)
class _Loaded:
    """What every fork has from its server: the contents its config names, read once, and
    the interpreter's parts of a run."""

    config: wire.Config
    seccomp: kernel.Filter
    bounding_set: tuple[int, ...]  # what bwrap left the server's (its three capabilities)
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
    kernel.unshare(kernel.CLONE_NEWPID)
    server = os.fork()
    if server:
        os._exit(os.waitstatus_to_exitcode(os.waitpid(server, 0)[1]) & 0xFF)


def serve(control: socket.socket, config: wire.Config, interpreter: Interpreter) -> NoReturn:
    """Fork a run's init for each `fork` message, until the service closes the socket."""
    # Children are reaped by the kernel: the server never waits on a run.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    files = {path: _read(path) for path in config.files}
    loaded = _Loaded(config, kernel.Filter(_read(config.seccomp)), kernel.bounding_set(), files, *interpreter)
    wire.say_hello(control, "server")
    while True:
        said = wire.read(control)
        if said.kind != wire.FORK:  # the service closed the socket: nothing more to make
            os._exit(0)
        order, fds = wire.fork_order(said)
        try:
            if _fork_into_new_pid_namespace(own) == 0:
                os.close(own)
                _exit_on_error(fds.control, _init, control, order, fds, loaded)
        except OSError as error:  # no fork now (a process limit): that run says so, the server goes on
            with socket.socket(fileno=os.dup(fds.control)) as report:
                wire.say_error(report, str(error))
        finally:
            said.close_fds()


def _fork_into_new_pid_namespace(own: int) -> int:
    """fork(), the child pid 1 of a new PID namespace; the server keeps its own."""
    kernel.unshare(kernel.CLONE_NEWPID)  # for the next child only
    try:
        child = os.fork()
    except BaseException:
        kernel.setns(own, kernel.CLONE_NEWPID)
        raise
    if child:
        kernel.setns(own, kernel.CLONE_NEWPID)
    return child


def _exit_on_error(ctl: int, body: Callable[..., None], *args: Any) -> NoReturn:
    """A process of the run reports what failed on the control socket, then ends."""
    try:
        body(*args)
    except BaseException as error:
        with socket.socket(fileno=os.dup(ctl)) as report:
            wire.say_error(report, error)
    os._exit(0)


def _init(control: socket.socket, order: wire.ForkOrder, fds: wire.ForkDescriptors, loaded: _Loaded) -> None:
    control.close()
    _quiet()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setpriority(os.PRIO_PROCESS, 0, order.nice)  # the program, forked below, inherits it
    ctl = socket.socket(fileno=fds.control)
    for fd in fds.procs:  # into the run's cgroup: every process of the run is born inside
        os.write(fd, b"0")
        os.close(fd)
    wire.say_hello(ctl, "init")
    kernel.unshare(kernel.CLONE_NEWNS | kernel.CLONE_NEWNET | kernel.CLONE_NEWIPC | kernel.CLONE_NEWUTS)
    # Nothing of the run's mounts reaches the server, or back.
    kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)
    _mount_run_filesystems(loaded)
    kernel.loopback_up()
    # No exec of the run's may gain a capability: the bounding set emptied for the init and
    # the program it forks.
    kernel.drop_bounding_set(loaded.bounding_set)
    program = os.fork()
    if program == 0:
        _program(ctl, loaded)
    # Confined, the init holds what the program will hold, the same uid: dumpable, the
    # program could take its descriptors (pidfd_getfd) or rewrite it (/proc/1/mem), and
    # with them its control socket. Not dumpable, neither can it; the program stays
    # dumpable (its own /proc/self is its own). It needs nothing more: the program takes
    # its own hand-over.
    kernel.not_dumpable()
    _confine(loaded)
    # Signals from inside its namespace never reach pid 1 unless it handles one: none is.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    code = os.waitstatus_to_exitcode(_reap_until(program))
    _end_the_rest()
    # As bwrap reports a program a signal ended: 128 + the signal's number.
    wire.say_exit(ctl, 128 - code if code < 0 else code)


def _hand_over(order: wire.RunOrder, given: wire.RunDescriptors) -> None:
    """The program into /code (then read-only), and the session's files at /mnt/data."""
    for name, fd in zip(order.files, given.files, strict=True):
        _write(f"/code/{name}", fd)
    kernel.remount_read_only("/code")
    kernel.attach(given.tree, "/mnt/data")
    # The session's mount must be what the program finds, or it would run in an empty directory.
    inside, tree = os.stat("/mnt/data"), os.fstat(given.tree)
    if (inside.st_dev, inside.st_ino) != (tree.st_dev, tree.st_ino):
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
    config, nosuid, nodev = loaded.config, kernel.MS_NOSUID, kernel.MS_NODEV
    kernel.mount("proc", "/proc", "proc", nosuid | nodev | kernel.MS_NOEXEC)
    for name in config.proc_covered:
        path = f"/proc/{name}"
        if os.path.exists(path):
            kernel.read_only_bind(path)
    kernel.mount("devpts", "/dev/pts", "devpts", nosuid | kernel.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    for path, mode in config.ram_disks:
        kernel.mount("tmpfs", path, "tmpfs", nosuid | nodev, f"mode={mode},size={config.ram_disk_bytes}")
    kernel.mount("tmpfs", "/code", "tmpfs", nosuid | nodev, "mode=0755")
    for path, content in loaded.files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(content)
        if not path.startswith("/code/"):  # read-only files of their own, as bwrap binds them
            kernel.read_only_bind(path)


def _confine(loaded: _Loaded) -> None:
    """Every capability gone (the init emptied the bounding set before it forked the
    program) and the seccomp filter on: from here on this process holds what a cold run's
    program holds."""
    kernel.drop_capabilities()
    loaded.seccomp.load()


def _program(ctl: socket.socket, loaded: _Loaded) -> NoReturn:
    """Made ready (the interpreter's part) and its signals a new process's, it waits for
    its run; one that waits a while does the interpreter's work that can wait, as long as
    its run has not come. At its run it takes the hand-over and confines itself: from the
    moment its output is the run's, what fails is the program's to say, on its own stderr."""
    try:
        loaded.ready()
        wire.say_hello(ctl, "program")
    except BaseException as error:
        wire.say_error(ctl, error)
        os._exit(0)
    _default_signals()
    if not _readable(ctl, loaded.config.copy_after):
        loaded.meanwhile(lambda: _readable(ctl, 0))
    said = wire.read(ctl)
    if said.kind is None:  # the run made ahead was closed unused
        os._exit(0)
    order, given = wire.run_order(said), wire.RunDescriptors.of(said.fds)
    try:
        _hand_over(order, given)
        _confine(loaded)
    except BaseException as error:  # nothing of the run's has run: it runs cold
        wire.say_error(ctl, error)
        os._exit(0)
    wire.say_started(ctl)
    ctl.close()
    os.dup2(given.stdout, 1)
    os.dup2(given.stderr, 2)
    said.close_fds()
    try:
        resource.setrlimit(resource.RLIMIT_CPU, loaded.config.cpu)  # its clock started at its fork
        os.chdir("/mnt/data")  # the session's mount, which arrived after this process started
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
