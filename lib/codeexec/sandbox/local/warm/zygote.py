"""A warm Python interpreter, the fork server's (forkserver.py), as it runs INSIDE its sandbox.

Started by server.py in a sandbox of its own, it imports what its configuration names (the
modules of its kind of server, policy.KINDS: none for a bare one) and makes a first use of
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
import errno
import gc
import importlib
import io
import json
import os
import random
import socket
import struct
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterator, Sequence


def preload(modules: Sequence[str], warm_ups: Sequence[str], kept_out: Sequence[str] = ()) -> None:
    """`modules` imported and `warm_ups` made, none of `kept_out` imported meanwhile (an
    import of one fails as where it is not installed); a run may import those itself."""
    refusal = _Refused(frozenset(kept_out))
    sys.meta_path.insert(0, refusal)
    with _quietly():
        try:
            for name in modules:
                importlib.import_module(name)
            for name in warm_ups:
                _WARM_UPS[name]()
        except ImportError:
            pass  # a host without them still warms the interpreter itself
        finally:
            sys.meta_path.remove(refusal)


class _Refused:
    """An importer that finds the packages it names, and their modules, not installed
    (libraries that check sys.modules for them find nothing there either)."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@contextlib.contextmanager
def _quietly() -> Iterator[None]:
    """What a cold run would print while importing (a warning, a cache being built) is
    nobody's output: stdout and stderr go nowhere until a program starts."""
    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


# Python 3.11 specializes the bytecode it runs in place after a few runs: done in the
# server, no fork rewrites (and so copies) the code objects of a chart or a fit again.
_WARM_ROUNDS = 5


def _draw_once() -> None:
    """A run's usual chart, made as runs make it (default size and dpi, a line, tick labels,
    a title, pyplot.savefig to PNG): it loads the fonts and the renderer, so a run's chart
    costs only its own drawing. Nothing of it is kept: no figure stays open."""
    pyplot = importlib.import_module("matplotlib.pyplot")
    for _ in range(_WARM_ROUNDS):
        pyplot.plot([1, 3, 2])
        pyplot.title("warm")
        pyplot.savefig(io.BytesIO(), format="png")
        pyplot.close("all")


def _chart_once() -> None:
    """A seaborn chart, as `_draw_once` a pyplot one (its first also imports what seaborn
    loads only then)."""
    pyplot, seaborn = (importlib.import_module(name) for name in ("matplotlib.pyplot", "seaborn"))
    for _ in range(_WARM_ROUNDS):
        seaborn.barplot(x=["a", "b", "c"], y=[1, 3, 2])
        pyplot.savefig(io.BytesIO(), format="png")
        pyplot.close("all")


def _fit_once() -> None:
    """A first fit of each kind, and a first plotly figure, import and load what the
    libraries do only then (a scikit-learn fit 20 ms, plotly's first figure 0.3 s): a
    run's then costs only its own work. Nothing of it is kept."""
    numpy = importlib.import_module("numpy")
    x = numpy.arange(8.0)
    api = importlib.import_module("statsmodels.api")
    for _ in range(_WARM_ROUNDS):
        importlib.import_module("sklearn.linear_model").LinearRegression().fit(x.reshape(-1, 1), 2 * x)
        api.OLS(2 * x, api.add_constant(x)).fit().summary()
        importlib.import_module("scipy.stats").norm.rvs(size=2)
    importlib.import_module("plotly.express").bar(x=["a", "b"], y=[1, 2])


_WARM_UPS = {"draw": _draw_once, "chart": _chart_once, "fit": _fit_once}


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
_PAGE = 4096
_MADV_HUGEPAGE, _MADV_POPULATE_WRITE, _MADV_COLLAPSE = 14, 23, 25  # POPULATE_WRITE: Linux 5.14, COLLAPSE: 6.1
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _writable_memory() -> list[tuple[int, int]]:
    """The heap and anonymous memory (never a file's pages): start and end of each range."""
    spans = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if fields[1] == "rw-p" and (len(fields) <= 5 or fields[5] == "[heap]"):
                low, high = (int(bound, 16) for bound in fields[0].split("-"))
                spans.append((low, high))
    return spans


def share_as_huge_pages() -> None:
    """The interpreter's heap in 2 MiB pages, where the kernel allows: a fork copies, and
    its exit tears down, one page-table entry per 2 MiB instead of 512, which halves what
    a run of the interpreter with the libraries pays to be forked and to end (measured:
    3.3 and 4 ms, then 1.5 and 1.5). A run's first write to such a page still copies
    only 4 KiB. Anywhere this fails (an older kernel, THP "never"), pages stay small."""
    for low, high in _writable_memory():
        start, end = -(-low // _HUGE) * _HUGE, high // _HUGE * _HUGE
        if end > start:
            _libc.madvise(start, end - start, _MADV_HUGEPAGE)
            _libc.madvise(start, end - start, _MADV_COLLAPSE)


# The pages of the server's memory that a run writes first, found once in the server
# (find_hot_pages): each run made ahead copies them while it waits for its run (meanwhile).
_hot_pages: list[tuple[int, int]] = []


def find_hot_pages(warm_ups: Sequence[str]) -> list[tuple[int, int]]:
    """One fork makes the server's first uses again, then reads which pages of the
    server's writable memory it holds alone (pagemap: present, mapped only here): those it
    copied (Python writes to every object it touches, if only its reference count) or
    made. As (start, pages) runs. Measured: a chart's run copies 4,500 pages, 16 ms."""
    spans = _writable_memory()
    found, said = os.pipe()
    child = os.fork()
    if child == 0:
        try:  # whatever happens here, this fork never goes on as the server
            os.close(found)
            with _quietly(), contextlib.suppress(Exception):
                reseed()
                for name in warm_ups:
                    _WARM_UPS[name]()
            with os.fdopen(said, "w") as out:
                json.dump(_pages_held_alone(spans), out)
        finally:
            os._exit(0)
    os.close(said)
    try:
        with os.fdopen(found) as into:
            return [(start, pages) for start, pages in json.load(into)]
    except ValueError:  # no pagemap here: runs copy their pages as they go
        return []
    finally:
        os.waitpid(child, 0)


def _pages_held_alone(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    with open("/proc/self/pagemap", "rb") as pagemap:
        for low, high in spans:
            pagemap.seek(low // _PAGE * 8)
            entries = pagemap.read((high - low) // _PAGE * 8)
            start = None
            for index, (entry,) in enumerate(struct.iter_unpack("Q", entries)):
                alone = entry >> 63 & 1 and entry >> 56 & 1  # present, and mapped exclusively
                if alone and start is None:
                    start = low + index * _PAGE
                elif not alone and start is not None:
                    runs.append((start, (low + index * _PAGE - start) // _PAGE))
                    start = None
            if start is not None:
                runs.append((start, (high - start) // _PAGE))
    return runs


def ready() -> None:
    """In a run, before it says it is ready: its own seeds, drawn from the kernel."""
    reseed()


def meanwhile(run_came: Callable[[], bool]) -> None:
    """In a run made ahead that waits for its run: copies of the pages a run writes first,
    made before it comes rather than on its clock (a pyplot chart 16 ms sooner, a seaborn
    one 25; each run made ahead then holds 12 MiB more, 27 with the scientific libraries).
    Stopped as soon as the run comes: the rest it copies as it goes."""
    for index, (start, pages) in enumerate(_hot_pages):
        if index % 64 == 0 and run_came():
            return
        if _libc.madvise(start, pages * _PAGE, _MADV_POPULATE_WRITE) != 0 and ctypes.get_errno() == errno.EINVAL:
            return  # a kernel before 5.14


def run_program(source: str, args: list[str]) -> None:
    """The program, as `python3 -s source args...` would run it (in /mnt/data)."""
    sys.argv = [source, *args]
    sys.path[0] = os.path.dirname(source)
    try:
        _run_as_main(source)
    except SystemExit:
        raise
    except BaseException as error:  # shown as Python shows it: the program's frames only
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != source:
            tb = tb.tb_next
        sys.stderr.write("".join(traceback.format_exception(type(error), error, tb)))
        sys.exit(1)


def _run_as_main(source: str) -> None:
    """What runpy.run_path(source, run_name="__main__") does for a source file, the same
    module attributes and the interpreter's __main__ given back after, without the
    importers it first asks whether the path is a zip file or a directory (they cost a
    bare run more than its program; a run's source is always a file)."""
    with io.open_code(source) as file:
        code = compile(file.read(), source, "exec")
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=source, __cached__=None, __loader__=None, __package__="", __spec__=None)
    interpreters, sys.modules["__main__"] = sys.modules["__main__"], main
    try:
        exec(code, main.__dict__)  # noqa: S102  # the run's own program
    finally:
        sys.modules["__main__"] = interpreters


def exit_code(source: str, args: list[str]) -> int:
    """Run the program and end as the interpreter ends, up to its module teardown: wait
    for the program's threads, run its atexit functions, flush. The teardown, with pandas
    and matplotlib loaded, would take a quarter of a second and change nothing. (Its
    generators were reseeded ahead.)"""
    try:
        run_program(source, args)
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
    # Siblings in /code here, not modules of the package the service imports this from.
    forkserver, wire = (importlib.import_module(name) for name in ("forkserver", "wire"))
    forkserver.own_pid_namespace()
    config = wire.load_config()
    preload(config.preload, config.warm_ups, config.kept_out)
    _generators.extend(find_generators())
    # What the imports made is never garbage: the runs' collections skip it, and so never
    # touch (and copy) the pages each fork shares with this process.
    gc.freeze()
    share_as_huge_pages()
    _hot_pages.extend(find_hot_pages(config.warm_ups))
    control = socket.socket(fileno=int(sys.argv[sys.argv.index("--control") + 1]))
    forkserver.serve(control, config, (ready, meanwhile, exit_code))


if __name__ == "__main__":
    main()
