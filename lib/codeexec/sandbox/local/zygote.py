"""A warm Python interpreter, as it runs INSIDE a sandbox that waits for its one run.

Started by warm.py in a sandbox made exactly as a cold run's, with nothing of a session
yet: it imports what users import, says so on stdout, and reads its one run from stdin.
By then the service has mounted the session's files on /mnt/data and written the program
to /code. The program runs in a child forked for it, its CPU clock at zero and its CPU
limit a cold run's (the imports spent none of it); this process only waits and hands on
the child's exit status. It never runs a second program.
"""

import atexit
import contextlib
import gc
import importlib
import json
import os
import resource
import sys
import threading
import traceback

READY = b"\0codeexec-warm-ready\n"
# Chosen by measurement (README "Libraries and tools"): what most programs import, each cheap
# enough in memory to hold in every waiting interpreter. scipy.stats, seaborn, sklearn and
# statsmodels would save 0.5 to 0.8 s for the few programs that use them, and cost every
# interpreter 60 to 100 MB more; they import on demand.
PRELOADED = ("numpy", "pandas", "matplotlib.pyplot", "openpyxl")  # pyplot loads the font cache


def preload() -> None:
    # What a cold run would print while importing (a warning, a cache being built) is
    # nobody's output: stdout and stderr go nowhere until the program starts.
    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        importlib.import_module("matplotlib").use("Agg")
        for name in PRELOADED:
            importlib.import_module(name)
        _draw_once()
    except ImportError:
        pass  # a host without them still warms the interpreter itself
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def _draw_once() -> None:
    """A first figure saved as PNG loads the fonts and the renderer: a run's chart then
    costs only its own drawing. Nothing of it is kept."""
    import io

    pyplot = importlib.import_module("matplotlib.pyplot")
    figure = pyplot.figure(figsize=(1, 1))
    pyplot.plot([0, 1], [0, 1])
    pyplot.title("warm")
    figure.savefig(io.BytesIO(), format="png")
    pyplot.close("all")


def run(source: str, args: list[str]) -> None:
    """The program, as `python3 -s source args...` would run it."""
    os.chdir("/mnt/data")  # the session's mount, which arrived after this process started
    sys.argv = [source, *args]
    sys.path[0] = os.path.dirname(source)
    import runpy

    try:
        runpy.run_path(source, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as error:  # shown as Python shows it: the program's frames only
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != source:
            tb = tb.tb_next
        sys.stderr.write("".join(traceback.format_exception(type(error), error, tb)))
        sys.exit(1)


def exit_code(source: str, args: list[str]) -> int:
    """Run the program and end as the interpreter ends, up to its module teardown: wait
    for the program's threads, run its atexit functions, flush. The teardown, with pandas
    and matplotlib loaded, would take a quarter of a second and change nothing."""
    try:
        run(source, args)
        code: object = 0
    except SystemExit as stop:
        code = stop.code
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx does first
    atexit._run_exitfuncs()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code & 0xFF


def main() -> None:
    if "--bare" not in sys.argv[1:]:  # a bare interpreter has started Python, nothing more
        preload()
    # What the imports made is never garbage: the run's collections skip it, and so never
    # touch (and copy) the pages the fork shares with this process.
    gc.freeze()
    os.write(1, READY)
    request = json.loads(sys.stdin.buffer.readline() or b"null")
    if request is None:  # the service closed it unused: nothing to run
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # as a cold run's stdin
    os.close(devnull)
    child = os.fork()
    if child == 0:
        resource.setrlimit(resource.RLIMIT_CPU, tuple(request["cpu"]))  # its clock starts now
        os._exit(exit_code(request["source"], request["args"]))
    _, status = os.waitpid(child, 0)
    # As bwrap reports a program a signal ended: 128 + the signal's number.
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
