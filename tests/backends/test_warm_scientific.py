"""The scientific fork server (sandbox/local/warm/, policy.KINDS["scientific"]): a py run naming
SciPy, seaborn, scikit-learn, statsmodels or plotly is forked from the interpreter that has
imported them already; one naming pandas alone from the first server, as before; its
forks draw random numbers of their own, as every fork of every server does; and none
ends later than its program because of what the server imported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from codeexec.api.app import create_app
from codeexec.sandbox.local import cgroups
from codeexec.sandbox.local.layout import PYTHON_LIBS
from codeexec.sandbox.local.warm.pools import Pool
from codeexec.settings import Settings

from ..calls import run
from ..conftest import API_KEY
from ..helpers.processes import family
from ..serving import Services

pytestmark = [
    pytest.mark.root,
    pytest.mark.cgroups,
    pytest.mark.skipif(
        os.geteuid() != 0 or "memory" not in cgroups.detect(), reason="warm sandboxes need root and a memory cgroup"
    ),
]

# Each program says whether its family was imported before its own import ran.
FAMILIES = {
    "scipy.stats": "import scipy.stats\nprint(scipy.stats.norm.cdf(0))",
    "seaborn": "import seaborn as sns\nprint(sns.__name__)",
    "sklearn.linear_model": "from sklearn.linear_model import LinearRegression\n"
    "print(LinearRegression().fit([[0], [1]], [0, 2]).coef_[0])",
    "statsmodels.api": "import statsmodels.api as sm\nprint(sm.OLS([0, 2], sm.add_constant([0, 1])).fit().params[1])",
    "plotly.express": "import plotly.express as px\nprint(type(px.bar(x=[1], y=[1])).__name__)",
}
BEFORE = "import sys\nprint({name!r} in sys.modules)\n"

# One line per generator; the first says the run was forked from the scientific server.
DRAWS = """
import sys
print('statsmodels.api' in sys.modules)
import random
import numpy as np
import scipy.stats
from sklearn.utils import check_random_state
from sklearn.model_selection import train_test_split
print(np.random.rand(), np.random.default_rng().random(), random.random())
print(scipy.stats.norm.rvs(), scipy.stats.uniform.rvs(size=2).tolist())
print(check_random_state(None).rand(), train_test_split(list(range(100)), test_size=3)[1])
"""


@pytest.fixture
def app(settings: Settings, services: Services) -> FastAPI:
    return create_app(
        services(settings.model_copy(update={"warm_python": 1, "warm_scientific": 1, "warm_sandboxes": 1}))
    )


def pools(app: FastAPI) -> dict[str, Pool]:
    return app.state.service.sandboxes.launcher.warm.pools  # type: ignore[no-any-return]


def taken(app: FastAPI) -> dict[str, int]:
    return {name: pool.taken for name, pool in pools(app).items()}


def test_each_family_runs_forked_from_the_server_that_imported_it(app: FastAPI) -> None:
    client = TestClient(app, headers={"X-API-Key": API_KEY})
    assert all(pool.wait_ready(120) for pool in pools(app).values())
    for name, code in FAMILIES.items():
        before = taken(app)
        reply = run(client, BEFORE.format(name=name) + code)
        assert reply["stdout"].splitlines()[0] == "True", (name, reply)
        after = taken(app)
        assert {kind: after[kind] - before[kind] for kind in after} == {"py": 0, "scientific": 1, "bare": 0}, name
    # pandas alone still forks from the first server, which has none of them (named so that
    # the program does not name one).
    before = taken(app)
    reply = run(client, "import sys\nimport pandas\nprint('sk' 'learn' in sys.modules, 'pandas' in sys.modules)")
    assert reply["stdout"] == "False True\n", reply
    assert taken(app)["py"] == before["py"] + 1 and taken(app)["scientific"] == before["scientific"]
    assert client.get("/health").status_code == 200


def test_two_runs_of_the_scientific_server_draw_different_numbers(app: FastAPI) -> None:
    client = TestClient(app, headers={"X-API-Key": API_KEY})
    scientific = pools(app)["scientific"]
    draws = []
    for _ in range(2):
        assert scientific.wait_ready(120)
        lines = run(client, DRAWS)["stdout"].splitlines()
        assert len(lines) == 4 and lines[0] == "True", lines
        draws.append(lines[1:])
    assert scientific.taken == 2
    same = [line for line, other in zip(*draws, strict=True) if line == other]
    assert not same, same


def test_no_server_holds_a_thread_its_runs_would_wait_for(app: FastAPI) -> None:
    """A fork has only the thread that forked it: what a library's thread does for it (a
    cleaner its exit waits for, a pool its calls queue work on) a run would wait for
    forever. statsmodels imports polars where it can, and polars starts one at its import
    (its spill-file cleaner, which its exit handler waits for): no server imports it
    (policy.KEPT_OUT), and a run that does ends. The allocator's own thread (jemalloc,
    pyarrow's) makes itself again in a fork."""
    assert all(pool.wait_ready(120) for pool in pools(app).values())
    for kind, pool in pools(app).items():
        assert pool.server is not None
        names = {Path(f"/proc/{pid}/task/{task}/comm").read_text().strip()
                 for pid in family(pool.server) for task in os.listdir(f"/proc/{pid}/task")}  # fmt: skip
        assert names <= {"bwrap", "python3", "jemalloc_bg_thd"}, (kind, names)
    if not (Path(PYTHON_LIBS) / "polars").is_dir():
        return  # no polars in this environment
    code = "import sys, statsmodels.api, polars\nprint('polars' in sys.modules, polars.DataFrame({'a': [1, 2]}).height)"
    reply = run(TestClient(app, headers={"X-API-Key": API_KEY}), code)
    assert (reply["stdout"], reply["stderr"]) == ("True 2\n", ""), reply
    assert pools(app)["scientific"].taken == 1
