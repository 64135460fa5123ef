"""Every sandboxed Python's sitecustomize: not imported by the service, but written into each
run as /code/.site/sitecustomize.py (layout.PYTHON_SITE), found first on PYTHONPATH, so
neither Debian's nor a session's own sitecustomize runs.

It takes itself off the path and adds the session's directory at the end, after the
standard library and the installed packages. It answers `nltk.download` itself: a run
has no network, and the data programs ask for is installed (NLTK_DATA, deps/python/
nltk-data.py), so the downloader says that at once instead of failing on the network. And
it gives numba the kernels compiled at install, which it would otherwise compile again.
"""

from __future__ import annotations

import os
import sys

# Not `typing.TYPE_CHECKING`: every Python a run starts reads this file, and importing typing
# would slow each of them; the names below are for the type checker alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

# The names programs still download by, for the data NLTK 3.9 and later read in their place.
_RENAMED = {"punkt": "punkt_tab", "averaged_perceptron_tagger": "averaged_perceptron_tagger_eng"}


def _installed() -> list[str]:
    """The packages under NLTK_DATA, as the downloader names them (wordnet, vader_lexicon)."""
    root = os.environ.get("NLTK_DATA", "")
    try:
        kinds = [os.path.join(root, kind) for kind in sorted(os.listdir(root))]
        return sorted({name.removesuffix(".zip") for kind in kinds for name in os.listdir(kind)})
    except OSError:
        return []


def _download(
    self: object,
    info_or_id: str | Sequence[str] | None = None,
    *_: Any,
    quiet: bool = False,
    raise_on_error: bool = False,
    **__: Any,
) -> bool:
    """nltk.download, offline: True when all it names is installed, as NLTK returns."""
    installed = _installed()
    wanted: Iterable[str] = [info_or_id] if isinstance(info_or_id, str) else info_or_id or []
    missing = [name for name in wanted if _RENAMED.get(name, name) not in installed]
    if missing or not info_or_id:
        message = (
            f"[nltk_data] runs have no network access, and {', '.join(missing) or 'nothing'} cannot be "
            f"downloaded. Installed already, in {os.environ.get('NLTK_DATA')}: {', '.join(installed)}"
        )
        if raise_on_error:
            raise ValueError(message)
        print(message, file=sys.stderr)
        return False
    if not quiet:
        print(f"[nltk_data] runs have no network access; {', '.join(wanted)}: installed already", file=sys.stderr)
    return True


def _patch_nltk_downloader(module: Any) -> None:
    module.Downloader.download = _download
    module.download = module._downloader.download


def _copy_numba_cache(module: Any) -> None:
    """Before numba starts: the kernels compiled at install (librosa's, deps/python/
    numba-cache.py), kept beside numba in the locked set, copied to NUMBA_CACHE_DIR in the
    run's /tmp. numba reads no cache from a directory it cannot write, as the set is to a run."""
    built = os.path.join(os.path.dirname(os.path.dirname(module.__file__)), ".numba-cache")
    cache = os.environ.get("NUMBA_CACHE_DIR")
    if cache and os.path.isdir(built) and not os.path.exists(cache):
        import contextlib
        import shutil

        with contextlib.suppress(OSError):  # numba then compiles what it needs, as with no cache
            shutil.copytree(built, cache)


class _Hooks:
    """Finds the modules named below as the path would, and runs each one's hook once: before
    the module's code or after it."""

    def __init__(self) -> None:
        self.before = {"numba": _copy_numba_cache}
        self.after = {"nltk.downloader": _patch_nltk_downloader}

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        before, after = self.before.pop(name, None), self.after.pop(name, None)
        if before is None and after is None:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        loader: Any = spec and spec.loader
        if loader is not None:
            run = loader.exec_module

            def exec_module(module: Any) -> None:
                if before is not None:
                    before(module)
                run(module)
                if after is not None:
                    after(module)

            loader.exec_module = exec_module
        return spec


# Only as a run's sitecustomize: the service never imports this file, and would not be changed if it did.
if __name__ == "sitecustomize":
    sys.path[:] = [p for p in sys.path if p != "/code/.site"] + ["/mnt/data"]
    sys.meta_path.insert(0, _Hooks())
