"""The docs as a product: every Python block in docs/ runs, every link and anchor resolves.

A ```python block runs as it stands, in a fresh temporary directory, as ``__main__``. A block
that is a piece of a larger program says so on the line before its fence::

    <!-- fragment: why it cannot run alone -->

and is then compiled only (its syntax is still checked, top-level ``await`` allowed). README.md's
blocks are compiled here; its API screen runs as examples/first_program (its own test). Links are
checked offline: a relative link must name a file of the repository, and a ``#anchor`` a heading
of that page (the anchors MkDocs and GitHub both make); external links are not fetched.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted([*DOCS.rglob("*.md"), ROOT / "README.md", ROOT / "CHANGELOG.md"])
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
FRAGMENT = re.compile(r"<!--\s*fragment:\s*(.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str
    fragment: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def python_blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) != "python":
            continue
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marked = FRAGMENT.search(before)
        fragment = (marked.group(1) if marked else
                    "README: run as examples/first_program" if page.name == "README.md" else
                    "the tutorial's program: tests/test_tutorial.py runs it as the page says"
                    if page.name == "tutorial.md" else None)
        out.append(Block(page, line, m.group(2), fragment))
    return out


BLOCKS = [b for page in PAGES if page.name != "CHANGELOG.md" for b in python_blocks(page)]


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_python_block(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = compile(block.code, block.name, "exec",
                   flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if block.fragment else 0)
    if block.fragment:
        return
    monkeypatch.chdir(tmp_path)
    exec(code, {"__name__": "__main__", "__file__": str(tmp_path / "block.py")})


# -- links --------------------------------------------------------------------------------------
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor of a heading, as GitHub and MkDocs' toc make it (markdown marks dropped)."""
    text = re.sub(r"`|\*|_(?=\w)|(?<=\w)_|\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = unicodedata.normalize("NFKD", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        base = slug(m.group(1))
        candidate, n = base, 0
        while candidate in found:              # repeated headings get -1, -2, ...
            n += 1
            candidate = f"{base}-{n}"
        found.add(candidate)
    return found


def links(page: Path) -> list[tuple[int, str]]:
    text = page.read_text(encoding="utf-8")
    blanked = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    blanked = re.sub(r"`[^`\n]*`", "", blanked)
    return [(blanked.count("\n", 0, m.start()) + 1, m.group(1) or m.group(2))
            for m in LINK.finditer(blanked)]


def test_every_link_and_anchor_resolves() -> None:
    broken: list[str] = []
    for page in PAGES:
        for line, target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):      # http:, mailto: ...: not fetched
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(ROOT)}:{line}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
                continue
            if not dest.is_relative_to(ROOT):
                broken.append(f"{where} (outside the repository)")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where} (no heading with this anchor)")
    assert not broken, "\n".join(broken)


def test_the_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n## A `code` heading, twice\n\n[ok](#a-code-heading-twice) "
                    "[bad](#nope) [file](missing.md)\n```sh\n[not a link](x.md)\n```\n")
    found = links(page)
    assert [t for _, t in found] == ["#a-code-heading-twice", "#nope", "missing.md"]
    assert "a-code-heading-twice" in anchors(page) and "nope" not in anchors(page)


def test_the_site_builds_strict(tmp_path: Path) -> None:
    """`make docs`: MkDocs Material with the API reference from the docstrings; --strict fails
    on a broken page link, anchor or reference."""
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                          str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "outlive.runtime.Runtime" in api and "outlive.errors" in api
    assert (tmp_path / "site" / "tutorial" / "index.html").exists()
