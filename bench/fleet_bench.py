"""A fleet of runners, measured: figures, not a test.

    .venv/bin/python bench/fleet_bench.py [--calls N]

Starts three runners (`python -m codeexec.runner`, RUNNER_INDEX 0 to 2, a root each) and
two embedded services: one leasing from runner 0 alone (RUNNER_URL), one from the fleet
(RUNNER_URLS). Then:

- exec p50 through the fleet against one runner, the same calls interleaved (goal: at
  most 1.1x): the fleet adds routing by id, and for a new session a choice by load;
- what an idle session costs its host: disk (the filesystem's used blocks over 100 new
  sessions of one small file) and memory (none: no process lives for a session);
- runs one host holds: `print(1)` p50 and p95 at 1 to 32 callers at once, against
  one runner; the most callers whose p95 stays under a second;
- how long a dead runner (SIGKILL) and a frozen one (SIGSTOP) take to be noticed: a call
  to one of its sessions answered 503, and /health saying it is down.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
from roots import sandbox_root

from bench import _free_port, pct, process
from codeexec import ids


@contextlib.contextmanager
def runner(index: int, key: str) -> Iterator[tuple[str, int]]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with sandbox_root() as root:
        env = {"RUNNER_KEY": key, "RUNNER_PORT": str(port), "RUNNER_INDEX": str(index), "SANDBOX_ROOT": str(root),
               "WARM_PYTHON": "0", "WARM_SANDBOXES": "0"}  # fmt: skip
        with process([sys.executable, "-m", "codeexec.runner"], env, url) as pid:
            yield url, pid


@contextlib.contextmanager
def service(runners: dict[str, str], runner_key: str, key: str) -> Iterator[httpx.Client]:
    port = _free_port()
    env = {"PORT": str(port), "HOST": "127.0.0.1", "CODE_EXEC_API_KEY": key, "SANDBOX_BACKEND": "runner",
           "RUNNER_KEY": runner_key, "MAX_CONCURRENT_RUNS": "64", **runners}  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with process([sys.executable, "-m", "codeexec.server"], env, base), httpx.Client(
        base_url=f"{base}/v1", headers={"X-API-Key": key}, timeout=60
    ) as client:
        yield client


def run(client: httpx.Client, **body: object) -> dict:
    reply = client.post("/exec", json={"lang": "py", "code": "print(1)", **body})
    assert reply.status_code == 200 and reply.json()["stdout"] == "1\n", reply.text
    return reply.json()


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


def fleet_against_one(one: httpx.Client, fleet: httpx.Client, calls: int) -> None:
    sessions = {name: run(client)["session_id"] for name, client in (("one", one), ("fleet", fleet))}
    print(f"exec through a fleet of three against one runner, {calls} calls a side, interleaved (p50 ms)")
    for label, body in (("existing session", lambda n: {"session_id": sessions[n]}), ("new session", lambda n: {})):
        times: dict[str, list[float]] = {"one": [], "fleet": []}
        for i in range(calls + 3):
            order = [("one", one), ("fleet", fleet)]
            for name, client in order if i % 2 else reversed(order):
                took = timed(lambda c=client, n=name, b=body: run(c, **b(n)))
                if i >= 3:
                    times[name].append(took)
        ratio = statistics.median(times["fleet"]) / statistics.median(times["one"])
        print(f"  {label:<18} one {pct(times['one'], 50):7.1f}   fleet {pct(times['fleet'], 50):7.1f}   "
              f"{ratio:.2f}x (goal <= 1.1x)")  # fmt: skip


def idle_session_cost(client: httpx.Client, root_of: Callable[[str], str]) -> None:
    first = client.post("/upload", files={"file": ("a.txt", b"a")}).json()["session_id"]
    root = root_of(first)
    before = os.statvfs(root)
    for _ in range(100):
        assert client.post("/upload", files={"file": ("a.txt", b"a")}).status_code == 200
    os.sync()
    after = os.statvfs(root)
    used = ((before.f_bfree - after.f_bfree) * after.f_frsize) / 100
    print(f"\nan idle session costs its host about {used / 1024:.0f} KiB of disk (a subvolume and its lease; "
          "one small file) and no memory: no process lives for it")  # fmt: skip


def runs_one_host_holds(client: httpx.Client, calls: int) -> None:
    print("\nprint(1) on one runner, callers at once: p50 / p95 ms")
    held = 0
    for callers in (1, 2, 4, 8, 16, 32):
        with ThreadPoolExecutor(callers) as pool:
            # A caller each: one user's share of the run slots is only part of them.
            users = [f"u{n % callers}" for n in range(max(calls, 2 * callers))]
            times = list(pool.map(lambda user: timed(lambda: run(client, user_id=user)), users))
        print(f"  {callers} at once   {pct(times, 50):7.1f} / {pct(times, 95):7.1f}")
        held = callers if pct(times, 95) < 1000 else held
    print(f"  the most callers at once with p95 under 1 s: {held} (on {os.cpu_count()} cores)")


def time_to_notice(client: httpx.Client, pid: int, session: str, fault: int, label: str) -> None:
    index = ids.runner_of(session)
    os.kill(pid, fault)
    start = time.perf_counter()
    status = client.get(f"/files/{session}").status_code
    answered = (time.perf_counter() - start) * 1e3
    while client.get("/health").json()["runners"][index]["up"]:
        time.sleep(0.05)
    down = (time.perf_counter() - start) * 1e3
    print(f"  {label:<8} first call {status} in {answered:6.0f} ms; /health says down after {down:6.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=30, help="calls per side and measure")
    args = parser.parse_args()
    key, runner_key = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(runner(i, runner_key)) for i in range(3)]
        urls = [url for url, _ in started]
        one = stack.enter_context(service({"RUNNER_URL": urls[0]}, runner_key, key))
        fleet = stack.enter_context(service({"RUNNER_URLS": ",".join(urls)}, runner_key, key))
        fleet_against_one(one, fleet, args.calls)
        idle_session_cost(one, lambda session: "/var/tmp/codeexec-bench")
        runs_one_host_holds(one, args.calls)
        print("\nnoticing a runner that fails (a call to one of its sessions, through the fleet)")
        sessions: dict[int, str] = {}
        while len(sessions) < 3:
            made = fleet.post("/upload", files={"file": ("a.txt", b"a")}).json()["session_id"]
            sessions.setdefault(ids.runner_of(made), made)
        time_to_notice(fleet, started[2][1], sessions[2], signal.SIGKILL, "killed")
        time_to_notice(fleet, started[1][1], sessions[1], signal.SIGSTOP, "frozen")
        os.kill(started[1][1], signal.SIGCONT)


if __name__ == "__main__":
    main()
