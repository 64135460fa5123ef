"""Runs forked from one warm interpreter (sandbox/local/warm/zygote.py) draw numbers of their
own: every generator the preloaded libraries keep is seeded afresh in each fork, as it is
in a cold run's new interpreter."""

from __future__ import annotations

import os

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.sandbox.local import cgroups
from codeexec.sandbox.local.warm.pools import Pool
from codeexec.settings import Settings

from ..calls import run
from ..conftest import API_KEY
from ..serving import Services

pytestmark = [
    pytest.mark.root,
    pytest.mark.cgroups,
    pytest.mark.skipif(
        os.geteuid() != 0 or "memory" not in cgroups.detect(), reason="warm sandboxes need root and a memory cgroup"
    ),
]

# One line per generator; the first says the run was forked from the interpreter with the libraries.
DRAWS = """
import sys
print('pandas' in sys.modules)
import random
import numpy as np
import pandas as pd
print(np.random.rand(), np.random.randint(1 << 30), np.random.normal())
print(np.random.default_rng().random())
print(pd.DataFrame({"x": range(1000)}).sample(3)["x"].tolist())
print(random.random())
import scipy.stats
print(scipy.stats.norm.rvs())
from sklearn.utils import check_random_state
print(check_random_state(None).rand())
"""


@pytest.fixture
def app(settings: Settings, services: Services) -> FastAPI:
    return create_app(services(settings.model_copy(update={"warm_python": 2, "warm_sandboxes": 1})))


def test_two_warm_runs_draw_different_numbers(app: FastAPI) -> None:
    client = TestClient(app, headers={"X-API-Key": API_KEY})
    pools: dict[str, Pool] = app.state.service.sandboxes.launcher.warm.pools
    draws = []
    for _ in range(2):
        assert pools["py"].wait_ready()
        reply = run(client, DRAWS)
        lines = reply["stdout"].splitlines()
        assert len(lines) == 7 and lines[0] == "True", reply  # forked warm, every generator drew
        draws.append(lines[1:])
    assert pools["py"].taken == 2
    same = [line for line, other in zip(*draws, strict=True) if line == other]
    assert not same, same
    assert client.get("/health").status_code == 200
