"""File access beneath a directory that an untrusted program can also write to.

The service may run as root while a program in the sandbox plants symlinks in its own
directory (`data.csv -> /etc/shadow`). Every component is therefore opened relative to
its parent with O_NOFOLLOW, so no path the service touches can lead out of the directory,
whatever the program left there.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

from ...errors import FileNotFound, TooLarge
from ..port import FileInfo

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK = 1 << 16
# An upload in progress; never listed, so a half-written file is never an output.
_PARTIAL_PREFIX = ".codeexec-partial-"


@contextlib.contextmanager
def _parent_dir(root: str, path: str, create: bool = False) -> Iterator[tuple[int, str]]:
    """Yield (fd of the directory holding `path`, its last component)."""
    *dirs, name = path.split("/")
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in dirs:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        yield fd, name
    finally:
        os.close(fd)


def open_beneath(root: str, path: str) -> tuple[BinaryIO, FileInfo]:
    try:
        with _parent_dir(root, path) as (dir_fd, name):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:  # missing, a symlink (ELOOP), not a directory...
        raise FileNotFound() from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FileNotFound()
    return os.fdopen(fd, "rb"), FileInfo(path, st.st_size, st.st_mtime_ns)


def stat_beneath(root: str, path: str) -> FileInfo:
    try:
        with _parent_dir(root, path) as (dir_fd, name):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise FileNotFound() from exc
    if not stat.S_ISREG(st.st_mode):
        raise FileNotFound()
    return FileInfo(path, st.st_size, st.st_mtime_ns)


def write_beneath(
    root: str, path: str, data: BinaryIO, limit: int | None, owner: tuple[int, int] | None
) -> FileInfo:
    """Write to a hidden temporary name, then rename over `path`: atomic, and a rename
    replaces a planted symlink instead of writing through it."""
    with _parent_dir(root, path, create=True) as (dir_fd, name):
        tmp = f"{_PARTIAL_PREFIX}{os.urandom(8).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        try:
            size = _copy(data, fd, limit)
            if owner is not None:
                os.fchown(fd, *owner)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            st = os.fstat(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        finally:
            os.close(fd)
    return FileInfo(path, size, st.st_mtime_ns)


def _copy(data: BinaryIO, fd: int, limit: int | None) -> int:
    size = 0
    while chunk := data.read(CHUNK):
        size += len(chunk)
        if limit is not None and size > limit:
            raise TooLarge(f"the file is larger than {limit} bytes")
        os.write(fd, chunk)
    return size


def remove_beneath(root: str, path: str) -> None:
    try:
        with _parent_dir(root, path) as (dir_fd, name):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise FileNotFound()
            os.unlink(name, dir_fd=dir_fd)
    except OSError as exc:
        raise FileNotFound() from exc


def list_beneath(root: str) -> list[FileInfo]:
    """Every regular file, recursively; symlinks are neither followed nor listed."""
    found: list[FileInfo] = []
    stack = [""]
    while stack:
        prefix = stack.pop()
        try:
            entries = os.scandir(os.path.join(root, prefix) if prefix else root)
        except OSError:
            continue
        with entries:
            for entry in entries:
                rel = f"{prefix}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    stack.append(rel + "/")
                elif entry.is_file(follow_symlinks=False) and not entry.name.startswith(_PARTIAL_PREFIX):
                    st = entry.stat(follow_symlinks=False)
                    found.append(FileInfo(rel, st.st_size, st.st_mtime_ns))
    return found
