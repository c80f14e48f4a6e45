"""Every reference resolves inside the repository: the product, its docs and its tests cite the team's notes
by their copies in docs/sources/, and every docs/sources/ file they cite exists. (The lab's scripts keep their
comments as they are: their hashes key the lab's cached image, wheelhouse and model.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"(?:\.\./)+shared/|/work/shared/|(?<![\w'`])shared/notes/")
CITED = re.compile(r"docs/sources/([\w.-]+\.md)")
HISTORY = (
    "docs/journal/measurements.md",
    "CHANGELOG.md",
    "changelogs/",
    "docs/sources/",
    "lab/",
    "molecule/",
)
SELF = "tests/unit/test_sources.py"  # its patterns name what it looks for


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = [ROOT / name for name in names.split() if not name.startswith(HISTORY) and name != SELF]
    return [
        p for p in files if p.is_file() and not p.is_symlink() and p.suffix in {".py", ".yml", ".md", ".txt"}
    ]


def test_nothing_cites_the_notes_outside_the_repository() -> None:
    found = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in tracked_text_files()
        for m in OUTSIDE.finditer(p.read_text())
    ]
    assert not found, found


def test_every_cited_source_is_in_docs_sources() -> None:
    cited = {name for p in tracked_text_files() for name in CITED.findall(p.read_text())}
    assert cited and all((ROOT / "docs" / "sources" / name).is_file() for name in cited), cited
