"""README.md stays a short front page whose links lead somewhere (the docs site's own links are checked by
``mkdocs build --strict``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150


def test_readme_links_point_at_files_in_the_repository():
    targets = [t for t in LINK.findall(README.read_text(encoding="utf-8")) if "://" not in t]
    assert targets, "README.md links into docs/"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"
