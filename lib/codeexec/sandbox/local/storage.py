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

With no such filesystem at SANDBOX_ROOT, the service (as root) makes one: a sparse image
file beside the root, formatted btrfs and loop-mounted there. A root that exists but is
someone else's, or on another filesystem with things in it, is refused at start.

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
from . import btrfs

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

    @classmethod
    def prepare(cls, root: Path, session_bytes: int, sandbox_gid: int, image_bytes: int = 0) -> Storage:
        """Check SANDBOX_ROOT, making its filesystem first where there is none."""
        if os.geteuid() != 0:
            raise RuntimeError("SANDBOX_BACKEND=local runs as root: it sets quota limits and drops to the sandbox uid")
        if not _on_btrfs(root):
            _provision(root, image_bytes)
        _close_to_others(root, sandbox_gid)
        _mount_inert(root)
        btrfs.enable_quotas(str(root))
        (root / _SPOOL).mkdir(mode=0o700, exist_ok=True)
        return cls(root, session_bytes, sandbox_gid)

    def create_session(self, name: str) -> Path:
        """A new subvolume for a session, limited to `session_bytes`; FileExistsError if taken."""
        self.check_room()
        with self._root_fd() as root_fd:
            btrfs.create_subvolume(root_fd, name, self.session_bytes)
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
                if exc.errno not in (errno.ENOTTY, errno.EINVAL):
                    raise
                shutil.rmtree(self.root / name)  # a plain directory (an older layout)

    def check_room(self) -> None:
        if shutil.disk_usage(self.root).free < _FLOOR_BYTES:
            raise BackendUnavailable("the sandbox storage is full; try again later", retry_after=60)

    def snapshot(self, fd: int) -> int:
        """A private copy of the open file as it is now (a reflink: instant), unnamed, gone
        when closed: a download then sends what the file was, whatever writes it later."""
        copy = os.open(self.root / _SPOOL, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            btrfs.clone(copy, fd)
        except OSError:
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


def over_limit(exc: OSError, limit: int) -> Exception:
    """A write's failure as the caller should hear it: the session's limit, else itself."""
    if exc.errno == errno.EDQUOT:
        return TooLarge(f"the session's files would exceed their {limit} byte limit")
    if exc.errno == errno.ENOSPC:
        return BackendUnavailable("the sandbox storage is full; try again later", retry_after=60)
    return exc


def _on_btrfs(root: Path) -> bool:
    """Whether the root is, or, made, will be, on btrfs (made here when its parent is)."""
    if not root.exists() and root.parent.is_dir() and btrfs.is_btrfs(str(root.parent)):
        root.mkdir(mode=0o700)
    return root.is_dir() and btrfs.is_btrfs(str(root))


def _provision(root: Path, image_bytes: int) -> None:
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise RuntimeError(
            f"SANDBOX_ROOT={root} is not on btrfs and is not empty: give it a btrfs filesystem "
            "(quota groups are how the kernel holds each session to its disk limit), or point "
            "SANDBOX_ROOT at a new path and the service makes one"
        )
    image = root.with_name(root.name + ".btrfs")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not image.exists():
        size = image_bytes or min(_IMAGE_MAX_BYTES, int(shutil.disk_usage(image.parent).free * _IMAGE_SHARE))
        with open(image, "xb") as made:
            made.truncate(size)  # sparse: the host's disk is taken only as sessions fill it
        image.chmod(0o600)
        _command("mkfs.btrfs", "-q", str(image))
    _command("mount", "-o", "loop,nosuid,nodev,noatime", str(image), str(root))
    log.info("mounted %s (btrfs) at SANDBOX_ROOT %s", image, root)


def _close_to_others(root: Path, sandbox_gid: int) -> None:
    """Refuse a root another user made (in world-writable /var/tmp, say), then close it."""
    st = root.stat()
    if st.st_uid != os.geteuid():
        raise RuntimeError(f"SANDBOX_ROOT={root} belongs to uid {st.st_uid}, not to this service: refusing it")
    os.chown(root, os.geteuid(), sandbox_gid)
    root.chmod(0o710)
    parent = root.parent.stat()
    if parent.st_uid not in (0, os.geteuid()) or (parent.st_mode & stat.S_IWOTH and not parent.st_mode & stat.S_ISVTX):
        raise RuntimeError(f"SANDBOX_ROOT={root} lies in a directory others may change: refusing it")


def _mount_inert(root: Path) -> None:
    """nosuid and nodev on the sessions' filesystem; a bind mount onto itself adds them."""
    flags = os.statvfs(root).f_flag
    if flags & os.ST_NOSUID and flags & os.ST_NODEV:
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
