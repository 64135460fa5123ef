"""Write a PDF's form fields as JSON: id, type, page and rectangle of each.

    python scripts/extract_form_field_info.py <file.pdf> <fields.json>
"""

import json
import sys

from pypdf import PdfReader

TYPES = {"/Tx": "text", "/Btn": "checkbox", "/Ch": "choice"}


def field_info(reader: PdfReader) -> list:
    found = []
    for number, page in enumerate(reader.pages, start=1):
        for annotation in page.get("/Annots") or []:
            widget = annotation.get_object()
            if widget.get("/Subtype") != "/Widget" or "/T" not in widget:
                continue
            found.append({"field_id": widget["/T"], "type": TYPES.get(widget.get("/FT"), "other"), "page": number,
                          "rect": [round(float(v), 1) for v in widget["/Rect"]]})
    return found


if __name__ == "__main__":
    fields = field_info(PdfReader(sys.argv[1]))
    with open(sys.argv[2], "w") as out:
        json.dump(fields, out, indent=2)
    print(f"{len(fields)} fields written to {sys.argv[2]}")
