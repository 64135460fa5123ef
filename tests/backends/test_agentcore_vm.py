"""The steps the `agentcore` backend runs inside a session's microVM (vm.py), run here in
a directory as the VM's python3 would run them: what they list, find, refuse and change,
among the things a program can plant (symlinks, FIFOs, hidden files, a stale hold)."""

from __future__ import annotations

import ast
import base64
import glob
import hashlib
import json
import os
import subprocess
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from codeexec import ids
from codeexec.sandbox.agentcore import sandboxes

VM = resources.files("codeexec.sandbox.agentcore").joinpath("vm.py").read_text()
# Amazon Linux 2023's python3 is 3.9: run the steps with one where this host has it.
PYTHON = next(iter(sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")))), "/usr/bin/python3")
SESSION = "BkpbGufCMp0ra-M63zvvg"


def step(workdir: Path, name: str, **args: Any) -> dict[str, Any]:
    done = subprocess.run(
        [PYTHON, "-c", VM, name], input=json.dumps({"session": SESSION, **args}).encode(),
        cwd=workdir, capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    answer: dict[str, Any] = json.loads(base64.b64decode(done.stdout.decode().rpartition(sandboxes._VM_MARK)[2]))
    return answer


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A session's working directory, with what a program and the environment leave."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "data.csv").write_text("a,b\n")
    (tmp_path / "sub" / "x.txt").write_text("x")
    (tmp_path / ".profile").write_text("# the environment's")
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "interpreter.log").write_text("started")
    (tmp_path / "link").symlink_to("/etc/passwd")
    (tmp_path / "sub" / "dirlink").symlink_to("/etc")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / os.fsdecode(b"not-utf8-\xff.txt")).write_text("a name no reply can carry")
    return tmp_path


def test_the_steps_are_python_3_9() -> None:
    ast.parse(VM, feature_version=(3, 9))


def test_a_listing_shows_a_clients_files_only_and_touches_the_session(workdir: Path) -> None:
    files = step(workdir, "list")["files"]
    assert [f[0] for f in files] == ["data.csv", "sub/x.txt"]
    assert files[0][1] == 4 and files[0][2] == (workdir / "data.csv").stat().st_mtime_ns
    assert (workdir / ".codeexec" / "touched").exists()


def test_an_id_resolves_to_a_regular_file_inside_and_nothing_else(workdir: Path) -> None:
    assert step(workdir, "stat", file_id="sub/x.txt")["file"][0] == "sub/x.txt"
    assert step(workdir, "stat", file_id=ids.file_id(SESSION, "sub/x.txt"))["file"][0] == "sub/x.txt"
    for planted in ("link", "fifo", "sub/dirlink/passwd", "../x", ".profile", "log/interpreter.log", "gone"):
        assert step(workdir, "stat", file_id=planted) == {"missing": True}, planted


def test_a_commit_moves_every_staged_file_in_or_none(workdir: Path) -> None:
    staging = workdir / ".codeexec"
    staging.mkdir()
    for name in ("s1", "s2"):
        (staging / name).write_text(name)
    refused = step(workdir, "commit", staged=[[".codeexec/s1", "new/a.txt"], [".codeexec/s2", "data.csv/b.txt"]])
    assert "refused" in refused
    assert not (workdir / "new" / "a.txt").exists() and (workdir / "data.csv").read_text() == "a,b\n"
    assert step(workdir, "commit", staged=[[".codeexec/s1", "new/a.txt"], [".codeexec/s2", "data.csv"]]) == {"ok": True}
    assert ((workdir / "new" / "a.txt").read_text(), (workdir / "data.csv").read_text()) == ("s1", "s2")
    assert not (workdir / ".codeexec" / "hold").exists()  # let go


def test_a_held_session_is_busy_and_a_stale_hold_is_taken_over(workdir: Path) -> None:
    (workdir / ".codeexec").mkdir()
    (workdir / ".codeexec" / "hold").mkdir()
    started = time.monotonic()
    assert step(workdir, "remove", file_id="data.csv", hold_seconds=60, hold_wait=0.5) == {"refused": "busy"}
    assert time.monotonic() - started >= 0.5 and (workdir / "data.csv").exists()
    past = time.time() - 120
    os.utime(workdir / ".codeexec" / "hold", (past, past))  # its holder was stopped two minutes ago
    assert step(workdir, "remove", file_id="data.csv", hold_seconds=60, hold_wait=5) == {"path": "data.csv"}
    assert not (workdir / "data.csv").exists() and not (workdir / ".codeexec" / "hold").exists()


def test_around_a_run_inputs_are_placed_and_only_what_changed_comes_back(workdir: Path) -> None:
    own = [{"index": 0, "paths": ["sub/x.txt"], "target": "copy/x.txt", "read_only": False},
           {"index": 1, "paths": ["link"], "target": "stolen.txt", "read_only": False}]  # fmt: skip
    carried = [{"index": 2, "target": "in.bin", "data": base64.b64encode(b"\x00\x01").decode(), "read_only": True}]
    pre = step(workdir, "pre", token="t1", own=own, carried=carried, lang="python", timeout=30, pid_file="p")
    assert "arm" in pre
    (workdir / "data.csv").write_text("changed")
    (workdir / "sub" / "x.txt").unlink()
    (workdir / "made.png").write_bytes(b"png")
    post = step(workdir, "post", token="t1")
    assert post["placed"] == {"0": {"path": "copy/x.txt", "read_only": False}, "1": {"path": None},
                              "2": {"path": "in.bin", "read_only": True}}  # fmt: skip
    changes = post["changes"]
    assert ([f[0] for f in changes["created"]], [f[0] for f in changes["modified"]], changes["deleted"]) == (
        ["made.png"], ["data.csv"], ["sub/x.txt"]
    )
    assert (workdir / "in.bin").read_bytes() == b"\x00\x01" and not (workdir / "stolen.txt").exists()


def test_a_workflows_record_replaces_only_the_one_it_names(workdir: Path) -> None:
    first = base64.b64encode(b"round 1").decode()
    keep = {"key": "W" * 21, "record": first, "replaces": None}
    assert "arm" in step(workdir, "pre", token="t1", keep=keep, lang="python", timeout=30, pid_file="p")
    step(workdir, "post", token="t1")
    digest = hashlib.sha256(b"round 1").hexdigest()
    replayed = step(workdir, "pre", token="t2", keep=keep, lang="python", timeout=30, pid_file="p")
    assert replayed["refused"].startswith("conflict: ") and "spent" in replayed["refused"]
    assert step(workdir, "post", token="t2") == {"refused": replayed["refused"]}
    second = {**keep, "record": base64.b64encode(b"round 2").decode(), "replaces": digest}
    assert "arm" in step(workdir, "pre", token="t3", keep=second, lang="python", timeout=30, pid_file="p")
    assert (workdir / ".codeexec" / "state" / f"{'W' * 21}.json").read_bytes() == b"round 2"
    step(workdir, "post", token="t3")
    assert not (workdir / ".codeexec" / "hold").exists()


def test_a_bash_run_is_stopped_at_its_limit_and_answers_its_streams_apart(workdir: Path) -> None:
    run = {"token": "b1", "code": 'echo out; echo err >&2; echo "$1" > arg.txt', "args": ["a b"], "timeout": 10,
           "max_output": 1000}  # fmt: skip
    done = step(workdir, "run", **run)
    result = done["result"]
    assert (base64.b64decode(result["stdout"]), base64.b64decode(result["stderr"]), result["exit_code"]) == (
        b"out\n", b"err\n", 0
    )
    assert [f[0] for f in done["changes"]["created"]] == ["arg.txt"]
    started = time.monotonic()
    stopped = step(workdir, "run", **{**run, "token": "b2", "code": "sleep 30 & sleep 30", "timeout": 1})
    assert stopped["result"]["exit_code"] is None and time.monotonic() - started < 10
