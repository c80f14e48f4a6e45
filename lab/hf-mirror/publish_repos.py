#!/usr/bin/env python3
"""Lab only: publish the lab's models as git model repositories that olah serves offline (mirrors-path).

Usage: publish_repos.py --tiny-models DIR --out DIR

Writes, under OUT/models/glm5-lab/:
- glm5-lab-tiny, glm5-lab-tiny-nan, glm5-lab-tiny-inf: the files of the lab's trained tiny model (and its
  poisoned copies), byte for byte, plus a generated model.safetensors.index.json that names the one shard;
- shards-test: four shards of deterministic random bytes (32-56 MiB each, valid safetensors, one U8 tensor
  each) with their index, so that an interrupted download and a corrupted shard can be tested.

Each repository is a git repository with one commit on main. *.safetensors files are LFS files: the commit
holds the pointer, the object lies at .git/lfs/objects/aa/bb/<oid> (the layout olah 0.5.4 reads; the git-lfs
tool is not needed). Author, committer and dates are fixed, so the same inputs give the same commit ids.
OUT/revisions.json maps each repository to its commit id (the pin a lab inventory uses).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

ORG = "glm5-lab"
TINY_VARIANTS = ("glm5-lab-tiny", "glm5-lab-tiny-nan", "glm5-lab-tiny-inf")
# shards-test: sizes in MiB; different sizes, so that a size check cannot pass by accident.
SHARD_MIB = (48, 40, 56, 32)
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "glm5-deploy lab",
    "GIT_AUTHOR_EMAIL": "lab@glm5-deploy.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "glm5-deploy lab",
    "GIT_COMMITTER_EMAIL": "lab@glm5-deploy.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}
GITATTRIBUTES = "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def safetensors_tensors(path: Path) -> dict[str, int]:
    """Tensor name -> byte size, from a safetensors header (8-byte little-endian length, then JSON)."""
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    return {
        name: entry["data_offsets"][1] - entry["data_offsets"][0]
        for name, entry in header.items()
        if name != "__metadata__"
    }


def write_index(repo: Path, shards: list[str]) -> None:
    """model.safetensors.index.json naming, for every tensor, the shard that holds it."""
    weight_map: dict[str, str] = {}
    total = 0
    for shard in shards:
        for name, size in safetensors_tensors(repo / shard).items():
            weight_map[name] = shard
            total += size
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (repo / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def lfs_store(repo: Path, name: str) -> None:
    """Move the file into .git/lfs/objects/aa/bb/<oid> and leave its LFS pointer in its place."""
    path = repo / name
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    oid = digest.hexdigest()
    size = path.stat().st_size
    obj = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    obj.parent.mkdir(parents=True, exist_ok=True)
    path.replace(obj)
    path.write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n")


def commit(repo: Path, message: str) -> str:
    (repo / ".gitattributes").write_text(GITATTRIBUTES)
    for shard in sorted(p.name for p in repo.glob("*.safetensors")):
        lfs_store(repo, shard)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def init(repo: Path) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "--initial-branch=main")


def publish_tiny(models: Path, out: Path, name: str) -> str:
    repo = out / "models" / ORG / name
    init(repo)
    for src in sorted((models / name).iterdir()):
        shutil.copyfile(src, repo / src.name)
    write_index(repo, ["model.safetensors"])
    return commit(repo, f"{name}: the lab's tiny model (lab/bin/build-tiny-model {models.name})")


def publish_shards_test(out: Path) -> str:
    repo = out / "models" / ORG / "shards-test"
    init(repo)
    names = []
    for number, mib in enumerate(SHARD_MIB, start=1):
        name = f"model-{number:05d}-of-{len(SHARD_MIB):05d}.safetensors"
        size = mib << 20
        header = json.dumps(
            {
                "__metadata__": {"format": "pt"},
                f"shard{number}.weight": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]},
            },
            separators=(",", ":"),
        ).encode()
        header += b" " * (-len(header) % 8)
        with (repo / name).open("wb") as f:
            f.write(struct.pack("<Q", len(header)) + header)
            f.write(random.Random(number).randbytes(size))
        names.append(name)
    write_index(repo, names)
    (repo / "config.json").write_text(json.dumps({"model_type": "glm5-lab-shards-test"}) + "\n")
    (repo / "README.md").write_text(
        "# shards-test\n\nA test fixture of glm5-deploy's lab: four shards of deterministic random bytes, "
        "to test an interrupted download, its resume and a corrupted shard. Not a model.\n"
    )
    return commit(repo, "shards-test: deterministic random shards")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tiny-models", type=Path, required=True, help="lab/bin/build-tiny-model's directory"
    )
    parser.add_argument("--out", type=Path, required=True, help="the mirror directory (mirrors-path)")
    args = parser.parse_args()
    revisions = {f"{ORG}/{name}": publish_tiny(args.tiny_models, args.out, name) for name in TINY_VARIANTS}
    revisions[f"{ORG}/shards-test"] = publish_shards_test(args.out)
    (args.out / "revisions.json").write_text(json.dumps(revisions, indent=2, sort_keys=True) + "\n")
    print(json.dumps(revisions, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
