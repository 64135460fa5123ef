"""`make bench`, part two: what a user waits for when runs are forked from warm servers,
against a PLAIN bubblewrap launch of print(1), in ONE run.

The sides:

- plain: `bwrap --unshare-all ... python3 -c 'print(1)'` started from this process,
  nothing of the service's (no cgroup, no seccomp, no limits, no session, no HTTP): the
  floor any sandboxed launch of python3 stands on, and the unit of every latency ratio;
- warm: the whole service over HTTP (`POST /v1/exec`, a new session each call), with
  warm sandboxes (WARM_PYTHON, WARM_SANDBOXES, WARM_SCIENTIFIC);
- cold: the same service with none, what every run was before (throughput's unit).

Latency is taken back to back, at one caller and at four, and at a chat's pace (one
caller, a pause after each pair, so the pools are full when a call comes): each caller
alternates a call to the service and a plain print(1) launch, so the plain launch runs on
the same machine as the service and the ratios cancel the machine's noise. The programs:
print(1), a pandas sum, a matplotlib chart saved as PNG, a seaborn chart, a scikit-learn
fit, a statsmodels OLS, a scipy.stats call, and hello worlds in js and bash. Throughput is
taken at four callers, back to back, warm against cold; last, the host's memory at rest
with every server ready, without and with the scientific server.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
from roots import sandbox_root

from bench import THROUGHPUT_SLOTS, TIMEOUT, machine, pct, service, throughput
from codeexec.sandbox.local.layout import ENVIRONMENT, HOST_SITE_PACKAGES, PYTHON_LIBS

PROGRAMS = {
    "print(1)": ("py", "print(1)", "1\n"),
    "pandas sum": ("py", "import pandas as pd\nprint(int(pd.Series(range(1000)).sum()))", "499500\n"),
    "matplotlib PNG": (
        "py",
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('chart')\nplt.savefig('chart.png')\n"
        "print('saved')",
        "saved\n",
    ),
    "seaborn chart": (
        "py",
        "import matplotlib.pyplot as plt\nimport seaborn as sns\nsns.barplot(x=['a', 'b', 'c'], y=[1, 3, 2])\n"
        "plt.savefig('bar.png')\nprint('saved')",
        "saved\n",
    ),
    "sklearn fit": (
        "py",
        "import numpy as np\nfrom sklearn.linear_model import LinearRegression\nx = np.arange(20.0).reshape(-1, 1)\n"
        "print(round(LinearRegression().fit(x, 2 * x.ravel() + 1).coef_[0], 3))",
        "2.0\n",
    ),
    "statsmodels OLS": (
        "py",
        "import numpy as np\nimport statsmodels.api as sm\nx = np.arange(20.0)\n"
        "print(round(sm.OLS(2 * x + 1, sm.add_constant(x)).fit().params[1], 3))",
        "2.0\n",
    ),
    "scipy.stats": ("py", "from scipy import stats\nprint(round(stats.norm.cdf(0), 2))", "0.5\n"),
    "js console.log": ("js", "console.log(1)", "1\n"),
    "bash echo": ("bash", "echo 1", "1\n"),
}
# The issue's targets, against the plain print(1)'s p50 (print(1) runs in the bare server).
# The families of the scientific server (issue 36): seaborn 3x, scikit-learn and statsmodels 1.5x, scipy.stats 1x.
TARGETS = {"print(1)": 0.5, "pandas sum": 1.5, "matplotlib PNG": 3.0, "seaborn chart": 3.0, "sklearn fit": 1.5,
           "statsmodels OLS": 1.5, "scipy.stats": 1.0}  # fmt: skip
Call = Callable[[], None]

PLAIN = [
    shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent",
    "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
    "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
    "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp",
    # The environment's Python set, as runs import it (the host's own packages hidden).
    "--ro-bind", ENVIRONMENT, ENVIRONMENT, "--setenv", "PYTHONPATH", PYTHON_LIBS,
    *(arg for path in HOST_SITE_PACKAGES if os.path.isdir(path) for arg in ("--tmpfs", path)),
    "/usr/bin/python3", "-c", "print(1)",
]  # fmt: skip


def plain_call() -> None:
    done = subprocess.run(PLAIN, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.stdout == "1\n", done.stderr


def service_call(client: httpx.Client, lang: str, code: str, expected: str) -> Call:
    body = {"lang": lang, "code": code}

    def call() -> None:
        reply = client.post("/exec", json=body)
        assert reply.status_code == 200 and reply.json()["stdout"] == expected, reply.text

    return call


def _ms(call: Call) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


CHAT_PAUSE = 0.5  # seconds between a caller's pairs at a chat's pace


def back_to_back(calls: list[Call], rounds: int, pause: float = 0.0) -> tuple[list[float], list[float]]:
    """One caller per entry of `calls`, each alternating its call and a plain print(1)
    launch (the order swapped every round), `rounds` of each, `pause` seconds after each
    pair; the times of both."""
    service: list[float] = []
    plain: list[float] = []
    lock = threading.Lock()

    def caller(call: Call) -> None:
        for i in range(rounds):
            pair = [(service, call), (plain, plain_call)]
            for times, fn in pair if i % 2 else reversed(pair):
                ms = _ms(fn)
                with lock:
                    times.append(ms)
            time.sleep(pause)

    for call in calls:  # each side's first call pays its caches; not counted
        call()
    plain_call()
    with ThreadPoolExecutor(len(calls)) as pool:
        list(pool.map(caller, calls))
    return service, plain


def latency_table(url: str, key: str, rounds: int, stack: ExitStack, only: list[str]) -> dict[str, str]:
    print(f"\nlatency, ms: each caller alternates a warm call and a plain print(1), {rounds} of each back to back,")
    print(f"{rounds // 4} at a chat's pace (one caller, {CHAT_PAUSE:g} s after each pair)")
    print(f"{'program':<16}{'callers':>8}{'p50':>8}{'p99':>8}{'p99/p50':>9}{'plain p50':>11}{'p50/plain':>11}"
          f"{'plain p99/p50':>15}")  # fmt: skip
    main = {}
    for callers, pause in ((1, 0.0),) if only else ((1, 0.0), (4, 0.0), (1, CHAT_PAUSE)):
        name, side = ("chat", "chat") if pause else (str(callers), f"c{callers}")  # column, summary
        for label, program in PROGRAMS.items():
            if only and label not in only:
                continue
            calls = [service_call(stack.enter_context(_client(url, key)), *program) for _ in range(callers)]
            times, plain = back_to_back(calls, max(rounds // (4 if pause else callers), 8), pause)
            p50, p99, plain50 = pct(times, 50), pct(times, 99), pct(plain, 50)
            print(f"{label:<16}{name:>8}{p50:8.1f}{p99:8.1f}{p99 / p50:8.2f}x{plain50:11.1f}{p50 / plain50:10.2f}x"
                  f"{pct(plain, 99) / plain50:14.2f}x")  # the machine's own tail  # fmt: skip
            if label in TARGETS:
                main[f"{label} {side}"] = f"p50 {p50 / plain50:.2f}x plain, p99 {p99 / p50:.2f}x p50"
    return main


def throughput_table(
    urls: dict[str, str], key: str, calls: int, max_seconds: float, stack: ExitStack
) -> dict[str, str]:
    print(f"\nthroughput, runs/s at 4 callers, back to back: {calls} calls a side (at most {max_seconds:g} s)")
    print(f"{'program':<16}{'warm':>8}{'cold':>8}{'warm/cold':>11}")
    main = {}
    for label in ("print(1)", "pandas sum", "matplotlib PNG"):
        program = PROGRAMS[label]
        sides = {side: [service_call(stack.enter_context(_client(url, key)), *program) for _ in range(4)]
                 for side, url in urls.items()}  # fmt: skip
        warm, cold = throughput(sides["warm"], sides["cold"], calls, max_seconds)
        print(f"{label:<16}{warm:8.1f}{cold:8.1f}{warm / cold:10.2f}x")
        main[f"{label} c4 warm/cold"] = f"{warm / cold:.2f}x"
    return main


def _tree(pid: int) -> list[int]:
    """The pid and every process under it: the service, its fork servers, runs made ahead."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found = [pid]
    for each in found:
        found.extend(children.get(each, []))
    return found


def memory_at_rest(pid: int) -> float:
    """MiB: the proportional set size of the service and every process under it (its
    fork servers and runs made ahead), what the host gives it at rest."""
    total = 0
    for each in _tree(pid):
        with contextlib.suppress(OSError):
            rollup = Path(f"/proc/{each}/smaps_rollup").read_text()
            total += next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))
    return total / 1024


def settled(pid: int, quiet_seconds: float = 1.0, at_most: float = 120.0) -> None:
    """Wait until the service and everything under it spent no CPU for `quiet_seconds`:
    every server imported and every pool full, as a deployment has them after its start
    (their start takes seconds, and would otherwise be measured as the first calls' time)."""

    def cpu_ticks() -> int:
        ticks = 0
        for each in _tree(pid):
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks

    deadline, last = time.monotonic() + at_most, -1
    while time.monotonic() < deadline and (now := cpu_ticks()) != last:
        last = now
        time.sleep(quiet_seconds)


def memory_table(key: str, warm: int, scientific: int) -> dict[str, str]:
    """The host's memory at rest, every server ready, without and with the scientific server."""
    print(f"\nmemory at rest, MiB (PSS of the service and its processes, {warm} runs made ahead of each kind)")
    main = {}
    for side, count in (("without scientific", 0), ("with scientific", scientific)):
        with sandbox_root() as root, service(root, key, warm=warm, scientific=count) as (_, pid):
            settled(pid)
            mib = memory_at_rest(pid)
        print(f"{side:<20}{mib:8.0f}")
        main[f"memory {side}"] = f"{mib:.0f} MiB"
    return main


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=TIMEOUT)


def run(args: argparse.Namespace) -> None:
    key = secrets.token_urlsafe(24)
    print(f"machine: {machine()}; load average at start {os.getloadavg()[0]:.2f}")
    with sandbox_root() as warm_root, sandbox_root() as cold_root, ExitStack() as stack:
        warm_url, warm_pid = stack.enter_context(
            service(warm_root, key, warm=args.warm, runs=THROUGHPUT_SLOTS, scientific=args.scientific)
        )
        cold_url, _ = stack.enter_context(service(cold_root, key, runs=THROUGHPUT_SLOTS))
        settled(warm_pid)
        main = latency_table(warm_url, key, args.calls, stack, args.only)
        if not args.only:
            main |= throughput_table(
                {"warm": warm_url, "cold": cold_url}, key, args.tput_calls, args.tput_seconds, stack
            )
    if not args.only:
        main |= memory_table(key, args.warm, args.scientific)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    print(
        f"\nmain (WARM_PYTHON=WARM_SANDBOXES={args.warm}; targets: p50 at most 0.5x plain print(1) for print(1), "
        "1.5x for the pandas sum, 3x for the chart and the seaborn chart, 1.5x for the sklearn fit and the "
        "statsmodels OLS, 1x for scipy.stats; p99 at most 2x p50; pandas c4 at least 5x cold): "
        + " | ".join(f"{name} {value}" for name, value in main.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=80, help="back-to-back calls per program (and plain launches)")
    parser.add_argument("--tput-calls", type=int, default=96, help="calls per side for throughput")
    parser.add_argument("--tput-seconds", type=float, default=20.0, help="time bound per side for throughput")
    parser.add_argument("--warm", type=int, default=4, help="WARM_PYTHON and WARM_SANDBOXES of the warm service")
    parser.add_argument("--scientific", type=int, default=2, help="WARM_SCIENTIFIC of the warm service")
    parser.add_argument("--only", type=lambda value: value.split(","), default=[],
                        help="these programs' latency at one caller alone (comma-separated labels)")
    parser.add_argument("--quick", action="store_true", help="a short run while developing")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.tput_calls, args.tput_seconds = 24, 32, 8.0
    run(args)


if __name__ == "__main__":
    main()
