"""The guide builds and every link holds: ``mkdocs build --strict`` (warnings fail: a missing page, a broken link or
anchor inside docs/), and every relative link and anchor of README.md, docs/*.md and analysis/README.md resolves,
with the anchor spelt as both GitHub and MkDocs spell a heading's id (the README is read on GitHub, the guide on
either). Every page in docs/ is in mkdocs.yml's nav."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.launch_helpers import REPO

DOCS = REPO / "docs"
PAGES = (REPO / "README.md", *sorted(DOCS.glob("*.md")), REPO / "analysis" / "README.md")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans, where ``[x](y)`` is no link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def heading_text(line: str) -> str:
    """A heading's text as rendered: without the ``#`` marks, code ticks, emphasis and link targets."""
    text = line.lstrip("#").strip()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return text.replace("`", "").replace("*", "")


def github_slug(text: str) -> str:
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def mkdocs_slug(text: str) -> str:
    from markdown.extensions.toc import slugify

    return slugify(text, "-")


def anchors(md: Path) -> tuple[set[str], set[str]]:
    """The heading ids of a page as GitHub and as MkDocs make them."""
    text = re.sub(r"^```.*?^```", "", md.read_text(), flags=re.S | re.M)
    heads = [heading_text(line) for line in text.splitlines() if re.match(r"#{1,6} ", line)]
    return {github_slug(h) for h in heads}, {mkdocs_slug(h) for h in heads}


def links(md: Path) -> list[str]:
    return LINK.findall(prose(md.read_text()))


def nav_pages() -> list[str]:
    def names(nav) -> list[str]:
        items = nav if isinstance(nav, list) else list(nav.values()) if isinstance(nav, dict) else [nav]
        return [n for item in items for n in (names(item) if isinstance(item, (list, dict)) else [item])]

    return names(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])


def test_the_link_finder_sees_links_and_skips_code():
    page = "[a](x.md) and ![img](img/p.png), `[not](code.md)`\n```\n[not](block.md)\n```\n[t](y.md#z \"title\")\n"
    assert LINK.findall(prose(page)) == ["x.md", "img/p.png", "y.md#z"]
    assert github_slug(heading_text("## MLflow: which system is better?")) == "mlflow-which-system-is-better"
    assert mkdocs_slug(heading_text("## What `report` writes")) == "what-report-writes"


@pytest.mark.parametrize("md", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_every_relative_link_and_anchor_resolves(md: Path):
    broken = []
    for target in links(md):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ... are not checked offline
            continue
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor:
            if dest.suffix != ".md":
                broken.append(f"{target}: an anchor into a file that is not Markdown")
                continue
            github, mkdocs = anchors(dest)
            if anchor not in github or anchor not in mkdocs:
                broken.append(f"{target}: no heading with this id (GitHub ids: {sorted(github)})")
    assert not broken, f"{md.relative_to(REPO)}: " + "; ".join(broken)


def test_lists_and_tables_follow_a_blank_line():
    """MkDocs' Markdown, unlike GitHub's, reads a list or table right under a paragraph line as more paragraph."""
    bad = []
    for md in DOCS.glob("*.md"):
        lines = md.read_text().splitlines()
        fenced = False
        for i, line in enumerate(lines[1:], 2):
            if line.startswith("```"):
                fenced = not fenced
            prev = lines[i - 2]
            if (not fenced and re.match(r"(\* |\d+\. |\|)", line) and prev.strip()
                    and not re.match(r"(\* |\d+\. |\||  )", prev)):
                bad.append(f"{md.name}:{i}")
    assert not bad, bad


def test_every_guide_page_is_in_the_nav():
    nav = set(nav_pages())
    assert {p.name for p in DOCS.glob("*.md")} <= nav
    assert all((DOCS / n).exists() for n in nav), [n for n in nav if not (DOCS / n).exists()]


@pytest.mark.slow
def test_mkdocs_builds_strict(tmp_path):
    """``mkdocs build --strict``: a warning (a nav page missing, a link to no page, an anchor no heading has) fails."""
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
                        "--site-dir", str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "WARNING" not in p.stderr, p.stderr[-3000:]
    assert (tmp_path / "site" / "methodology" / "index.html").exists()
