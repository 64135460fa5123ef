"""Recalculate every formula of a workbook in LibreOffice, then report the errors found.

    python scripts/recalc.py <file.xlsx> [timeout_seconds]
"""

import json
import subprocess
import sys
from pathlib import Path

from office.soffice import soffice_env
from openpyxl import load_workbook

MACRO_DIR = Path.home() / ".config/libreoffice/4/user/basic/Standard"
MACRO = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE script:module PUBLIC "-//OpenOffice.org//DTD OfficeDocument 1.0//EN" "module.dtd">
<script:module xmlns:script="http://openoffice.org/2000/script" script:name="Module1" script:language="StarBasic">
Sub Recalculate()
  ThisComponent.calculateAll()
  ThisComponent.store()
  ThisComponent.close(True)
End Sub
</script:module>"""
ERRORS = ("#VALUE!", "#DIV/0!", "#REF!", "#NAME?", "#NULL!", "#NUM!", "#N/A")


def install_macro() -> None:
    """The macro goes into LibreOffice's user profile, which its first start creates."""
    if not MACRO_DIR.exists():
        subprocess.run(["soffice", "--headless", "--terminate_after_init"], env=soffice_env(),
                       capture_output=True, timeout=60)
    MACRO_DIR.mkdir(parents=True, exist_ok=True)
    (MACRO_DIR / "Module1.xba").write_text(MACRO)


def recalc(path: Path, timeout: int) -> dict:
    install_macro()
    macro = "vnd.sun.star.script:Standard.Module1.Recalculate?language=Basic&location=application"
    done = subprocess.run(["timeout", str(timeout), "soffice", "--headless", "--norestore", macro, str(path.resolve())],
                          env=soffice_env(), capture_output=True, text=True)
    if done.returncode not in (0, 124):
        return {"error": done.stderr.strip() or f"soffice exited with {done.returncode}"}
    values = load_workbook(path, data_only=True)
    formulas = load_workbook(path)
    found = {error: [] for error in ERRORS}
    total_formulas = 0
    for sheet in formulas.worksheets:
        for row in sheet.iter_rows():
            for cell in row:
                if isinstance(cell.value, str) and cell.value.startswith("="):
                    total_formulas += 1
                value = values[sheet.title][cell.coordinate].value
                if value in found:
                    found[value].append(f"{sheet.title}!{cell.coordinate}")
    errors = {error: {"count": len(cells), "locations": cells[:20]} for error, cells in found.items() if cells}
    total = sum(len(cells) for cells in found.values())
    return {"status": "errors_found" if total else "success", "total_formulas": total_formulas,
            "total_errors": total, "error_summary": errors}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(json.dumps(recalc(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 30), indent=2))
