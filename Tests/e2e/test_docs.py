"""The README stays a front page and the documentation's links hold: README.md is at most 300
lines, it links every file of docs/, and every relative link in README.md, docs/*.md and
Tests/e2e/README.md names a file that exists and, with a `#anchor`, a heading of that file
(GitHub's anchor rules); every `.swift` file the docs name exists.
"""

from __future__ import annotations

import re
from pathlib import Path

from proxy_harness import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
TEST_MAP = REPO / "Tests/e2e/README.md"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """TEXT without fenced code blocks and inline code spans (their brackets are no links)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(lines)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of PATH: lower case, punctuation other than `-` and
    `_` dropped, spaces as `-`, and `-1`, `-2`, … for repeats."""
    seen: dict[str, int] = {}
    result = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text())) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_readme_is_at_most_300_lines():
    lines = README.read_text().count("\n")
    assert lines <= 300, f"README.md has {lines} lines: move reference material to docs/ (docs/development.md)"


def test_readme_links_every_docs_file():
    linked = {(README.parent / t.split("#", 1)[0]).resolve() for t in relative_links(README)}
    assert DOCS, "no docs/*.md"
    missing = [d.name for d in DOCS if d.resolve() not in linked]
    assert not missing, f"README.md does not link {missing}"


def test_every_relative_link_resolves():
    broken = []
    for document in [README, *DOCS, TEST_MAP]:
        for target in relative_links(document):
            file, _, anchor = target.partition("#")
            path = (document.parent / file).resolve() if file else document
            if not path.exists():
                broken.append(f"{document.relative_to(REPO)}: {target}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{document.relative_to(REPO)}: {target}: no such heading")
    assert not broken, "\n".join(broken)


def test_the_anchor_rules_match_githubs():
    """The slug function itself, on headings of the kinds the docs use."""
    doc = REPO / "docs" / "trust-decisions.md"
    names = anchors(doc)
    assert "the-refusal-inside-tls-refusal--in-tls" in names
    assert "a-custom-check-verify_command" in names


def test_the_e2e_map_names_every_test_file():
    """Tests/e2e/README.md maps each feature to its test file: every test file is in it."""
    named = set(re.findall(r"`(test_[a-z0-9_]+\.py)`", TEST_MAP.read_text()))
    files = {p.name for p in (REPO / "Tests/e2e").glob("test_*.py")}
    assert not files - named, f"Tests/e2e/README.md does not name {sorted(files - named)}"
    assert not named - files, f"Tests/e2e/README.md names missing files {sorted(named - files)}"


SWIFT_FILE = re.compile(r"`((?:[A-Za-z0-9_]+/)*[A-Za-z0-9_+]+\.swift)`")


def test_every_source_file_the_docs_name_exists():
    """how-it-works.md follows a CONNECT by naming the file of each step: a name that no file of
    the package carries (a file moved or renamed) fails here. A name with a folder must match that
    path's end; a bare name, some file's name."""
    files = [p.relative_to(REPO).as_posix() for top in ("Sources", "Tests", "Fuzz") for p in (REPO / top).rglob("*.swift")]
    files.append("Package.swift")
    missing = []
    for doc in [README, *DOCS, TEST_MAP]:
        for name in SWIFT_FILE.findall(doc.read_text()):
            if not any(f == name or f.endswith("/" + name) for f in files):
                missing.append(f"{doc.relative_to(REPO)}: {name}")
    assert not missing, "source files named in the docs that do not exist:\n" + "\n".join(missing)
