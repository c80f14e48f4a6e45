"""The lab's test doubles never reach a production path: no product role or playbook refers to lab/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = sorted(
    p
    for top in ("roles", "playbooks", "templates", "plugins")
    for p in (ROOT / top).rglob("*")
    if p.is_file() and p.suffix in {".yml", ".yaml", ".j2", ".py", ".json", ".cfg", ".md"}
)
# A path into lab/, the stand-ins, or the lab's environment knobs.
LAB_REFERENCE = re.compile(r"(^|[^a-z_])lab/|gpu-standin|standin-packages|GLM5_LAB_|glm5-lab-")


def test_product_tree_is_not_empty() -> None:
    assert len(PRODUCT) > 20


@pytest.mark.parametrize("path", PRODUCT, ids=lambda p: str(p.relative_to(ROOT)))
def test_product_file_does_not_refer_to_the_lab(path: Path) -> None:
    hits = [
        f"{n}: {line.strip()}"
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if LAB_REFERENCE.search(line)
    ]
    assert not hits, f"{path.relative_to(ROOT)} refers to the lab: {hits}"


def test_site_yml_imports_no_lab_play() -> None:
    assert not LAB_REFERENCE.search((ROOT / "site.yml").read_text())
