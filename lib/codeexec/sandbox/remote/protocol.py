"""The runner's wire: the port's coarse operations as requests, one each (the route table
below), their types as JSON, streamed files as frames, and errors as statuses.

Both ends import this module, the runner (`codeexec.runner.app`, which serves each route
of the table) and the `runner` backend (`codeexec.sandbox.remote`, which addresses each
by it), so a route and a shape are written once. Nothing here knows HTTP beyond the
header names.

A frame is one JSON line, then the file's bytes in chunks, each a 4-byte big-endian length
and that many bytes, ended by an empty chunk: files of any number and size, streamed one
after another, lengths unknown ahead.

A runner is never silent for long, whatever the call: an answer not ready within
HEARTBEAT_SECONDS is a 200 at once (LATE_HEADER), a space every HEARTBEAT_SECONDS, then
what it answers, or `{LATE_ERROR: {status, body}}` for an error. An answer of bytes (a
file, a record) begins with one JSON line, its head, so it can be kept alive the same way.
So a caller tells a runner at work from one that froze, died or lost its link by silence
alone (SILENT_SECONDS), and no call waits minutes on a dead peer's connection.
"""

from __future__ import annotations

import base64
import enum
import io
import json
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, BinaryIO, Protocol, cast
from urllib.parse import quote

from ... import errors
from ..port import (
    Access,
    Changes,
    FileInfo,
    HostLoad,
    HostReport,
    Input,
    Intent,
    Keep,
    Lease,
    Limit,
    LimitHit,
    OwnerTag,
    Placed,
    Placement,
    PoolLoad,
    Program,
    Quota,
    Ran,
    Run,
    RunResult,
)

KEY_HEADER = "X-Runner-Key"
CHUNK = 1 << 16
LATE_HEADER = "X-Runner-Late"
LATE_ERROR = "late_error"
HEARTBEAT_SECONDS = 0.5
# Five heartbeats missed: the runner is not answering. Under 3 s, which is how soon a
# fleet's caller hears that a frozen or cut-off runner's session is unavailable.
SILENT_SECONDS = 2.5
# The error classes that cross as themselves, by the `error` of the one error body both
# servers answer (codeexec.serving); any other answer is the runner failing.
ERRORS: dict[str, type[errors.ServiceError]] = {
    cls.error: cls
    for cls in (
        errors.BadRequest,
        errors.UnsupportedLanguage,
        errors.SessionNotFound,
        errors.FileNotFound,
        errors.Conflict,
        errors.TooLarge,
        errors.RateLimited,
        errors.Unavailable,
        errors.BackendUnavailable,
        errors.ListingNeeded,
    )
}

# -- the routes ----------------------------------------------------------------------------


class Answer(enum.Enum):
    JSON = "json"  # kept alive: spaces, then the JSON
    BYTES = "bytes"  # kept alive: spaces, then its head (a JSON line), then the bytes
    FRAMES = "frames"  # a frame per file, each as it is read


@dataclass(frozen=True)
class Route:
    """One request of the wire: `path` is a template whose `{names}` are path segments."""

    method: str
    path: str
    answer: Answer = Answer.JSON

    def at(self, **parts: str) -> Target:
        return Target(self, self.path.format(**{name: quote(part, safe="") for name, part in parts.items()}))


@dataclass(frozen=True)
class Target:
    """A route with its parts filled in: what a client asks."""

    route: Route
    path: str


# `<access>` is the caller's `port.Access` as query parameters; a file id is one too (a raw
# path id may hold `..`, which a URL's path would resolve away).
HEALTH = Route("GET", "/health")  # languages, named sessions, its index in a fleet, its load:
#                                   runs now, sessions held (the one route needing no key)
LEASE = Route("GET", "/sessions/{sid}")  # its lease, untouched
END = Route("DELETE", "/sessions/{sid}")  # end now (each runner reaps its own sessions)
CANCEL = Route("POST", "/cancels/{run_key}")
RUN = Route("POST", "/runs")  # a Run: its JSON frame, then the bytes of the inputs it carries,
#                               a frame each; answers the Ran
WRITE = Route("POST", "/writes")  # files written all or none: a JSON frame (placement, limit),
#                                   then a frame per file; answers the session
LIST = Route("GET", "/sessions/{sid}/files")  # ?<access>: the listing
READ = Route("GET", "/sessions/{sid}/file", Answer.BYTES)  # ?id=<file id>&<access>: its stat, its bytes
REMOVE = Route("DELETE", "/sessions/{sid}/file")  # ?id=<file id>&<access>: answers the path removed
STAT = Route("GET", "/sessions/{sid}/stat")  # ?id=<file id>&<access>
READS = Route("POST", "/reads", Answer.FRAMES)  # ?<access>: inputs of any of its sessions (each
#                        names its origin), a frame each: a run on another runner or VM carries them in
RECORD = Route("GET", "/sessions/{sid}/records/{key}", Answer.BYTES)  # ?<access>: the service's own
#                                                                        record (port.Keep)
REPORT = Route("GET", "/report")  # what the console shows of it (port.HostReport): its load, who
#                                   holds most, its last hour
USAGE = Route("GET", "/usage")  # ?epoch=&since=: what each owner holds on it (digest: bytes), as
#                                 changed since that pass of that process (quotas)
ROUTES = (HEALTH, LEASE, END, CANCEL, RUN, WRITE, LIST, READ, REMOVE, STAT, READS, RECORD, REPORT, USAGE)


def answered(answer: Any) -> Any:
    """What a runner answered (a JSON answer, an answer's head); the error a late answer
    carries instead, raised."""
    late = isinstance(answer, dict) and answer.get(LATE_ERROR)
    if late:
        raise error_of(int(late["status"]), late["body"])
    return answer

class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def late_error_json(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {LATE_ERROR: {"status": status, "body": body}}


# -- the port's types ----------------------------------------------------------------------


def access_params(access: Access) -> dict[str, str]:
    return {"org": access.owner.org, "user": access.owner.user, "intent": access.intent.value,
            "server": "1" if access.server else "0"}  # fmt: skip


def access_of(params: Mapping[str, str]) -> Access:
    try:
        return Access(OwnerTag(params["org"], params["user"]), Intent(params["intent"]), params.get("server") == "1")
    except (KeyError, ValueError):
        raise errors.BadRequest("a request names who asks, and for what") from None


def lease_json(lease: Lease) -> dict[str, Any]:
    return asdict(lease)


def lease_of(data: dict[str, Any]) -> Lease:
    owner = OwnerTag(str(data["owner"]["org"]), str(data["owner"]["user"]))
    return Lease(
        str(data["session_id"]), owner, bool(data["shared"]), bool(data["read_only"]),
        float(data["leased_at"]), int(data["ttl_seconds"]), float(data["touched_at"]),
    )  # fmt: skip


def report_json(report: HostReport) -> dict[str, Any]:
    return asdict(report)


def report_of(data: dict[str, Any]) -> HostReport:
    load = data["load"]
    pools = {kind: PoolLoad(**pool) for kind, pool in load.get("pools", {}).items()}
    return HostReport(HostLoad(**{**load, "pools": pools}), data.get("usage"), data.get("history"))


def file_json(info: FileInfo) -> dict[str, Any]:
    return asdict(info)


def file_of(data: dict[str, Any]) -> FileInfo:
    return FileInfo(str(data["path"]), int(data["size"]), int(data["mtime_ns"]))


def inputs_json(inputs: Iterable[Input]) -> list[dict[str, Any]]:
    return [asdict(i) for i in inputs]


def inputs_of(data: Any) -> tuple[Input, ...]:
    try:
        return tuple(Input(str(i["file_id"]), i.get("name"), i.get("origin")) for i in data)
    except (KeyError, TypeError):
        raise errors.BadRequest("inputs are [{file_id, name, origin}]") from None


def run_json(run: Run) -> dict[str, Any]:
    return {
        "program": asdict(run.program),
        "placement": placement_json(run.placement),
        "inputs": inputs_json(run.inputs),
        "keep": run.keep and {**asdict(run.keep), "record": base64.b64encode(run.keep.record).decode()},
    }


def run_of(data: dict[str, Any]) -> Run:
    try:
        placement = placement_of(data["placement"])
        keep = data.get("keep")
        if keep:
            keep = Keep(str(keep["key"]), base64.b64decode(keep["record"]), keep.get("replaces"))
        return Run(_program_of(data["program"]), placement, inputs_of(data.get("inputs", [])), keep)
    except (KeyError, TypeError, ValueError):
        raise errors.BadRequest("not a run this runner understands") from None


def _program_of(data: dict[str, Any]) -> Program:
    args = data.get("args") or []
    if not isinstance(data.get("lang"), str) or not isinstance(data.get("code"), str):
        raise errors.BadRequest("a program needs lang and code")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise errors.BadRequest("a program's args are strings")
    return Program(data["lang"], data["code"], tuple(args), float(data.get("timeout", 30.0)), data.get("run_key"))


def ran_json(ran: Ran) -> dict[str, Any]:
    result = ran.result
    hits = [{**asdict(hit), "limit": hit.limit.value} for hit in result.hits]
    return {
        "session_id": ran.session_id,
        "created": ran.created,
        "result": {
            "stdout": result.stdout, "stderr": result.stderr, "exit_code": result.exit_code, "hits": hits,
            "warm": result.warm, "seconds": result.seconds,
        },  # fmt: skip
        "changes": asdict(ran.changes),
        "inputs": [asdict(p) for p in ran.inputs],
    }


def ran_of(data: dict[str, Any]) -> Ran:
    result = data["result"]
    hits = tuple(LimitHit(**{**h, "limit": Limit(h["limit"])}) for h in result.get("hits", []))
    exit_code = result.get("exit_code")
    changes = data["changes"]
    return Ran(
        str(data["session_id"]),
        bool(data["created"]),
        RunResult(
            str(result["stdout"]), str(result["stderr"]), None if exit_code is None else int(exit_code), hits,
            result.get("warm"), result.get("seconds"),
        ),  # fmt: skip
        Changes(
            tuple(map(file_of, changes["created"])), tuple(map(file_of, changes["modified"])), tuple(changes["deleted"])
        ),
        tuple(Placed(**p) for p in data.get("inputs", [])),
    )


def placement_json(placement: Placement) -> dict[str, Any]:
    return {**asdict(placement), "access": access_params(placement.access)}


def placement_of(data: dict[str, Any]) -> Placement:
    try:
        quota = data.get("quota")
        return Placement(**{**data, "access": access_of(data["access"]), "candidates": tuple(data["candidates"]),
                            "quota": Quota(**quota) if quota else None})  # fmt: skip
    except (KeyError, TypeError):
        raise errors.BadRequest("not a placement this runner understands") from None


# -- frames --------------------------------------------------------------------------------


def frames(items: Iterable[tuple[dict[str, Any], Readable | None]]) -> Iterator[bytes]:
    """Each (header, bytes) as a frame, pulled one by one, each body read to its end."""
    for header, body in items:
        yield json.dumps(header).encode() + b"\n"
        while body is not None and (chunk := body.read(CHUNK)):
            yield struct.pack(">I", len(chunk)) + chunk
        yield struct.pack(">I", 0)


def frames_of(read: Callable[[int], bytes]) -> Iterator[tuple[dict[str, Any], BinaryIO]]:
    """The frames a stream carries (`read(n)` gives at most n bytes, b"" at its end), each
    body a reader; a body the consumer left unread is skipped before the next frame."""
    source = _Exact(read)
    while line := source.line():
        try:
            header = json.loads(line)
        except ValueError:
            raise errors.BadRequest("a frame does not start with its JSON line") from None
        body = _FrameBody(source)
        yield header, cast(BinaryIO, io.BufferedReader(body))
        while body.readinto(bytearray(CHUNK)):
            pass


class _Exact:
    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read
        self._left = b""

    def take(self, size: int) -> bytes:
        while len(self._left) < size:
            more = self._read(max(size - len(self._left), CHUNK))
            if not more:
                raise errors.BadRequest("a frame was cut short")
            self._left += more
        taken, self._left = self._left[:size], self._left[size:]
        return taken

    def line(self) -> bytes:
        while b"\n" not in self._left:
            more = self._read(CHUNK)
            if not more:
                if self._left:
                    raise errors.BadRequest("a frame was cut short")
                return b""
            self._left += more
        line, _, self._left = self._left.partition(b"\n")
        return line


class _FrameBody(io.RawIOBase):
    def __init__(self, source: _Exact) -> None:
        self._source = source
        self._chunk_left = 0
        self._ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._ended and self._chunk_left == 0:
            self._chunk_left = struct.unpack(">I", self._source.take(4))[0]
            self._ended = self._chunk_left == 0
        if self._ended:
            return 0
        data = self._source.take(min(len(buffer), self._chunk_left))
        self._chunk_left -= len(data)
        buffer[: len(data)] = data
        return len(data)


# -- errors --------------------------------------------------------------------------------


def error_of(status: int, data: Any) -> errors.ServiceError:
    """The error a runner's answer carries, as the library's own class; anything the
    runner did not say in its own words is the backend failing, which the caller may retry."""
    body = data if isinstance(data, dict) else {}
    cls = ERRORS.get(str(body.get("error")))
    if cls is errors.SessionNotFound or cls is errors.FileNotFound:
        return cls()
    if cls is None:
        reason = "refused the key" if status == 401 else f"answered {status}"
        return errors.BackendUnavailable(f"the sandbox runner {reason}", retry_after=5)
    retry_after = body.get("retry_after_seconds")
    details = body.get("details")
    return cls(str(details) if details else None, retry_after=int(retry_after) if retry_after else None)
