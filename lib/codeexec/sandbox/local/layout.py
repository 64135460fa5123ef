"""What a run sees, written once: its paths, the host's files it may read, its environment,
its RAM disks and what /code holds besides the program.

Two launches read it: a cold run's bubblewrap options (bwrap.py) and a warm run's, whose
fork server is started by those same options and then mounts a run's own filesystems from
its configuration (warm/server.py writes it, warm/forkserver.py reads it). So a warm run and a cold one
see the same sandbox by construction, not by two lists kept alike.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from .limits import Limits

ARTIFACT_DIR = "/mnt/data"
# A program's source is written here (outside the artifact directory, so it never shows
# up as an output file), with the files below.
CODE_DIR = "/code"
# The libraries programs run with, apart from the service's Python and from the host's
# (deps/, installed by `make install`), bound read-only into every run at the same path:
# the locked Python set, the npm lock's node_modules, and `python`/`pip` for scripts.
ENVIRONMENT = "/opt/sandbox"
PYTHON_LIBS = f"{ENVIRONMENT}/python"
NODE_MODULES = f"{ENVIRONMENT}/node/node_modules"
TOOLS = f"{ENVIRONMENT}/tools"  # bin/python, bin/pip, matplotlibrc, jupyter/ (deps/tools/)
NLTK_DATA = f"{ENVIRONMENT}/nltk"  # corpora, tokenizers, taggers NLTK reads (deps/python/nltk-data.py)
# matplotlib's font cache, built once on the host by `make install` (fonts.py), and where
# matplotlib looks for it inside (HOME is /tmp, so ~/.cache/matplotlib).
FONT_CACHE = Path("/var/cache/codeexec/matplotlib")
SANDBOX_FONT_CACHE = "/tmp/.cache/matplotlib"
NOBODY = 65534  # the sandbox uid's name inside: a user /etc/passwd knows

# What the runtimes need from /etc, and nothing else of the host's configuration.
ETC = (
    "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "fonts",
    "java-17-openjdk", "php", "R", "ssl", "mime.types", "nsswitch.conf", "passwd", "group",
    "matplotlibrc", "ldc2.conf", "libreoffice",
)  # fmt: skip

# Where the host's apt and pip put packages for Debian 12's python3 (3.11, the sandbox's):
# covered by empty directories, so a run imports the locked set, the same on every host,
# never an older copy beside it (whose .pth files would run first: Debian's matplotlib
# claims mpl_toolkits that way).
HOST_SITE_PACKAGES = ("/usr/lib/python3/dist-packages", "/usr/local/lib/python3.11/dist-packages")

_ENV = {
    # `python` and `pip` first (the environment's tools), then the locked set's commands.
    "PATH": f"{TOOLS}/bin:{PYTHON_LIBS}/bin:/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    # Named, so no runtime asks systemd for it (R's does, and says it cannot on stderr).
    "TZ": "UTC",
    # matplotlib's defaults: no display (figures are saved, never shown) and fonts for every
    # script (CJK too). Not MPLBACKEND: a Jupyter kernel a run starts (nbclient) would
    # inherit it, and draw its plots into nothing instead of into the notebook.
    "MATPLOTLIBRC": f"{TOOLS}/matplotlibrc",
    # PYTHON_SITE (below) puts /mnt/data LAST on the path, so a session's own modules
    # import (a helper.py an earlier run wrote), and a json.py or sitecustomize.py among
    # its files shadows nothing. The locked set comes before the standard library, as any
    # --target install does; none of its top-level names is a standard module's
    # (tests/api/test_environment.py).
    "PYTHONPATH": f"{CODE_DIR}/.site:{PYTHON_LIBS}",
    "PYTHONNOUSERSITE": "1",  # as `-s`, for a `python` a script starts
    # Where numba may write its cache, and finds the kernels compiled at install (run_site.py).
    "NUMBA_CACHE_DIR": "/tmp/.cache/numba",
    # NLTK's data (deps/python/nltk-data.py). Jupyter's templates and kernel spec where the
    # locked set installed them, which nbconvert does not look in by itself, and its
    # configuration: `--to pdf` without TeX (tools/jupyter).
    "NLTK_DATA": NLTK_DATA,
    "JUPYTER_PATH": f"{PYTHON_LIBS}/share/jupyter",
    "JUPYTER_CONFIG_PATH": f"{TOOLS}/jupyter",
    # LibreOffice draws without a display; plotly's kaleido finds Debian's headless Chromium.
    "SAL_USE_VCLPLUGIN": "svp",
    "BROWSER_PATH": "/usr/bin/chromium-headless-shell",
    "GOCACHE": "/tmp/go-cache",  # go build needs a writable cache, and /tmp is the place
    "GOPATH": "/tmp/go",
    # Unbuffered, a Python program stopped at its time limit still shows what it printed.
    "PYTHONUNBUFFERED": "1",
    # No __pycache__ among the session's files for every module a run imports from there.
    "PYTHONDONTWRITEBYTECODE": "1",
}

# Libraries that start a thread per core (BLAS, OpenMP, numexpr, joblib, OpenCV, Go,
# data.table) see the host's cores, not the run's share: they get the run's CPU count.
_THREAD_VARS = (
    "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "NUMEXPR_MAX_THREADS", "LOKY_MAX_CPU_COUNT",
    "OPENCV_FOR_THREADS_NUM", "GOMAXPROCS", "R_DATATABLE_NUM_THREADS",
)  # fmt: skip

# The two writable RAM disks, by path and mode. They share one size, the memory limit:
# without a memory cgroup nothing else would bound them, with one their pages count against it.
RAM_DISKS = (("/tmp", "0755"), ("/dev/shm", "1777"))
# What bubblewrap covers read-only in the /proc it mounts, and a warm run in its own.
PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")

# Every run's sitecustomize (run_site.py says what it does), read once.
PYTHON_SITE = (Path(__file__).parent / "run_site.py").read_bytes()


def environment(limits: Limits) -> dict[str, str]:
    """A run's whole environment: built from nothing, never the service's."""
    return {**_ENV, **dict.fromkeys(_THREAD_VARS, str(limits.cpus))}


def run_files() -> dict[str, bytes]:
    """What every run finds read-only besides its program, by path (a relative one is in
    /code): the sitecustomize above, and the font cache where there is one."""
    return {".site/sitecustomize.py": PYTHON_SITE, **_font_cache()}


@functools.cache
def _font_cache() -> dict[str, bytes]:
    """Without it each run's matplotlib scans every font again (about 300 ms in every run
    that draws). Read once per process; a host without it runs as before."""
    try:
        return {f"{SANDBOX_FONT_CACHE}/{path.name}": path.read_bytes() for path in FONT_CACHE.glob("fontlist-*.json")}
    except OSError:
        return {}


def path_inside(name: str) -> str:
    """Where a file named by run_files, or a program's file, is inside: a relative name in /code."""
    return name if name.startswith("/") else f"{CODE_DIR}/{name}"


@functools.cache
def host_site_packages() -> tuple[str, ...]:
    """HOST_SITE_PACKAGES that this host has: only those can be covered."""
    return tuple(path for path in HOST_SITE_PACKAGES if os.path.isdir(path))
