"""Every relative link in README and docs/ (the measurement notes included) resolves to a file or
folder of the repository, and every anchor (`FILE.md#anchor`, `#anchor`) to a heading of that file,
slugged as GitHub does."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "patches" / "README.md", ROOT / "sglang_asd" / "fixtures" / "README.md",
        *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "measurements").glob("*/NOTES.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation other than '-' and '_'
    dropped, each space a '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link's text
    return re.sub(r"[^\w\- ]", "", text.replace("`", "").lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    found, seen, fenced = set(), {}, False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_slug_matches_githubs():
    assert slug("Acceptance rules at n = 100: does the request ledger beat local rules?") == \
        "acceptance-rules-at-n--100-does-the-request-ledger-beat-local-rules"
    assert slug("STANDALONE: SGLang's draft flow vs `--asd-standalone-draft-fix`") == \
        "standalone-sglangs-draft-flow-vs---asd-standalone-draft-fix"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # absolute URLs
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"
