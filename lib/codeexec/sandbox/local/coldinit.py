"""A cold run's init: pid 1 of its sandbox, which starts the program and reaps (bwrap.py
runs it with `--as-pid-1`, under `python3 -I -S`, as a file of /code).

bwrap's own init would do it, but it stays the process that parsed bwrap's options and
read the host's mount table: the host's paths of the sandbox root and of the session are
in its memory, and, holding no more than the program (the same uid, no capability), it
is dumpable, so the program could read them from /proc/1/mem. This one was started by an
exec, knows nothing of the host, and makes itself not dumpable before the program exists,
as a warm run's init does: neither its memory nor its descriptors are the program's to take.

It ends as bwrap's own did: when the program ends, with its exit status (128 + the signal's
number for a program a signal ended), and the kernel then ends whatever the program left
running in the sandbox.

    python3 -I -S /code/.init.py <the program's command line>
"""

import ctypes
import os
import signal
import sys

_PR_SET_DUMPABLE = 4


def main(argv: list[str]) -> int:
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        os.write(2, b"the sandbox's init could not make itself unreadable\n")
        return 127
    # Signals from inside its namespace never reach pid 1 unless it handles one: none is.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    program = os.fork()  # not posix_spawn: the C library's leaves its own signals (32, 33) ignored
    if program == 0:
        _exec(argv)
    while True:  # as pid 1, every orphan of the run is reaped here
        reaped, status = os.waitpid(-1, 0)
        if reaped == program:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


def _exec(argv: list[str]) -> None:
    """The program, with a new process's signals: none blocked, none ignored (Python ignores
    SIGPIPE and SIGXFSZ at its start, and an exec keeps what is ignored)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for number in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        if signal.getsignal(number) == signal.SIG_IGN:
            signal.signal(number, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)  # noqa: S606  # the run's own command line
    except OSError as error:
        os.write(2, f"{argv[0]}: {error.strerror}\n".encode(errors="replace"))
    os._exit(127)


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
