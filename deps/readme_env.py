"""The list of the sandbox's libraries and tools in docs/libraries.md, written from deps/
(`make readme-env`, run by `make lock`): `python deps/readme_env.py docs/libraries.md`
rewrites the part between the markers; tests/test_environment.py checks that it matches
the locks.

Python and npm versions come from the locks. Debian's come from the machine that runs it
(`dpkg-query`): Debian 12 pins them by its release, and they change only with its updates.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

DEPS = Path(__file__).parent
BEGIN = "<!-- libraries: written by `make readme-env` from deps/; edit deps/, then run it -->"
END = "<!-- /libraries -->"
# deps/apt.txt lists the service's and the compilers' packages first; the environment's follow this line.
APT_MARK = "# The sandbox's libraries and tools"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def python_pins() -> dict[str, str]:
    lock = (DEPS / "python/requirements.lock").read_text()
    return {_normal(n): v for n, v in re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)", lock, re.MULTILINE)}


def python_asked() -> list[str]:
    lines = (DEPS / "python/requirements.in").read_text().splitlines()
    return [_normal(re.split(r"[\[<>=;\s]", line, maxsplit=1)[0]) for line in lines if line and line[0].isalnum()]


def node_pins() -> tuple[dict[str, str], int]:
    """The packages package.json asks for, at their locked versions, and how many the lock holds."""
    lock = json.loads((DEPS / "node/package-lock.json").read_text())["packages"]
    asked = json.loads((DEPS / "node/package.json").read_text())["dependencies"]
    return {name: lock[f"node_modules/{name}"]["version"] for name in sorted(asked)}, len(lock) - 1


def debian_packages() -> list[str]:
    apt = (DEPS / "apt.txt").read_text().split(APT_MARK, 1)[1].splitlines()[1:]
    backports = (DEPS / "apt-backports.txt").read_text().splitlines()
    return [line for line in [*apt, *backports] if line and not line.startswith("#")]


def debian_versions(packages: list[str]) -> dict[str, str]:
    shown = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${Version}\n", *packages], capture_output=True, text=True, check=False
    ).stdout
    return dict(line.split(" ", 1) for line in shown.splitlines())


def _listing(pins: dict[str, str]) -> str:
    return ", ".join(f"{name} {version}" for name, version in pins.items())


def python_paragraph() -> str:
    pins = python_pins()
    asked = {name: pins[name] for name in python_asked()}
    rest = {name: version for name, version in sorted(pins.items()) if name not in asked}
    return (
        f"**Python** ({len(pins)} packages in `deps/python/requirements.lock`): {_listing(asked)}; "
        f"and what they need: {_listing(rest)}."
    )


def node_paragraph() -> str:
    pins, total = node_pins()
    where = f"{total} packages in `deps/node/package-lock.json`, some for other platforms"
    return f"**Node.js** ({where}): {_listing(pins)}."


def debian_paragraph(versions: dict[str, str]) -> str:
    listed = {name: versions.get(name, "(not installed here)") for name in debian_packages()}
    return f"**Debian** (`deps/apt.txt`, LibreOffice from bookworm-backports): {_listing(listed)}."


def section(versions: dict[str, str]) -> str:
    return "\n\n".join([BEGIN, python_paragraph(), node_paragraph(), debian_paragraph(versions), END])


def main(page: Path) -> None:
    text = page.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    page.write_text(text[:start] + section(debian_versions(debian_packages())) + text[end:])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
