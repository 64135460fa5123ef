"""The documentation against what it describes: every relative link and anchor in README.md
and docs/*.md resolves (a file that is there, a heading that is in it), every setting is
named and each README default is the setting's own, every `make` target and test marker
the docs name exists, and one Node.js is named everywhere: so that a page that drifted fails
here rather than for a reader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
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


# -- claims that can be checked against what they describe -----------------------------------

PROCESS_VARIABLES = {"HOST", "PORT", "SECRETS_DIR"}  # read by the servers' mains and settings' sources


def _tables(text: str) -> list[list[str]]:
    rows = (line for line in text.splitlines() if line.startswith("| `"))
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_every_setting_is_named_in_the_docs_and_every_documented_one_exists() -> None:
    from codeexec.settings import Settings

    named = set(re.findall(r"`([A-Z][A-Z0-9_]{2,})(?:=[^`]*)?`", "\n".join(page.read_text() for page in PAGES)))
    assert {field.upper() for field in Settings.model_fields} - named == set()
    rows = _tables((ROOT / "README.md").read_text())
    readme = {name for row in rows for name in re.findall(r"`([A-Z_]+)`", row[0])}
    assert readme - {field.upper() for field in Settings.model_fields} - PROCESS_VARIABLES == set()


def test_the_readme_says_each_settings_default() -> None:
    """Where a row names settings and their defaults one for one, they are Settings' own."""
    from codeexec.settings import Settings

    for row in _tables((ROOT / "README.md").read_text()):
        names, defaults = re.findall(r"`([A-Z_]+)`", row[0]), re.findall(r"`([^`]*)`", row[1])
        if len(names) != len(defaults) or not all(name.lower() in Settings.model_fields for name in names):
            continue
        for name, said in zip(names, defaults, strict=True):
            default = Settings.model_fields[name.lower()].default
            assert said in (str(default), f"{default:g}" if isinstance(default, float) else str(default)), (name, said)


def test_every_make_target_the_docs_name_exists() -> None:
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    said = {t for page in PAGES for t in re.findall(r"`make ([a-z][a-z0-9-]*)", page.read_text())}
    assert said - targets == set()


def test_the_markers_table_is_pytests_markers() -> None:
    import tomllib

    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = {marker.split(":")[0] for marker in pytest_options["markers"]}
    rows = _tables((ROOT / "docs/contributing.md").read_text())
    table = {row[0].strip("`") for row in rows if re.fullmatch(r"`[a-z]+`", row[0])}
    assert table == declared


def test_the_folders_table_is_the_tests_folders() -> None:
    rows = _tables((ROOT / "docs/contributing.md").read_text())
    table = {row[0].strip("`") for row in rows if re.fullmatch(r"`tests/\w+/`", row[0])}
    folders = {f"tests/{test.parent.name}/" for test in (ROOT / "tests").glob("*/test_*.py")}
    assert table == folders


def test_one_node_everywhere() -> None:
    """The Node.js the hosts and the image install (deps/node/node-version) is the one the docs name."""
    version = (ROOT / "deps/node/node-version").read_text().strip()
    for page in [*PAGES, ROOT / "Dockerfile"]:
        for said in re.findall(r"Node\.js (\d+(?:\.\d+\.\d+)?)(?! ?\d)", page.read_text()):
            assert version == said or version.split(".")[0] == said, (page.name, said)
