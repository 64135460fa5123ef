"""One user against another: figures, not a test.

    .venv/bin/python bench/fairness_bench.py [--hogs N] [--sleep S] [--calls N]

Starts the embedded server (local backend, its default admission) and measures a chat
user's short runs (`print(1)`, one every 0.6 s) first alone, then while another user
keeps N long runs going (each sleeps S seconds, and a refused one is sent again after
0.1 s, as a hostile caller would). Prints the chat user's p50 and p90 and how many of its
calls were refused (429), beside how many of the hog's were taken on and refused: what
fair admission promises is that the chat user runs as if alone, and is never refused.
"""

from __future__ import annotations

import argparse
import secrets
import threading
import time
from collections import Counter

import httpx
from roots import sandbox_root

from bench import pct, service

PACE_SECONDS = 0.6  # a chat's pace: a call, then a moment to read the answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hogs", type=int, default=16, help="long runs the hog keeps going at once")
    parser.add_argument("--sleep", type=float, default=5.0, help="seconds each of the hog's runs sleeps")
    parser.add_argument("--calls", type=int, default=50, help="the chat user's calls, each side")
    args = parser.parse_args()
    key = secrets.token_urlsafe(16)
    with sandbox_root() as root, service(root, key) as (url, _):
        slots = httpx.get(url.removesuffix("/v1") + "/health").json()["runs_at_once"]
        with httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=120) as client:
            alone = _chat(client, args.calls)
            hog, stop = Counter[int](), threading.Event()
            hogs = [threading.Thread(target=_hog, args=(url, key, args.sleep, hog, stop)) for _ in range(args.hogs)]
            for thread in hogs:
                thread.start()
            time.sleep(1)  # the hog has taken what it may
            loaded = _chat(client, args.calls)
            stop.set()
            for thread in hogs:
                thread.join()
    print(f"run slots: {slots}; the hog keeps {args.hogs} runs of {args.sleep:g} s going (a refusal sent again)")
    print(f"  the hog: {hog[200]} runs taken on, {hog[429]} refused")
    for label, (times, refused) in (("alone", alone), ("beside the hog", loaded)):
        latency = f"p50 {pct(times, 50):7.1f} ms, p90 {pct(times, 90):7.1f} ms" if len(times) > 1 else "no answers"
        print(f"  the chat user {label:15} {latency}, 429: {refused}/{args.calls} ({100 * refused / args.calls:.0f} %)")


def _chat(client: httpx.Client, calls: int) -> tuple[list[float], int]:
    """The chat user's calls at a chat's pace: the answered ones' times, and the refusals."""
    times, refused = [], 0
    body = {"lang": "py", "code": "print(1)", "user_id": "chat"}
    for _ in range(calls):
        started = time.perf_counter()
        reply = client.post("/exec", json=body)
        if reply.status_code == 429:
            refused += 1
        else:
            assert reply.status_code == 200 and reply.json()["stdout"] == "1\n", reply.text
            times.append((time.perf_counter() - started) * 1e3)
        time.sleep(PACE_SECONDS)
    return times, refused


_counted = threading.Lock()


def _hog(url: str, key: str, sleep: float, counts: Counter[int], stop: threading.Event) -> None:
    body = {"lang": "bash", "code": f"sleep {sleep}", "user_id": "hog"}
    with httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=120) as client:
        while not stop.is_set():
            status = client.post("/exec", json=body).status_code
            with _counted:
                counts[status] += 1
            if status == 429:
                stop.wait(0.1)


if __name__ == "__main__":
    main()
