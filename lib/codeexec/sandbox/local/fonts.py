"""matplotlib's font cache, built once on the host and given to every Python run read-only.

Without it, each sandbox starts with an empty /tmp and matplotlib scans every font on the
system again (about 300 ms, in every run that draws a chart). The fonts are the host's
/usr, the same paths inside the sandbox, so a list built on the host holds inside. Built
by `make install` (`fonts.build()`); a host without it, or
without matplotlib, runs as before.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from .toolchains import PYTHON_LIBS

CACHE_DIR = Path("/var/cache/codeexec/matplotlib")
# Where matplotlib looks inside the sandbox: HOME is /tmp, so ~/.cache/matplotlib.
SANDBOX_CACHE = "/tmp/.cache/matplotlib"


@functools.cache
def files() -> dict[str, bytes]:
    """The cache's files by their path inside the sandbox (read once per process)."""
    try:
        return {f"{SANDBOX_CACHE}/{path.name}": path.read_bytes() for path in CACHE_DIR.glob("fontlist-*.json")}
    except OSError:
        return {}


def build() -> None:
    """The cache as the sandbox's python3 builds it, with the environment's matplotlib (-S:
    none of the host's site-packages, as in a run), in CACHE_DIR, replacing what was there."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    for old in CACHE_DIR.glob("fontlist-*.json"):
        old.unlink()
    env = {
        "PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_LIBS, "MPLCONFIGDIR": str(CACHE_DIR), "MPLBACKEND": "Agg",
        "HOME": "/nonexistent",
    }  # fmt: skip
    code = "import matplotlib.font_manager"
    done = subprocess.run(["/usr/bin/python3", "-S", "-c", code], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"no matplotlib font cache (is the environment installed?): {done.stderr.strip()[-300:]}")
    for path in CACHE_DIR.iterdir():
        os.chmod(path, 0o644)
