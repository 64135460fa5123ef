"""The plain sentences a reply's stderr carries about what the service did: written here
once, from facts (the port's `LimitHit`s, the inputs a run could not get), whichever
backend ran the program."""

from __future__ import annotations

from collections.abc import Iterable

from .sandbox.port import Limit, LimitHit


def limit_hit(hit: LimitHit) -> str:
    amount = f"{hit.amount:g}" if hit.limit in (Limit.TIME, Limit.CPU) else str(int(hit.amount))
    match hit.limit:
        case Limit.TIME if hit.still_running:
            return f"Stopped waiting: the run exceeded its {amount} s time limit (it may still be running)."
        case Limit.TIME:
            return f"Stopped: the run exceeded its {amount} s time limit."
        case Limit.CPU:
            return f"Stopped: the program used up its {amount} s of CPU time."
        case Limit.MEMORY:
            return f"Killed: the run exceeded its memory limit of {amount} bytes."
        case Limit.PROCESSES:
            return f"The run reached its limit of {amount} processes and threads; no more started."
        case Limit.FILE_SIZE:
            return f"A file reached the {amount} byte file size limit; writing past it failed."
        case Limit.SESSION_DISK if hit.stopped:
            return f"Stopped: the session's files exceeded their {amount} byte limit."
        case Limit.SESSION_DISK:
            return f"The session's files exceed their {amount} byte limit."
        case Limit.OUTPUT:
            return f"Output truncated: {hit.stream} exceeded {amount} bytes; the rest was dropped."


def not_available(name: str) -> str:
    return f'File "{name}" is not available: its session has ended or is not yours.'


def not_copied(name: str, reason: str) -> str:
    return f'File "{name}" was not copied: {reason}.'


def files_listed(shown: int, total: int) -> str:
    return f"Listed {shown} of {total} files; all of them are in the session's file list."


def around(stderr: str, before: Iterable[str], after: Iterable[str]) -> str:
    """The program's stderr between the service's notes: what happened to the inputs
    first, the limits the run hit last, each on a line of its own."""
    text = "".join(f"{note}\n" for note in before) + stderr
    after = list(after)
    if after:
        text += ("\n" if text and not text.endswith("\n") else "") + "\n".join(after) + "\n"
    return text
