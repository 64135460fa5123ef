"""The runner in a container beside the runner on the host: figures, not a test.

    .venv/bin/python bench/container_bench.py [--calls N]

Three runners of one sandbox root, each behind its own embedded service
(SANDBOX_BACKEND=runner): on the host; in a container with what Swarm gives it
(tests/helpers/runner_container.py: CAP_SYS_ADMIN, the runner's seccomp profile as the
engine's default, the runtime's covers over /proc, a read-only cgroup), its preloaded server
on; and that container with the preloaded server off, which is what a container got before
the runner made its cgroup writable (no memory cgroup, no preloaded server). A pandas run's
latency through each, interleaved call by call so that noise falls on all alike, and a
memory bomb in the container: held to the run's memory limit, or not.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from pydantic import SecretStr
from roots import sandbox_root

from bench import _free_port, pct, process
from codeexec.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.helpers import engines  # noqa: E402 - the tests' engine and container, not copies
from tests.helpers.runner_container import SECCOMP, runner_container  # noqa: E402
from tests.serving import RUNNER_KEY  # noqa: E402

PANDAS = "import pandas as pd\nprint(pd.DataFrame({'a': range(1000)}).a.sum())"
BOMB = "x = bytearray(4 << 30)\nprint('allocated 4 GiB')"


@contextlib.contextmanager
def service(runner_url: str, key: str) -> Iterator[str]:
    port = _free_port()
    env = {"PORT": str(port), "HOST": "127.0.0.1", "CODE_EXEC_API_KEY": key, "SANDBOX_BACKEND": "runner",
           "RUNNER_URL": runner_url, "RUNNER_KEY": RUNNER_KEY, "WARM_PYTHON": "0", "WARM_SANDBOXES": "0",
           "WARM_SCIENTIFIC": "0"}  # fmt: skip
    with process([sys.executable, "-m", "codeexec.server"], env, f"http://127.0.0.1:{port}"):
        yield f"http://127.0.0.1:{port}/v1"


@contextlib.contextmanager
def host_runner(settings: Settings) -> Iterator[str]:
    port = _free_port()
    env = {"SANDBOX_ROOT": str(settings.sandbox_root), "RUNNER_KEY": RUNNER_KEY, "RUNNER_HOST": "127.0.0.1",
           "RUNNER_PORT": str(port), "WARM_PYTHON": "1", "WARM_SANDBOXES": "1",
           "WARM_SCIENTIFIC": "0"}  # fmt: skip
    with process([sys.executable, "-m", "codeexec.runner"], env, f"http://127.0.0.1:{port}"):
        yield f"http://127.0.0.1:{port}"


def exec_ms(client: httpx.Client, base: str, code: str) -> tuple[float, dict]:
    started = time.perf_counter()
    answer = client.post(f"{base}/exec", json={"lang": "py", "code": code}, timeout=120)
    assert answer.status_code == 200, answer.text
    return (time.perf_counter() - started) * 1000, answer.json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    key = secrets.token_urlsafe(16)
    with sandbox_root() as root, engines.engine("bench", seccomp=SECCOMP) as engine, contextlib.ExitStack() as stack:
        image = engines.empty_image(engine)
        warm = Settings(sandbox_root=root, runner_key=SecretStr(RUNNER_KEY), warm_python=1, warm_sandboxes=1)
        runners = {
            "host": stack.enter_context(host_runner(warm)),
            "container": stack.enter_context(runner_container(engine, image, warm)),
            "container, no preloaded server": stack.enter_context(
                runner_container(engine, image, warm.model_copy(update={"warm_python": 0}))
            ),
        }
        bases = {name: stack.enter_context(service(url, key)) for name, url in runners.items()}
        client = stack.enter_context(httpx.Client(headers={"X-API-Key": key}))
        for base in bases.values():  # the first runs fill the pools
            for _ in range(3):
                exec_ms(client, base, PANDAS)
        times: dict[str, list[float]] = {name: [] for name in bases}
        for _ in range(args.calls):
            for name, base in bases.items():
                times[name].append(exec_ms(client, base, PANDAS)[0])
        print(f"pandas run through the service, {args.calls} calls each (ms):")
        for name, values in times.items():
            ratio = statistics.median(values) / statistics.median(times["host"])
            print(f"  {name:32} p50 {statistics.median(values):7.1f}  p95 {pct(values, 95):7.1f}  {ratio:.2f}x host")
        _, bomb = exec_ms(client, bases["container"], BOMB)
        print(f"memory bomb (4 GiB) in the container: {(bomb['stderr'] or bomb['stdout']).strip()}")


if __name__ == "__main__":
    main()
