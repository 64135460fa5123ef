"""A sandbox root the sandbox user cannot enter (a directory above it closed to others)
made every run an opaque 500; the service refuses to start instead, and says why."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from codeexec.sandbox.local import LocalSandboxes
from codeexec.settings import Settings

from ..calls import run

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="the local backend runs as root")]


def test_a_root_the_sandbox_user_cannot_enter_refuses_to_start(
    settings: Settings, sandbox_storage: Path, client: TestClient, local_sandboxes: Callable[[Settings], LocalSandboxes]
) -> None:
    closed = Path(tempfile.mkdtemp(prefix="closed-", dir=sandbox_storage))  # 0700, root's
    try:
        root = closed / "root"
        with pytest.raises(RuntimeError, match="cannot be entered by the sandbox user") as refused:
            local_sandboxes(settings.model_copy(update={"sandbox_root": root}))
        assert str(root) in str(refused.value) and "chmod o+x" in str(refused.value)
        closed.chmod(0o711)  # opened: the same root serves
        opened = local_sandboxes(settings.model_copy(update={"sandbox_root": root}))
        assert opened.languages
    finally:
        shutil.rmtree(closed, ignore_errors=True)
    assert client.get("/health").status_code == 200
    assert run(client, "print(6 * 7)")["stdout"] == "42\n"
