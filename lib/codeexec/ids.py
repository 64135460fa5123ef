"""Session ids, file ids and paths: checked here, before they reach a filesystem or a cloud API.

A session id and a file id are both 21 characters of `[A-Za-z0-9_-]`: LibreChat puts ids
into URLs without encoding them, and its fallback download route takes nothing else.

A file id is DERIVED from where the file's bytes are (its session and its path under
`/mnt/data`), with no table: the same file always has the same id, and finding a file
by its id needs nothing but the session's own listing. A file's path travels beside
its id, in `name`. A raw path is still accepted as an id, from clients that stored one.
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
# Where the service keeps what it needs inside a session (a backend's markers, a
# programmatic run's progress): never a client's file.
RESERVED_DIR = ".codeexec"
# In it, what the session layer keeps (a programmatic run's progress): backends store it
# like any file, clients can never name it.
STATE_DIR = f"{RESERVED_DIR}/state"
# A path the filesystem, and every client, can take: LibreChat's own limit is 255 a name.
MAX_PATH_CHARS = 1024


def new_session_id() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(21))


def is_session_id(value: str) -> bool:
    return _ID.fullmatch(value) is not None


def derived_id(*parts: str) -> str:
    """21 characters of the id alphabet from a digest of the parts (126 bits)."""
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).digest()
    return base64.urlsafe_b64encode(digest).decode()[:21]


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


def port_path(value: str) -> str:
    """A path as the sandbox port takes it over the wire (the runner): a client's, or one
    under STATE_DIR that the session layer keeps."""
    prefix = f"{STATE_DIR}/"
    if value.startswith(prefix):
        return prefix + file_path(value.removeprefix(prefix))
    return file_path(value)


def upload_path(filename: str | None) -> str:
    """Where an uploaded file goes under `/mnt/data`: its relative path kept
    (`skills/pdf/SKILL.md`), so the paths a model is told exist. Backslashes are
    separators; a path that would leave the directory is refused, never shortened."""
    name = (filename or "").replace("\\", "/").strip("/")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise BadRequest("the upload's filename is empty or leads out of the session's directory")
    return file_path("/".join(parts))
