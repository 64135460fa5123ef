"""`make bench`: the service against the bare sandboxed launch, side by side, in ONE run.

The service runs as `python -m codeexec.server` on loopback with the local backend. "Bare"
is the same program launched in the same sandbox from this process through the local
backend's own step (`Sandbox.run` of sandbox/local/engine.py, the bwrap launch the service
makes), without HTTP and without the service, so the comparison stays honest as the
sandbox hardening evolves. Machines are shared and noisy: the ratios within one run are the
figures that count, and the two sides are interleaved call by call so that noise falls on
both alike.

Prints a table and, last, one line of the main ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
from pydantic import SecretStr
from roots import sandbox_root

from codeexec.sandbox import make_sandboxes
from codeexec.sandbox.port import Owner, Program
from codeexec.settings import Settings

REPO = Path(__file__).resolve().parent.parent
PRINT_ONE = {"py": "print(1)", "js": "console.log(1)", "bash": "echo 1"}
TIMEOUT = 30.0
THROUGHPUT_SLOTS = 32  # more than the 16 at once measured: no 429 in a throughput figure
# The Lambda handler's figures: on Lambda the backend is never `local`, and keeps no sandboxes.
NO_WARM = {"WARM_PYTHON": "0", "WARM_SANDBOXES": "0", "WARM_SCIENTIFIC": "0"}
OWNER = Owner("bench")
Call = Callable[[], None]


# --- the two sides ---------------------------------------------------------------------


@contextmanager
def service(
    root: Path, key: str, warm: int = 0, runs: int | None = None, scientific: int | None = None
) -> Iterator[tuple[str, int]]:
    """The embedded server as a subprocess; yields (base URL ending in /v1, its pid).
    Cold runs unless told (interpreters_bench.py measures warm ones: `warm` runs made ahead
    of each kind, `scientific` of the scientific kind when it differs); `runs` run slots, to
    measure throughput rather than admission (load_bench.py measures that)."""
    port = _free_port()
    env = {**os.environ, "PORT": str(port), "HOST": "127.0.0.1", "CODE_EXEC_API_KEY": key,
           "SANDBOX_BACKEND": "local", "SANDBOX_ROOT": str(root), "WARM_PYTHON": str(warm),
           "WARM_SANDBOXES": str(warm), "WARM_SCIENTIFIC": str(warm if scientific is None else scientific)}  # fmt: skip
    if runs is not None:
        env["MAX_CONCURRENT_RUNS"] = str(runs)
    base = f"http://127.0.0.1:{port}"
    with process([sys.executable, "-m", "codeexec.server"], env, base) as pid:
        yield f"{base}/v1", pid


@contextmanager
def process(argv: list[str], env: dict[str, str], base: str) -> Iterator[int]:
    """A server as a subprocess until the block ends, once it listens at `base`; yields
    its pid. What it logged is shown when the block fails."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=log)
        try:
            _wait_listening(base, proc)
            yield proc.pid
        except BaseException:
            log.seek(0)
            sys.stderr.write(log.read()[-4000:].decode(errors="replace"))
            raise
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(base: str, proc: subprocess.Popen[bytes]) -> None:
    # Any HTTP answer means it is serving; what /health says is not this script's concern.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited with {proc.returncode} before it was ready")
        try:
            httpx.get(f"{base}/health", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("the service did not answer within 20 s")


def bare_call(stack: ExitStack, root: Path, lang: str) -> Call:
    """One run of `lang`'s print(1) in a leased sandbox, straight through the port: the
    very program the service hands the backend."""
    settings = Settings(
        sandbox_root=root / "bare", code_exec_api_key=SecretStr("unused"), warm_python=0, warm_sandboxes=0,
        warm_scientific=0,
    )
    sandboxes = make_sandboxes(settings)
    stack.callback(sandboxes.close)
    sandbox = stack.enter_context(sandboxes.create(OWNER.tag()))
    program = Program(lang, PRINT_ONE[lang], (), TIMEOUT)

    def call() -> None:
        result = sandbox.run(program)
        assert result.stdout == "1\n", result

    return call


def service_call(client: httpx.Client, lang: str) -> Call:
    """One `POST /v1/exec` as G1 LibreChat sends it: no session, so each run leases one."""
    body = {"lang": lang, "code": PRINT_ONE[lang]}

    def call() -> None:
        reply = client.post("/exec", json=body)
        assert reply.status_code == 200 and reply.json()["stdout"] == "1\n", reply.text

    return call


# --- measurements ----------------------------------------------------------------------


def _ms(call: Call) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


def latency(service_fn: Call, bare_fn: Call, calls: int) -> tuple[list[float], list[float]]:
    """Sequential calls, interleaved (and the order alternated) so drift hits both sides."""
    for _ in range(5):  # warm caches on both sides; not counted
        service_fn()
        bare_fn()
    svc: list[float] = []
    bare: list[float] = []
    for i in range(calls):
        pair = ((svc, service_fn), (bare, bare_fn))
        for times, fn in pair if i % 2 else reversed(pair):
            times.append(_ms(fn))
    return svc, bare


def throughput(
    service_calls: list[Call], bare_calls: list[Call], total: int, max_seconds: float
) -> tuple[float, float]:
    """Calls per second of each side with one worker per entry of its calls, `total`
    calls (or `max_seconds`) a side, in rounds that alternate the sides against drift."""
    rounds = 4
    done = {"service": 0, "bare": 0}
    spent = dict.fromkeys(done, 0.0)
    for i in range(rounds):
        sides = [("service", service_calls), ("bare", bare_calls)]
        for side, calls in sides if i % 2 else reversed(sides):
            start = time.perf_counter()
            done[side] += _burst(calls, total // rounds, max_seconds / rounds)
            spent[side] += time.perf_counter() - start
    return done["service"] / spent["service"], done["bare"] / spent["bare"]


def _burst(calls: list[Call], count: int, max_seconds: float) -> int:
    deadline = time.monotonic() + max_seconds
    per_worker = max(1, count // len(calls))

    def worker(call: Call) -> int:
        done = 0
        while done < per_worker and time.monotonic() < deadline:
            call()
            done += 1
        return done

    with ThreadPoolExecutor(len(calls)) as pool:
        return sum(pool.map(worker, calls))


def file_roundtrip(client: httpx.Client, size: int, reps: int) -> tuple[list[float], list[float]]:
    """Upload then download `size` bytes, `reps` times; milliseconds of each."""
    data = os.urandom(size)
    up: list[float] = []
    down: list[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        reply = client.post("/upload", files={"file": ("blob.bin", data)})
        up.append((time.perf_counter() - start) * 1e3)
        assert reply.status_code == 200, reply.text
        session = reply.json()["session_id"]
        start = time.perf_counter()
        got = client.get(f"/download/{session}/blob.bin")
        down.append((time.perf_counter() - start) * 1e3)
        assert got.content == data
    return up, down


# Run in a fresh interpreter: the init phase (import), then the first two requests of that
# environment, through the Lambda handler with the sample upload event. With SnapStart the
# init phase is what the snapshot holds; the first request is what a restored environment
# pays before it is warm (less the one Secrets Manager read it adds on AWS).
_FIRST_REQUEST = """
import json, sys, time, types
t0 = time.perf_counter(); import handlers.api as api; t1 = time.perf_counter()
event = json.load(open("events/upload.json"))
context = types.SimpleNamespace(function_name="bench", memory_limit_in_mb=512, aws_request_id="bench",
                                invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:bench")
times = []
for _ in range(2):
    start = time.perf_counter()
    reply = api.handler(event, context)
    assert reply["statusCode"] == 200, reply
    times.append(time.perf_counter() - start)
print(json.dumps([t1 - t0, *times]))
"""


def first_requests(python: str, runs: int, root: Path) -> list[list[float]]:
    """[import, first request, second request] in ms, for `runs` fresh interpreters."""
    env = {**os.environ, "SANDBOX_BACKEND": "local", "SANDBOX_ROOT": str(root / "first"), **NO_WARM,
           "CODE_EXEC_API_KEY": "sam-local-key", "PYTHONPATH": str(REPO), "POWERTOOLS_METRICS_NAMESPACE": "bench",
           "POWERTOOLS_LOG_LEVEL": "WARNING"}  # fmt: skip
    env.pop("AWS_LAMBDA_FUNCTION_NAME", None)
    found = []
    for _ in range(runs):
        done = subprocess.run([python, "-c", _FIRST_REQUEST], env=env, cwd=REPO, capture_output=True, check=True)
        found.append([t * 1e3 for t in json.loads(done.stdout.splitlines()[-1])])
    return found


def first_request_lines(root: Path, runs: int, pythons: list[str]) -> dict[str, str]:
    main = {}
    print("\ninit and first requests of a fresh environment (sample upload through the Lambda handler), median ms")
    print(f"{'python':<10}{'import':>10}{'1st req':>10}{'2nd req':>10}")
    for python in pythons:
        version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        found = first_requests(python, runs, root)
        medians = [statistics.median(column) for column in zip(*found, strict=True)]
        print(f"{version:<10}" + "".join(f"{ms:10.1f}" for ms in medians))
        main[f"py{version.rsplit('.', 1)[0]} import/1st req"] = f"{medians[0]:.0f}/{medians[1]:.0f} ms"
    return main


def cold_import(runs: int, root: Path) -> tuple[list[float], dict[str, float]]:
    """What a Lambda cold start pays before its first request: importing the handler.
    Returns the times of `runs` fresh interpreters, and the median self time of each
    top-level package over three more runs under -X importtime (which slows it a little)."""
    code = "import time; t = time.perf_counter(); import handlers.api; print(time.perf_counter() - t)"
    env = {**os.environ, "SANDBOX_BACKEND": "local", "SANDBOX_ROOT": str(root / "cold"), **NO_WARM,
           "CODE_EXEC_API_KEY": "cold", "PYTHONPATH": str(REPO)}  # fmt: skip
    env.pop("AWS_LAMBDA_FUNCTION_NAME", None)
    times = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, check=True)
        times.append(float(done.stdout) * 1e3)
    shares: dict[str, list[float]] = {}
    for _ in range(3):
        argv = [sys.executable, "-X", "importtime", "-c", code]
        traced = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, check=True, text=True)
        for package, ms in _import_shares(traced.stderr).items():
            shares.setdefault(package, []).append(ms)
    return times, {package: statistics.median(ms) for package, ms in shares.items()}


def _import_shares(importtime: str) -> dict[str, float]:
    """-X importtime's self times (us), summed per top-level package, in ms."""
    shares: dict[str, float] = {}
    for line in importtime.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) == 3 and fields[0].strip().isdigit():
            package = fields[2].strip().split(".")[0]
            shares[package] = shares.get(package, 0.0) + int(fields[0]) / 1e3
    return shares


def proc_status(pid: int, field: str) -> float:
    """A /proc/<pid>/status memory field (VmHWM, VmRSS) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


# --- the report ------------------------------------------------------------------------


def pct(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def machine() -> str:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    )  # fmt: skip
    return f"{os.cpu_count()} cores, {cpu}, Linux {platform.release()}, Python {platform.python_version()}"


def run(args: argparse.Namespace) -> None:
    key = secrets.token_urlsafe(24)
    print(f"machine: {machine()}")
    with sandbox_root() as root, ExitStack() as stack:
        url, pid = stack.enter_context(service(root, key, runs=THROUGHPUT_SLOTS))
        idle_mb = proc_status(pid, "VmRSS")

        def client() -> httpx.Client:
            return stack.enter_context(httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=TIMEOUT))

        main = latency_table(stack, root, client(), args.calls)
        main |= throughput_table(stack, root, client, args.tput_calls, args.tput_seconds)
        main |= files_table(client(), args.file_reps)
        peak_mb = proc_status(pid, "VmHWM")
        main |= import_line(root, args.import_runs)
        main |= first_request_lines(root, args.import_runs, [sys.executable, *args.python])
    print(f"service memory: peak (VmHWM) {peak_mb:.1f} MB after the load above; {idle_mb:.1f} MB RSS when idle")
    main["peak memory"] = f"{peak_mb:.0f} MB"
    print("\nmain (service/bare; targets py p50 <= 1.3x, c4 >= 0.8x, import < 300 ms): " + " | ".join(
        f"{name} {value}" for name, value in main.items()
    ))  # fmt: skip


def latency_table(stack: ExitStack, root: Path, client: httpx.Client, calls: int) -> dict[str, str]:
    print(f"\nexec latency, ms: print(1), {calls} sequential calls a side, interleaved")
    print(f"{'lang':<6}{'side':<10}{'p50':>8}{'p90':>8}{'p99':>8}")
    main = {}
    for lang in PRINT_ONE:
        svc, bare = latency(service_call(client, lang), bare_call(stack, root, lang), calls)
        for side, times in (("service", svc), ("bare", bare)):
            print(f"{lang:<6}{side:<10}" + "".join(f"{pct(times, p):8.2f}" for p in (50, 90, 99)))
        ratios = [pct(svc, p) / pct(bare, p) for p in (50, 90, 99)]
        print(f"{lang:<6}{'ratio':<10}" + "".join(f"{r:7.2f}x" for r in ratios))
        main[f"{lang} p50"] = f"{ratios[0]:.2f}x"
    return main


def throughput_table(
    stack: ExitStack, root: Path, client: Callable[[], httpx.Client], calls: int, max_seconds: float
) -> dict[str, str]:
    print(f"\nthroughput, exec/s: py print(1), {calls} calls a side (at most {max_seconds:g} s), interleaved")
    print(f"{'conc':<6}{'service':>10}{'bare':>10}{'ratio':>9}")
    main = {}
    for conc in (1, 4, 16):
        service_calls = [service_call(client(), "py") for _ in range(conc)]
        bare_calls = [bare_call(stack, root, "py") for _ in range(conc)]
        svc, bare = throughput(service_calls, bare_calls, calls, max_seconds)
        print(f"{conc:<6}{svc:10.1f}{bare:10.1f}{svc / bare:8.2f}x")
        main[f"c{conc} exec/s"] = f"{svc / bare:.2f}x"
    return main


def files_table(client: httpx.Client, reps: int) -> dict[str, str]:
    up, down = file_roundtrip(client, 1 << 20, reps)
    print(f"\nfiles: 1 MB, {reps} round trips, ms")
    print(f"{'op':<10}{'p50':>8}{'p90':>8}{'MB/s':>8}")
    for op, times in (("upload", up), ("download", down)):
        print(f"{op:<10}{pct(times, 50):8.2f}{pct(times, 90):8.2f}{1e3 / pct(times, 50):8.0f}")
    return {"1 MB up/down": f"{pct(up, 50):.1f}/{pct(down, 50):.1f} ms"}


def import_line(root: Path, runs: int) -> dict[str, str]:
    times, shares = cold_import(runs, root)
    median = statistics.median(times)
    print(
        f"\ncold import of handlers.api: median {median:.0f} ms of {runs} (min {min(times):.0f}, max {max(times):.0f})"
    )
    largest = sorted(shares.items(), key=lambda item: -item[1])[:8]
    print("  largest shares (self time, ms): " + ", ".join(f"{name} {ms:.0f}" for name, ms in largest))
    return {"cold import": f"{median:.0f} ms"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="sequential exec calls per side and language")
    parser.add_argument("--tput-calls", type=int, default=160, help="calls per side per concurrency level")
    parser.add_argument("--tput-seconds", type=float, default=15.0, help="time bound per side per level")
    parser.add_argument("--file-reps", type=int, default=20, help="1 MB upload+download round trips")
    parser.add_argument("--import-runs", type=int, default=7, help="fresh interpreters timing the import")
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        help="another interpreter (with the library installed) to time init and first requests on",
    )
    parser.add_argument("--quick", action="store_true", help="a short run while developing")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.tput_calls, args.file_reps, args.import_runs = 30, 48, 5, 3
    run(args)


if __name__ == "__main__":
    main()
