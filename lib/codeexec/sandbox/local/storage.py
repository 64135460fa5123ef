"""Where the `local` backend keeps sessions, and what holds them to their limits.

SANDBOX_ROOT is a btrfs filesystem (or a directory in one) with quota groups on, mounted
`nosuid,nodev`, owned by the service and closed to every other host user:

- Each session is a subvolume with a quota group limit, so the KERNEL refuses a write,
  an fallocate or a new file past the session's limit when it happens; nothing a
  program does between two looks can overshoot it. (This host's kernel, like many, has
  no ext4 or XFS project quotas; btrfs quota groups it has.)
- The filesystem's own size is the host-wide floor: all sessions together can never take
  more of the host's disk than it.
- `nosuid,nodev`: a setuid binary or a device node a run leaves is inert on the host.
- The root is the service's, mode 0710, group the sandbox gid: bubblewrap, running as
  the sandbox uid, can reach a session's data; no other host user can reach anything.

Without CAP_SYS_ADMIN (a runner under Pod Security "baseline", docs/kubernetes.md), the
filesystem must be given (a btrfs volume): the runner can make subvolumes, but neither turn
quota groups on nor set their limits, nor remount the root. Then a session has no disk limit
of its own: the filesystem's size bounds all sessions together, RLIMIT_FSIZE each file, and
the runner says so at its start.

With no such filesystem at SANDBOX_ROOT, the service (as root) makes one: a sparse image
file beside the root, formatted btrfs and loop-mounted there. Both are made exclusively
(mkdir, O_EXCL), closed from their first moment: in a sticky directory such as /var/tmp
another user could have made either name first, to read every session's bytes through
it. So a root, an image or the image behind a mounted root that exists but is someone
else's, or that others may read, is refused at start, as is a root on another filesystem
with things in it.

    python -m codeexec.sandbox.local.storage PATH    makes one at PATH ahead of time (for a
                                                     runner in a container: compose.yaml)
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ...errors import BackendUnavailable, TooLarge
from . import btrfs, capabilities

log = logging.getLogger("codeexec.storage")

_SPOOL = ".spool"  # snapshots of files being downloaded; never a session
# An image made here takes at most this share of the free space where it is made.
_IMAGE_SHARE = 0.5
_IMAGE_MAX_BYTES = 64 << 30
# Below this much free space no new session is leased: the ones there keep some room.
_FLOOR_BYTES = 256 << 20


@dataclass(frozen=True)
class Storage:
    root: Path
    session_bytes: int  # each session's limit, data and metadata together
    sandbox_gid: int
    limited: bool = True  # False: the runner may not set quota limits (no CAP_SYS_ADMIN)

    @classmethod
    def prepare(cls, root: Path, session_bytes: int, sandbox_gid: int, image_bytes: int = 0) -> Storage:
        """Check SANDBOX_ROOT, making its filesystem first where there is none."""
        if os.geteuid() != 0:
            raise RuntimeError("SANDBOX_BACKEND=local runs as root: it sets quota limits and drops to the sandbox uid")
        _own_directory(root)
        if btrfs.is_btrfs(str(root)):
            _check_image_behind(root)
        else:
            _provision(root, image_bytes)
        os.chown(root, os.geteuid(), sandbox_gid)
        root.chmod(0o710)
        _mount_inert(root)
        limited = _enable_quotas(root)
        (root / _SPOOL).mkdir(mode=0o700, exist_ok=True)
        return cls(root, session_bytes, sandbox_gid, limited)

    def create_session(self, name: str) -> Path:
        """A new subvolume for a session, limited to `session_bytes`; FileExistsError if taken."""
        self.check_room()
        with self._root_fd() as root_fd:
            btrfs.create_subvolume(root_fd, name, self.session_bytes if self.limited else None)
        path = self.root / name
        os.chown(path, 0, self.sandbox_gid)
        path.chmod(0o710)
        return path

    def destroy_session(self, name: str) -> None:
        """Gone in one call, however deep the tree in it (no walk that could fail halfway)."""
        with self._root_fd() as root_fd:
            try:
                btrfs.destroy_subvolume(root_fd, name)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    return
                if exc.errno not in (errno.ENOTTY, errno.EINVAL, errno.EPERM):
                    raise
                # A plain directory (an older layout), or a subvolume that only CAP_SYS_ADMIN
                # (or the mount option user_subvol_rm_allowed) destroys in one call: emptied
                # first, it goes as a directory.
                shutil.rmtree(self.root / name)

    def check_room(self) -> None:
        if shutil.disk_usage(self.root).free < _FLOOR_BYTES:
            raise BackendUnavailable("the sandbox storage is full; try again later", retry_after=60)

    def snapshot(self, fd: int) -> int:
        """A private copy of the open file as it is now, unnamed, gone when closed: a
        download then sends what the file was, whatever writes it later. A reflink,
        instant; a file that cannot be cloned (one marked no-copy-on-write, `chattr +C`,
        before programs were refused that) is copied byte by byte instead."""
        copy = os.open(self.root / _SPOOL, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            try:
                btrfs.clone(copy, fd)
            except OSError:
                _copy_all(fd, copy)
        except BaseException:
            os.close(copy)
            raise
        return copy

    @contextlib.contextmanager
    def _root_fd(self) -> Iterator[int]:
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)


def _copy_all(source: int, target: int) -> None:
    """The kernel copies, never this process (both files are on the sessions' filesystem)."""
    offset = 0
    while copied := os.copy_file_range(source, target, 1 << 30, offset, offset):
        offset += copied


def over_limit(exc: OSError, limit: int) -> Exception:
    """A write's failure as the caller should hear it: the session's limit, else itself."""
    if exc.errno == errno.EDQUOT:
        return TooLarge(f"the session's files would exceed their {limit} byte limit")
    if exc.errno == errno.ENOSPC:
        return BackendUnavailable("the sandbox storage is full; try again later", retry_after=60)
    return exc


def _own_directory(root: Path) -> None:
    """The root directory, made now, or one this service made before: never a link, never
    another user's (in /var/tmp anyone could have made it first), and in a directory no
    other user may change (a sticky one is fine: others may add names there, never move
    or remove ours)."""
    root.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    parent = root.parent.stat()
    if parent.st_uid not in (0, os.geteuid()) or (parent.st_mode & stat.S_IWOTH and not parent.st_mode & stat.S_ISVTX):
        raise RuntimeError(f"SANDBOX_ROOT={root} lies in a directory others may change: refusing it")
    try:
        root.mkdir(mode=0o700)
        return
    except FileExistsError:
        pass
    st = root.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeError(f"SANDBOX_ROOT={root} is not a directory (a link or a file): refusing it")
    _refuse_foreign(f"SANDBOX_ROOT={root}", st, others_may=stat.S_IWGRP | stat.S_IWOTH)


def _refuse_foreign(what: str, st: os.stat_result, others_may: int) -> None:
    if st.st_uid != os.geteuid():
        raise RuntimeError(f"{what} belongs to uid {st.st_uid}, not to this service: refusing it")
    if st.st_mode & others_may:
        raise RuntimeError(f"{what} is open to other users (mode {stat.S_IMODE(st.st_mode):o}): refusing it")


def _provision(root: Path, image_bytes: int) -> None:
    if any(root.iterdir()):
        raise RuntimeError(
            f"SANDBOX_ROOT={root} is not on btrfs and is not empty: give it a btrfs filesystem "
            "(quota groups are how the kernel holds each session to its disk limit), or point "
            "SANDBOX_ROOT at a new path and the service makes one"
        )
    image = root.with_name(root.name + ".btrfs")
    try:  # 0600 from its first moment: nobody else can hold it open to read it later
        fd = os.open(image, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        _check_image(image)
    else:
        size = image_bytes or min(_IMAGE_MAX_BYTES, int(shutil.disk_usage(image.parent).free * _IMAGE_SHARE))
        os.ftruncate(fd, size)  # sparse: the host's disk is taken only as sessions fill it
        os.close(fd)
        _command("mkfs.btrfs", "-q", str(image))
    _command("mount", "-o", "loop,nosuid,nodev,noatime", str(image), str(root))
    log.info("mounted %s (btrfs) at SANDBOX_ROOT %s", image, root)


def _check_image(image: Path) -> None:
    """An image that exists: a file of this service's that no other user may read."""
    try:
        fd = os.open(image, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise RuntimeError(f"the sandbox image {image} cannot be opened ({exc.strerror}): refusing it") from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode):
        raise RuntimeError(f"the sandbox image {image} is not a regular file: refusing it")
    _refuse_foreign(f"the sandbox image {image}", st, others_may=0o077)


def _check_image_behind(root: Path) -> None:
    """A root already on btrfs: when that filesystem is a loop-mounted image, the image
    must pass the same checks as one about to be mounted."""
    found = subprocess.run(["findmnt", "-nro", "SOURCE", "-T", str(root)], capture_output=True, text=True)
    device = found.stdout.strip().split("[", 1)[0]
    if not device.startswith("/dev/loop"):
        return
    try:
        backing = Path("/sys/block", Path(device).name, "loop", "backing_file").read_text().strip()
    except OSError:
        return
    if backing.endswith(" (deleted)"):  # a removed image has no name to check
        return
    if not os.path.lexists(backing):
        # A container given the root by its host (compose): the image is in the host's
        # filesystem, out of this one's sight, and the host that mounted it checked it.
        log.info("the sandbox image %s behind SANDBOX_ROOT is not in sight here: not checked", backing)
        return
    _check_image(Path(backing))


def _enable_quotas(root: Path) -> bool:
    """Quota groups on; False where the runner may not (no CAP_SYS_ADMIN)."""
    try:
        btrfs.enable_quotas(str(root))
    except PermissionError:
        log.warning(
            "sessions have no disk limit of their own: btrfs quota groups take CAP_SYS_ADMIN, which this "
            "process lacks; the filesystem's size bounds all sessions together and RLIMIT_FSIZE each file"
        )  # fmt: skip
        return False
    return True


def _mount_inert(root: Path) -> None:
    """nosuid and nodev on the sessions' filesystem; a bind mount onto itself adds them."""
    flags = os.statvfs(root).f_flag
    if flags & os.ST_NOSUID and flags & os.ST_NODEV:
        return
    if not capabilities.effective(capabilities.SYS_ADMIN):
        # Runs hold no_new_privs and no capability: a setuid file or a device node in a
        # session stays inert for them; nosuid,nodev guard whoever else mounts the volume.
        log.warning("SANDBOX_ROOT %s is not mounted nosuid,nodev and this process may not remount it", root)
        return
    _command("mount", "--bind", str(root), str(root))
    _command("mount", "-o", "remount,bind,nosuid,nodev", str(root))


def main() -> None:
    from ...settings import Settings

    settings = Settings()
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else settings.sandbox_root
    Storage.prepare(root, settings.max_session_bytes, settings.sandbox_gid, settings.sandbox_image_bytes)
    print(f"SANDBOX_ROOT {root}: btrfs with quota groups, nosuid,nodev")


def _command(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed preparing SANDBOX_ROOT: {done.stderr.strip()}")


if __name__ == "__main__":
    main()
