"""Which version of a library the code models write runs on: the measure behind a hold
(docs/libraries.md "Versions"). The programs of model_programs.py for that library run on
each version asked for, installed alone into a scratch directory that comes before the
sandbox's set on the path (uv, wheels only), each in a fresh /usr/bin/python3. Prints
each program's outcome on each version, and how many fail on one and not the other.

    python bench/versions_bench.py polars 1.44.2 2.1.0
    python bench/versions_bench.py scipy 1.15.3 1.17.1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from model_programs import PROGRAMS

from codeexec.sandbox.local.layout import PYTHON_LIBS

ROOT = Path(__file__).resolve().parent.parent
UV = os.environ.get("UV", str(ROOT / ".venv/bin/uv"))


def install(package: str, version: str, into: str) -> None:
    subprocess.run(
        [UV, "pip", "install", "--quiet", "--no-config", "--python", "/usr/bin/python3", "--target", into,
         "--only-binary", ":all:", f"{package}=={version}"],
        check=True,
    )  # fmt: skip


def outcome(code: str, path: str) -> str:
    """'ok', or the exception's last line."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["/usr/bin/python3", "-s", "-c", code], capture_output=True, text=True, env=env, timeout=120)
    if done.returncode == 0:
        return "ok"
    lines = done.stderr.strip().splitlines()
    return lines[-1][:90] if lines else f"exit {done.returncode}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("package", choices=sorted(PROGRAMS))
    parser.add_argument("versions", nargs=2)
    parser.add_argument("--libs", default=PYTHON_LIBS, help="the rest of the set (default: the installed one)")
    args = parser.parse_args()
    data, programs = PROGRAMS[args.package]
    results: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for version in args.versions:
            into = f"{scratch}/{version}"
            install(args.package, version, into)
            results[version] = {name: outcome(data + code, f"{into}:{args.libs}") for name, code in programs.items()}
    old, new = args.versions
    print(f"# {args.package}: {len(programs)} programs as models write them, on {old} and on {new}")
    for name in programs:
        print(f"  {name:28} {results[old][name]:36.36} {results[new][name]}")
    failed = {version: {name for name, out in found.items() if out != "ok"} for version, found in results.items()}
    print(f"fail on {old}: {len(failed[old])}; on {new}: {len(failed[new])}")
    print(f"fail on {new} only: {len(failed[new] - failed[old])} {sorted(failed[new] - failed[old])}")
    print(f"fail on {old} only: {len(failed[old] - failed[new])} {sorted(failed[old] - failed[new])}")


if __name__ == "__main__":
    main()
