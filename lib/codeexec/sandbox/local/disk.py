"""How much disk a session's files take, counted so that a program cannot hide any.

A file counts at its size or its allocated blocks, whichever is larger (a sparse file
is small on disk but as large as its size to download), and every file and directory
at least one block, so a million empty files are not free. Hard links count once.
Symlinks are counted, never followed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

BLOCK = 4096


@dataclass(frozen=True)
class Usage:
    total: int  # bytes
    largest_file: int  # bytes


def usage(root: str) -> Usage:
    total = largest = 0
    seen: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:  # removed while we walked: the program is still running
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += max(st.st_size, st.st_blocks * 512, BLOCK)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                elif stat.S_ISREG(st.st_mode):
                    largest = max(largest, st.st_size)
    return Usage(total, largest)
