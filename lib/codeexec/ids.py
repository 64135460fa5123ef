"""Session ids and file ids: checked here, before they reach a filesystem or a cloud API."""

from __future__ import annotations

import re
import secrets
from pathlib import PurePosixPath

from .errors import BadRequest

# LibreChat validates session ids with exactly this pattern on some of its routes.
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{21}")
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"


def new_session_id() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(21))


def is_session_id(value: str) -> bool:
    return _SESSION_ID.fullmatch(value) is not None


def file_path(file_id: str) -> str:
    """The file id as a normalized relative path, or BadRequest if it could escape."""
    if not file_id or "\x00" in file_id or "\\" in file_id:
        raise BadRequest("file id is empty or holds a forbidden character")
    path = PurePosixPath(file_id)
    if path.is_absolute() or any(part in ("..", ".") for part in path.parts):
        raise BadRequest("file id must be a path inside the session's directory")
    return path.as_posix()


def upload_name(filename: str | None) -> str:
    """An uploaded file's name cut to a flat, safe file id (the basename)."""
    name = PurePosixPath((filename or "").replace("\\", "/")).name
    if name in ("", ".", "..") or "\x00" in name:
        raise BadRequest("the upload has no usable filename")
    return name
