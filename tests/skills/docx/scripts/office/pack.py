"""Zip a folder made by unpack.py back into an Office file, after checking that every XML
part parses, and undoing the indentation unpack.py added.

    python scripts/office/pack.py <folder> <file.docx|.pptx|.xlsx>
"""

import sys
import zipfile
from pathlib import Path

import lxml.etree


def pack(folder: Path, target: Path) -> int:
    parser = lxml.etree.XMLParser(remove_blank_text=True)
    parts = sorted(p for p in folder.rglob("*") if p.is_file())
    # [Content_Types].xml first, as Office writes it.
    parts.sort(key=lambda p: p.name != "[Content_Types].xml")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in parts:
            data = path.read_bytes()
            if path.suffix in (".xml", ".rels"):
                data = lxml.etree.tostring(lxml.etree.fromstring(data, parser), xml_declaration=True,
                                           encoding="UTF-8", standalone=True)
            archive.writestr(str(path.relative_to(folder)), data)
    return len(parts)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(f"packed {pack(Path(sys.argv[1]), Path(sys.argv[2]))} parts into {sys.argv[2]}")
