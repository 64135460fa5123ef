"""`make bench`, the warm servers' families: what importing each library family costs on
top of the interpreter the first fork server preloads (warm.KINDS["py"]), in time and in
memory (the server once, and each run made ahead), and the fork and exit times of a run
forked from a server that has it loaded (its heap in huge pages, frozen, as zygote.py
leaves it). The figures that chose the scientific server's (docs/performance.md).

Each side is a new /usr/bin/python3 with the environment's libraries, as a server's: the
base (zygote.preload of the first server's modules), then the family imported, then `--forks` runs forked and ended.
`--libs DIR` measures another set than the installed one (a lock installed with
`uv pip install --target DIR`: before and after a change of the lock, side by side), and
`--family NAME=MODULE,...` adds a family (tensorflow=tensorflow,keras).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from codeexec.sandbox.local import warm
from codeexec.sandbox.local.layout import PYTHON_LIBS
from codeexec.sandbox.local.warm import zygote

FAMILIES = {
    "scipy.stats": ["scipy.stats"],
    "seaborn": ["seaborn"],
    "sklearn": ["sklearn.linear_model", "sklearn.model_selection", "sklearn.ensemble", "sklearn.metrics"],
    "statsmodels": ["statsmodels.api", "statsmodels.formula.api"],
    "plotly": ["plotly.express"],
}

# Runs inside the new interpreter: the server's preload, the family, then forks.
PROBE = r"""
import gc, importlib, json, os, sys, time
sys.path.insert(0, sys.argv[1])
import zygote
forks, base_modules, modules = int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:]
start = time.perf_counter(); zygote.preload(base_modules, ["draw"]); base = time.perf_counter() - start
start = time.perf_counter()
for name in modules:
    importlib.import_module(name)
imported = time.perf_counter() - start
gc.freeze()
zygote.share_as_huge_pages()

def memory(pid):
    fields = {}
    for line in open(f"/proc/{pid}/smaps_rollup").readlines()[1:]:
        key, value = line.split(":")
        fields[key] = int(value.split()[0])
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmPTE:"):
            fields["PTE"] = int(line.split()[1])
    return {key: fields.get(key, 0) for key in ("Rss", "Pss", "Private_Dirty", "PTE")}

server = memory(os.getpid())
fork_ms, exit_ms, ahead = [], [], []
for _ in range(forks):
    go_r, go_w = os.pipe()
    said_r, said_w = os.pipe()
    before = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        zygote.reseed()  # what a run does first
        os.write(said_w, b"r")
        os.read(go_r, 1)
        os.write(said_w, repr(time.perf_counter()).encode().ljust(32))
        os._exit(0)
    fork_ms.append((time.perf_counter() - before) * 1e3)
    os.read(said_r, 1)
    ahead.append(memory(pid))  # a run made ahead, waiting for its run
    os.write(go_w, b"g")
    ended_at = float(os.read(said_r, 32))
    os.waitpid(pid, 0)
    exit_ms.append((time.perf_counter() - ended_at) * 1e3)
    for fd in (go_r, go_w, said_r, said_w):
        os.close(fd)
print(json.dumps({"base": base, "imported": imported, "modules": len(sys.modules), "server": server,
                  "ahead": ahead, "fork_ms": fork_ms, "exit_ms": exit_ms}))
"""


def probe(modules: list[str], forks: int, libs: str) -> dict[str, object]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": libs, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    base = json.dumps(warm.KINDS["py"].preload)
    argv = ["/usr/bin/python3", "-s", "-c", PROBE, str(Path(zygote.__file__).parent), str(forks), base, *modules]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=True)
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def mib(kib: float) -> str:
    return f"{kib / 1024:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2, help="interpreters per side (import time: the least)")
    parser.add_argument("--libs", default=PYTHON_LIBS, help="the Python set to measure (default: the installed one)")
    parser.add_argument("--family", action="append", default=[], help="NAME=MODULE,MODULE: one more family")
    args = parser.parse_args()
    print(f"# warm families of {args.libs} (cores {os.cpu_count()}, load {os.getloadavg()[0]:.2f}: a shared machine)")
    scientific = [module for name, modules in FAMILIES.items() if name != "plotly" for module in modules]
    extra = {name: modules.split(",") for name, modules in (family.split("=", 1) for family in args.family)}
    sides = {"today's server": [], **FAMILIES, "all but plotly": scientific, **extra}
    print(f"{'server':16} {'import s':>8} {'modules':>7} {'RSS MiB':>7} {'PSS MiB':>7} "
          f"{'ahead priv MiB':>14} {'ahead PTE KiB':>13} {'fork ms':>7} {'exit ms':>7}")  # fmt: skip
    for name, modules in sides.items():
        runs = [probe(modules, args.forks, args.libs) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["imported"])  # type: ignore[arg-type,return-value]
        ahead = [a for r in runs for a in r["ahead"]]  # type: ignore[attr-defined]
        server = best["server"]  # type: ignore[index]
        print(
            f"{name:16} {best['imported'] if modules else best['base']:8.2f} {best['modules']:7} "  # type: ignore[index]
            f"{mib(server['Rss']):>7} {mib(server['Pss']):>7} "
            f"{mib(statistics.median(a['Private_Dirty'] for a in ahead)):>14} "
            f"{statistics.median(a['PTE'] for a in ahead):13.0f} "
            f"{statistics.median(m for r in runs for m in r['fork_ms']):7.2f} "  # type: ignore[attr-defined]
            f"{statistics.median(m for r in runs for m in r['exit_ms']):7.2f}"  # type: ignore[attr-defined]
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
