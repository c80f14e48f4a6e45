"""modules/model_checkpoint.py, run in-process with a source directory (no hub needed).

The hub path (snapshot_download against a real HF-compatible server) is exercised by molecule/checkpoint.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.glm5.deploy.plugins.module_utils.model_checkpoint import partial_key
from project_modules import load_module

ROOT = Path(__file__).resolve().parents[2]
MODULE_PATH = ROOT / "plugins" / "modules" / "model_checkpoint.py"


model_checkpoint = load_module("model_checkpoint")


def shard(path: Path, tensor: str, size: int, seed: int) -> None:
    header = json.dumps({tensor: {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes((seed + i) % 251 for i in range(size)))


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A two-shard checkpoint with its index; one shard is 0600, as transformers writes them."""
    src = tmp_path / "source"
    src.mkdir()
    shard(src / "model-00001-of-00002.safetensors", "a", 300_000, 1)
    shard(src / "model-00002-of-00002.safetensors", "b", 200_000, 2)
    (src / "model-00002-of-00002.safetensors").chmod(0o600)
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    (src / "config.json").write_text("{}")
    (src / ".cache").mkdir()
    (src / ".cache" / "ignored").write_text("not part of the checkpoint")
    return src


def run(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        model_checkpoint.main()
    return json.loads(capsys.readouterr().out)


def args(source: Path, dest: Path, **extra: Any) -> dict[str, Any]:
    return {
        "revision": "nfs",
        "source_path": str(source),
        "local_dir": str(dest),
        "min_free_margin_gb": 0,
    } | extra


def test_copy_verify_and_reverify_from_the_manifest(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "models" / "m"
    first = run(args(source, dest), capsys)
    assert first.get("failed") is not True, first
    assert first["changed"] is True
    assert first["verified"] is True
    assert first["files"] == 4
    assert first["index_shards"] == 2
    assert first["bytes_downloaded"] == first["bytes_total"] > 500_000
    assert sorted(first["downloaded_files"]) == sorted(
        ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", INDEX]
    )
    assert not (dest / ".cache" / "ignored").exists()
    for name in first["downloaded_files"]:
        assert (dest / name).read_bytes() == (source / name).read_bytes()
        assert (dest / name).stat().st_mode & 0o444 == 0o444, name
    manifest = json.loads((dest / ".cache" / "glm5-deploy" / "manifest.json").read_text())
    assert set(manifest["files"]) == set(first["downloaded_files"])

    second = run(args(source, dest), capsys)
    assert second.get("failed") is not True, second
    assert second["changed"] is False
    assert second["hashed_files"] == 0
    assert second["cached_files"] == 4
    assert second["bytes_downloaded"] == 0


INDEX = "model.safetensors.index.json"


def test_corrupted_shard_is_replaced(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "m"
    run(args(source, dest), capsys)
    target = dest / "model-00001-of-00002.safetensors"
    data = bytearray(target.read_bytes())
    data[1000] ^= 0xFF
    target.write_bytes(bytes(data))
    result = run(args(source, dest), capsys)
    assert result["changed"] is True
    assert result["replaced_files"] == ["model-00001-of-00002.safetensors"]
    assert result["downloaded_files"] == ["model-00001-of-00002.safetensors"]
    assert target.read_bytes() == (source / target.name).read_bytes()


def test_truncated_shard_is_replaced(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "m"
    run(args(source, dest), capsys)
    target = dest / "model-00002-of-00002.safetensors"
    target.write_bytes(target.read_bytes()[:1000])
    result = run(args(source, dest), capsys)
    assert result["replaced_files"] == ["model-00002-of-00002.safetensors"]
    assert target.stat().st_size == (source / target.name).stat().st_size


def test_rehash_reads_every_file(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "m"
    run(args(source, dest), capsys)
    result = run(args(source, dest, rehash=True), capsys)
    assert result["changed"] is False
    assert result["cached_files"] == 0
    assert result["hashed_files"] >= 4


def test_stale_partials_are_removed_and_live_ones_kept(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import fcntl

    dest = tmp_path / "m"
    run(args(source, dest), capsys)
    download = dest / ".cache" / "huggingface" / "download"
    download.mkdir(parents=True)
    stale = download / f"{partial_key('model-00001-of-00002.safetensors')}.{'a' * 64}.0123abcd.incomplete"
    live = download / f"{partial_key('model-00002-of-00002.safetensors')}.{'b' * 64}.89abcdef.incomplete"
    for partial in (stale, live):
        partial.write_bytes(b"x" * 100)
        os.utime(partial, ns=(1, 1))
    (download / "model-00001-of-00002.safetensors.lock").write_text("")
    lock = download / "model-00002-of-00002.safetensors.lock"
    lock.write_text("")
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = run(args(source, dest), capsys)
    assert result["stale_partials_removed"] == [str(stale.relative_to(dest))]
    assert result["changed"] is True
    assert not stale.exists()
    assert live.exists()


def test_refuses_before_copying_when_the_disk_is_too_small(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "m"
    result = run(args(source, dest, min_free_margin_gb=10**9), capsys)
    assert result["failed"] is True
    assert "not enough disk space" in result["msg"]
    assert "model_checkpoint_min_free_margin_gb" in result["msg"]
    assert result["bytes_needed"] > 500_000
    assert not any(p.is_file() and ".cache" not in p.parts for p in dest.rglob("*"))


def test_check_mode_changes_nothing(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "m"
    result = run(args(source, dest, _ansible_check_mode=True), capsys)
    assert result["changed"] is True
    assert len(result["downloaded_files"]) == 4
    assert not dest.exists()


def test_index_naming_an_absent_shard_fails(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (source / INDEX).write_text(json.dumps({"weight_map": {"a": "model-00009-of-00009.safetensors"}}))
    result = run(args(source, tmp_path / "m"), capsys)
    assert result["failed"] is True
    assert "model-00009-of-00009.safetensors" in result["msg"]


def test_source_that_is_not_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(args(tmp_path / "absent", tmp_path / "m"), capsys)
    assert result["failed"] is True
    assert "is not a directory" in result["msg"]


def test_another_run_holds_the_directory(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import fcntl

    dest = tmp_path / "m"
    state = dest / ".cache" / "glm5-deploy"
    state.mkdir(parents=True)
    with open(state / "run.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = run(args(source, dest), capsys)
    assert result["failed"] is True
    assert "another model_checkpoint run" in result["msg"]


def test_hub_mode_without_huggingface_hub_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    result = run({"revision": "0" * 40, "local_dir": str(tmp_path / "m")}, capsys)
    assert result["failed"] is True
    assert "huggingface_hub is not importable" in result["msg"]
    assert "model_checkpoint_tool_venv" in result["msg"]


def test_token_is_not_logged() -> None:
    assert "no_log: true" in MODULE_PATH.read_text().replace('"no_log": True', "no_log: true")
