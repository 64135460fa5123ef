"""The few btrfs operations the `local` backend's storage needs, as ioctls.

A session is a btrfs subvolume with a quota group limit: the kernel refuses (EDQUOT) any
write, fallocate or file creation past it, at the moment it happens, which no
measurement from outside could. Ending a session destroys its subvolume in one call,
however deep the tree a program left in it; a subvolume nested in it (programs can no
longer make one: seccomp.py) is destroyed first, by its id. A snapshot of a file for a
download is a reflink (FICLONE): instant, and no later write to the file can reach it.

ioctls rather than the `btrfs` command: a session is leased on every G1 exec, and two
subprocesses there would cost more than the rest of the lease.
"""

from __future__ import annotations

import ctypes
import errno
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
_TREE_SEARCH = _ioc(_READ | _WRITE, 17, 4096)  # struct btrfs_ioctl_search_args: a key, then results
_INO_LOOKUP = _ioc(_READ | _WRITE, 18, 4096)  # struct btrfs_ioctl_ino_lookup_args: treeid, objectid, name
_SNAP_DESTROY_V2 = _ioc(_WRITE, 63, 4096)  # struct btrfs_ioctl_vol_args_v2
_SPEC_BY_ID = 1 << 4  # BTRFS_SUBVOL_SPEC_BY_ID: the v2 destroy names the subvolume by id
_ROOT_TREE = 1  # the tree that records which subvolume holds which
_ROOT_REF = 156  # key (parent id, ROOT_REF, child id): a subvolume nested in another
_FIRST_FREE_OBJECTID = 256  # the inode of every subvolume's top directory
_SEARCH_KEY = struct.Struct("7Q4I4Q")  # struct btrfs_ioctl_search_key, 104 bytes
_SEARCH_HEADER = struct.Struct("3Q2I")  # struct btrfs_ioctl_search_header: transid, objectid, offset, type, len
_U64_MAX = (1 << 64) - 1
_QUOTA_CTL = _ioc(_READ | _WRITE, 40, 16)  # struct btrfs_ioctl_quota_ctl_args: __u64 cmd, status
_QGROUP_LIMIT = _ioc(_READ, 43, 48)  # qgroupid, then struct btrfs_qgroup_limit (5 x __u64)
_FS_INFO = _ioc(_READ, 31, 1024)  # struct btrfs_ioctl_fs_info_args: max_id, num_devices, fsid[16], ...
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


def create_subvolume(parent_fd: int, name: str, max_bytes: int | None) -> None:
    """Make `name` under the directory `parent_fd` a new subvolume that may hold at most
    `max_bytes`, data and metadata together (None: no limit of its own)."""
    fcntl.ioctl(parent_fd, _SUBVOL_CREATE, _vol_args(name))
    if max_bytes is None:
        return
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    try:
        limit(fd, max_bytes)
    except OSError:
        os.close(fd)
        destroy_subvolume(parent_fd, name)
        raise
    os.close(fd)


def limit(fd: int, max_bytes: int) -> None:
    """Hold the subvolume the open directory `fd` is the top of to `max_bytes` from now on."""
    # qgroupid 0: the subvolume's own quota group.
    fcntl.ioctl(fd, _QGROUP_LIMIT, struct.pack("6Q", 0, _LIMIT_MAX_REFERENCED, max_bytes, 0, 0, 0))


def subvolume_id(fd: int) -> int:
    """The id of the subvolume the open directory `fd` is in (its quota group is 0/<id>)."""
    return _subvolume_id(fd)


def filesystem_id(fd: int) -> str:
    """The filesystem's UUID, which names it under /sys/fs/btrfs."""
    args = bytearray(1024)
    fcntl.ioctl(fd, _FS_INFO, args)
    raw = bytes(args[16:32]).hex()
    return f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"


def held(filesystem: str, subvolume: int) -> int:
    """The bytes the subvolume's quota group holds now, as its limit counts them: those
    accounted at the last commit and those written since (reserved until the next), the
    kernel's own figures, from sysfs."""
    group = f"/sys/fs/btrfs/{filesystem}/qgroups/0_{subvolume}"
    total = 0
    for figure in ("referenced", "rsv_data"):
        with open(f"{group}/{figure}", "rb") as counted:
            total += int(counted.read())
    return total


def destroy_subvolume(parent_fd: int, name: str) -> None:
    """Destroy the subvolume `name` under `parent_fd` with everything in it. One that holds
    another subvolume cannot be destroyed (ENOTEMPTY), so those go first, deepest first."""
    try:
        fcntl.ioctl(parent_fd, _SNAP_DESTROY, _vol_args(name))
        return
    except OSError as exc:
        if exc.errno != errno.ENOTEMPTY:
            raise
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    try:
        for nested in reversed(_nested(fd, _subvolume_id(fd))):
            fcntl.ioctl(fd, _SNAP_DESTROY_V2, _by_id(nested))
    finally:
        os.close(fd)
    fcntl.ioctl(parent_fd, _SNAP_DESTROY, _vol_args(name))


def _subvolume_id(fd: int) -> int:
    """The id of the subvolume the open directory `fd` is in."""
    args = bytearray(struct.pack("QQ", 0, _FIRST_FREE_OBJECTID).ljust(4096, b"\0"))
    fcntl.ioctl(fd, _INO_LOOKUP, args)
    return int(struct.unpack_from("Q", args)[0])


def _nested(fd: int, top: int) -> list[int]:
    """Every subvolume below `top`, each after the one that holds it (root only: it
    searches the filesystem's tree of subvolumes)."""
    found: list[int] = []
    pending = [top]
    while pending:
        children = _children(fd, pending.pop())
        found += children
        pending += children
    return found


def _children(fd: int, parent: int) -> list[int]:
    """The subvolumes directly below `parent`, from its ROOT_REF items, a buffer at a time."""
    children: list[int] = []
    while True:
        after = children[-1] + 1 if children else 0
        key = (_ROOT_TREE, parent, parent, after, _U64_MAX, 0, _U64_MAX, _ROOT_REF, _ROOT_REF, 4096, 0, 0, 0, 0, 0)
        args = bytearray(_SEARCH_KEY.pack(*key).ljust(4096, b"\0"))
        fcntl.ioctl(fd, _TREE_SEARCH, args)
        count = struct.unpack_from("I", args, 64)[0]  # nr_items, as the kernel rewrote it
        batch, offset = [], _SEARCH_KEY.size
        for _ in range(count):
            _, objectid, child, kind, length = _SEARCH_HEADER.unpack_from(args, offset)
            offset += _SEARCH_HEADER.size + length
            if kind == _ROOT_REF and objectid == parent:
                batch.append(child)
        if not batch:
            return children
        children += batch


def _by_id(subvolume_id: int) -> bytearray:
    # fd, transid, flags, four reserved words, then the id where a name would be.
    return bytearray(struct.pack("qQQ4QQ", 0, 0, _SPEC_BY_ID, 0, 0, 0, 0, subvolume_id).ljust(4096, b"\0"))


def clone(target_fd: int, source_fd: int) -> None:
    """Make the file `target_fd` share the bytes of `source_fd` as they are now."""
    fcntl.ioctl(target_fd, FICLONE, source_fd)


def _vol_args(name: str) -> bytearray:
    # Mutable: fcntl.ioctl passes an immutable argument of at most 1024 bytes only.
    encoded = os.fsencode(name)
    if len(encoded) > _NAME_MAX or b"/" in encoded:
        raise ValueError("not a subvolume name")
    return bytearray(struct.pack("q", 0) + encoded.ljust(_VOL_ARGS - 8, b"\0"))
