"""Prometheus and promtool from Debian's package (`make prometheus-tools` puts them in
.tools/bin): a real Prometheus on loopback, with a configuration and a data directory of
its own, and PromQL asked of it over its HTTP API."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ..serving import free_port

TOOLS = Path(__file__).resolve().parent.parent.parent / ".tools" / "bin"
ALERTS = Path(__file__).resolve().parent.parent.parent / "deploy" / "helm" / "codeexec" / "files" / "alerts.yaml"


def tool(name: str) -> str:
    path = TOOLS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: `make prometheus-tools` installs it")
    return str(path)


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar) `promql` is now; an error of PromQL fails the test."""
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10).json()
        assert answer["status"] == "success", (promql, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The single value `promql` has now, or None when it has none."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait(self, promql: str, seconds: float = 15) -> list[dict[str, Any]]:
        """`promql`'s answer, once it has one."""
        deadline = time.monotonic() + seconds
        while not (result := self.query(promql)):
            assert time.monotonic() < deadline, f"no answer to {promql} in {seconds} s"
            time.sleep(0.1)
        return result

    def rules(self) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/v1/rules", timeout=10).json()
        return [rule for group in answer["data"]["groups"] for rule in group["rules"]]


@contextlib.contextmanager
def running_prometheus(directory: Path, jobs: dict[str, list[str]], interval: str = "1s") -> Iterator[Prometheus]:
    """Prometheus scraping each job's targets (host:port) every `interval`, evaluating the
    chart's alerts as often, until the block ends."""
    config = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": targets}]} for job, targets in jobs.items()
        ],
    }
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with (directory / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [tool("prometheus"), f"--config.file={directory / 'prometheus.yml'}",
             f"--storage.tsdb.path={directory / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (directory / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "Prometheus was not ready in 30 s"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            time.sleep(0.1)
        yield Prometheus(url)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
