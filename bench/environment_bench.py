"""`make bench`, the environment's part: what each part of the sandbox's environment costs
on disk and to install, and what each preloaded library costs to import in a run.

- disk: the Python set and node_modules as installed under /opt/sandbox, and the
  directories Debian's packages fill (LibreOffice, Chromium, R's packages, pandoc, ...);
- install: the Python set (uv) and node_modules (npm ci) installed again from the locks
  into a scratch directory, each with an empty cache of its own: what a fresh machine
  pays for them (Debian's packages are timed once, in docs/libraries.md: apt cannot be undone);
- imports: each library of zygote.PRELOADED imported in a cold sandboxed run through the
  service, each in a run of its own (pandas's time includes numpy's), the median of several.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient
from pydantic import SecretStr
from roots import sandbox_root

from codeexec.api.app import create_app
from codeexec.sandbox.local import zygote
from codeexec.sandbox.local.toolchains import ENVIRONMENT
from codeexec.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
UV = ROOT / ".venv/bin/uv"
# What Debian's packages of the environment fill, by part (deps/apt.txt, apt-backports.txt).
DEBIAN_PARTS = {
    "LibreOffice 25.2 (writer, calc, impress)": ["/usr/lib/libreoffice"],
    "Chromium headless shell (plotly's PNGs)": ["/usr/lib/chromium"],
    "R packages (r-cran-*)": ["/usr/lib/R/site-library"],
    "pandoc": ["/usr/bin/pandoc"],
    "tesseract with English": ["/usr/share/tesseract-ocr"],
    "fonts: Liberation, WenQuanYi Micro Hei": ["/usr/share/fonts/truetype/liberation", "/usr/share/fonts/truetype/wqy"],
}


def du(*paths: str) -> int:
    found = [p for p in paths if os.path.exists(p)]
    if not found:
        return 0
    out = subprocess.run(["du", "-sbc", *found], capture_output=True, text=True, check=True).stdout
    return int(out.splitlines()[-1].split()[0])


def disk_table() -> None:
    print("\ndisk, MiB")
    rows = {"Python set (/opt/sandbox/python)": [f"{ENVIRONMENT}/python"], "node_modules": [f"{ENVIRONMENT}/node"]}
    for name, paths in {**rows, **DEBIAN_PARTS}.items():
        print(f"  {name:<44}{du(*paths) / 2**20:8.0f}")


def timed(argv: list[str], cwd: str | None = None) -> float:
    started = time.monotonic()
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True)
    return time.monotonic() - started


def install_table() -> None:
    print("\ninstall from the locks, empty caches, s")
    with tempfile.TemporaryDirectory() as scratch:
        python = timed([
            str(UV), "pip", "install", "--quiet", "--no-config", "--python", "/usr/bin/python3",
            "--target", f"{scratch}/python", "--cache-dir", f"{scratch}/uv-cache", "--require-hashes",
            "--only-binary", ":all:", "--compile-bytecode", "-r", str(ROOT / "deps/python/requirements.lock"),
        ])  # fmt: skip
        print(f"  {'Python set (uv, bytecode compiled)':<44}{python:8.1f}")
        node = Path(scratch) / "node"
        node.mkdir()
        for name in ("package.json", "package-lock.json"):
            (node / name).write_bytes((ROOT / "deps/node" / name).read_bytes())
        npm = ["npm", "ci", "--omit=dev", "--no-audit", "--no-fund", "--cache", f"{scratch}/npm-cache"]
        print(f"  {'node_modules (npm ci)':<44}{timed(npm, cwd=str(node)):8.1f}")


PROBE = """
import sys, time
start = time.perf_counter()
__import__(sys.argv[1])
print((time.perf_counter() - start) * 1000)
"""


def import_table(runs: int) -> None:
    print(f"\nimport in a cold sandboxed run, ms (median of {runs})")
    with sandbox_root() as root:
        settings = Settings(sandbox_root=root, code_exec_api_key=SecretStr("k"), warm_python=0, warm_sandboxes=0)
        client = TestClient(create_app(settings), headers={"X-API-Key": "k"})
        for name in zygote.PRELOADED:
            found = []
            for _ in range(runs):
                body = client.post("/v1/exec", json={"lang": "py", "code": PROBE, "args": [name]}).json()
                found.append(float(body["stdout"]))
            print(f"  {name:<44}{statistics.median(found):8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 runs an import, no reinstall")
    args = parser.parse_args()
    disk_table()
    if not args.quick:
        install_table()
    import_table(3 if args.quick else 7)


if __name__ == "__main__":
    main()
