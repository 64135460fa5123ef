"""Round trips to a remote backend, measured as a network would show them: figures, not a test.

    .venv/bin/python bench/round_trips_bench.py [--calls N] [--delay-ms D]

Starts a runner (`python -m codeexec.runner`) and two embedded services leasing from it
(SANDBOX_BACKEND=runner): one straight to it on loopback, one through a TCP proxy in this
script that holds every byte D ms each way (25 ms: one cloud hop). The same calls go to
both, interleaved so that noise falls on both alike; the difference of their medians,
over the 2 D a round trip costs, is how many round trips to the runner each call makes
(the port's target: at most 2, whatever the number of files; tests/backends/test_round_trips.py
counts them exactly).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator

import httpx
from roots import sandbox_root

from bench import _free_port, pct, process


@contextlib.contextmanager
def delaying_proxy(upstream_port: int, delay: float) -> Iterator[int]:
    """A TCP proxy on loopback that delivers every chunk `delay` seconds after it arrived,
    in order, in each direction: a link with that much latency each way."""
    port = _free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                if not chunk:
                    writer.close()
                    return
                writer.write(chunk)
                await writer.drain()

        delivering = asyncio.ensure_future(deliver())
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(1 << 16):
                queue.put_nowait((loop.time() + delay, chunk))
        queue.put_nowait((loop.time() + delay, b""))
        with contextlib.suppress(ConnectionError):
            await delivering

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def serve() -> None:
        server = await asyncio.start_server(connection, "127.0.0.1", port)
        ready.set()
        async with server:
            with contextlib.suppress(asyncio.CancelledError):  # the block ended
                await server.serve_forever()

    serving = loop.create_task(serve())
    thread = threading.Thread(target=loop.run_until_complete, args=(serving,), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield port
    finally:
        loop.call_soon_threadsafe(serving.cancel)
        thread.join(10)


@contextlib.contextmanager
def service_of(runner_url: str, runner_key: str, key: str) -> Iterator[str]:
    port = _free_port()
    env = {"PORT": str(port), "HOST": "127.0.0.1", "CODE_EXEC_API_KEY": key, "SANDBOX_BACKEND": "runner",
           "RUNNER_URL": runner_url, "RUNNER_KEY": runner_key}  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with process([sys.executable, "-m", "codeexec.server"], env, base):
        yield f"{base}/v1"


Call = Callable[[httpx.Client], None]


def calls(session: str, inputs: list[dict[str, str]]) -> dict[str, Call]:
    """Each route as LibreChat calls it, checked for what it answers."""

    def run(body: dict[str, object]) -> Call:
        def call(client: httpx.Client) -> None:
            reply = client.post("/exec", json=body)
            assert reply.status_code == 200 and reply.json()["stdout"] == "1\n", reply.text

        return call

    def get(path: str) -> Call:
        def call(client: httpx.Client) -> None:
            assert client.get(path).status_code == 200

        return call

    def upload(client: httpx.Client) -> None:
        files = [("file", (f"f{i}.txt", b"x")) for i in range(10)]
        assert client.post("/upload", data={"session_id": session}, files=files).status_code == 200

    return {
        "exec, existing session": run({"lang": "py", "code": "print(1)", "session_id": session}),
        "exec, new session": run({"lang": "py", "code": "print(1)"}),
        "exec, 10 inputs of another": run({"lang": "py", "code": "print(1)", "session_id": session, "files": inputs}),
        "upload, 10 files": upload,
        "list": get(f"/files/{session}"),
        "download": get(f"/download/{inputs[0]['session_id']}/{inputs[0]['id']}"),
    }


def measure(direct: httpx.Client, delayed: httpx.Client, call: Call, count: int) -> tuple[list[float], list[float]]:
    near: list[float] = []
    far: list[float] = []
    for i in range(count + 3):
        pair = ((near, direct), (far, delayed))
        for times, client in pair if i % 2 else reversed(pair):
            start = time.perf_counter()
            call(client)
            if i >= 3:  # the first three warm both sides; not counted
                times.append((time.perf_counter() - start) * 1e3)
    return near, far


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=30, help="calls per side and route")
    parser.add_argument("--delay-ms", type=float, default=25.0, help="latency added each way")
    args = parser.parse_args()
    key, runner_key = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    runner_port = _free_port()
    with sandbox_root() as root, contextlib.ExitStack() as stack:
        runner = f"http://127.0.0.1:{runner_port}"
        runner_env = {"RUNNER_KEY": runner_key, "RUNNER_PORT": str(runner_port), "SANDBOX_ROOT": str(root),
                      "WARM_PYTHON": "0", "WARM_SANDBOXES": "0", "WARM_SCIENTIFIC": "0"}  # fmt: skip
        stack.enter_context(process([sys.executable, "-m", "codeexec.runner"], runner_env, runner))
        proxy = stack.enter_context(delaying_proxy(runner_port, args.delay_ms / 1e3))
        clients = [
            stack.enter_context(httpx.Client(base_url=stack.enter_context(service_of(url, runner_key, key)),
                                             headers={"X-API-Key": key}, timeout=60))
            for url in (runner, f"http://127.0.0.1:{proxy}")
        ]  # fmt: skip
        direct, delayed = clients
        session = direct.post("/upload", files={"file": ("a.txt", b"a")}).json()["session_id"]
        other = direct.post("/upload", files=[("file", (f"o{i}.txt", b"o")) for i in range(10)]).json()
        inputs = [{"id": f["fileId"], "name": f["filename"], "session_id": other["session_id"]} for f in other["files"]]
        rtt = 2 * args.delay_ms
        print(f"round trips to the runner, {args.calls} calls a side, {args.delay_ms:g} ms added each way (p50 ms)")
        print(f"{'call':<30}{'0 ms':>9}{f'{args.delay_ms:g} ms':>9}{'trips':>8}")
        main_line = []
        for name, call in calls(session, inputs).items():
            near, far = measure(direct, delayed, call, args.calls)
            trips = (statistics.median(far) - statistics.median(near)) / rtt
            print(f"{name:<30}{pct(near, 50):9.1f}{pct(far, 50):9.1f}{trips:8.1f}")
            main_line.append(f"{name} {trips:.1f}")
        print(f"\nmain (round trips a call implies; target at most 2): {' | '.join(main_line)}")


if __name__ == "__main__":
    main()
