"""What telemetry and the console cost: figures, not a test.

    .venv/bin/python bench/telemetry_bench.py [--calls N] [--sessions N]

- print(1) through the service with telemetry on (metrics, the console's hour, a JSON line
  per call) and off (a Telemetry with no sink: the request id and the call's record alone),
  two services of this process on loopback, the same calls interleaved (goal: on <= 1.03x
  off at p50 and at p99);
- a scrape of a runner holding N sessions (goal: under 100 ms: no walk of the disk), and the
  usage pass over them that quotas and the console read (in its own thread, every 5 s);
- the console's one call over a fleet of three runners holding N sessions between them
  (goal: under 500 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import uvicorn
from pydantic import SecretStr
from roots import sandbox_root

from bench import _free_port, pct
from codeexec.api.app import create_app
from codeexec.api.service import Service
from codeexec.runner.app import Runner, create_runner_app
from codeexec.runner.build import build_runner
from codeexec.sandbox.local import LocalSandboxes
from codeexec.sandbox.port import Owner
from codeexec.settings import Settings
from codeexec.telemetry import Telemetry, logs

KEY, RUNNER_KEY, ADMIN_KEY = "bench-key", "bench-runner-key", "bench-admin-key"


@contextlib.contextmanager
def served(app: object) -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def settings_at(root: Path, **more: object) -> Settings:
    """Runs from the bare warm server alone: print(1)'s fastest path, where a cost shows most."""
    made = {"sandbox_root": root, "code_exec_api_key": SecretStr(KEY), "warm_python": 0, "warm_scientific": 0,
            "warm_sandboxes": 2}  # fmt: skip
    return Settings(**{**made, **more})


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def on_and_off(calls: int) -> None:
    """print(1) through two services, one telling everything, one nothing."""
    with sandbox_root() as on_root, sandbox_root() as off_root, contextlib.ExitStack() as stack:
        on = stack.enter_context(Service(settings_at(on_root)))
        off = stack.enter_context(Service(settings_at(off_root), telemetry=Telemetry()))
        for service in (on, off):
            assert isinstance(service.sandboxes, LocalSandboxes)
            service.sandboxes.launcher.warm.wait_ready()
        clients = [
            stack.enter_context(httpx.Client(base_url=stack.enter_context(served(create_app(s))),
                                             headers={"X-API-Key": KEY}, timeout=30))  # fmt: skip
            for s in (on, off)
        ]
        body = {"lang": "py", "code": "print(1)", "user_id": "bench"}
        figures: list[list[float]] = [[], []]
        for i in range(calls + 20):
            for side in (i % 2, 1 - i % 2):  # interleaved, each first half the time
                took = timed(lambda c=clients[side]: c.post("/v1/exec", json=body).raise_for_status())
                if i >= 20:  # the first calls warm both sides
                    figures[side].append(took)
    (on_ms, off_ms) = figures
    print(f"print(1) through the service, {calls} calls each, interleaved, ms")
    print(f"  {'':14}{'p50':>8}{'p99':>8}")
    print(f"  {'telemetry on':14}{pct(on_ms, 50):8.2f}{pct(on_ms, 99):8.2f}")
    print(f"  {'telemetry off':14}{pct(off_ms, 50):8.2f}{pct(off_ms, 99):8.2f}")
    print(f"  on / off: p50 {pct(on_ms, 50) / pct(off_ms, 50):.3f}x, p99 {pct(on_ms, 99) / pct(off_ms, 99):.3f}x")


def leased(sandboxes: LocalSandboxes, count: int, users: int) -> None:
    for i in range(count):
        with sandboxes.create(Owner("bench", f"user-{i % users}").tag()):
            pass


def scrape(sessions: int) -> None:
    with sandbox_root() as root:
        runner = build_runner(settings_at(root, warm_sandboxes=0, runner_key=SecretStr(RUNNER_KEY)))
        with runner:
            started = time.perf_counter()
            leased(runner.sandboxes, sessions, users=sessions // 5)
            print(f"\n{sessions} sessions of {sessions // 5} users leased in {time.perf_counter() - started:.1f} s")
            passes = [timed(runner.sandboxes.usage.refresh) for _ in range(3)]
            print(f"  a usage pass over them: {statistics.median(passes):.0f} ms (median of 3; its own thread)")
            assert runner.telemetry.metrics is not None
            from codeexec.telemetry.exporter import Exporter

            with served(Exporter(runner.telemetry.metrics)) as url, httpx.Client(base_url=url) as client:
                took = [timed(lambda: client.get("/metrics").raise_for_status()) for _ in range(20)]
            print(f"  a scrape of the runner: p50 {pct(took, 50):.1f} ms, max {max(took):.1f} ms (goal: < 100)")


def console(sessions: int) -> None:
    with sandbox_root() as root, contextlib.ExitStack() as stack:
        runners: list[Runner] = []
        urls = []
        for index in range(3):
            made = build_runner(settings_at(root, warm_sandboxes=0, runner_key=SecretStr(RUNNER_KEY),
                                            runner_index=str(index)))  # fmt: skip
            runners.append(made)
            urls.append(stack.enter_context(served(create_runner_app(made))))
        for made in runners:
            leased(made.sandboxes, sessions // 3, users=sessions // 15)
            made.sandboxes.usage.refresh()
        fleet = settings_at(root, sandbox_backend="runner", runner_urls=tuple(urls),
                            runner_key=SecretStr(RUNNER_KEY), code_exec_admin_key=SecretStr(ADMIN_KEY))  # fmt: skip
        service = stack.enter_context(Service(fleet))
        client = stack.enter_context(httpx.Client(base_url=stack.enter_context(served(create_app(service))),
                                                  headers={"X-Admin-Key": ADMIN_KEY}, timeout=30))  # fmt: skip
        time.sleep(1.5)  # each runner's first /health
        took = [timed(lambda: client.get("/admin/api/overview").raise_for_status()) for _ in range(20)]
        print(f"\nthe console's call over 3 runners holding {sessions} sessions: p50 {pct(took, 50):.0f} ms, "
              f"max {max(took):.0f} ms (goal: < 500)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--sessions", type=int, default=10_000)
    args = parser.parse_args()
    logs.configure("json", "INFO")
    null = open(os.devnull, "w")  # noqa: SIM115 (the process's log, to its end)
    for handler in logging.getLogger().handlers:
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(null)  # the line is made and written, to nowhere
    print(f"load average at start: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    on_and_off(args.calls)
    scrape(args.sessions)
    console(args.sessions)


if __name__ == "__main__":
    main()
