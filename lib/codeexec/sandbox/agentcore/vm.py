"""What the `agentcore` backend runs INSIDE a session's microVM: one step of a coarse
operation, so that a whole operation is one InvokeCodeInterpreter call (or two, around a
native run). The service sends this file's text with every call (`python3 -c`), and the
step's arguments as JSON on stdin; the step prints its answer last, as MARK and base64'd
JSON, which survives the terminal executeCommand runs on (CRLF, other output before it).

Standard library only, and Python 3.9 (Amazon Linux 2023's python3). It runs in the
session's working directory, which is /mnt/data for programs. It trusts nothing it finds
there: a program may have planted symlinks, FIFOs or a fake hold; it follows no symlink,
reads only regular files, and keeps its own files under .codeexec/, which no listing shows.

Steps: list, stat, send (a large file to a presigned URL), remove, commit (an upload's
staged files into place, all or none), pre and post (around a native run: the hold,
inputs, the record of a programmatic workflow, the listing before; then the listing after,
and the hold let go), and run (pre, a bash program under its time limit, post).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

MARK = "CODEEXEC-VM:"
OWN = ".codeexec"
HOLD = OWN + "/hold"
TOUCHED = OWN + "/touched"
STATE = OWN + "/state"
# Top-level entries that are the environment's or ours, never a client's file.
HIDDEN_TOP = ("log",)
MAX_PATH_CHARS = 1024  # codeexec.ids.MAX_PATH_CHARS


def main() -> None:
    step = sys.argv[1]
    args = json.loads(sys.stdin.read() or "{}")
    os.makedirs(OWN, exist_ok=True)
    if args.get("fresh"):
        setup()
    with open(TOUCHED, "a"):
        os.utime(TOUCHED)
    try:
        answer(STEPS[step](args))
    except Busy:
        answer({"refused": "busy"})


def answer(value: dict[str, Any]) -> None:
    sys.stdout.flush()
    sys.stdout.write("\n" + MARK + base64.b64encode(json.dumps(value).encode()).decode() + "\n")


def setup() -> None:
    """A new session: /mnt/data linked to the working directory, by this user or by sudo."""
    here = os.getcwd()
    if not os.path.exists("/mnt/data"):
        try:
            os.symlink(here, "/mnt/data")
        except OSError:
            subprocess.call(["sudo", "-n", "ln", "-s", here, "/mnt/data"], stderr=subprocess.DEVNULL)


# -- files -------------------------------------------------------------------------------


def listing() -> dict[str, list[int]]:
    """Every regular file a client can address, as {path: [size, mtime_ns]}."""
    found = {}
    for top, dirs, files in os.walk(".", followlinks=False):
        rel = top[2:]
        if not rel:
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in HIDDEN_TOP]
        for name in files:
            path = rel + "/" + name if rel else name
            if (not rel and name.startswith(".")) or not addressable(path):
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found[path] = [st.st_size, st.st_mtime_ns]
    return found


def addressable(path: str) -> bool:
    """A name a reply can carry: UTF-8 (JSON takes nothing else), and not too long."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return len(path) <= MAX_PATH_CHARS


def regular(path: str) -> list[int] | None:
    """The file's [size, mtime_ns] if it is a regular file reached through no symlink."""
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts or parts[0].startswith(".") or parts[0] in HIDDEN_TOP:
        return None
    for depth in range(1, len(parts)):
        try:
            if not stat.S_ISDIR(os.lstat("/".join(parts[:depth])).st_mode):
                return None
        except OSError:
            return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns] if stat.S_ISREG(st.st_mode) else None


def file_id(session: str, path: str) -> str:
    digest = hashlib.sha256("\0".join(["file", session, path]).encode("utf-8", "surrogateescape")).digest()
    return base64.urlsafe_b64encode(digest).decode()[:21]


def resolve(args: dict[str, Any]) -> list[Any] | None:
    """The file a bare id names, as [path, size, mtime_ns]: a raw path, else a derived id
    among the listing."""
    wanted = args["file_id"]
    found = regular(wanted)
    if found:
        return [wanted, *found]
    for path, info in listing().items():
        if file_id(args["session"], path) == wanted:
            return [path, *info]
    return None


def step_list(args: dict[str, Any]) -> dict[str, Any]:
    return {"files": [[p, s, m] for p, (s, m) in sorted(listing().items())]}


def step_stat(args: dict[str, Any]) -> dict[str, Any]:
    found = resolve(args)
    return {"file": found} if found else {"missing": True}


def step_send(args: dict[str, Any]) -> dict[str, Any]:
    found = resolve(args)
    if not found:
        return {"missing": True}
    if found[1] < args["from_bytes"]:
        return {"file": found, "sent": False}
    sent = subprocess.call(
        ["curl", "-sSf", "--max-time", str(args["seconds"]), "-o", "/dev/null", "-T", "./" + found[0], args["url"]],
        stderr=subprocess.DEVNULL,
    )
    return {"file": found, "sent": sent == 0}


def step_remove(args: dict[str, Any]) -> dict[str, Any]:
    with held(args):
        found = resolve(args)
        if found:
            os.unlink(found[0])
    return {"path": found[0]} if found else {"missing": True}


def step_commit(args: dict[str, Any]) -> dict[str, Any]:
    """An upload's files, staged under .codeexec/, into place: every target checked and its
    directories made first, then all renamed in."""
    with held(args):
        for _, path in args["staged"]:
            if not placeable(path):
                return {"refused": "a file of the upload cannot go where its name says: a directory or a link is there"}
        for staged, path in args["staged"]:
            os.rename(staged, path)
    return {"ok": True}


def placeable(path: str) -> bool:
    parts = path.split("/")
    for depth in range(1, len(parts)):
        part = "/".join(parts[:depth])
        if os.path.lexists(part) and not (os.path.isdir(part) and not os.path.islink(part)):
            return False
    if parts[:-1]:
        os.makedirs("/".join(parts[:-1]), exist_ok=True)
    return not os.path.isdir(path) or os.path.islink(path)


# -- holds -------------------------------------------------------------------------------


class Busy(Exception):
    pass


class held:  # noqa: N801 - a context manager, named as a statement reads
    """The session's exclusive hold: a directory mkdir makes for one holder at a time. A
    hold older than the longest call (its holder was stopped) is taken over."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.fresh = args.get("fresh")
        self.stale, self.wait = args.get("hold_seconds", 60), args.get("hold_wait", 30)

    def __enter__(self) -> None:
        if not self.fresh:
            take_hold(self.stale, self.wait)

    def __exit__(self, *exc: object) -> None:
        if not self.fresh:
            release_hold()


def take_hold(stale: float, wait: float) -> None:
    deadline = time.time() + wait
    while True:
        try:
            os.mkdir(HOLD)
            return
        except FileExistsError:
            try:
                if time.time() - os.lstat(HOLD).st_mtime > stale:
                    os.rmdir(HOLD)
                    continue
            except OSError:
                continue
        if time.time() > deadline:
            raise Busy()
        time.sleep(0.1)


def release_hold() -> None:
    with contextlib.suppress(OSError):
        os.rmdir(HOLD)


# -- runs --------------------------------------------------------------------------------


def step_pre(args: dict[str, Any]) -> dict[str, Any]:
    """Before a native run: the hold, the inputs, the record; the listing the run's
    changes are counted from. Prints the code the run's first line runs next: arming its
    watchdog, or raising why the run may not happen."""
    done = prepare(args)
    if "refused" in done:
        return done
    return {"arm": watchdog(args["lang"], args["timeout"], args["pid_file"])}


def prepare(args: dict[str, Any]) -> dict[str, Any]:
    rundir = OWN + "/run-" + args["token"]
    os.makedirs(rundir, exist_ok=True)
    try:
        held(args).__enter__()
    except Busy:
        return refused(rundir, "busy")
    try:
        placed = place(args)
        before = listing()
        keep = args.get("keep")
        if keep:
            before = kept(keep, before)
    except Conflicted as exc:
        if not args.get("fresh"):
            release_hold()
        return refused(rundir, "conflict: " + str(exc))
    with open(rundir + "/before", "w") as out:
        json.dump({"before": before, "placed": placed, "fresh": bool(args.get("fresh"))}, out)
    return {}


def refused(rundir: str, reason: str) -> dict[str, Any]:
    with open(rundir + "/refused", "w") as out:
        out.write(reason)
    return {"refused": reason}


class Conflicted(Exception):
    pass


def place(args: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Each input where the run wants it: from this session (found by the paths the
    service tried to verify, in order), or carried in by the service from another."""
    placed = {}
    for item in args.get("carried", []):
        if "staged" in item:  # written by writeFiles ahead of the step
            with open(item["staged"], "rb") as source:
                data = source.read()
            os.unlink(item["staged"])
        else:
            data = base64.b64decode(item["data"])
        placed[item["index"]] = write_input(item["target"], data, item["read_only"])
    for item in args.get("own", []):
        found = next((p for p in item["paths"] if regular(p)), None)
        if item["target"] is None:
            placed[item["index"]] = {"path": None, "refused": "its name leads out of the session's directory"}
        elif found is None:
            placed[item["index"]] = {"path": None}
        elif item["target"] == found:
            placed[item["index"]] = {"path": found, "read_only": item["read_only"]}
        else:
            with open(found, "rb") as source:
                placed[item["index"]] = write_input(item["target"], source.read(), item["read_only"])
    return placed


def write_input(target: str, data: bytes, read_only: bool) -> dict[str, Any]:
    if not placeable(target):
        return {"path": None, "refused": "a directory, or a link, is where it would go"}
    staged = OWN + "/in-" + os.urandom(8).hex()
    with open(staged, "wb") as out:
        out.write(data)
    os.rename(staged, target)
    return {"path": target, "read_only": read_only}


def kept(keep: dict[str, Any], now: dict[str, list[int]]) -> dict[str, list[int]]:
    """A programmatic round's record, checked against the one it replaces and written;
    the listing its changes count from, kept from before its workflow's first round."""
    os.makedirs(STATE, exist_ok=True)
    record, baseline = STATE + "/" + keep["key"] + ".json", STATE + "/" + keep["key"] + ".before"
    current = None
    if os.path.exists(record):
        with open(record, "rb") as existing:
            current = hashlib.sha256(existing.read()).hexdigest()
    if current != keep.get("replaces"):
        raise Conflicted("that continuation token is spent: its round ran already")
    with open(record, "wb") as out:
        out.write(base64.b64decode(keep["record"]))
    if not os.path.exists(baseline):
        with open(baseline, "w") as out:
            json.dump(now, out)
    with open(baseline) as source:
        kept_before: dict[str, list[int]] = json.load(source)
    return kept_before


def watchdog(lang: str, timeout: float, pid_file: str) -> str:
    """A process of its own that kills the run at its time limit, unless the post step has
    removed the pid file by then (the run is over; the interpreter may be a kernel that
    lives on); and the code the run's first line runs to write that pid file. Outside the
    interpreter, so a loop that never yields to it is stopped all the same."""
    kill = f'sleep {timeout}; p=$(cat {pid_file} 2>/dev/null) && rm -f {pid_file} && kill -KILL "$p"'
    subprocess.Popen(
        ["sh", "-c", kill], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    if lang == "python":
        return f"import os\nopen({pid_file!r}, 'w').write(str(os.getpid()))\n"
    fs = "(process.getBuiltinModule ? process.getBuiltinModule('fs') : require('fs'))"
    return f"{fs}.writeFileSync({json.dumps(pid_file)}, String(process.pid));"


def step_post(args: dict[str, Any]) -> dict[str, Any]:
    """After a run: what changed since the listing before, the inputs placed, the hold
    let go; or why the run was refused."""
    rundir = OWN + "/run-" + args["token"]
    try:
        if os.path.exists(rundir + "/refused"):
            with open(rundir + "/refused") as reason:
                return {"refused": reason.read()}
        if not os.path.exists(rundir + "/before"):
            return {"refused": "the run never started"}
        with open(rundir + "/before") as source:
            before = json.load(source)
        if args.get("pid_file"):
            with contextlib.suppress(OSError):
                os.unlink(args["pid_file"])
        after = listing()
        if not before["fresh"]:
            release_hold()
        return {"changes": changes(before["before"], after), "placed": before["placed"]}
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


def changes(before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, Any]:
    created = [[p, *after[p]] for p in sorted(after) if p not in before]
    modified = [[p, *after[p]] for p in sorted(after) if p in before and list(before[p]) != list(after[p])]
    return {"created": created, "modified": modified, "deleted": sorted(p for p in before if p not in after)}


def step_run(args: dict[str, Any]) -> dict[str, Any]:
    """A bash program, whole: pre, the program in /mnt/data under its time limit with its
    stdout and stderr apart and capped, post."""
    done = prepare(args)
    if "refused" in done:
        step_post(args)
        return done
    limit = args["max_output"]
    started = time.time()
    # From /mnt/data when it is there (`pwd` says so), as on every backend.
    here = "/mnt/data" if os.path.realpath("/mnt/data") == os.path.realpath(".") else os.getcwd()
    child = subprocess.Popen(
        ["bash", "-c", args["code"], "main.sh"] + args["args"], cwd=here, env=dict(os.environ, PWD=here),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    timed_out = False
    try:
        out, err = child.communicate(timeout=args["timeout"])
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
    result = {
        "stdout": base64.b64encode(out[: limit + 1]).decode(),
        "stderr": base64.b64encode(err[: limit + 1]).decode(),
        "exit_code": None if timed_out else child.returncode,
        "seconds": time.time() - started,
    }
    return {**step_post(args), "result": result}


STEPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "list": step_list,
    "stat": step_stat,
    "send": step_send,
    "remove": step_remove,
    "commit": step_commit,
    "pre": step_pre,
    "post": step_post,
    "run": step_run,
}

if __name__ == "__main__":
    main()
