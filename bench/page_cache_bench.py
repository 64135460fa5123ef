"""The page cache of the shared environment, as one tenant's run sees another's (issue 42,
item 9): whether a file's pages are cached is what another run just loaded. Measured from
inside a cold run, against files of /opt/sandbox the host made cached or not:

- the probes the seccomp filter now refuses: RWF_NOWAIT (asks without loading) and
  POSIX_FADV_DONTNEED (evicts, to ask again);
- the one left: the time of a first read, how well it tells cached from not, and that the
  read itself loads the page (so it answers once per file until memory pressure evicts it);
- what a tenant-private page cache would take: a copy of the environment per tenant.

    python bench/page_cache_bench.py [--files 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

from roots import sandbox_root

from codeexec.sandbox import make_sandboxes
from codeexec.sandbox.local import LocalSandboxes
from codeexec.sandbox.local.layout import ENVIRONMENT, PYTHON_LIBS
from codeexec.sandbox.port import Access, Intent, OwnerTag, Placement, Program, Run
from codeexec.settings import Settings

LAND = Placement(Access(OwnerTag("bench", "tenant"), Intent.LAND))

# Inside the run: each file's first page, read and timed twice; then the two refused probes.
PROBE = r"""
import json, os, sys, time
paths = json.loads(sys.argv[1])
def first_page(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        started = time.perf_counter_ns()
        os.pread(fd, 4096, 0)
        return (time.perf_counter_ns() - started) / 1000
    finally:
        os.close(fd)
first = [first_page(p) for p in paths]
again = [first_page(p) for p in paths]
fd = os.open(paths[0], os.O_RDONLY)
try:
    os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
    nowait = "answered"
except OSError as error:
    nowait = error.errno
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
advised = first_page(paths[0])
# The pages the run loaded count against its own memory: filled to its limit, does it push
# them out, to ask again?
started = time.perf_counter()
held = [bytearray(16 << 20) for _ in range(int(sys.argv[2]) * 95 // 100 >> 24)]
filled = time.perf_counter() - started
held.clear()
print(json.dumps({"first": first, "again": again, "nowait": nowait, "advised": advised, "filled": filled,
                  "after_filling": [first_page(p) for p in paths]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=200)
    count = parser.parse_args().files
    found = sorted(str(p) for p in Path(PYTHON_LIBS).rglob("*.py") if p.stat().st_size > 8192)
    paths = found[:: max(1, len(found) // count)][:count]  # spread over the environment
    evicted = set(paths[::2])
    for path in paths:  # half evicted, half cached, as the host leaves them
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED) if path in evicted else os.pread(fd, 4096, 0)
        os.close(fd)
    with sandbox_root() as root:
        cold = {"sandbox_root": root, "warm_python": 0, "warm_sandboxes": 0, "warm_scientific": 0}
        sandboxes = make_sandboxes(Settings(**cold))
        assert isinstance(sandboxes, LocalSandboxes)
        try:
            limit = str(sandboxes.limits.memory_bytes)
            ran = sandboxes.execute(Run(Program("py", PROBE, (json.dumps(paths), limit)), LAND))
        finally:
            sandboxes.close()
    assert ran.result.exit_code == 0, ran.result
    measured = json.loads(ran.result.stdout)
    timed = dict(zip(paths, measured["first"], strict=True))
    cached = [t for p, t in timed.items() if p not in evicted]
    uncached = [t for p, t in timed.items() if p in evicted]
    threshold = (statistics.median(cached) + statistics.median(uncached)) / 2
    right = sum(t < threshold for t in cached) + sum(t >= threshold for t in uncached)
    print(f"{count} files of {PYTHON_LIBS}, half cached, half evicted by the host:")
    print(f"  RWF_NOWAIT inside a run: errno {measured['nowait']} (refused); a page read again after"
          f" POSIX_FADV_DONTNEED: {measured['advised']:.1f} us (still cached)")
    print(f"  first read of a page, cached: p50 {statistics.median(cached):.1f} us; not cached: p50 "
          f"{statistics.median(uncached):.1f} us; a threshold between tells {right / count:.0%} of them")
    again = statistics.median(measured["again"])
    print(f"  the same pages read again: p50 {again:.1f} us (the first read loaded them)")
    refilled = sum(t >= threshold for t in measured["after_filling"])
    print(f"  after the run filled 95% of its own memory ({measured['filled']:.1f} s): {refilled} of {count} pages"
          " read as not cached again")
    size = subprocess.run(["du", "-sh", ENVIRONMENT], capture_output=True, text=True).stdout.split()[0]
    print(f"  a tenant-private page cache: a copy of {ENVIRONMENT} per tenant, {size} each")


if __name__ == "__main__":
    main()
