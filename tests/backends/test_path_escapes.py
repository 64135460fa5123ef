"""A path that leaves the session's directory is refused by every backend's own file layer,
whoever sends it: the API checks its own, but a runner's wire or any other caller of a
backend hands paths straight to it, and `..` would land beside the session's files (next
to its lease) or in another session."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from codeexec.auth import Caller
from codeexec.errors import BadRequest
from codeexec.sandbox import make_sandboxes
from codeexec.sandbox.local.sandboxes import LocalSandboxes
from codeexec.sandbox.port import OwnerTag, Placement
from codeexec.sessions.access import changing
from codeexec.settings import Settings

from ..calls import run
from ..conftest import API_KEY
from ..fakes.agentcore import RunningFake

ESCAPES = ["../escape.txt", "../../escape.txt", "a/../../escape.txt", "/escape.txt"]
CALLER = Caller("org-1", "user-1")


def test_the_local_file_layer_refuses_paths_out_of_the_session(
    settings: Settings, sandbox_root: Path, client: TestClient, local_sandboxes: Callable[[Settings], LocalSandboxes]
) -> None:
    sandboxes = local_sandboxes(settings)
    victim = sandboxes.write_files(Placement(changing(CALLER)), [("secret.txt", io.BytesIO(b"theirs"))], 100)
    # Also what is no file's name there: the directory itself ("." or an empty component).
    for path in [*ESCAPES, f"../../{victim}/data/secret.txt", "./escape.txt", "a//escape.txt"]:
        batch = [("fine.txt", io.BytesIO(b"x")), (path, io.BytesIO(b"x"))]  # as a runner's wire sends it
        with pytest.raises(BadRequest):
            sandboxes.write_files(Placement(changing(CALLER)), batch, 100)
    with sandboxes.create(OwnerTag("org-1", "user-1")) as sandbox:
        for path in ("../lease.json", "../lock", f"../../{victim}/data/secret.txt"):
            for attempt in (sandbox.open_file, sandbox.stat, sandbox.remove_file):
                with pytest.raises(BadRequest):
                    attempt(path)
            with pytest.raises(BadRequest):
                sandbox.write_file(path, io.BytesIO(b"x"), 100)
    assert not list(sandbox_root.rglob("escape.txt")) and not list(sandbox_root.rglob("fine.txt"))
    assert (sandbox_root / victim / "data" / "secret.txt").read_bytes() == b"theirs"
    assert client.get("/health").status_code == 200
    assert run(client, "print(6 * 7)")["stdout"] == "42\n"


def test_the_agentcore_backend_refuses_them_before_a_call(agentcore_fake: RunningFake) -> None:
    settings = Settings(
        sandbox_backend="agentcore", agentcore_endpoint_url=agentcore_fake.url, code_exec_api_key=SecretStr(API_KEY)
    )
    sandboxes = make_sandboxes(settings)
    before = list(agentcore_fake.fake.calls)
    for path in ESCAPES:
        with pytest.raises(BadRequest):
            sandboxes.write_files(Placement(changing(CALLER)), [(path, io.BytesIO(b"x"))], 100)
    assert agentcore_fake.fake.calls == before  # refused before anything reached AgentCore
