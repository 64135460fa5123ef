"""Attacks on the HOST side of the sessions, from an unprivileged host user or as a
deployment could have left things: the sessions' root and its image, another user's
reach, setuid bits. Each asserts that the attack failed, and that the service still
serves. Each names the issue (and its item) that found it: 19 (round two), 23 (round
three)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.sandbox.local import btrfs
from codeexec.settings import Settings

from ..helpers.attacks import HOST_USER, KEY, as_host_user, exec_
from ..serving import Services

# Issue 19, item 6: The host side of a session.


def test_another_host_user_reaches_no_session_and_no_setuid_bit_holds(api: httpx.Client, sandbox_root: Path) -> None:
    code = "cp /usr/bin/id myid; chmod 4755 myid; chmod 777 /mnt/data; echo secret > secret.txt; chmod 644 secret.txt"
    session = exec_(api, code, lang="bash")["session_id"]
    data = sandbox_root / session / "data"
    attempt = as_host_user(f"cat {data}/secret.txt; ls {data}; {data}/myid -u; ls {sandbox_root}")
    assert "secret" not in attempt.stdout and "myid" not in attempt.stdout and session not in attempt.stdout
    assert attempt.stderr.count("Permission denied") >= 3
    assert os.statvfs(data).f_flag & os.ST_NOSUID  # even reached, the bit would do nothing
    assert (data.stat().st_mode & 0o777) == 0o777  # the run did chmod it...
    exec_(api, "true", lang="bash", session_id=session)
    assert (data.stat().st_mode & 0o777) == 0o700  # ...and the next run finds it closed again


@pytest.mark.parametrize("owner", [HOST_USER, 0])
def test_a_sandbox_root_someone_else_made_is_refused(
    settings: Settings, sandbox_root: Path, owner: int, services: Services
) -> None:
    planted = sandbox_root / "planted"
    planted.mkdir()
    if owner:
        os.chown(planted, owner, owner)
    else:  # ours, but in a directory another user may change
        planted.chmod(0o777)
        planted = planted / "root"
        planted.mkdir()
    with pytest.raises(RuntimeError, match="refusing it"):
        create_app(services(settings.model_copy(update={"sandbox_root": planted})))


# Issue 23, item 4: A sandbox image or root someone else made.


@pytest.fixture
def sticky_dir() -> Iterator[Path]:
    """A directory like /var/tmp: anyone may make names in it, nobody may move another's."""
    made = Path(tempfile.mkdtemp(prefix="codeexec-sticky-", dir="/var/tmp"))
    made.chmod(0o1777)
    assert not btrfs.is_btrfs(str(made))  # so the service would make an image there
    yield made
    for root in made.iterdir():
        if root.is_mount():
            subprocess.run(["umount", "-l", str(root)], check=True)
    subprocess.run(["rm", "-rf", str(made)], check=True)


def test_an_image_or_root_another_user_made_is_refused(
    api: httpx.Client, settings: Settings, sticky_dir: Path, services: Services
) -> None:
    def at(name: str) -> FastAPI:
        root = {"sandbox_root": sticky_dir / name, "sandbox_image_bytes": 1 << 30}  # sparse: no disk taken
        return create_app(services(settings.model_copy(update=root)))

    planted = as_host_user(f"cd {sticky_dir} && umask 0 && : > first.btrfs && mkdir second && ln -s /var/tmp third")
    assert planted.returncode == 0, planted.stderr
    for name, reason in (("first", "image .* belongs to uid 4321"), ("second", "belongs to uid 4321"),
                         ("third", "not a directory")):  # fmt: skip
        with pytest.raises(RuntimeError, match=f"{reason}.*refusing it"):
            at(name)
    # One the service makes itself is closed from its first moment.
    mine = at("mine")
    secret = exec_(TestClient(mine, headers=KEY), "open('secret.txt', 'w').write('secret')")["session_id"]
    image = sticky_dir / "mine.btrfs"
    assert (image.stat().st_uid, image.stat().st_mode & 0o777) == (0, 0o600)
    peek = as_host_user(f"grep -c secret {image}; ls {sticky_dir}/mine/{secret}")
    assert peek.stdout.strip() == "" and peek.stderr.count("Permission denied") == 2
