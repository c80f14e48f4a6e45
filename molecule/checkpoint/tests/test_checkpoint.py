"""Verify the checkpoint scenario: the tiny model and shards-test are complete, byte-exact and readable."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MODELS = "/var/lib/sglang/models"


def lab_dir(script: str, flag: str = "--print-dir") -> Path:
    out = subprocess.run(
        [str(ROOT / "lab" / "bin" / script), flag], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lfs_oids(repo: Path) -> dict[str, str]:
    """File name -> sha256 of the LFS files of a mirror repository (from the committed pointers)."""
    oids = {}
    for pointer in repo.glob("*.safetensors"):
        oids[pointer.name] = re.search(r"oid sha256:([0-9a-f]{64})", pointer.read_text()).group(1)
    return oids


def remote_sha256(host, path: str) -> str:
    return host.check_output(f"sha256sum {path}").split()[0]


def test_tiny_model_is_byte_identical_to_the_lab_build(host) -> None:
    built = lab_dir("build-tiny-model") / "glm5-lab-tiny"
    for source in sorted(built.iterdir()):
        assert remote_sha256(host, f"{MODELS}/glm5-lab-tiny/{source.name}") == sha256(source), source.name


def test_tiny_model_index_names_its_shard(host) -> None:
    index = json.loads(host.file(f"{MODELS}/glm5-lab-tiny/model.safetensors.index.json").content_string)
    assert set(index["weight_map"].values()) == {"model.safetensors"}


@pytest.mark.parametrize("name", ["glm5-lab-tiny", "shards-test"])
def test_every_model_file_is_world_readable(host, name: str) -> None:
    listing = host.check_output(f"find {MODELS}/{name} -path '*/.cache' -prune -o -printf '%y %m %p\\n'")
    for line in listing.splitlines():
        kind, mode, _path = line.split(" ", 2)
        wanted = 0o555 if kind == "d" else 0o444
        assert int(mode, 8) & wanted == wanted, line


def test_shards_test_matches_the_mirror(host) -> None:
    repo = lab_dir("build-hf-mirror") / "models" / "glm5-lab" / "shards-test"
    oids = lfs_oids(repo)
    assert len(oids) == 4
    for name, oid in oids.items():
        assert remote_sha256(host, f"{MODELS}/shards-test/{name}") == oid, name


def test_manifest_vouches_for_every_file(host) -> None:
    manifest = json.loads(host.file(f"{MODELS}/shards-test/.cache/glm5-deploy/manifest.json").content_string)
    assert manifest["repo_id"] == "glm5-lab/shards-test"
    assert len(manifest["files"]) == 8
    repo = lab_dir("build-hf-mirror") / "models" / "glm5-lab" / "shards-test"
    for name, oid in lfs_oids(repo).items():
        assert manifest["files"][name]["sha256"] == oid


def test_no_partial_files_are_left(host) -> None:
    assert host.check_output(f"find {MODELS} /var/lib/small-disk -name '*.incomplete'") == ""


def test_tool_venv_has_the_pinned_huggingface_hub(host) -> None:
    version = host.check_output(
        "/opt/glm5/hf-tools/bin/python -c 'import huggingface_hub; print(huggingface_hub.__version__)'"
    )
    assert version == "1.33.0"
