"""A warm Python interpreter, the fork server's (forkserver.py), as it runs INSIDE its sandbox.

Started by warm.py in a sandbox of its own, it imports what its configuration names (the
modules of its kind of server, warm.KINDS: none for a bare one) and makes a first use of
them (a figure drawn, a model fitted); what that made is frozen out of the garbage
collector and laid in huge pages; then it serves. Each run is a fork of it that
became a sandbox of its own (forkserver.py), and runs its Python program here, as
`python3 -s source args...` would, but without starting an interpreter or importing
anything again, and with every random generator the imports made seeded afresh, as a
new interpreter's would be. The server itself never runs a program.
"""

import atexit
import contextlib
import ctypes
import gc
import importlib
import os
import pkgutil  # noqa: F401  # runpy.run_path imports it at every call: here, once
import random
import runpy  # here, not in each run: its imports cost a bare run more than its program
import socket
import sys
import threading
import traceback
from collections.abc import Sequence


def preload(modules: Sequence[str], warm_ups: Sequence[str]) -> None:
    # What a cold run would print while importing (a warning, a cache being built) is
    # nobody's output: stdout and stderr go nowhere until the program starts.
    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        for name in modules:
            importlib.import_module(name)
        for name in warm_ups:
            _WARM_UPS[name]()
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


def _fit_once() -> None:
    """A first fit of each kind, and a first plotly figure, import and load what the
    libraries do only then (a scikit-learn fit 20 ms, plotly's first figure 0.3 s): a
    run's then costs only its own work. Nothing of it is kept."""
    numpy = importlib.import_module("numpy")
    x = numpy.arange(8.0)
    importlib.import_module("sklearn.linear_model").LinearRegression().fit(x.reshape(-1, 1), 2 * x)
    api = importlib.import_module("statsmodels.api")
    api.OLS(2 * x, api.add_constant(x)).fit().summary()
    importlib.import_module("scipy.stats").norm.rvs(size=2)
    importlib.import_module("plotly.express").bar(x=["a", "b"], y=[1, 2])


_WARM_UPS = {"draw": _draw_once, "fit": _fit_once}


# The random generators the server's imports made, found once in the server: each fork
# reseeds them, or every run would draw what every other run draws.
_generators: list[object] = []


def find_generators() -> list[object]:
    """Python's random.Random instances (the module's own reseeds itself at a fork; one a
    library made does not), and numpy's RandomStates (np.random.*, and what pandas,
    SciPy and scikit-learn draw from when given no seed) and bit generators (a Generator's)."""
    kinds: tuple[type, ...] = (random.Random,)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kinds += (numpy.random.RandomState, numpy.random.BitGenerator)
    found = (each for each in gc.get_objects() if isinstance(each, kinds))
    return [each for each in found if not isinstance(each, random.SystemRandom)]  # seeds nothing


def reseed() -> None:
    """Fresh seeds from the kernel for every generator the server's imports made: in the
    run, after its fork."""
    for generator in _generators:
        if isinstance(generator, random.Random):
            generator.seed(os.urandom(32))
        elif hasattr(generator, "seed"):  # a RandomState: None seeds it from the kernel's entropy
            generator.seed(None)
        else:  # a bit generator: the state of a fresh one, seeded from the kernel's entropy
            generator.state = type(generator)().state  # type: ignore[attr-defined]


_HUGE = 1 << 21
_MADV_HUGEPAGE, _MADV_COLLAPSE = 14, 25  # MADV_COLLAPSE: Linux 6.1


def share_as_huge_pages() -> None:
    """The interpreter's heap in 2 MiB pages, where the kernel allows: a fork copies, and
    its exit tears down, one page-table entry per 2 MiB instead of 512, which halves what
    a run of the interpreter with the libraries pays to be forked and to end (measured:
    3.3 and 4 ms, then 1.5 and 1.5). A run's first write to such a page still copies
    only 4 KiB. Anywhere this fails (an older kernel, THP "never"), pages stay small."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if fields[1] != "rw-p" or (len(fields) > 5 and fields[5] != "[heap]"):
                continue  # the heap and anonymous memory only, never a file's pages
            low, high = (int(bound, 16) for bound in fields[0].split("-"))
            start, end = -(-low // _HUGE) * _HUGE, high // _HUGE * _HUGE
            if end > start:
                libc.madvise(start, end - start, _MADV_HUGEPAGE)
                libc.madvise(start, end - start, _MADV_COLLAPSE)


def run(source: str, args: list[str]) -> None:
    """The program, as `python3 -s source args...` would run it (in /mnt/data)."""
    sys.argv = [source, *args]
    sys.path[0] = os.path.dirname(source)
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
    reseed()
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
    # A sibling in /code here, not a module of the package the service imports this from.
    forkserver = importlib.import_module("forkserver")
    forkserver.own_pid_namespace()
    config = forkserver.load_config()
    preload(config.preload, config.warm_ups)
    _generators.extend(find_generators())
    # What the imports made is never garbage: the runs' collections skip it, and so never
    # touch (and copy) the pages each fork shares with this process.
    gc.freeze()
    share_as_huge_pages()
    control = socket.socket(fileno=int(sys.argv[sys.argv.index("--control") + 1]))
    forkserver.serve(control, exit_code, config)


if __name__ == "__main__":
    main()
