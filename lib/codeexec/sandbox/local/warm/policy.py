"""The warm pools' policy, every choice in one place, as Android's zygote names its pool's
(its size, when it refills, at what priority): the kinds of fork server and what each
imports, how many runs each keeps made ahead, which kinds a launch may be forked from and
in what order, when a run made ahead copies the pages runs write first, at what priority
refills run, and how long a server serves. Each figure here was chosen by measurement
(docs/performance.md, bench/interpreters_bench.py, bench/warm_bench.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..toolchains import Launch

# Never imported by a server, though a library it preloads imports one where it can (and
# runs without it): each starts a thread at its import, and a run forked from the server
# has only the thread that forked it. polars (which statsmodels imports) would make every
# run's exit wait, forever, on its spill-file cleaner. A run that wants one imports it.
KEPT_OUT = ("polars",)


@dataclass(frozen=True)
class Kind:
    """A kind of fork server: the modules it imports, the first uses it makes of them
    (zygote.py reads both from its configuration), and how long a run made ahead from it
    waits for its run before it copies the pages runs write first (zygote.meanwhile)."""

    preload: tuple[str, ...]
    warm_ups: tuple[str, ...]  # zygote._WARM_UPS
    copy_after: float
    kept_out: tuple[str, ...] = KEPT_OUT


# Chosen by measurement: what most programs import, and (the scientific server's) what
# fewer do: on top of the first they cost a server about 150 MB and each fork and exit
# 1.5 ms more, which the first server's runs (pandas, a chart) do not pay; each saves its
# program 0.4 to 1 s.
_PRELOADED = (
    "numpy", "pandas", "matplotlib.pyplot", "openpyxl",  # pyplot loads the font cache
    # What pandas imports only at a first to_excel/read_excel (20 ms), df.plot (7), to_csv
    # and a DataFrame printed (1 each): modules only, nothing registered.
    "xlsxwriter", "pandas.io.formats.excel", "pandas.plotting._matplotlib", "pandas.io.formats.csvs",
    "pandas.io.formats.string",
)  # fmt: skip
_SCIENTIFIC = ("scipy.stats", "seaborn", "sklearn.linear_model", "sklearn.model_selection", "sklearn.ensemble",
               "sklearn.metrics", "statsmodels.api", "statsmodels.formula.api", "plotly.express")  # fmt: skip

# A run made ahead copies its pages (12 MiB from the server with the libraries, 27 from the
# scientific one) once it has waited half a second: at a chat's pace every run is copied
# ahead, while calls back to back never share the CPU with that work (measured: at 0.1 s
# back-to-back pandas runs paid 5 % and their p99 for the charts' gain).
_COPY_AFTER = 0.5

KINDS = {
    "py": Kind(_PRELOADED, ("draw",), _COPY_AFTER),
    "scientific": Kind(_PRELOADED + _SCIENTIFIC, ("draw", "chart", "fit"), _COPY_AFTER),
    # Python started, nothing imported: other py runs, and every language by exec.
    "bare": Kind((), (), _COPY_AFTER),
}

# A program that names one of these (or a library that imports one of them: measured, each
# of these imports numpy at least) wants the interpreter that imported them...
_PRELOADED_USERS = re.compile(
    r"\b(numpy|pandas|matplotlib|openpyxl|seaborn|scipy|sklearn|statsmodels|plotly|pyarrow|cv2|skimage|imageio"
    r"|wordcloud|markitdown)\b"
)
# ... and one that names one of these, the scientific one.
_SCIENTIFIC_USERS = re.compile(r"\b(scipy|seaborn|sklearn|statsmodels|plotly)\b")

# The kinds a launch may be forked from, best first, by the kind it wants: with none of
# that kind ready, one is forked from its server at once (a fork costs less than the
# imports another kind would make), else one of the next kind is taken.
FORK_ORDER = {
    "scientific": ("scientific", "py", "bare"),
    "py": ("py", "scientific", "bare"),
    "bare": ("bare", "py", "scientific"),
}


def wanted(launch: Launch) -> str:
    """The kind of server a launch wants: for a Python program, the one with the libraries
    it names (the scientific one for SciPy, seaborn, sklearn, statsmodels or plotly), else
    the bare one; any other language, the bare one (by exec: the namespaces, mounts and
    cgroup made ahead are most of a cold start that is not the language's own)."""
    program = launch.interpreted
    if program is None:
        return "bare"
    if _SCIENTIFIC_USERS.search(program.code):
        return "scientific"
    return "py" if _PRELOADED_USERS.search(program.code) else "bare"


def _may_renice() -> bool:
    """Giving a process its normal priority back takes CAP_SYS_NICE, which a container may
    lack: then refills are not niced at all, or their runs would keep the lower priority."""
    status = Path("/proc/self/status").read_text()
    effective = next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:"))
    return bool(int(effective, 16) >> 23 & 1)  # CAP_SYS_NICE


REFILL_NICE = 10 if _may_renice() else 0


@dataclass(frozen=True)
class Policy:
    """How the pools run."""

    sizes: Mapping[str, int]  # runs made ahead of each kind (WARM_PYTHON, WARM_SCIENTIFIC, WARM_SANDBOXES)
    kinds: Mapping[str, Kind] = field(default_factory=lambda: KINDS)
    fork_order: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: FORK_ORDER)
    # A pool with at least this share of its runs ready refills once the run that took one
    # has ended, at `refill_nice`: a refill's fork and mounts would share the CPU, the
    # service's GIL and the kernel's locks with that run (measured back to back: the pandas
    # sum 1.08x a plain launch with refills during runs, 1.01x after them). Below it, at once
    # and at normal priority: runs are about to be forked on demand, the same work better
    # done ahead. A run gets its normal priority at its hand-over.
    refill_nice: int = REFILL_NICE
    ample: float = 0.5
    # A server is replaced after this many runs or seconds: its forks share its
    # address-space layout (docs/isolation.md "Warm sandboxes").
    server_runs: int = 1000
    server_seconds: float = 15 * 60

    def kinds_for(self, launch: Launch) -> tuple[str, ...]:
        """The kinds of server a launch may be forked from, best first."""
        return self.fork_order[wanted(launch)]

    def is_ample(self, ready: int, size: int) -> bool:
        """Whether a pool with `ready` of its `size` runs ready refills after runs, at low
        priority (else at once, at normal priority)."""
        return ready >= size * self.ample

    def refill_priority(self, ready: int, size: int) -> int:
        """The nice a refill runs at, with `ready` of the pool's `size` runs ready."""
        return self.refill_nice if self.is_ample(ready, size) else 0
