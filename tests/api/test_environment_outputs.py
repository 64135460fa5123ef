"""What a run hands back, by kind (outputs.py, docs/environment.md "What a run hands back"):
every kind of file a user could have asked for comes back from a real run, and what a run
leaves behind unasked (bytecode, caches, hidden directories, scratch files) does not."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from codeexec.sessions.outputs import is_output

from ..calls import names, run

# One file of each kind a request ends with, beyond the reference server's list.
ASKED_FOR = {
    "media": ["clip.mp4", "clip.webm", "clip.mov", "clip.mkv", "song.mp3", "take.wav", "take.ogg", "memo.m4a",
              "take.flac", "take.aac", "loop.gif"],
    "notebooks": ["analysis.ipynb"],
    "skills": ["pdf-tools.skill"],
    "gis": ["parks.geojson", "route.kml", "route.kmz", "track.gpx", "parks/parks.shp", "parks/parks.dbf",
            "parks/parks.shx", "parks/parks.prj"],
    "fonts": ["brand.ttf", "brand.otf", "brand.woff", "brand.woff2"],
    "archives": ["all.zip", "all.tar", "all.tar.gz", "all.tgz", "all.tar.bz2", "all.tar.xz", "all.7z"],
    "databases": ["sales.sqlite", "sales.db", "sales.duckdb", "sales.parquet", "sales.feather", "sales.arrow"],
    "models": ["model.pkl", "model.joblib", "model.onnx", "model.h5", "model.pt", "model.safetensors",
               "weights.npy", "arrays.npz"],
    "documents": ["report.odt", "sheet.ods", "deck.odp", "book.epub", "letter.rtf", "paper.tex", "refs.bib",
                  "README.md", "page.html", "report.Rmd"],
}  # fmt: skip
LEFT_BEHIND = [
    "__pycache__/helper.cpython-311.pyc", "helper.pyc", ".cache/matplotlib/fontlist.json",
    ".ipynb_checkpoints/analysis-checkpoint.ipynb", ".ipython/profile_default/history.sqlite",
    ".local/share/jupyter/runtime/kernel.json", "a.out", "scratch", "core",
]  # fmt: skip
EVERY_KIND = sorted(name for kind in ASKED_FOR.values() for name in kind)

WRITE = """
import os, sys
for path in sys.argv[1:]:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    open(path, "wb").write(b"x")
"""


def test_each_kind_a_user_asks_for_comes_back_and_junk_does_not(client: TestClient) -> None:
    body = run(client, WRITE, args=EVERY_KIND + LEFT_BEHIND)
    assert body["stderr"] == ""
    assert sorted(names(body)) == EVERY_KIND


@pytest.mark.parametrize("kind", sorted(ASKED_FOR))
def test_each_kind_is_an_output(kind: str) -> None:
    assert [name for name in ASKED_FOR[kind] if not is_output(name)] == []


@pytest.mark.parametrize("path", LEFT_BEHIND)
def test_what_a_run_leaves_behind_is_not(path: str) -> None:
    assert not is_output(path)


def test_junk_stays_in_the_session_all_the_same(client: TestClient) -> None:
    made = run(client, WRITE, args=["__pycache__/m.pyc", "clip.mp4"])
    assert names(made) == ["clip.mp4"]
    listed = client.get(f"/v1/files/{made['session_id']}", params={"detail": "full"}).json()
    assert sorted(f["path"] for f in listed) == ["__pycache__/m.pyc", "clip.mp4"]
