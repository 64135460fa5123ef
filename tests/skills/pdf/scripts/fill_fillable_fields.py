"""Fill a PDF's form fields from a JSON list of {"field_id", "value"}; a field id the form
does not have is an error, not a silent skip.

    python scripts/fill_fillable_fields.py <form.pdf> <values.json> <out.pdf>
"""

import json
import sys

from extract_form_field_info import field_info
from pypdf import PdfReader, PdfWriter

if __name__ == "__main__":
    reader = PdfReader(sys.argv[1])
    with open(sys.argv[2]) as given:
        values = {item["field_id"]: item["value"] for item in json.load(given)}
    known = {field["field_id"] for field in field_info(reader)}
    if unknown := sorted(set(values) - known):
        sys.exit(f"no such fields: {unknown}; the form has {sorted(known)}")
    writer = PdfWriter()
    writer.append(reader)
    for page in writer.pages:
        writer.update_page_form_field_values(page, values, auto_regenerate=False)
    writer.set_need_appearances_writer(True)
    writer.write(sys.argv[3])
    print(f"filled {len(values)} fields into {sys.argv[3]}")
