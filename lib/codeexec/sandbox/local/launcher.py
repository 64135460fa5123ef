"""The one local launch: every run of the `local` backend goes in here, with what its
toolchain says to launch (toolchains.Launch), and comes out a RunResult that says whether
it ran warm.

It is forked from a warm server of the kind it wants when one can be had (warm/), else
it runs cold in a bubblewrap sandbox of its own (bwrap.py); both see the sandbox layout.py
describes, under one Confinement, and are collected to their end the same way (collect.py).
The launcher owns the warm pools and closes them with the backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from ..port import PoolLoad, RunResult
from .bwrap import ColdRuns
from .limits import Confinement
from .toolchains import Launch
from .warm import Policy, WarmPools


class Launcher:
    def __init__(self, confinement: Confinement, warm_sizes: Mapping[str, int]) -> None:
        """`warm_sizes`: how many runs each kind of warm server keeps made ahead (warm.KINDS)."""
        self.warm = WarmPools(confinement, Policy(warm_sizes))
        self.cold = ColdRuns(confinement)

    def run(self, data_dir: str, launch: Launch, cancelled: Callable[[], bool] | None) -> RunResult:
        """`launch` over the artifact directory data_dir, warm, else cold (the two take the
        same arguments); `cancelled` is asked every 20 ms, and once it says yes the run is stopped."""
        started = time.perf_counter()
        warm = self.warm.run(data_dir, launch, cancelled)
        result = warm if warm is not None else self.cold.run(data_dir, launch, cancelled)
        return replace(result, warm=warm is not None, seconds=time.perf_counter() - started)

    def warm_stats(self) -> dict[str, PoolLoad]:
        """Each warm pool's runs ready now, and the runs it served warm and those that ran cold."""
        return self.warm.stats()

    def close(self) -> None:
        self.warm.close()
