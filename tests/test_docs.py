"""The docs name files of this repository only, and only files that exist."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("discovery/", "elastic/", "training/", "localcluster/", "images/", "deploy/", "scripts/", "tests/", "docs/")
DOCS = ["README.md", "docs/architecture.md", *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("*/README.md"))]


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_a_doc_names_exists(doc):
    text = (ROOT / doc).read_text()
    named = {m for m in re.findall(r"`([A-Za-z0-9_./*-]+)`", text) if m.startswith(TOP) or m.endswith(".md")}
    named |= set(re.findall(r"\]\(([^)#:]+)\)", text))  # markdown links
    base = (ROOT / doc).parent
    missing = sorted(n for n in named if not list(ROOT.glob(n.rstrip("/"))) and not (base / n).exists())
    assert missing == []


@pytest.mark.parametrize("doc", DOCS)
def test_no_doc_points_outside_the_repository(doc):
    text = (ROOT / doc).read_text()
    assert not re.findall(r"\.\./shared|\bissue \d+", text)
