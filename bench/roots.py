"""A fresh SANDBOX_ROOT for one benchmark: a directory in a btrfs filesystem made once
(the local backend's storage: kernel quotas per session), removed with its sessions."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from codeexec.sandbox.local import btrfs
from codeexec.sandbox.local.storage import Storage
from codeexec.settings import Settings

STORAGE = Path("/var/tmp/codeexec-bench")


@contextlib.contextmanager
def sandbox_root() -> Iterator[Path]:
    Storage.prepare(STORAGE, session_bytes=1 << 30, sandbox_gid=Settings().sandbox_gid, image_bytes=16 << 30)
    root = Path(tempfile.mkdtemp(prefix="root-", dir=STORAGE))
    try:
        yield root
    finally:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        for entry in root.iterdir():  # sessions are subvolumes
            with contextlib.suppress(OSError):
                btrfs.destroy_subvolume(fd, entry.name)
        os.close(fd)
        shutil.rmtree(root, ignore_errors=True)
