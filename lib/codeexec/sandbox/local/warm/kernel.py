"""The kernel calls Python's `os` lacks, for both ends of a warm run: the service (root on
the host) makes a detached copy of a session's mount with them, and a fork server's
processes (forkserver.py, inside its sandbox) make a run's namespaces and mounts, attach
the session there and confine themselves. Only the standard library: a server imports
this module as a sibling in its /code.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = (
    0x00020000, 0x04000000, 0x08000000, 0x20000000, 0x40000000,
)  # fmt: skip
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18,
)  # fmt: skip
_MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 0x2, 0x4
# The new mount API's calls have one number on every architecture.
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_OPEN_TREE_CLONE, _AT_FDCWD, _AT_EMPTY_PATH, _MOVE_MOUNT_F_EMPTY_PATH = 1, -100, 0x1000, 0x4
_PR_SET_DUMPABLE, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_CAPBSET_READ, _PR_CAPBSET_DROP = 4, 22, 2, 23, 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# capset's arguments that empty this process's sets: _LINUX_CAPABILITY_VERSION_3 and
# this process; all-zero effective, permitted and inheritable sets.
_CAPSET_HEADER, _NO_CAPABILITIES = struct.pack("Ii", 0x20080522, 0), bytes(24)
_SIOCSIFFLAGS, _IFF_UP = 0x8914, 0x1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


# --- mounts ---------------------------------------------------------------------------


def open_tree(path: str) -> int:
    """A detached copy of the mount at path (the service's side, root on the host)."""
    flags = _OPEN_TREE_CLONE | os.O_CLOEXEC
    return _check(_libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, os.fsencode(path), flags), "open_tree")


def restrict(tree: int) -> None:
    """nosuid,nodev on a detached tree, as on a cold run's /mnt/data."""
    attr = ctypes.create_string_buffer(struct.pack("QQQQ", _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV, 0, 0, 0))
    _check(_libc.syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, attr, len(attr)), "mount_setattr")


def attach(tree: int, target: str) -> None:
    flags = _MOVE_MOUNT_F_EMPTY_PATH
    _check(_libc.syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(target), flags), "move_mount")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encoded = [value if value is None else os.fsencode(value) for value in (source, target, fstype, data)]
    _check(_libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]), f"mount {target}")


def remount_read_only(path: str) -> None:
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def read_only_bind(path: str) -> None:
    mount(path, path, None, MS_BIND)
    remount_read_only(path)


# --- namespaces -----------------------------------------------------------------------


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def setns(fd: int, flags: int) -> None:
    _check(_libc.setns(fd, flags), "setns")


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", _IFF_UP))


# --- privileges -----------------------------------------------------------------------


def not_dumpable() -> None:
    _check(_libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable")


def bounding_set() -> tuple[int, ...]:
    """The capabilities this process's bounding set holds."""
    with open("/proc/sys/kernel/cap_last_cap", "rb") as last:
        highest = int(last.read())
    return tuple(cap for cap in range(highest + 1) if _libc.prctl(_PR_CAPBSET_READ, cap, 0, 0, 0) == 1)


def drop_bounding_set(caps: tuple[int, ...]) -> None:
    """`caps` out of the bounding set: no exec can gain them again. The capabilities the
    process holds now stay until drop_capabilities."""
    for cap in caps:
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "drop the bounding set")


def drop_capabilities() -> None:
    """Every capability this process holds gone: the ambient, effective, permitted and
    inheritable sets emptied."""
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear the ambient set")
    _check(_libc.capset(_CAPSET_HEADER, _NO_CAPABILITIES), "capset")


class Filter:
    """A compiled seccomp filter (seccomp.bpf()), made ready to load once: each process
    that loads it then makes one call, allocating nothing."""

    def __init__(self, filters: bytes) -> None:
        self._buffer = ctypes.create_string_buffer(filters, len(filters))
        self._program = struct.pack("@HP", len(filters) // 8, ctypes.addressof(self._buffer))  # struct sock_fprog

    def load(self) -> None:
        """The filter on this process and all it starts."""
        _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, self._program, 0, 0), "seccomp")
