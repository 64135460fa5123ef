"""One image showing every slide of a deck, in a grid, each labelled with its number.

    python scripts/thumbnail.py <deck.pptx> <grid.jpg> [columns]
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from office.soffice import soffice_env
from PIL import Image, ImageDraw, ImageFont

WIDTH = 320  # of one slide in the grid


def slides_as_images(deck: Path, work: Path) -> list:
    subprocess.run(["soffice", "--headless", "--convert-to", "pdf", "--outdir", str(work), str(deck)],
                   env=soffice_env(), capture_output=True, check=True, timeout=120)
    pdf = work / f"{deck.stem}.pdf"
    subprocess.run(["pdftoppm", "-jpeg", "-r", "60", str(pdf), str(work / "slide")], check=True, capture_output=True)
    return sorted(work.glob("slide-*.jpg"))


def grid(images: list, columns: int) -> Image.Image:
    thumbs = []
    for path in images:
        image = Image.open(path)
        thumbs.append(image.resize((WIDTH, round(image.height * WIDTH / image.width))))
    height = thumbs[0].height + 24
    rows = -(-len(thumbs) // columns)
    sheet = Image.new("RGB", (columns * WIDTH, rows * height), "white")
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    for i, thumb in enumerate(thumbs):
        x, y = (i % columns) * WIDTH, (i // columns) * height
        sheet.paste(thumb, (x, y + 24))
        draw.text((x + 4, y + 4), str(i + 1), fill="black", font=font)
    return sheet


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as work:
        images = slides_as_images(Path(sys.argv[1]), Path(work))
        grid(images, int(sys.argv[3]) if len(sys.argv) > 3 else 3).save(sys.argv[2], quality=85)
    print(f"{len(images)} slides in {sys.argv[2]}")
