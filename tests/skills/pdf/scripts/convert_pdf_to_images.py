"""Render each page of a PDF to a PNG (pdf2image, which runs poppler's pdftoppm).

    python scripts/convert_pdf_to_images.py <file.pdf> <folder>
"""

import os
import sys

from pdf2image import convert_from_path

if __name__ == "__main__":
    os.makedirs(sys.argv[2], exist_ok=True)
    for number, image in enumerate(convert_from_path(sys.argv[1], dpi=100), start=1):
        image.save(os.path.join(sys.argv[2], f"page_{number}.png"))
        print(f"page {number}: {image.size[0]}x{image.size[1]}")
