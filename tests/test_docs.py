"""The documentation's links: every relative link and anchor in README.md and docs/*.md
resolves (a file that is there, a heading that is in it), so that a page moved or a
heading renamed fails here rather than for a reader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The page without its code: a link or heading in a code block or span is an example."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The anchors a page's headings get, as GitHub makes them (lower case, punctuation
    dropped, spaces to hyphens, a repeated one numbered)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", _prose(page.read_text()), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not this repository's
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_checker_finds_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading, with punctuation!\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#a-heading-with-punctuation) [ok](there.md#twice-1) [ok](#self)\n"
        "[gone](missing.md) [bad](there.md#nowhere) `[code](ignored.md)` [web](https://example.com)\n"
        "```\n[fenced](ignored.md)\n```\n# Self\n"
    )
    assert broken_links(page) == ["missing.md: no such file", "there.md#nowhere: no such heading"]
