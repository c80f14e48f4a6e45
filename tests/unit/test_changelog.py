"""CHANGELOG.md is antsibull-changelog's rendering of changelogs/changelog.yaml, and the pending fragments are
valid: a release (make changelog VERSION=x.y.z) turns them into the next section."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
TOOL = str(Path(sys.executable).parent / "antsibull-changelog")


def test_the_fragments_and_the_changelog_lint_clean() -> None:
    done = subprocess.run([TOOL, "lint"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_changelog_md_is_generated_from_the_changelog_data(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "changelogs", tmp_path / "changelogs")
    shutil.copy(ROOT / "galaxy.yml", tmp_path)  # a collection's changelog: galaxy.yml names it
    done = subprocess.run([TOOL, "generate"], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "CHANGELOG.md").read_text() == (ROOT / "CHANGELOG.md").read_text(), (
        "CHANGELOG.md is stale or edited by hand: run antsibull-changelog generate"
    )


def test_the_changelog_is_a_collections_and_ships_in_the_artifact() -> None:
    """antsibull-changelog's collection format (Galaxy and Automation Hub read it from the artifact)."""
    config = yaml.safe_load((ROOT / "changelogs" / "config.yaml").read_text())
    assert config["is_other_project"] is False
    ignored = yaml.safe_load((ROOT / "galaxy.yml").read_text())["build_ignore"]
    assert not {"changelogs", "changelogs/changelog.yaml", "CHANGELOG.md", "LICENSE"} & set(ignored)


def test_the_collections_version_is_the_newest_release() -> None:
    """galaxy.yml's version names the artifact make collection builds: the newest release of the changelog."""
    releases = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())["releases"]
    newest = max(releases, key=lambda v: tuple(int(part) for part in v.split(".")))
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert galaxy["version"] == newest
