"""Unzip an Office file into a folder, its XML indented to be edited by hand.

    python scripts/office/unpack.py <file.docx|.pptx|.xlsx> <folder>
"""

import sys
import zipfile
from pathlib import Path

import defusedxml.minidom


def unpack(source: Path, folder: Path) -> int:
    with zipfile.ZipFile(source) as archive:
        archive.extractall(folder)
    pretty = 0
    for path in folder.rglob("*"):
        if path.suffix in (".xml", ".rels"):
            tree = defusedxml.minidom.parseString(path.read_bytes())
            path.write_bytes(tree.toprettyxml(indent="  ", encoding="UTF-8"))
            pretty += 1
    return pretty


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(f"unpacked {unpack(Path(sys.argv[1]), Path(sys.argv[2]))} XML parts into {sys.argv[2]}")
