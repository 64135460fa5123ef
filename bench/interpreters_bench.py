"""`make bench`, part two: what a user waits for, warm interpreters against cold ones and
against a PLAIN bubblewrap launch, in ONE run.

Three sides, interleaved call by call so that the machine's noise falls on all alike:

- plain: `bwrap --unshare-all ... python3 -c CODE` started from this process, nothing of
  the service's (no cgroup, no seccomp, no limits, no session, no HTTP);
- warm: the whole service over HTTP (`POST /v1/exec`, a new session each call), with
  warm sandboxes (WARM_PYTHON, WARM_SANDBOXES);
- cold: the same service with both 0, what every run was before.

The programs: print(1), a pandas sum, a matplotlib chart saved as PNG, and a hello world
in js and bash (warm sandboxes of any language). Latency is taken
at a chat's pace, one call of each side every `--pace` seconds: a pool refills between
calls, as it does between a model's turns. Throughput is taken back to back at
concurrency 1, 4 and 16, where pools empty and runs start cold: it shows what a burst gets.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from contextlib import ExitStack

import httpx
from roots import sandbox_root

from bench import THROUGHPUT_SLOTS, TIMEOUT, machine, pct, service, throughput
from codeexec.sandbox.local.toolchains import ENVIRONMENT, HOST_SITE_PACKAGES, PYTHON_LIBS

PROGRAMS = {
    "print(1)": ("py", "print(1)", "1\n"),
    "pandas sum": ("py", "import pandas as pd\nprint(int(pd.Series(range(1000)).sum()))", "499500\n"),
    "matplotlib PNG": (
        "py",
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('chart')\nplt.savefig('chart.png')\n"
        "print('saved')",
        "saved\n",
    ),
    "js console.log": ("js", "console.log(1)", "1\n"),
    "bash echo": ("bash", "echo 1", "1\n"),
}
# How the plain side launches each language: its interpreter on the code, nothing else.
PLAIN = {"py": ["/usr/bin/python3", "-c"], "js": ["/usr/bin/node", "-e"], "bash": ["/bin/bash", "-c"]}
Call = Callable[[], None]


def plain_call(lang: str, code: str, expected: str) -> Call:
    """The interpreter in a bare bubblewrap sandbox: its own namespaces, /usr, /etc, and a
    /tmp to work in. The floor any sandboxed launch of python3 stands on."""
    argv = [
        shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent",
        "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
        "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp",
        "--setenv", "HOME", "/tmp", "--setenv", "MPLBACKEND", "Agg",
        # The environment's Python set, as runs import it (the host's own packages hidden).
        "--ro-bind", ENVIRONMENT, ENVIRONMENT, "--setenv", "PYTHONPATH", PYTHON_LIBS,
        *(arg for path in HOST_SITE_PACKAGES if os.path.isdir(path) for arg in ("--tmpfs", path)),
        *PLAIN[lang], code,
    ]  # fmt: skip

    def call() -> None:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert done.stdout == expected, done.stderr

    return call


def service_call(client: httpx.Client, lang: str, code: str, expected: str) -> Call:
    body = {"lang": lang, "code": code}

    def call() -> None:
        reply = client.post("/exec", json=body)
        assert reply.status_code == 200 and reply.json()["stdout"] == expected, reply.text

    return call


def paced(sides: dict[str, Call], calls: int, pace: float) -> dict[str, list[float]]:
    """`calls` calls a side, one of each every `pace` seconds, the order rotated."""
    for call in sides.values():  # each side's first call pays its caches; not counted
        call()
    times: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for i in range(calls):
        started = time.monotonic()
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            sides[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
        time.sleep(max(0.0, pace - (time.monotonic() - started)))
    return times


def latency_table(clients: dict[str, httpx.Client], calls: int, pace: float) -> dict[str, str]:
    print(f"\nlatency, ms: {calls} calls a side, one of each side every {pace:g} s, interleaved")
    print(f"{'program':<16}{'side':<8}{'p50':>8}{'p90':>8}{'p99':>8}{'p50/plain':>11}{'p99/p50':>9}")
    main = {}
    for label, program in PROGRAMS.items():
        sides = {"plain": plain_call(*program)}
        sides |= {name: service_call(client, *program) for name, client in clients.items()}
        times = paced(sides, calls, pace)
        plain50 = pct(times["plain"], 50)
        for side, found in times.items():
            p50, p90, p99 = (pct(found, p) for p in (50, 90, 99))
            print(f"{label:<16}{side:<8}{p50:8.1f}{p90:8.1f}{p99:8.1f}{p50 / plain50:10.2f}x{p99 / p50:8.2f}x")
        warm50 = pct(times["warm"], 50)
        main[f"{label} warm p50"] = f"{warm50:.0f} ms ({warm50 / plain50:.2f}x plain)"
        main[f"{label} warm p99/p50"] = f"{pct(times['warm'], 99) / warm50:.2f}x"
    return main


def throughput_table(urls: dict[str, str], key: str, calls: int, max_seconds: float) -> dict[str, str]:
    print(f"\nthroughput, runs/s, back to back: {calls} calls a side a level (at most {max_seconds:g} s)")
    print(f"{'program':<16}{'conc':<6}{'plain':>8}{'warm':>8}{'cold':>8}{'warm/cold':>11}{'warm/plain':>12}")
    main = {}
    with ExitStack() as stack:
        for label in ("print(1)", "pandas sum"):
            program = PROGRAMS[label]
            for conc in (1, 4, 16):
                clients = {
                    side: [stack.enter_context(_client(url, key)) for _ in range(conc)] for side, url in urls.items()
                }
                warm_calls = [service_call(c, *program) for c in clients["warm"]]
                cold_calls = [service_call(c, *program) for c in clients["cold"]]
                plain_calls = [plain_call(*program) for _ in range(conc)]
                warm, cold = throughput(warm_calls, cold_calls, calls, max_seconds)
                plain, _ = throughput(plain_calls, cold_calls[:1], calls // 2, max_seconds / 2)
                ratios = f"{warm / cold:10.2f}x{warm / plain:11.2f}x"
                print(f"{label:<16}{conc:<6}{plain:8.1f}{warm:8.1f}{cold:8.1f}{ratios}")
                main[f"{label} c{conc} warm/cold"] = f"{warm / cold:.2f}x"
    return main


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=TIMEOUT)


def run(args: argparse.Namespace) -> None:
    key = secrets.token_urlsafe(24)
    print(f"machine: {machine()}")
    with sandbox_root() as warm_root, sandbox_root() as cold_root, ExitStack() as stack:
        warm_url, _ = stack.enter_context(service(warm_root, key, warm=args.warm, runs=THROUGHPUT_SLOTS))
        cold_url, _ = stack.enter_context(service(cold_root, key, runs=THROUGHPUT_SLOTS))
        urls = {"warm": warm_url, "cold": cold_url}
        clients = {side: stack.enter_context(_client(url, key)) for side, url in urls.items()}
        time.sleep(3)  # the warm service's first interpreters, as a deployment has them after its start
        main = latency_table(clients, args.calls, args.pace)
        main |= throughput_table(urls, key, args.tput_calls, args.tput_seconds)
    print(
        f"\nmain (WARM_PYTHON=WARM_SANDBOXES={args.warm}; targets: print(1) p50 <= 0.6x plain, "
        "pandas < 30 ms, PNG < 60 ms, p99 < 2x p50): " + " | ".join(f"{name} {value}" for name, value in main.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=50, help="paced calls per side and program")
    parser.add_argument("--pace", type=float, default=0.6, help="seconds between one call of each side and the next")
    parser.add_argument("--tput-calls", type=int, default=96, help="calls per side per concurrency level")
    parser.add_argument("--tput-seconds", type=float, default=10.0, help="time bound per side per level")
    parser.add_argument("--warm", type=int, default=4, help="WARM_PYTHON and WARM_SANDBOXES of the warm service")
    parser.add_argument("--quick", action="store_true", help="a short run while developing")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.tput_calls, args.tput_seconds = 15, 32, 5.0
    run(args)


if __name__ == "__main__":
    main()
