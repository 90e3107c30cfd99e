"""The README and the manuals under docs/: every relative link names a file that exists and, with an
``#anchor``, a heading of that file (GitHub's anchors), so moving a section cannot leave a dead link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ._support import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("services/*/README.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"#{1,6} (.*)")


def prose(page: Path) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    slugs: set[str] = set()
    repeats: dict[str, int] = {}
    for _, line in prose(page):
        if match := HEADING.fullmatch(line):
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1).strip())
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            n = repeats[slug] = repeats.get(slug, -1) + 1
            slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def test_the_anchor_rule_is_githubs() -> None:
    expected = {"quick-start-fresh-linux-machine-python-311", "the-gateway-8888", "embeddings-v1embeddings"}
    assert expected <= anchors(ROOT / "README.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for number, line in prose(page):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"line {number}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"line {number}: {target}: no such heading")
    assert not broken, broken
