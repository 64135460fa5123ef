"""The driver of one round of a programmatic run, as it runs INSIDE the sandbox.

The service sends this file's text as the round's program, with `main(<config>)` after
it (workflow.py): the program's code and language, its tools, the answers recorded so
far, and a nonce. A call with a recorded answer returns it (or raises ToolError); the
first unanswered ones are printed on a last line that starts with the nonce, and the
round ends. Python code runs in this interpreter with top-level await; bash runs as a
child whose tool functions reach this process over a local socket.
"""

import ast
import asyncio
import json
import linecache
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

SOURCE = "/code/program.py"
# A round ends once the program has waited on unanswered calls alone this long: calls
# made together (gather, background jobs) are asked for together.
SETTLE_SECONDS = 0.05


class ToolError(Exception):
    """A tool the program called failed; the message is the client's."""


class Calls:
    def __init__(self, history: dict[str, dict[str, Any]], nonce: str) -> None:
        self.history = history
        self.nonce = nonce
        self.used: set[str] = set()
        self.pending: list[dict[str, Any]] = []
        self.made = 0
        self.changed = time.monotonic()
        self.lock = threading.Lock()
        self.waiting: list[socket.socket] = []  # bash's calls left unanswered, kept open

    def lookup(self, name: str, given: dict[str, Any]) -> dict[str, Any] | None:
        """The recorded answer to this call, else None (and the call is now pending)."""
        with self.lock:
            self.made += 1
            numbered = f"call_{self.made:03d}"
            order = [numbered, *self.history] if numbered in self.history else list(self.history)
            for call_id in order:
                entry = self.history[call_id]
                if call_id not in self.used and entry["name"] == name and entry["input"] == given:
                    self.used.add(call_id)
                    return entry
            call_id = f"call_{len(self.history) + len(self.pending) + 1:03d}"
            self.pending.append({"id": call_id, "name": name, "input": given})
            self.changed = time.monotonic()
            return None

    def settled(self) -> bool:
        return bool(self.pending) and time.monotonic() - self.changed >= SETTLE_SECONDS

    def end_round(self) -> None:
        sys.stdout.flush()
        os.write(1, f"\n{self.nonce}{json.dumps(self.pending)}\n".encode())
        os._exit(0)


def main(config_json: str) -> None:
    config = json.loads(config_json)
    calls = Calls(config["history"], config["nonce"])
    if config["lang"] == "bash":
        run_bash(config, calls)
    else:
        asyncio.run(run_python(config, calls))


# -- Python ------------------------------------------------------------------------------


async def run_python(config: dict[str, Any], calls: Calls) -> None:
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": SOURCE, "ToolError": ToolError}
    for tool in config["tools"]:
        namespace[tool["ident"]] = _python_tool(tool, calls)
    source = config["code"]
    linecache.cache[SOURCE] = (len(source), None, source.splitlines(True), SOURCE)  # for tracebacks
    try:
        code = compile(source, SOURCE, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        ran = eval(code, namespace)  # noqa: S307 - the caller's own program, in its sandbox
        if asyncio.iscoroutine(ran):
            await _rounds(ran, calls)
    except Exception as error:  # shown as Python shows a program's error: its own frames only
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != SOURCE:
            tb = tb.tb_next
        sys.stderr.write("".join(traceback.format_exception(type(error), error, tb)))
        sys.exit(1)


async def _rounds(ran: Any, calls: Calls) -> None:
    """Run the program until it ends, or until it waits on unanswered calls alone."""
    task = asyncio.ensure_future(_exits_within(ran))
    while not task.done():
        await asyncio.wait({task}, timeout=SETTLE_SECONDS)
        if not task.done() and calls.settled():
            calls.end_round()
    stop = task.result()
    if stop is not None:
        raise stop


async def _exits_within(ran: Any) -> SystemExit | None:
    """The program's own exit(), kept: raised inside a task, asyncio would report the task
    as lost and print its own frames on the program's stderr."""
    try:
        await ran
    except SystemExit as stop:
        return stop
    return None


def _python_tool(tool: dict[str, Any], calls: Calls) -> Any:
    async def call(*args: Any, **kwargs: Any) -> Any:
        given = dict(zip(tool["params"], args, strict=False)) | kwargs
        given = {key: value for key, value in given.items() if value is not None}
        entry = calls.lookup(tool["name"], given)
        if entry is None:
            await asyncio.get_running_loop().create_future()  # answered next round
            raise AssertionError("unreachable")
        if entry["is_error"]:
            raise ToolError(entry.get("error_message") or "the tool call failed")
        return entry["result"]

    call.__name__ = call.__qualname__ = tool["ident"]
    return call


# -- bash --------------------------------------------------------------------------------

_CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect("\0" + sys.argv[1])
s.sendall((json.dumps({"name": sys.argv[2], "input": sys.argv[3] if len(sys.argv) > 3 else ""}) + "\n").encode())
reply = json.loads(s.makefile().readline())
if "error" in reply:
    print(reply["error"], file=sys.stderr); sys.exit(1)
print(json.dumps(reply["result"], separators=(",", ":")))
"""


def run_bash(config: dict[str, Any], calls: Calls) -> None:
    # An abstract socket with a fresh name, and the client inline: a round leaves no file
    # behind, and rounds that share a /tmp (one AgentCore session, the tests' fake) never meet.
    address = f"codeexec-ptc-{secrets.token_hex(8)}"
    client = f"/usr/bin/python3 -s -c {shlex.quote(_CLIENT)} {address}"
    functions = "".join(
        f"{t['ident']}() {{ {client} {shlex.quote(t['name'])} \"${{1-}}\"; }}\n" for t in config["tools"]
    )
    server = socket.socket(socket.AF_UNIX)
    server.bind("\0" + address)
    server.listen(64)
    threading.Thread(target=_serve, args=(server, calls), daemon=True).start()
    child = subprocess.Popen(["/bin/bash", "-c", functions + config["code"], "main.sh"], start_new_session=True)
    while child.poll() is None:
        time.sleep(SETTLE_SECONDS / 2)
        if calls.settled():
            os.killpg(child.pid, signal.SIGKILL)
            calls.end_round()
    sys.exit(child.returncode)


def _serve(server: socket.socket, calls: Calls) -> None:
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_answer, args=(conn, calls), daemon=True).start()


def _answer(conn: socket.socket, calls: Calls) -> None:
    request = json.loads(conn.makefile().readline())
    try:
        given = json.loads(request["input"] or "{}")
    except json.JSONDecodeError:
        given = None
    if not isinstance(given, dict):
        conn.sendall(b'{"error": "a tool takes one JSON object as its argument"}\n')
        return
    entry = calls.lookup(request["name"], given)
    if entry is None:
        calls.waiting.append(conn)  # kept open: the round ends before an answer
        return
    if entry["is_error"]:
        reply = {"error": entry.get("error_message") or "the tool call failed"}
    else:
        reply = {"result": entry["result"]}
    conn.sendall((json.dumps(reply) + "\n").encode())
