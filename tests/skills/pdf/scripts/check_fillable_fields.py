"""Say whether a PDF has form fields to fill.

    python scripts/check_fillable_fields.py <file.pdf>
"""

import sys

from pypdf import PdfReader

if __name__ == "__main__":
    fields = PdfReader(sys.argv[1]).get_fields()
    print("This PDF has fillable form fields" if fields else "This PDF has no fillable form fields")
