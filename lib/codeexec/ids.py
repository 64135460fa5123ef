"""Session ids, file ids and paths: checked here, before they reach a filesystem or a cloud API.

A session id and a file id are both 21 characters of `[A-Za-z0-9_-]`: LibreChat puts ids
into URLs without encoding them, and its fallback download route takes nothing else.

A file id is DERIVED from where the file's bytes are (its session and its path under
`/mnt/data`), with no table: the same file always has the same id. A file's path travels
beside its id, in `name`, and a client's ref names both: the path the name gives is
checked against the id (`paths_for`), so finding an input never lists its session. A raw
path is still accepted as an id, from clients that stored one.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from pathlib import PurePosixPath

from .errors import BadRequest

# LibreChat validates ids with exactly this pattern on some of its routes.
_ID = re.compile(r"[A-Za-z0-9_-]{21}")
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
# Where a backend keeps what it needs inside a session's files (AgentCore's markers and
# steps): never a client's file.
RESERVED_DIR = ".codeexec"
# A path the filesystem, and every client, can take: LibreChat's own limit is 255 a name.
MAX_PATH_CHARS = 1024


# A runner of a fleet marks the ids of the sessions it makes with its index, in their
# first character, so that the service finds a session's runner from its id alone (no
# table, no listing): 64 runners at most, and 20 random characters (120 bits) after it.
MAX_RUNNERS = len(_ALPHABET)


def new_session_id(runner: int | None = None) -> str:
    """A fresh session id; a fleet's runner `runner` puts its mark first."""
    mark = "" if runner is None else runner_mark(runner)
    return mark + "".join(secrets.choice(_ALPHABET) for _ in range(21 - len(mark)))


def runner_mark(runner: int) -> str:
    if not 0 <= runner < MAX_RUNNERS:
        raise ValueError(f"a runner's index is 0 to {MAX_RUNNERS - 1}, not {runner}")
    return _ALPHABET[runner]


def runner_of(session_id: str) -> int:
    """The index of the fleet's runner whose mark the id carries (any id has one)."""
    return _ALPHABET.index(session_id[0])


def on_runner(session_id: str, runner: int) -> str:
    """The same id, marked for `runner` (a derived id, such as a stateful hint's)."""
    return runner_mark(runner) + session_id[1:]


def is_session_id(value: str) -> bool:
    return _ID.fullmatch(value) is not None


def derived_id(*parts: str) -> str:
    """21 characters of the id alphabet from a digest of the parts (126 bits)."""
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).digest()
    return base64.urlsafe_b64encode(digest).decode()[:21]


# A run key's first characters name its caller alone, so that what is kept per run key
# (a cancel waiting for its run) can be counted per caller.
RUN_KEY_CALLER_CHARS = 6


def run_key(org: str, user: str, request_id: str) -> str:
    """The id of a caller's run by its request id: a digest of the caller, then one of the run."""
    caller = derived_id("caller", org, user)[:RUN_KEY_CALLER_CHARS]
    return caller + derived_id("run", org, user, request_id)[RUN_KEY_CALLER_CHARS:]


def file_id(session_id: str, path: str) -> str:
    return derived_id("file", session_id, path)


def is_file_id(value: str) -> bool:
    return _ID.fullmatch(value) is not None


def file_path(file_id: str) -> str:
    """A raw path id as a normalized relative path, or BadRequest if it could escape
    `/mnt/data` or names the service's own directory."""
    if not file_id or "\x00" in file_id or "\\" in file_id or len(file_id) > MAX_PATH_CHARS:
        raise BadRequest("file id is empty, too long or holds a forbidden character")
    path = PurePosixPath(file_id)
    if path.is_absolute() or any(part in ("..", ".") for part in path.parts):
        raise BadRequest("file id must be a path inside the session's directory")
    if path.parts[0] == RESERVED_DIR:
        raise BadRequest(f"paths under {RESERVED_DIR}/ are the service's own")
    return path.as_posix()


# How LibreChat renames the older of two inputs that share a name: `<stem>-<hex>.<ext>`.
_RENAMED = re.compile(r"(?P<stem>.+)-[0-9a-f]{4,}(?P<ext>\.[^./]+)?")


def paths_for(session_id: str, ref_id: str, name: str | None) -> list[str]:
    """Where a client's ref may point in its session, in the order to try, without a
    listing: the path its name gives (or the name it had before LibreChat renamed it),
    each only when the id is that path's derived id; then the id as a raw path (clients
    that stored one); then the name's path whatever the id (3.1.x clients strip the
    extension off an id: "out" for "out.txt")."""
    named = [path for path in map(_checked, (name, _unrenamed(name))) if path]
    derived = [path for path in named if file_id(session_id, path) == ref_id]
    return list(dict.fromkeys([*derived, *filter(None, [_checked(ref_id, raw=True)]), *named[:1]]))


def _checked(value: str | None, raw: bool = False) -> str | None:
    if not value:
        return None
    try:
        return file_path(value) if raw else upload_path(value)
    except BadRequest:
        return None


def _unrenamed(name: str | None) -> str | None:
    if not name:
        return None
    head, _, leaf = name.replace("\\", "/").rpartition("/")
    found = _RENAMED.fullmatch(leaf)
    if found is None:
        return None
    return f"{head}/" * bool(head) + found["stem"] + (found["ext"] or "")


def upload_path(filename: str | None) -> str:
    """Where an uploaded file goes under `/mnt/data`: its relative path kept
    (`skills/pdf/SKILL.md`), so the paths a model is told exist. Backslashes are
    separators; a path that would leave the directory is refused, never shortened."""
    name = (filename or "").replace("\\", "/").strip("/")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise BadRequest("the upload's filename is empty or leads out of the session's directory")
    return file_path("/".join(parts))
