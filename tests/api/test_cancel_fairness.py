"""Cancels that wait for their runs are capped per caller: one caller's flood of cancels
for runs that never come refuses its own, never another caller's early cancel."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from codeexec import ids
from codeexec.errors import RateLimited
from codeexec.sandbox.local.sandboxes import LocalSandboxes
from codeexec.settings import Settings

from ..calls import run


def test_one_callers_flood_of_cancels_leaves_anothers_early_cancel(
    settings: Settings, client: TestClient, local_sandboxes: Callable[[Settings], LocalSandboxes]
) -> None:
    sandboxes = local_sandboxes(settings)
    refused = 0
    for n in range(300):
        try:
            sandboxes.cancel(ids.run_key("org-1", "flooder", f"never-{n}"))
        except RateLimited:
            refused += 1
    assert 0 < refused < 300  # its own cap, reached
    early = ids.run_key("org-1", "someone-else", "their-request")
    sandboxes.cancel(early)  # taken: the flood was another caller's
    with sandboxes.running(early) as cancelled:
        assert cancelled is not None and cancelled()  # the run it was for sees it at its start
    assert client.get("/health").status_code == 200
    assert run(client, "print(6 * 7)")["stdout"] == "42\n"
