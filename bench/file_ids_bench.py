"""A session's record of its files' ids (issue 42, item 1; sandbox/local/fileids.py): what a
bare id cost to find before (a listing of the session) and now (a link read), and what the
record costs the run that makes the files, against the same run with no record kept, in a
session of `--files` files.

    python bench/file_ids_bench.py [--files 30000]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterable, Iterator

from roots import sandbox_root

from codeexec import ids
from codeexec.errors import FileNotFound
from codeexec.sandbox import make_sandboxes
from codeexec.sandbox.local import LocalSandboxes, files
from codeexec.sandbox.local.fileids import FileIds
from codeexec.sandbox.port import Access, Intent, OwnerTag, Placement, Program, Run
from codeexec.settings import Settings

OWNER = OwnerTag("bench", "user")


@contextlib.contextmanager
def no_record() -> Iterator[None]:
    """The run as before the record: no link written."""
    record = FileIds._record

    def nothing(self: FileIds, paths: Iterable[str]) -> bool:
        return False

    FileIds._record = nothing  # type: ignore[method-assign]
    try:
        yield
    finally:
        FileIds._record = record  # type: ignore[method-assign]


def made(sandboxes: LocalSandboxes, count: int) -> tuple[str, float]:
    code = f"for n in range({count}):\n    open(f'f{{n}}', 'w').close()"
    started = time.perf_counter()
    ran = sandboxes.execute(Run(Program("py", code, timeout=120), Placement(Access(OWNER, Intent.LAND))))
    return ran.session_id, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=30_000)
    count = parser.parse_args().files
    read = Access(OWNER, Intent.READ)
    with sandbox_root() as root:
        cold = {"sandbox_root": root, "warm_python": 0, "warm_sandboxes": 0, "warm_scientific": 0}
        sandboxes = make_sandboxes(Settings(**cold))
        assert isinstance(sandboxes, LocalSandboxes)
        try:
            session, with_record = made(sandboxes, count)
            with no_record():
                _, without = made(sandboxes, count)
            made_up = ids.derived_id("made", "up")
            listing, lookup = [], []
            for _ in range(5):
                started = time.perf_counter()
                data = str(root / session / "data")
                next((f for f in files.list_beneath(data) if ids.file_id(session, f.path) == made_up), None)
                listing.append(time.perf_counter() - started)
                started = time.perf_counter()
                with contextlib.suppress(FileNotFound):
                    sandboxes.stat_file(session, read, made_up)
                lookup.append(time.perf_counter() - started)
        finally:
            sandboxes.close()
    print(f"a session of {count} files:")
    print(f"  a made-up id, by a listing (before): p50 {statistics.median(listing) * 1000:.0f} ms;"
          f" by the record (now, the whole call): p50 {statistics.median(lookup) * 1000:.2f} ms")
    print(f"  the run that made them: {with_record:.2f} s keeping the record, {without:.2f} s without"
          f" (+{(with_record - without) / count * 1e6:.0f} us a file)")


if __name__ == "__main__":
    main()
