"""`make bench`, the environment's part: what each part of the sandbox's environment costs
on disk and to install, and what each preloaded library costs to import in a run.

- disk: the Python set and node_modules as installed under /opt/sandbox, and the
  directories Debian's packages fill (LibreOffice, Chromium, R's packages, pandoc, ...);
- install: the Python set (uv) and node_modules (npm ci) installed again from the locks
  into a scratch directory, each with an empty cache of its own: what a fresh machine
  pays for them (Debian's packages are timed once, in docs/libraries.md: apt cannot be undone);
- groups: what each group of the second round (docs/environment.md) adds, the packages it
  alone brings: Debian's (installed size of the closure of its packages that nothing else
  of deps/apt.txt needs), and the lock's (on disk under /opt/sandbox, and installed again
  from the lock into a scratch directory with an empty cache); and what the groups left out
  (a TeX set) would add, as apt reckons it;
- imports: each library of warm.KINDS['py'].preload imported in a cold sandboxed run through the
  service, each in a run of its own (pandas's time includes numpy's), the median of several.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient
from pydantic import SecretStr
from roots import sandbox_root

from codeexec.api.app import create_app
from codeexec.api.service import Service
from codeexec.sandbox.local import warm
from codeexec.sandbox.local.layout import ENVIRONMENT
from codeexec.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
UV = os.environ.get("UV", str(ROOT / ".venv/bin/uv"))
# What Debian's packages of the environment fill, by part (deps/apt.txt, apt-backports.txt).
DEBIAN_PARTS = {
    "LibreOffice 25.2 (writer, calc, impress)": ["/usr/lib/libreoffice"],
    "Chromium headless shell (plotly's PNGs)": ["/usr/lib/chromium"],
    "R packages (r-cran-*)": ["/usr/lib/R/site-library"],
    "pandoc": ["/usr/bin/pandoc"],
    "tesseract with English": ["/usr/share/tesseract-ocr"],
    "fonts: Liberation, WenQuanYi Micro Hei": ["/usr/share/fonts/truetype/liberation", "/usr/share/fonts/truetype/wqy"],
}
# The second round's groups (docs/environment.md), by the names deps/ lists them under.
DEBIAN_GROUPS = {
    "ffmpeg (with ffprobe)": ["ffmpeg"],
    "R reports (svglite, rmarkdown, knitr)": ["r-cran-svglite", "r-cran-rmarkdown", "r-cran-knitr"],
}
NOT_INSTALLED = {
    "TeX, Latin (pdflatex, recommended fonts)": [
        "texlive-latex-base", "texlive-latex-recommended", "texlive-fonts-recommended", "lmodern"],
    "TeX, Latin and CJK (xelatex, texlive-lang-cjk)": [
        "texlive-latex-base", "texlive-latex-recommended", "texlive-fonts-recommended", "lmodern", "texlive-xetex",
        "texlive-lang-cjk"],
}  # fmt: skip
PYTHON_GROUPS = {
    "notebook (nbformat, nbclient, nbconvert, ipykernel)": ["nbformat", "nbclient", "nbconvert", "ipykernel"],
    "geo (geopandas, shapely, pyproj, folium)": ["geopandas", "shapely", "pyproj", "folium"],
    "polars, duckdb": ["polars", "duckdb"],
    "xgboost-cpu": ["xgboost-cpu"],
    "PDF: weasyprint, cairosvg, svglib": ["weasyprint", "cairosvg", "svglib"],
    "PDF to Word: pdf2docx (PyMuPDF)": ["pdf2docx"],
    "bokeh": ["bokeh"],
    "the rest (pydub, pillow-heif, RTL, lifelines, ...)": [
        "pydub", "pillow-heif", "arabic-reshaper", "python-bidi", "numexpr", "lifelines", "docx2python", "pypdf2",
        "vsdx", "exifread", "hachoir"],
    # The third round's: BigCodeBench's evaluation environment.
    "BigCodeBench audio: soundfile, librosa, numba": ["soundfile", "librosa", "numba"],
    "BigCodeBench text: nltk, textblob, gensim, regex, ...": [
        "regex", "natsort", "nltk", "textblob", "gensim", "levenshtein", "wordninja"],
    "BigCodeBench web: flask and extensions, django, ...": [
        "flask", "flask-login", "flask-restful", "flask-wtf", "flask-mail", "wtforms", "werkzeug", "django",
        "mechanize", "pyquery", "requests-mock"],
    "BigCodeBench rest: holidays, geopy, crypto, pytest, ...": [
        "prettytable", "texttable", "xlwt", "holidays", "geopy", "dnspython", "datetime", "blake3", "rsa",
        "pycryptodome", "pytest", "pyfakefs"],
}  # fmt: skip
LOCK = ROOT / "deps/python/requirements.lock"


def du(*paths: str) -> int:
    found = [os.path.realpath(p) for p in paths if os.path.exists(p)]  # /opt/sandbox/<part> is a symlink
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


@functools.cache
def sdist_wheels() -> str:
    """The wheels of deps/python/sdists.txt, built as every install builds them (the lock pins
    their hashes, and no registry has them), for the installs below to find."""
    built = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, built)
    build = [str(ROOT / "deps/python/build-wheels.sh"), built]
    subprocess.run(build, check=True, capture_output=True, env={**os.environ, "UV": UV})
    return built


def install_table() -> None:
    print("\ninstall from the locks, empty caches, s")
    with tempfile.TemporaryDirectory() as scratch:
        python = timed([
            UV, "pip", "install", "--quiet", "--no-config", "--python", "/usr/bin/python3",
            "--target", f"{scratch}/python", "--cache-dir", f"{scratch}/uv-cache", "--require-hashes",
            "--only-binary", ":all:", "--find-links", sdist_wheels(), "--compile-bytecode",
            "-r", str(ROOT / "deps/python/requirements.lock"),
        ])  # fmt: skip
        print(f"  {'Python set (uv, bytecode compiled)':<44}{python:8.1f}")
        node = Path(scratch) / "node"
        node.mkdir()
        for name in ("package.json", "package-lock.json"):
            (node / name).write_bytes((ROOT / "deps/node" / name).read_bytes())
        npm = ["npm", "ci", "--omit=dev", "--no-audit", "--no-fund", "--cache", f"{scratch}/npm-cache"]
        print(f"  {'node_modules (npm ci)':<44}{timed(npm, cwd=str(node)):8.1f}")


def _lock_blocks() -> dict[str, tuple[str, set[str]]]:
    """Each locked distribution: its block of the lock (pin and hashes) and what it is there for."""
    blocks: dict[str, tuple[str, set[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text().split("\n", 2)[-1]):
        name = re.sub(r"[-_.]+", "-", block.split("==")[0]).lower()
        pin = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("#"))
        via = set(re.findall(r"#(?: via|  ) (-r|[A-Za-z0-9_.\-]+)", block))  # -r: asked for by name
        blocks[name] = (pin, {re.sub(r"[-_.]+", "-", v).lower() if v != "-r" else v for v in via})
    return blocks


def _closure(roots: set[str], blocks: dict[str, tuple[str, set[str]]]) -> set[str]:
    found, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += [child for child, (_, via) in blocks.items() if name in via]
    return found


def _top_levels(dist: str) -> set[str]:
    """The entries under /opt/sandbox/python a distribution installed (its RECORD)."""
    for info in Path(f"{ENVIRONMENT}/python").glob("*.dist-info"):
        if re.sub(r"[-_.]+", "-", info.name.removesuffix(".dist-info").rsplit("-", 1)[0]).lower() == dist:
            record = (info / "RECORD").read_text().splitlines()
            return {line.split("/")[0].split(",")[0] for line in record} - {"bin", "..", ""}
    return set()


def python_groups(install: bool) -> None:
    print("\nthe lock's groups: what each alone brings (distributions, MiB on disk, s to install)")
    blocks = _lock_blocks()
    roots = {name for name, (_, via) in blocks.items() if "-r" in via}
    for group, names in PYTHON_GROUPS.items():
        own = _closure(set(names), blocks) - _closure(roots - set(names), blocks)
        disk = du(*(f"{ENVIRONMENT}/python/{entry}" for dist in own for entry in _top_levels(dist)))
        seconds = _install_alone([blocks[name][0] for name in sorted(own)]) if install else float("nan")
        print(f"  {group:<52}{len(own):4d}{disk / 2**20:8.0f}{seconds:8.1f}")


def _install_alone(pins: list[str]) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        Path(scratch, "lock.txt").write_text("\n".join(pins) + "\n")
        return timed([
            UV, "pip", "install", "--quiet", "--no-config", "--python", "/usr/bin/python3", "--no-deps",
            "--target", f"{scratch}/python", "--cache-dir", f"{scratch}/uv-cache", "--require-hashes",
            "--only-binary", ":all:", "--find-links", sdist_wheels(), "--compile-bytecode", "-r", f"{scratch}/lock.txt",
        ])  # fmt: skip


def _debian_closure(packages: list[str]) -> set[str]:
    out = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--installed", "--no-recommends", "--no-suggests", "--no-conflicts",
         "--no-breaks", "--no-replaces", "--no-enhances", *packages],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {line.split(":")[0] for line in out.splitlines() if line and not line.startswith((" ", "<"))}


def _installed_kib(packages: set[str]) -> int:
    if not packages:
        return 0
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Installed-Size}\n", *packages], capture_output=True, text=True)
    return sum(int(size) for size in out.stdout.split() if size.isdigit())


def debian_groups() -> None:
    print("\nDebian's groups: what each alone brings (packages, MiB installed)")
    listed = [line for line in (ROOT / "deps/apt.txt").read_text().split() if not line.startswith("#")]
    for group, packages in DEBIAN_GROUPS.items():
        own = _debian_closure(packages) - _debian_closure([p for p in listed if p not in packages])
        print(f"  {group:<52}{len(own):4d}{_installed_kib(own) / 1024:8.0f}")
    print("left out, as apt reckons it on this host (packages, MiB installed, MiB to download)")
    for group, packages in NOT_INSTALLED.items():
        plan = subprocess.run(["apt-get", "install", "-s", "--no-install-recommends", *packages],
                              capture_output=True, text=True).stdout  # fmt: skip
        new = re.findall(r"^Inst (\S+)", plan, re.MULTILINE)
        show = subprocess.run(["apt-cache", "show", "--no-all-versions", *new], capture_output=True, text=True).stdout
        kib = sum(int(n) for n in re.findall(r"^Installed-Size: (\d+)", show, re.MULTILINE))
        download = sum(int(n) for n in re.findall(r"^Size: (\d+)", show, re.MULTILINE))
        print(f"  {group:<52}{len(new):4d}{kib / 1024:8.0f}{download / 2**20:8.0f}")


PROBE = """
import sys, time
start = time.perf_counter()
__import__(sys.argv[1])
print((time.perf_counter() - start) * 1000)
"""


def import_table(runs: int) -> None:
    print(f"\nimport in a cold sandboxed run, ms (median of {runs})")
    with sandbox_root() as root:
        settings = Settings(
            sandbox_root=root, code_exec_api_key=SecretStr("k"), warm_python=0, warm_sandboxes=0, warm_scientific=0
        )
        with Service(settings) as service:
            client = TestClient(create_app(service), headers={"X-API-Key": "k"})
            for name in warm.KINDS["py"].preload:
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
    debian_groups()
    python_groups(install=not args.quick)
    if not args.quick:
        install_table()
    import_table(3 if args.quick else 7)


if __name__ == "__main__":
    main()
