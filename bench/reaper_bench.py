"""One reaper pass over 10,000 leases on the `local` backend: figures, not a test.

    .venv/bin/python bench/reaper_bench.py [--leases N]

Prints the time of a pass that ends nothing (every lease is read and kept) and of a pass
that ends every lease, per lease and in total.
"""

from __future__ import annotations

import argparse
import contextlib
import time

from roots import sandbox_root

from codeexec.reaper import reap
from codeexec.sandbox import make_sandboxes
from codeexec.sandbox.port import Owner
from codeexec.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leases", type=int, default=10_000)
    count = parser.parse_args().leases
    with sandbox_root() as root, contextlib.closing(make_sandboxes(Settings(sandbox_root=root))) as sandboxes:
        owner = Owner("default").tag()
        started = time.perf_counter()
        for _ in range(count):
            with sandboxes.create(owner):
                pass
        print(f"created {count} leases in {time.perf_counter() - started:.2f} s")
        for label, clock in (("keeps all", time.time), ("ends all", lambda: time.time() + 10 * 86_400)):
            started = time.perf_counter()
            report = reap(sandboxes, idle_timeout=3_600, clock=clock)
            took = time.perf_counter() - started
            print(f"reaper pass, {label:9}: {took:6.2f} s  {took / count * 1e6:7.1f} us/lease  {report.as_dict()}")


if __name__ == "__main__":
    main()
