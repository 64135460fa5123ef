"""The document skills (tests/skills/: stand-ins written after Anthropic's docx, xlsx, pptx
and pdf skills, whose license forbids a copy) uploaded and run as LibreChat 3.9.2 does, by
the REAL @librechat/agents client (tests/contract_g2/skills_client.mjs), on `local`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import FastAPI

from codeexec.api.app import create_app
from codeexec.settings import Settings

from ..helpers.contract import drive_g2_client
from ..helpers.g2 import KID
from ..helpers.tokens import Issuer
from ..serving import Services


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    made = Issuer(tmp_path / "jwks.json")
    made.add_key(KID, "EdDSA")
    return made


@pytest.fixture
def app(settings: Settings, issuer: Issuer, services: Services) -> FastAPI:
    g2 = {
        "code_exec_auth_modes": frozenset({"jwt"}),
        "code_exec_jwt_jwks_url": issuer.url,
        "code_exec_jwt_issuer": "librechat",
        "code_exec_jwt_audience": "codeapi",
        # LibreOffice starts in a few seconds alone; a shared CI machine needs room.
        "run_timeout_seconds": 90,
    }
    return create_app(services(settings.model_copy(update=g2)))


def test_document_skills_run_their_scripts_on_a_users_files(live_server: str, issuer: Issuer) -> None:
    result = drive_g2_client(live_server, issuer, "skills_client.mjs")
    assert result["client"]["version"] == "3.9.2"

    # Each skill is one batch, its nested paths kept, the shared helper in those that need it.
    uploads = result["uploads"]
    assert {name: up["status"] for name, up in uploads.items()} == dict.fromkeys(("docx", "xlsx", "pptx", "pdf"), 200)
    assert "skills/xlsx/scripts/office/soffice.py" in uploads["xlsx"]["files"]
    assert "skills/pdf/scripts/fill_fillable_fields.py" in uploads["pdf"]["files"]
    assert result["inputs"]["content"].startswith("stdout:\ninputs made\n")

    runs = result["runs"]
    for name, ran in runs.items():
        assert ran["threw"] is False, (name, ran)
        assert "stderr:" not in ran["content"], (name, ran["content"])

    # xlsx: LibreOffice recalculated the workbook through the skill's Basic macro.
    report = json.loads(runs["xlsx"]["content"].removeprefix("stdout:\n").split("\n\n")[0])
    assert report["status"] == "errors_found" and report["total_formulas"] == 6, report
    assert report["error_summary"] == {"#DIV/0!": {"count": 1, "locations": ["Budget!D2"]}}

    # docx: pandoc read it, the XML was edited and packed, LibreOffice and poppler rendered it.
    assert runs["docx"]["content"].startswith("stdout:\n# Draft report\n")
    assert "page-1.png\nFinal report\n" in runs["docx"]["content"]

    # pptx: a grid of the three slides (soffice, pdftoppm, Pillow), and markitdown's text.
    assert runs["pptx"]["content"].startswith("stdout:\n3 slides in /mnt/data/grid.jpg\n3\n")

    # pdf: the form's fields found, filled, rendered, and merged with qpdf.
    assert runs["pdf"]["content"].startswith(
        "stdout:\nThis PDF has fillable form fields\n2 fields written to /mnt/data/fields.json\n"
        "filled 2 fields into /mnt/data/filled.pdf\npage 1: 827x1170\n2\n"
    ), runs["pdf"]["content"]

    assert {"budget.xlsx", "edited.docx", "grid.jpg", "filled.pdf", "pages/page_1.png"} <= set(result["outputs"])
    # Read back in a later turn, from the refs LibreChat kept of the outputs.
    read_back = result["read_back"]
    assert read_back["threw"] is False, read_back
    facts = json.loads(read_back["content"].removeprefix("stdout:\n").split("\n\n")[0])
    assert facts == {
        "budget": [2000, 0.6, "#DIV/0!"],
        "edited_heading": "Final report",
        "grid": [640, 2 * (240 + 24)],  # 4:3 slides, 320 px wide, under a 24 px label
        "filled": {"name": "Grace Hopper", "agree": "/Yes"},
    }
