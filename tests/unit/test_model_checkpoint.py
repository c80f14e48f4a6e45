"""module_utils/model_checkpoint.py: the decisions of the checkpoint module, and its outside-input parsers."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from pathlib import Path

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.model_checkpoint import (
    INDEX_NAME,
    CheckpointError,
    LocalStat,
    ManifestEntry,
    RemoteFile,
    bytes_to_fetch,
    digests_match,
    dump_manifest,
    entry_matches,
    hash_file,
    hash_files,
    hash_workers,
    human_size,
    index_shards,
    local_stat,
    missing_from,
    parse_index,
    parse_manifest,
    partial_key,
    partial_owner,
    plan,
    progress_line,
    remote_files,
    safe_relpath,
    space_problem,
    stale_partials,
    try_lock,
)
from hypothesis import given
from hypothesis import strategies as st

SHA_A = "a" * 64
SHA_B = "b" * 64
BLOB = "c" * 40

# --- the index -------------------------------------------------------------------------------------------


def test_index_of_a_sharded_checkpoint() -> None:
    text = json.dumps(
        {
            "metadata": {"total_size": 10},
            "weight_map": {
                "a.weight": "model-00001-of-00002.safetensors",
                "b.weight": "model-00002-of-00002.safetensors",
                "c.weight": "model-00001-of-00002.safetensors",
            },
        }
    )
    weight_map = parse_index(text)
    assert index_shards(weight_map) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "is not JSON"),
        ("[]", "no weight_map"),
        ('{"weight_map": []}', "no weight_map"),
        ('{"weight_map": {}}', "weight_map is empty"),
        ('{"weight_map": {"a": "../etc/passwd"}}', "not a relative file path"),
        ('{"weight_map": {"a": "/etc/passwd"}}', "not a relative file path"),
        ('{"weight_map": {"a": 3}}', "not a relative file path"),
        ('{"weight_map": {"a": "dir/"}}', "not a relative file path"),
    ],
)
def test_bad_index_is_refused(text: str, problem: str) -> None:
    with pytest.raises(CheckpointError, match=problem):
        parse_index(text)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@given(st.text(max_size=300))
def test_index_parser_raises_only_checkpoint_error_on_any_text(text: str) -> None:
    with contextlib.suppress(CheckpointError):
        parse_index(text)


@given(st.dictionaries(st.text(max_size=10), json_values, max_size=4))
def test_index_parser_raises_only_checkpoint_error_on_any_json(data: dict) -> None:
    try:
        weight_map = parse_index(json.dumps(data))
    except CheckpointError:
        return
    assert all(not shard.startswith("/") and ".." not in shard.split("/") for shard in weight_map.values())


shard_names = st.from_regex(r"[a-z0-9_-]{1,12}(/[a-z0-9_-]{1,8})?\.safetensors", fullmatch=True)


@given(st.dictionaries(st.text(min_size=1, max_size=20), shard_names, min_size=1, max_size=20))
def test_index_round_trip(weight_map: dict[str, str]) -> None:
    assert parse_index(json.dumps({"weight_map": weight_map})) == weight_map
    assert index_shards(weight_map) == sorted(set(weight_map.values()))


def test_missing_from() -> None:
    assert missing_from(["a", "b", "c"], ["b"]) == ["a", "c"]
    assert missing_from([], ["b"]) == []


# --- paths and the hub's file list -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["config.json", "sub/dir/file.bin", ".gitattributes"])
def test_safe_relpath_accepts_repository_paths(path: str) -> None:
    assert safe_relpath(path, "x") == path


@pytest.mark.parametrize("path", ["", "/abs", "../up", "a/../b", "./a", "a\\b", "a\x00b", None, 5, "a/"])
def test_safe_relpath_refuses_escapes(path: object) -> None:
    with pytest.raises(CheckpointError):
        safe_relpath(path, "x")


def test_remote_files_from_the_tree_listing() -> None:
    files = remote_files(
        [
            {"path": "model.safetensors", "size": 5, "sha256": SHA_A, "blob_sha1": None},
            {"path": "config.json", "size": 2, "sha256": None, "blob_sha1": BLOB},
        ]
    )
    assert [f.path for f in files] == ["config.json", "model.safetensors"]
    assert files[1] == RemoteFile("model.safetensors", 5, SHA_A, None)


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"path": "a", "size": -1}, "no valid size"),
        ({"path": "a", "size": True}, "no valid size"),
        ({"path": "a", "size": 1, "sha256": "xyz"}, "invalid sha256"),
        ({"path": "a", "size": 1, "blob_sha1": "A" * 40}, "invalid blob id"),
        ({"path": "../a", "size": 1}, "not a relative file path"),
    ],
)
def test_remote_files_refuses_bad_entries(entry: dict, problem: str) -> None:
    with pytest.raises(CheckpointError, match=problem):
        remote_files([entry])


def test_remote_files_refuses_duplicates() -> None:
    with pytest.raises(CheckpointError, match="twice"):
        remote_files([{"path": "a", "size": 1}, {"path": "a", "size": 1}])


@given(st.lists(st.dictionaries(st.sampled_from(["path", "size", "sha256", "blob_sha1"]), json_values)))
def test_remote_files_raises_only_checkpoint_error(entries: list[dict]) -> None:
    with contextlib.suppress(CheckpointError):
        remote_files(entries)


# --- the manifest ----------------------------------------------------------------------------------------

entries_strategy = st.dictionaries(
    shard_names,
    st.builds(
        ManifestEntry,
        st.integers(0, 2**50),
        st.integers(0, 2**63),
        st.integers(0, 2**40),
        st.from_regex(r"[0-9a-f]{64}", fullmatch=True),
        st.none() | st.from_regex(r"[0-9a-f]{40}", fullmatch=True),
    ),
    max_size=10,
)


@given(entries_strategy)
def test_manifest_round_trip(entries: dict[str, ManifestEntry]) -> None:
    assert parse_manifest(dump_manifest(entries, "org/name", "0" * 40)) == entries


@given(st.text(max_size=200))
def test_manifest_parser_raises_only_checkpoint_error_on_any_text(text: str) -> None:
    with contextlib.suppress(CheckpointError):
        parse_manifest(text)


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=3))
def test_manifest_parser_raises_only_checkpoint_error_on_any_files(files: dict) -> None:
    with contextlib.suppress(CheckpointError):
        parse_manifest(json.dumps({"version": 1, "files": files}))


@pytest.mark.parametrize(
    "text",
    [
        '{"version": 2, "files": {}}',
        '{"version": 1}',
        '{"version": 1, "files": {"a": {"size": 1, "mtime_ns": 1, "inode": 1, "sha256": "x"}}}',
        '{"version": 1, "files": {"a": {"size": "1", "mtime_ns": 1, "inode": 1, "sha256": "' + SHA_A + '"}}}',
    ],
)
def test_bad_manifest_is_refused(text: str) -> None:
    with pytest.raises(CheckpointError):
        parse_manifest(text)


# --- decisions -------------------------------------------------------------------------------------------

LFS = RemoteFile("model.safetensors", 100, SHA_A, None)
SMALL = RemoteFile("config.json", 10, None, BLOB)
STAT = LocalStat(size=100, mtime_ns=5, inode=7)
ENTRY = ManifestEntry(100, 5, 7, SHA_A)


def test_manifest_entry_vouches_only_for_an_unchanged_file() -> None:
    assert entry_matches(LFS, ENTRY, STAT)
    assert not entry_matches(LFS, ENTRY, LocalStat(100, 6, 7))  # touched
    assert not entry_matches(LFS, ENTRY, LocalStat(100, 5, 8))  # replaced
    assert not entry_matches(LFS, None, STAT)
    assert not entry_matches(LFS, ENTRY, None)
    # the revision moved on: the same local file no longer has the expected digest
    assert not entry_matches(RemoteFile("model.safetensors", 100, SHA_B), ENTRY, STAT)


def test_digests_match_by_kind_of_file() -> None:
    assert digests_match(LFS, SHA_A, None)
    assert not digests_match(LFS, SHA_B, None)
    assert digests_match(SMALL, SHA_B, BLOB)
    assert not digests_match(SMALL, SHA_B, "d" * 40)
    assert digests_match(RemoteFile("x", 1), SHA_B, None)  # nothing to compare with: size decides


def test_plan_sorts_every_case() -> None:
    remote = [
        RemoteFile("cached", 100, SHA_A),
        RemoteFile("changed", 100, SHA_A),
        RemoteFile("short", 100, SHA_A),
        RemoteFile("missing", 100, SHA_A),
        RemoteFile("new", 100, SHA_A),
    ]
    local = {
        "cached": STAT,
        "changed": LocalStat(100, 9, 7),
        "short": LocalStat(40, 5, 7),
        "new": STAT,
    }
    manifest = {"cached": ENTRY, "changed": ENTRY, "short": ENTRY}
    decided = plan(remote, local, manifest)
    assert decided.cached == ("cached",)
    assert decided.to_hash == ("changed", "new")
    assert decided.to_replace == ("short",)
    assert decided.to_fetch == ("missing",)
    assert plan(remote, local, manifest, rehash=True).to_hash == ("cached", "changed", "new")


@given(
    st.lists(st.tuples(shard_names, st.integers(0, 1000), st.integers(0, 1000)), unique_by=lambda t: t[0]),
)
def test_plan_puts_every_file_in_exactly_one_bucket(rows: list[tuple[str, int, int]]) -> None:
    remote = [RemoteFile(name, size, SHA_A) for name, size, _ in rows]
    local = {name: LocalStat(local_size, 1, 1) for name, _, local_size in rows if local_size % 3}
    decided = plan(remote, local, {})
    buckets = decided.cached + decided.to_hash + decided.to_replace + decided.to_fetch
    assert sorted(buckets) == sorted(name for name, _, _ in rows)


def test_bytes_to_fetch() -> None:
    remote = [RemoteFile("a", 10), RemoteFile("b", 5)]
    assert bytes_to_fetch(remote, ["a", "b", "a"]) == 15
    assert bytes_to_fetch(remote, []) == 0


def test_space_problem_names_the_variables_and_the_sizes() -> None:
    assert space_problem(10 * 10**9, 40 * 10**9, 20, "/models/x") is None
    msg = space_problem(440 * 10**9, 300 * 10**9, 20, "/models/x")
    assert msg is not None
    assert "/models/x" in msg
    assert "440.00 GB still to download" in msg
    assert "only 300.00 GB is free" in msg
    assert "Free 160.00 GB there" in msg
    assert "model_checkpoint_min_free_margin_gb" in msg
    assert "model_checkpoint_local_dir" in msg
    assert "Nothing was downloaded" in msg


def test_space_needs_the_margin_too() -> None:
    assert space_problem(10, 10, 0, "/d") is None
    assert space_problem(10, 10, 0.001, "/d") is not None


# --- partial files ---------------------------------------------------------------------------------------


def test_partial_owner_follows_huggingface_hub_naming() -> None:
    # huggingface_hub: <urlsafe b64 sha1 of "<file>.metadata">.<etag>.<8 hex>.incomplete, beside "<file>.lock"
    key = partial_key("model-00002-of-00004.safetensors")
    expected = hashlib.sha1(b"model-00002-of-00004.safetensors.metadata").digest()
    assert key.encode() == __import__("base64").urlsafe_b64encode(expected)
    partial = f"{key}.{SHA_A}.0123abcd.incomplete"
    locks = ["model-00001-of-00004.safetensors.lock", "model-00002-of-00004.safetensors.lock"]
    assert partial_owner(partial, locks) == "model-00002-of-00004.safetensors.lock"
    assert partial_owner(partial, locks[:1]) is None
    assert partial_owner("junk.incomplete", locks) is None


def test_stale_partials_are_old_and_unlocked() -> None:
    partials = [("old-free", 10, False), ("old-locked", 10, True), ("new-free", 30, False)]
    assert stale_partials(partials, run_started_ns=20) == ["old-free"]


def test_progress_line() -> None:
    assert progress_line("downloading", 5 * 10**9, 20 * 10**9, 1, 4) == (
        "downloading: 1/4 files, 5.00 GB of 20.00 GB (25%)"
    )
    assert progress_line("verified", 0, 0, 0, 0).endswith("0.0 MB of 0.0 MB (100%)")


def test_human_size() -> None:
    assert human_size(2_329_744) == "2.3 MB"
    assert human_size(440 * 10**9) == "440.00 GB"


# --- file helpers ----------------------------------------------------------------------------------------


def test_hash_file_gives_sha256_and_git_blob_sha1(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = os.urandom(3 * 1024 + 7)
    path.write_bytes(data)
    sha256, blob = hash_file(path, blob=True, block=1024)
    assert sha256 == hashlib.sha256(data).hexdigest()
    assert blob == hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()
    assert hash_file(path) == (sha256, None)


def test_git_blob_sha1_of_a_known_file(tmp_path: Path) -> None:
    # `printf 'hello\n' | git hash-object --stdin`
    path = tmp_path / "hello"
    path.write_bytes(b"hello\n")
    assert hash_file(path, blob=True)[1] == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_try_lock_sees_a_held_flock(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    lock.write_text("")
    assert try_lock(lock)
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert not try_lock(lock)
    assert try_lock(lock)
    assert try_lock(tmp_path / "absent.lock")


def test_local_stat(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    st = local_stat(path)
    assert st is not None and st.size == 3 and st.inode == path.stat().st_ino
    assert local_stat(tmp_path / "absent") is None
    assert local_stat(tmp_path) is None
    (tmp_path / "link").symlink_to(path)
    assert local_stat(tmp_path / "link") is None


def test_index_name() -> None:
    assert INDEX_NAME == "model.safetensors.index.json"


def test_files_are_hashed_on_several_threads_with_the_same_digests(tmp_path: Path) -> None:
    sizes = {"a": 3 << 20, "b": 9 << 20, "c": 1, "d": 0}
    jobs = []
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
        jobs.append((name, tmp_path / name, name == "c", size))
    expected = {n: hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in sizes}
    for workers in (1, 3):
        got = dict(hash_files(jobs, workers))
        assert {n: d[0] for n, d in got.items()} == expected
        assert got["c"][1] is not None and got["a"][1] is None
    assert hash_workers(5) == 5 and hash_workers(0) >= 1
