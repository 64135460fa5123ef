"""Installing the environment while runs go on (deps/environment.sh): each part is swapped in
whole by one rename, so a reader finds the old set or the new one, never none or half of
one, and a failed install leaves the set that was there."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "deps/environment.sh"


def _install(part: str, prefix: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), part, str(prefix)], capture_output=True, text=True, env=env, check=False)


def _built(prefix: Path, part: str) -> list[str]:
    return sorted(p.name for p in prefix.iterdir() if p.name.startswith(f"{part}.") and p.is_dir())


def test_a_reader_never_sees_a_half_made_part(tmp_path: Path) -> None:
    assert _install("tools", tmp_path).returncode == 0
    wanted = [tmp_path / "tools/matplotlibrc", tmp_path / "tools/bin/pandoc", tmp_path / "tools/dpkg/status"]
    reads, misses, done = [0], [], threading.Event()

    def read() -> None:
        while not done.is_set():
            misses.extend(str(path) for path in wanted if not path.is_file())
            reads[0] += 1

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(5):
            assert _install("tools", tmp_path).returncode == 0
    finally:
        done.set()
        reader.join()
    assert misses == [] and reads[0] > 50
    assert [os.readlink(tmp_path / "tools")] == _built(tmp_path, "tools")  # the old ones are gone


def test_a_failed_install_leaves_the_set_that_was_there(tmp_path: Path) -> None:
    # npm stands in for a registry: the first install succeeds, the second fails midway.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "npm").write_text(
        "#!/bin/sh\n[ -e \"$FAIL\" ] && { mkdir -p node_modules/half; exit 1; }\n"
        "mkdir -p node_modules/left-pad && echo first > node_modules/left-pad/index.js\n"
    )
    (fake / "npm").chmod(0o755)
    prefix, fail = tmp_path / "sandbox", tmp_path / "fail"
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "FAIL": str(fail)}
    assert _install("node", prefix, env).returncode == 0
    first = os.readlink(prefix / "node")
    # Its sources as they were: nothing to do, whatever their files' times (a fresh clone's).
    os.utime(ROOT / "deps/node/package-lock.json")
    assert _install("node", prefix, env).returncode == 0 and os.readlink(prefix / "node") == first

    (prefix / "node.lock").write_text("what an older lock said\n")  # the sources changed since
    fail.touch()
    assert _install("node", prefix, env).returncode != 0
    assert os.readlink(prefix / "node") == first
    assert (prefix / "node/node_modules/left-pad/index.js").read_text() == "first\n"
    assert len(_built(prefix, "node")) == 2  # the half-made one, beside

    fail.unlink()
    assert _install("node", prefix, env).returncode == 0
    assert os.readlink(prefix / "node") != first
    assert _built(prefix, "node") == [os.readlink(prefix / "node")]  # and then swept away
