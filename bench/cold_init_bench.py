"""A cold run's init (issue 42, item 6): what the run's own pid 1 (sandbox/local/coldinit.py,
not dumpable) costs against bwrap's own init, in the same run of this script: each run's
wall time, interleaved A/B, and the init's memory (RSS and PSS, host-side, while a run
sleeps).

    python bench/cold_init_bench.py [--runs 30]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from roots import sandbox_root

from codeexec.sandbox import make_sandboxes
from codeexec.sandbox.local import LocalSandboxes, bwrap
from codeexec.sandbox.port import Access, Intent, OwnerTag, Placement, Program, Run
from codeexec.settings import Settings

LAND = Placement(Access(OwnerTag("bench", "user"), Intent.LAND))
PROGRAMS = {"py print(1)": Program("py", "print(1)"), "bash true": Program("bash", "true")}


@contextlib.contextmanager
def bwraps_own_init() -> Iterator[None]:
    """bwrap's own init as pid 1, as before the run's own (the A of the A/B): no init in
    the command line, no --as-pid-1."""
    argv, args = bwrap._INIT_ARGV, bwrap.bwrap_args
    bwrap._INIT_ARGV = []
    bwrap.bwrap_args = lambda *given: args(*given[:5])  # type: ignore[assignment]
    try:
        yield
    finally:
        bwrap._INIT_ARGV, bwrap.bwrap_args = argv, args


def timed(sandboxes: LocalSandboxes, program: Program) -> float:
    started = time.perf_counter()
    ran = sandboxes.execute(Run(program, LAND))
    assert ran.result.exit_code == 0, ran.result
    sandboxes.end(ran.session_id)
    return (time.perf_counter() - started) * 1000


def init_memory(sandboxes: LocalSandboxes) -> dict[str, int]:
    """RSS and PSS (KiB) of the sandbox's pid 1 while its program sleeps: the process
    whose command line names the init."""
    running = threading.Thread(target=timed, args=(sandboxes, Program("bash", "sleep 2")))
    running.start()
    time.sleep(1)
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and b"/code/.init.py" in (proc / "cmdline").read_bytes():
                for line in (proc / "smaps_rollup").read_text().splitlines()[1:]:
                    key, value = line.split(":")
                    if key in ("Rss", "Pss"):
                        found[key] = int(value.split()[0])
    running.join()
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    with sandbox_root() as root:
        cold = {"sandbox_root": root, "warm_python": 0, "warm_sandboxes": 0, "warm_scientific": 0}
        sandboxes = make_sandboxes(Settings(**cold))
        assert isinstance(sandboxes, LocalSandboxes)
        try:
            for name, program in PROGRAMS.items():
                own, bwraps = [], []
                timed(sandboxes, program)  # the first run of each reads its files from disk
                for _ in range(runs):
                    own.append(timed(sandboxes, program))
                    with bwraps_own_init():
                        bwraps.append(timed(sandboxes, program))
                a, b = statistics.median(bwraps), statistics.median(own)
                print(f"{name}: p50 {b:.1f} ms with the run's own init, {a:.1f} ms with bwrap's"
                      f" ({b / a:.2f}x, +{b - a:.1f} ms)")  # fmt: skip
            print(f"the run's own init, while its program sleeps: {init_memory(sandboxes)} KiB")
        finally:
            sandboxes.close()


if __name__ == "__main__":
    main()
