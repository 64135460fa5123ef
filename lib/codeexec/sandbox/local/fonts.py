"""matplotlib's font cache, built once on the host and given to every Python run read-only
(layout.run_files).

Without it, each sandbox starts with an empty /tmp and matplotlib scans every font on the
system again (about 300 ms, in every run that draws a chart). The fonts are the host's
/usr, the same paths inside the sandbox, so a list built on the host holds inside. Built
by `make install` (`fonts.build()`); a host without it, or without matplotlib, runs as before.
"""

from __future__ import annotations

import os
import subprocess
import sys

from .layout import FONT_CACHE, PYTHON_LIBS


def build() -> None:
    """The cache as the sandbox's python3 builds it, with the environment's matplotlib (-S:
    none of the host's site-packages, as in a run), in FONT_CACHE, replacing what was there."""
    FONT_CACHE.mkdir(parents=True, exist_ok=True)
    for old in FONT_CACHE.glob("fontlist-*.json"):
        old.unlink()
    env = {
        "PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHON_LIBS, "MPLCONFIGDIR": str(FONT_CACHE), "MPLBACKEND": "Agg",
        "HOME": "/nonexistent",
    }  # fmt: skip
    code = "import matplotlib.font_manager"
    done = subprocess.run(["/usr/bin/python3", "-S", "-c", code], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"no matplotlib font cache (is the environment installed?): {done.stderr.strip()[-300:]}")
    for path in FONT_CACHE.iterdir():
        os.chmod(path, 0o644)
