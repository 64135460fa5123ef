"""The sessions' storage where the runner holds no CAP_SYS_ADMIN (Pod Security "baseline",
docs/kubernetes.md): on a btrfs filesystem it was given, it makes sessions without a disk
limit of their own, and says so, rather than fail to start."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from codeexec.settings import Settings

pytestmark = pytest.mark.root

# Root, with CAP_SYS_ADMIN out of every set it could get it back from.
WITHOUT_SYS_ADMIN = ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--ambient-caps=-sys_admin", "--"]
PROBE = """
import logging, os, sys
from pathlib import Path
from codeexec.sandbox.local.storage import Storage
logging.basicConfig(level=logging.WARNING)
if "--as-if-suid" in sys.argv:  # the filesystem seen as a volume mounted without nosuid,nodev
    real = os.statvfs
    class Flagless:
        def __init__(self, result): self.result = result
        def __getattr__(self, name): return 0 if name == "f_flag" else getattr(self.result, name)
    os.statvfs = lambda path: Flagless(real(path))
storage = Storage.prepare(Path(sys.argv[1]), session_bytes=1 << 20, sandbox_gid=int(sys.argv[2]))
path = storage.create_session("s1")
try:
    with open(path / "big", "wb") as f:  # twice the session's bytes: only a quota group stops it
        f.write(b"x" * (2 << 20))
    print("limited" if storage.limited else "unlimited", os.stat(path / "big").st_size)
finally:
    storage.destroy_session("s1")
"""


def test_without_cap_sys_admin_sessions_are_made_without_a_limit_of_their_own(sandbox_storage: Path) -> None:
    parent = Path(tempfile.mkdtemp(prefix="unprivileged-", dir=sandbox_storage))
    try:
        argv = [*WITHOUT_SYS_ADMIN, sys.executable, "-c", PROBE, str(parent / "root"), str(Settings().sandbox_gid)]
        done = subprocess.run([*argv, "--as-if-suid"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["unlimited", str(2 << 20)]
        assert "sessions have no disk limit of their own" in done.stderr
        assert "is not mounted nosuid,nodev and this process may not remount it" in done.stderr
        assert not (parent / "root" / "s1").exists()  # ended all the same
        # The same, with CAP_SYS_ADMIN: the session's limit holds (the probe fails on its write).
        held = subprocess.run(argv[len(WITHOUT_SYS_ADMIN):], capture_output=True, text=True, timeout=60)
        assert "Disk quota exceeded" in held.stderr
    finally:
        shutil.rmtree(parent)
