"""A run stopped at its limit while it writes a file: the file is listed as it was, and the
reply says that a file still being written may be cut short (not only that the run was
stopped)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..calls import names, run
from ..conftest import API_KEY
from ..serving import Services

WRITING = (
    "import time\nwith open('growing.txt', 'w') as out:\n    while True:\n        out.write('x' * 100)\n"
    "        time.sleep(0.01)\n"
)


@pytest.fixture
def client(settings: Settings, services: Services) -> TestClient:
    app = create_app(services(settings.model_copy(update={"run_timeout_seconds": 1})))
    return TestClient(app, headers={"X-API-Key": API_KEY})


def test_a_run_cut_while_writing_says_its_file_may_be_cut_short(client: TestClient) -> None:
    cut = run(client, WRITING)
    assert names(cut) == ["growing.txt"]
    lines = cut["stderr"].splitlines()
    assert lines[-2] == "Stopped: the run exceeded its 1 s time limit.", cut["stderr"][-500:]
    assert lines[-1] == (
        "The files are listed as they were when the run was stopped: one it was still writing may be cut short."
    )
    # A run stopped with nothing written, or one that ended, gets no such note.
    idle = run(client, "import time\ntime.sleep(5)")
    assert idle["stderr"] == "Stopped: the run exceeded its 1 s time limit.\n" and idle["files"] == []
    done = run(client, "open('done.txt', 'w').write('x')")
    assert done["stderr"] == "" and names(done) == ["done.txt"]
    assert client.get("/health").status_code == 200
