"""File access beneath a directory that an untrusted program can also write to.

The service runs as root while a program in the sandbox plants what it likes in its own
directory: symlinks (`data.csv -> /etc/shadow`), FIFOs and files under a lease that
would block a reader for good, trees deeper than PATH_MAX, names that are not UTF-8.
So every component is opened relative to its parent with O_NOFOLLOW; a file is opened
O_NONBLOCK and refused unless it is a regular file; walks hold a descriptor per level,
never a path, and skip what they cannot name rather than fail; a path given with a `..`,
`.` or empty component is refused, whoever gives it. Nothing here can be made to block,
to leave the directory, or to raise for a name a program chose.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ... import ids
from ...errors import BadRequest, Conflict, FileNotFound, TooLarge
from ..port import FileInfo

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO opens at once (and is then refused), a file under a lease fails at
# once instead of waiting out the lease-break time.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
CHUNK = 1 << 16
# An upload in progress; never listed, so a half-written file is never an output.
_PARTIAL_PREFIX = ".codeexec-partial-"
# How deep a listing goes: deeper files stay (and count against the session's limit),
# unlisted, like any file no client could address.
MAX_DEPTH = 64

Owner = tuple[int, int] | None  # the uid and gid files and directories are handed to


@contextlib.contextmanager
def _parent_dir(root: str, path: str, create: Owner | bool = False) -> Iterator[tuple[int, str]]:
    """Yield (fd of the directory holding `path`, its last component). With `create`,
    missing directories are made, handed to the owner it names."""
    *dirs, name = _components(path)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in dirs:
            if create is not False:
                _mkdir(fd, part, create if isinstance(create, tuple) else None)
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        yield fd, name
    finally:
        os.close(fd)


def _components(path: str) -> list[str]:
    """A path's components, each a name in its directory: whoever sends a path (the API
    checks its own; a runner's wire, a port's caller), `..` would walk out of the
    directory (to the session's lease, or another session), and `.` or an empty one
    would name the directory itself."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise BadRequest("a file's path must name a file inside the session's directory")
    return parts


def _mkdir(parent_fd: int, name: str, owner: Owner) -> None:
    try:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    except FileExistsError:
        return
    if owner is not None:  # the program must be able to write where an upload put its files
        os.chown(name, *owner, dir_fd=parent_fd, follow_symlinks=False)


def open_beneath(root: str, path: str, snapshot: Callable[[int], int]) -> tuple[BinaryIO, FileInfo]:
    """The file's bytes as they are now (`snapshot` makes a private copy of an open fd),
    and its stat."""
    try:
        with _parent_dir(root, path) as (dir_fd, name):
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except BlockingIOError:  # a lease another holds
        raise Conflict("the file is in use; try again") from None
    except OSError as exc:  # missing, a symlink (ELOOP), a device (nodev), a socket...
        raise FileNotFound() from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFound()
        copy = snapshot(fd)
    finally:
        os.close(fd)
    reader = os.fdopen(copy, "rb")
    return reader, FileInfo(path, os.fstat(copy).st_size, st.st_mtime_ns)


def stat_beneath(root: str, path: str) -> FileInfo:
    try:
        with _parent_dir(root, path) as (dir_fd, name):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise FileNotFound() from exc
    if not stat.S_ISREG(st.st_mode):
        raise FileNotFound()
    return FileInfo(path, st.st_size, st.st_mtime_ns)


def write_beneath(root: str, path: str, data: BinaryIO, limit: int, owner: Owner) -> None:
    """Write to a hidden temporary name, then rename over `path`: atomic, and a rename
    replaces a planted symlink instead of writing through it. The kernel's quota stops a
    write past the session's limit (EDQUOT); the caller says so."""
    try:
        with _parent_dir(root, path, create=owner or True) as (dir_fd, name):
            _write_at(dir_fd, name, data, limit, owner)
    except OSError as exc:
        raise _refused(exc) from exc


def stage(staging_fd: int, name: str, data: BinaryIO, limit: int, owner: Owner) -> None:
    """Write a file to be moved beneath a directory later (`move_beneath`), into a
    directory of the service's own where no program looks."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=staging_fd)
    try:
        _copy(data, fd, limit)
        if owner is not None:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)


def move_beneath(root: str, moves: list[tuple[str, int, str]], owner: Owner) -> None:
    """Move staged files (path, staging dir fd, name) to their paths beneath `root`, all or
    none as far as the filesystem allows: every path is checked and its directories made
    first, and only then is anything renamed into place (a rename replaces a planted
    symlink instead of writing through it)."""
    for path, _, _ in moves:  # every path checked before any directory is made
        _components(path)
    try:
        for path, _, _ in moves:
            with _parent_dir(root, path, create=owner or True) as (dir_fd, name):
                _no_directory_at(dir_fd, name)
        for path, staging_fd, staged in moves:
            with _parent_dir(root, path) as (dir_fd, name):
                os.rename(staged, name, src_dir_fd=staging_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        raise _refused(exc) from exc


def _no_directory_at(dir_fd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise OSError(errno.EISDIR, "a directory has that name")


def _write_at(dir_fd: int, name: str, data: BinaryIO, limit: int, owner: Owner) -> None:
    tmp = f"{_PARTIAL_PREFIX}{os.urandom(8).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    try:
        _copy(data, fd, limit)
        if owner is not None:
            os.fchown(fd, *owner)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    finally:
        os.close(fd)


def _copy(data: BinaryIO, fd: int, limit: int) -> None:
    size = 0
    while chunk := data.read(CHUNK):
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"the file is larger than {limit} bytes")
        os.write(fd, chunk)


def _refused(exc: OSError) -> Exception:
    """Why a write could not be done, in the caller's terms (a quota is the caller's to map)."""
    reasons = {
        errno.ENOTDIR: "a part of the file's path is a file, not a directory",
        errno.EISDIR: "a directory has that name",
        errno.ENAMETOOLONG: "the file's name is too long for the filesystem",
        errno.ELOOP: "a part of the file's path is a link",
    }
    return BadRequest(reasons[exc.errno]) if exc.errno in reasons else exc


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
    """Every regular file a client can address: symlinks are neither followed nor listed,
    and a name that is not UTF-8, too long, or too deep is passed over."""
    return [info for info, _ in walk_beneath(root)]


def walk_beneath(root: str) -> list[tuple[FileInfo, int]]:
    """list_beneath, each file with its ctime (ns): when its inode last changed, a
    rename included, as only the kernel sets it."""
    found: list[tuple[FileInfo, int]] = []
    top = os.open(root, _DIR_FLAGS)
    # Depth first, one open directory per level: the descriptors in use are at most MAX_DEPTH.
    stack = [(top, os.scandir(top), "")]
    try:
        while stack:
            fd, entries, prefix = stack[-1]
            entry = next(entries, None)
            if entry is None:
                entries.close()
                os.close(fd)
                stack.pop()
                continue
            rel = f"{prefix}{entry.name}"
            if not _addressable(rel):
                continue
            if entry.is_dir(follow_symlinks=False):
                if len(stack) < MAX_DEPTH:
                    with contextlib.suppress(OSError):  # removed meanwhile, or not ours to read
                        child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                        stack.append((child, os.scandir(child), f"{rel}/"))
            elif entry.is_file(follow_symlinks=False) and not entry.name.startswith(_PARTIAL_PREFIX):
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    found.append((FileInfo(rel, st.st_size, st.st_mtime_ns), st.st_ctime_ns))
    finally:
        for fd, entries, _ in stack:
            entries.close()
            os.close(fd)
    return found


def _addressable(rel: str) -> bool:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # a name that is not UTF-8: no JSON reply could carry it
        return False
    return len(rel) <= ids.MAX_PATH_CHARS and not rel.startswith(f"{ids.RESERVED_DIR}/")
