"""The runner's wire: the sandbox port's types as JSON, and its errors as statuses.

Both ends import this module, the runner (`codeexec.runner.app`) and the `runner` backend
(`codeexec.sandbox.runner`), so a shape is written once. Nothing here knows HTTP beyond
the header names.

    GET    /health                              languages, named sessions (no key needed)
    GET    /sessions                            every lease, one JSON object a line
    POST   /sessions                            create: a lease and a use
    GET    /sessions/{id}                       the lease, untouched (the caller admits itself)
    POST   /sessions/{id}/uses                  a shared hold: the reaper keeps away until released
    DELETE /sessions/{id}/uses/{token}
    POST   /sessions/{id}/holds                 the exclusive hold, across requests, until released
    DELETE /sessions/{id}/holds/{token}
    GET    /sessions/{id}/files                 the listing
    PUT    /sessions/{id}/files/{path}?limit=N  a body streamed in
    GET    /sessions/{id}/files/{path}          a body streamed out, its stat in headers
    DELETE /sessions/{id}/files/{path}
    GET    /sessions/{id}/stat/{path}
    POST   /sessions/{id}/run                   a Program in, a RunResult out
    DELETE /sessions/{id}                       end now; `?if_touched_at=T` ends only an idle one
    POST   /cancels/{run_key}
"""

from __future__ import annotations

from typing import Any

from ... import errors
from ..port import FileInfo, Lease, Limit, LimitHit, OwnerTag, Program, RunResult

KEY_HEADER = "X-Runner-Key"
SIZE_HEADER = "X-File-Size"
MTIME_HEADER = "X-File-Mtime-Ns"
# The error classes that cross as themselves; any other answer is the runner failing.
ERRORS: dict[str, type[errors.ServiceError]] = {
    cls.__name__: cls
    for cls in (
        errors.BadRequest,
        errors.UnsupportedLanguage,
        errors.SessionNotFound,
        errors.FileNotFound,
        errors.Conflict,
        errors.TooLarge,
        errors.Unavailable,
        errors.BackendUnavailable,
    )
}


def lease_json(lease: Lease) -> dict[str, Any]:
    return {
        "session_id": lease.session_id,
        "owner": {"org": lease.owner.org, "user": lease.owner.user},
        "shared": lease.shared,
        "read_only": lease.read_only,
        "leased_at": lease.leased_at,
        "ttl_seconds": lease.ttl_seconds,
        "touched_at": lease.touched_at,
    }


def lease_of(data: dict[str, Any]) -> Lease:
    owner = OwnerTag(str(data["owner"]["org"]), str(data["owner"]["user"]))
    return Lease(
        str(data["session_id"]),
        owner,
        bool(data["shared"]),
        bool(data["read_only"]),
        float(data["leased_at"]),
        int(data["ttl_seconds"]),
        float(data["touched_at"]),
    )


def file_json(info: FileInfo) -> dict[str, Any]:
    return {"path": info.path, "size": info.size, "mtime_ns": info.mtime_ns}


def file_of(data: dict[str, Any]) -> FileInfo:
    return FileInfo(str(data["path"]), int(data["size"]), int(data["mtime_ns"]))


def program_json(program: Program) -> dict[str, Any]:
    return {
        "lang": program.lang,
        "code": program.code,
        "args": list(program.args),
        "timeout": program.timeout,
        "run_key": program.run_key,
    }


def program_of(data: dict[str, Any]) -> Program:
    args = data.get("args") or []
    if not isinstance(data.get("lang"), str) or not isinstance(data.get("code"), str):
        raise errors.BadRequest("a program needs lang and code")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise errors.BadRequest("a program's args are strings")
    run_key = data.get("run_key")
    return Program(data["lang"], data["code"], tuple(args), float(data.get("timeout", 30.0)), run_key)


def result_json(result: RunResult) -> dict[str, Any]:
    hits = [
        {
            "limit": hit.limit.value,
            "amount": hit.amount,
            "stopped": hit.stopped,
            "stream": hit.stream,
            "still_running": hit.still_running,
        }
        for hit in result.hits
    ]
    return {"stdout": result.stdout, "stderr": result.stderr, "exit_code": result.exit_code, "hits": hits}


def result_of(data: dict[str, Any]) -> RunResult:
    hits = tuple(
        LimitHit(Limit(h["limit"]), float(h["amount"]), bool(h["stopped"]), str(h["stream"]), bool(h["still_running"]))
        for h in data.get("hits", [])
    )
    exit_code = data.get("exit_code")
    return RunResult(str(data["stdout"]), str(data["stderr"]), None if exit_code is None else int(exit_code), hits)


def error_json(exc: errors.ServiceError) -> dict[str, Any]:
    body = exc.body()
    body["kind"] = type(exc).__name__ if type(exc).__name__ in ERRORS else "BackendUnavailable"
    return body


def error_of(status: int, data: Any) -> errors.ServiceError:
    """The error a runner's answer carries, as the library's own class; anything the
    runner did not say in its own words is the backend failing, which the caller may retry."""
    kind = data.get("kind") if isinstance(data, dict) else None
    details = data.get("details") if isinstance(data, dict) else None
    retry_after = data.get("retry_after_seconds") if isinstance(data, dict) else None
    cls = ERRORS.get(kind) if isinstance(kind, str) else None
    if cls is errors.SessionNotFound or cls is errors.FileNotFound:
        return cls()
    if cls is None:
        reason = "refused the key" if status == 401 else f"answered {status}"
        return errors.BackendUnavailable(f"the sandbox runner {reason}", retry_after=5)
    return cls(str(details) if details else None, retry_after=int(retry_after) if retry_after else None)
