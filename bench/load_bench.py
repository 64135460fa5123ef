"""The service under more than it takes on: figures, not a test.

    .venv/bin/python bench/load_bench.py [--runs N] [--uploads N]

Starts the embedded server (local backend) and sends, all at once, N long runs (more
than it has run slots) and N uploads into a session a run holds, while /health is asked
every 20 ms. Prints how fast /health answered throughout, how many calls were taken on,
and how fast the excess was refused (429), which is what admission control promises:
/health within 100 ms, the excess refused at once, not queued.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from roots import sandbox_root

from bench import pct, service


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=24, help="long runs sent at once")
    parser.add_argument("--uploads", type=int, default=24, help="uploads into a busy session sent at once")
    parser.add_argument("--sleep", type=float, default=4.0, help="seconds each run sleeps")
    args = parser.parse_args()
    key = secrets.token_urlsafe(16)
    with sandbox_root() as root, service(root, key) as (url, _):
        headers = {"X-API-Key": key}
        with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
            slots = httpx.get(url.removesuffix("/v1") + "/health").json()["runs_at_once"]
            busy = client.post("/exec", json={"lang": "bash", "code": "echo ready"}).json()["session_id"]
            health, stop = [], threading.Event()
            poller = threading.Thread(target=_poll_health, args=(url, health, stop))
            poller.start()
            started = time.monotonic()
            calls = [lambda: client.post("/exec", json={"lang": "bash", "code": f"sleep {args.sleep}"})] * args.runs
            calls.insert(0, lambda: client.post("/exec", json={"lang": "bash", "code": "sleep 3", "session_id": busy}))
            upload = lambda: client.post(  # noqa: E731
                "/upload", files={"file": ("u.txt", b"u")}, params={"session_id": busy}
            )
            calls += [upload] * args.uploads
            with ThreadPoolExecutor(len(calls)) as pool:
                answered = list(pool.map(lambda call: _timed(call, started), calls))
            stop.set()
            poller.join()
    _report(slots, args, answered, health)


def _timed(call: object, started: float) -> tuple[int, float]:
    reply = call()  # type: ignore[operator]
    return reply.status_code, time.monotonic() - started


def _poll_health(url: str, times: list[float], stop: threading.Event) -> None:
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            begun = time.perf_counter()
            client.get(url.removesuffix("/v1") + "/health")
            times.append((time.perf_counter() - begun) * 1e3)
            stop.wait(0.02)


def _report(slots: int, args: argparse.Namespace, answered: list[tuple[int, float]], health: list[float]) -> None:
    runs, uploads = answered[: args.runs + 1], answered[args.runs + 1 :]
    print(f"run slots: {slots}; sent at once: {len(runs)} runs of {args.sleep:g} s, {len(uploads)} uploads")
    for label, group in (("runs", runs), ("uploads", uploads)):
        by_status: dict[int, list[float]] = {}
        for status, seconds in group:
            by_status.setdefault(status, []).append(seconds)
        for status, seconds in sorted(by_status.items()):
            print(f"  {label:7} {status}: {len(seconds):3}  answered after p50 {statistics.median(seconds):6.3f} s,"
                  f" max {max(seconds):6.3f} s")  # fmt: skip
    print(f"/health while loaded: {len(health)} calls, p50 {pct(health, 50):.1f} ms, p99 {pct(health, 99):.1f} ms,"
          f" max {max(health):.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
