"""The plain sentences a reply's stderr carries about what the service did: written here
once, from facts (the port's `LimitHit`s, the inputs a run could not get), whichever
backend ran the program."""

from __future__ import annotations

from collections.abc import Iterable

from .sandbox.port import Limit, LimitHit

_SAID = {
    "time": "Stopped: the run exceeded its {amount} s time limit.",
    "time waited": "Stopped waiting: the run exceeded its {amount} s time limit (it may still be running).",
    "cancelled": "Stopped: the run was cancelled.",
    "cpu": "Stopped: the program used up its {amount} s of CPU time.",
    "memory": "Killed: the run exceeded its memory limit of {amount} bytes.",
    "processes": "The run reached its limit of {amount} processes and threads; no more started.",
    "file size": "A file reached the {amount} byte file size limit; writing past it failed.",
    "output": "Output truncated: {stream} exceeded {amount} bytes; the rest was dropped.",
}


def limit_hit(hit: LimitHit) -> str:
    amount = f"{hit.amount:g}" if hit.limit in (Limit.TIME, Limit.CPU) else str(int(hit.amount))
    kind = hit.limit.value
    if hit.limit is Limit.TIME and hit.still_running:
        kind = "time waited"
    return _SAID[kind].format(amount=amount, stream=hit.stream)


def stopped_while_writing() -> str:
    return "The files are listed as they were when the run was stopped: one it was still writing may be cut short."


def not_available(name: str) -> str:
    return f'File "{name}" is not available: its session has ended or is not yours.'


def same_name(name: str, count: int, file_id: str, session_id: str | None) -> str:
    where = f" of session {session_id}" if session_id else ""
    return f'{count} inputs are named "{name}"; the run has one of them: file {file_id}{where}.'


def not_copied(name: str, reason: str) -> str:
    return f'File "{name}" was not copied: {reason}.'


def files_listed(shown: int, total: int) -> str:
    return f"Listed {shown} of {total} files; all of them are in the session's file list."


# Beyond this many notes on inputs, one more line counts the rest: a reply stays small
# whatever the request named.
MAX_INPUT_NOTES = 20


def capped(notes: list[str]) -> list[str]:
    if len(notes) <= MAX_INPUT_NOTES:
        return notes
    return [*notes[:MAX_INPUT_NOTES], f"...and {len(notes) - MAX_INPUT_NOTES} more input files could not be placed."]


def around(stderr: str, before: Iterable[str], after: Iterable[str]) -> str:
    """The program's stderr between the service's notes: what happened to the inputs
    first, the limits the run hit last, each on a line of its own."""
    text = "".join(f"{note}\n" for note in before) + stderr
    after = list(after)
    if after:
        text += ("\n" if text and not text.endswith("\n") else "") + "\n".join(after) + "\n"
    return text


_QUOTA_SCOPES = {"user": ("this user's", "MAX_USER_BYTES"), "tenant": ("this organization's", "MAX_TENANT_BYTES")}


def over_quota(scope: str, held: int, limit: int) -> str:
    """What a user is told (LibreChat shows it) when a storage quota refuses a call."""
    whose, setting = _QUOTA_SCOPES[scope]
    return (
        f"{whose} sessions hold {_size(held)} of the {_size(limit)} they may hold ({setting}): delete files "
        "from them (or conversations whose files are no longer needed) to free space, then try again"
    )


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"
