"""The few btrfs operations the `local` backend's storage needs, as ioctls.

A session is a btrfs subvolume with a quota group limit: the kernel refuses (EDQUOT) any
write, fallocate or file creation past it, at the moment it happens, which no
measurement from outside could. Ending a session destroys its subvolume in one call,
however deep the tree a program left in it. A snapshot of a file for a download is a
reflink (FICLONE): instant, and no later write to the file can reach it.

ioctls rather than the `btrfs` command: a session is leased on every G1 exec, and two
subprocesses there would cost more than the rest of the lease.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import struct

BTRFS_SUPER_MAGIC = 0x9123683E
_VOL_ARGS = 4096  # struct btrfs_ioctl_vol_args: __s64 fd; char name[4088]
_NAME_MAX = 4087


def _ioc(direction: int, number: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (0x94 << 8) | number


_WRITE, _READ = 1, 2
_SUBVOL_CREATE = _ioc(_WRITE, 14, _VOL_ARGS)
_SNAP_DESTROY = _ioc(_WRITE, 15, _VOL_ARGS)
_QUOTA_CTL = _ioc(_READ | _WRITE, 40, 16)  # struct btrfs_ioctl_quota_ctl_args: __u64 cmd, status
_QGROUP_LIMIT = _ioc(_READ, 43, 48)  # qgroupid, then struct btrfs_qgroup_limit (5 x __u64)
_QUOTA_ENABLE = 1
_LIMIT_MAX_REFERENCED = 1
FICLONE = 0x40049409


class _Statfs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112)]


_libc = ctypes.CDLL(None, use_errno=True)


def is_btrfs(path: str) -> bool:
    buf = _Statfs()
    if _libc.statfs(os.fsencode(path), ctypes.byref(buf)) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), path)
    return bool(buf.f_type == BTRFS_SUPER_MAGIC)


def enable_quotas(path: str) -> None:
    """Turn quota groups on for the filesystem (a no-op when they are on)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, _QUOTA_CTL, struct.pack("QQ", _QUOTA_ENABLE, 0))
    finally:
        os.close(fd)


def create_subvolume(parent_fd: int, name: str, max_bytes: int) -> None:
    """Make `name` under the directory `parent_fd` a new subvolume that may hold at most
    `max_bytes`, data and metadata together."""
    fcntl.ioctl(parent_fd, _SUBVOL_CREATE, _vol_args(name))
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    try:
        # qgroupid 0: the subvolume's own quota group.
        fcntl.ioctl(fd, _QGROUP_LIMIT, struct.pack("6Q", 0, _LIMIT_MAX_REFERENCED, max_bytes, 0, 0, 0))
    except OSError:
        os.close(fd)
        destroy_subvolume(parent_fd, name)
        raise
    os.close(fd)


def destroy_subvolume(parent_fd: int, name: str) -> None:
    fcntl.ioctl(parent_fd, _SNAP_DESTROY, _vol_args(name))


def clone(target_fd: int, source_fd: int) -> None:
    """Make the file `target_fd` share the bytes of `source_fd` as they are now."""
    fcntl.ioctl(target_fd, FICLONE, source_fd)


def _vol_args(name: str) -> bytearray:
    # Mutable: fcntl.ioctl passes an immutable argument of at most 1024 bytes only.
    encoded = os.fsencode(name)
    if len(encoded) > _NAME_MAX or b"/" in encoded:
        raise ValueError("not a subvolume name")
    return bytearray(struct.pack("q", 0) + encoded.ljust(_VOL_ARGS - 8, b"\0"))
