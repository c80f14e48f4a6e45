"""Decisions of the model_checkpoint module: what to fetch, what to re-hash, what is stale, whether it fits.

Pure functions over plain data, apart from the two small file helpers at the end (hash_file, try_lock),
which the unit tests exercise on temporary files. The module does the I/O: the hub (or a source directory),
stat, delete, download.

Terms:
- a *remote file* is a file of the repository at the pinned revision, with the size and digest the hub
  reports: sha256 for LFS files, the git blob sha1 for the others (what the hub's tree listing gives);
- the *manifest* caches, per verified local file, its stat (size, mtime_ns, inode) and digests, so that an
  unchanged re-verify hashes nothing;
- a *partial* is huggingface_hub's per-process download file, `<hash>.<etag>.<random>.incomplete`, under
  `<local_dir>/.cache/huggingface/download/`; a killed download leaves it behind.

Anything read from outside (the index, the manifest, the hub's file list) that is malformed raises
CheckpointError with a message that says what and where; nothing else escapes (tests/unit use hypothesis).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INDEX_NAME = "model.safetensors.index.json"
MANIFEST_VERSION = 1
GB = 1000**3
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")
_PARTIAL = re.compile(r"(?P<key>[A-Za-z0-9_=-]+)\.(?P<etag>[^./]+)\.(?P<nonce>[0-9a-f]{8})\.incomplete")


class CheckpointError(Exception):
    """Malformed outside input, or a checkpoint that cannot be made to match its revision."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of the repository at the pinned revision, as the hub (or a source directory) describes it."""

    path: str
    size: int
    sha256: str | None = None
    blob_sha1: str | None = None


@dataclass(frozen=True)
class LocalStat:
    """What stat says about a local file."""

    size: int
    mtime_ns: int
    inode: int


@dataclass(frozen=True)
class ManifestEntry:
    """A local file as it was when verified, with its digests."""

    size: int
    mtime_ns: int
    inode: int
    sha256: str
    blob_sha1: str | None = None


@dataclass(frozen=True)
class Plan:
    """What to do with each remote file, before anything is downloaded."""

    cached: tuple[str, ...]  # present, unchanged since verified: nothing to read
    to_hash: tuple[str, ...]  # present with the right size, not (or no longer) in the manifest: hash it
    to_replace: tuple[str, ...]  # present with the wrong size: delete, then fetch
    to_fetch: tuple[str, ...]  # missing: fetch


# --- paths and outside input ---------------------------------------------------------------------------


def safe_relpath(path: Any, what: str) -> str:
    """A repository path that stays inside the local directory; CheckpointError otherwise."""
    if not isinstance(path, str) or not path or "\\" in path or "\x00" in path:
        raise CheckpointError(f"{what}: {path!r} is not a relative file path")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise CheckpointError(f"{what}: {path!r} is not a relative file path inside the checkpoint")
    return path


def parse_index(text: str) -> dict[str, str]:
    """The weight_map of a model.safetensors.index.json: tensor name -> shard file."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{INDEX_NAME} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("weight_map"), dict):
        raise CheckpointError(f"{INDEX_NAME} has no weight_map object")
    weight_map: dict[str, str] = {}
    for tensor, shard in data["weight_map"].items():
        weight_map[tensor] = safe_relpath(shard, f"{INDEX_NAME}: tensor {tensor!r}")
    if not weight_map:
        raise CheckpointError(f"{INDEX_NAME}: the weight_map is empty")
    return weight_map


def index_shards(weight_map: Mapping[str, str]) -> list[str]:
    """The distinct shard files an index names, sorted."""
    return sorted(set(weight_map.values()))


def missing_from(names: Iterable[str], present: Iterable[str]) -> list[str]:
    """The names that are not in present, sorted."""
    return sorted(set(names) - set(present))


def remote_files(entries: Iterable[Mapping[str, Any]]) -> list[RemoteFile]:
    """RemoteFiles from the hub's tree listing: {path, size, sha256 (LFS) or None, blob_sha1 or None}."""
    files: dict[str, RemoteFile] = {}
    for entry in entries:
        path = safe_relpath(entry.get("path"), "the repository's file list")
        size = entry.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise CheckpointError(f"the repository's file list: {path} has no valid size ({size!r})")
        sha256 = entry.get("sha256")
        if sha256 is not None and not (isinstance(sha256, str) and _SHA256.fullmatch(sha256)):
            raise CheckpointError(f"the repository's file list: {path} has an invalid sha256 {sha256!r}")
        blob = entry.get("blob_sha1")
        if blob is not None and not (isinstance(blob, str) and _SHA1.fullmatch(blob)):
            raise CheckpointError(f"the repository's file list: {path} has an invalid blob id {blob!r}")
        if path in files:
            raise CheckpointError(f"the repository's file list names {path} twice")
        files[path] = RemoteFile(path=path, size=size, sha256=sha256, blob_sha1=blob)
    return sorted(files.values(), key=lambda f: f.path)


def parse_manifest(text: str) -> dict[str, ManifestEntry]:
    """The manifest's entries; CheckpointError when the file is not one this version wrote."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"the manifest is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        raise CheckpointError(f"the manifest is not version {MANIFEST_VERSION}")
    files = data.get("files")
    if not isinstance(files, dict):
        raise CheckpointError("the manifest has no files object")
    entries: dict[str, ManifestEntry] = {}
    for path, entry in files.items():
        safe_relpath(path, "the manifest")
        if not isinstance(entry, dict):
            raise CheckpointError(f"the manifest: {path} is not an object")
        numbers = [entry.get(k) for k in ("size", "mtime_ns", "inode")]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
            raise CheckpointError(f"the manifest: {path} has an invalid size, mtime_ns or inode")
        sha256, blob = entry.get("sha256"), entry.get("blob_sha1")
        if not (isinstance(sha256, str) and _SHA256.fullmatch(sha256)):
            raise CheckpointError(f"the manifest: {path} has an invalid sha256")
        if blob is not None and not (isinstance(blob, str) and _SHA1.fullmatch(blob)):
            raise CheckpointError(f"the manifest: {path} has an invalid blob_sha1")
        entries[path] = ManifestEntry(numbers[0], numbers[1], numbers[2], sha256, blob)
    return entries


def dump_manifest(entries: Mapping[str, ManifestEntry], repo_id: str, commit: str) -> str:
    """The manifest as JSON (what parse_manifest reads back)."""
    files = {
        path: {k: v for k, v in vars(entry).items() if v is not None}
        for path, entry in sorted(entries.items())
    }
    return json.dumps(
        {"version": MANIFEST_VERSION, "repo_id": repo_id, "commit": commit, "files": files}, indent=1
    )


# --- decisions -----------------------------------------------------------------------------------------


def entry_matches(remote: RemoteFile, entry: ManifestEntry | None, stat: LocalStat | None) -> bool:
    """Whether a manifest entry still vouches for the local file: same stat, and digests the hub expects."""
    if entry is None or stat is None:
        return False
    if (entry.size, entry.mtime_ns, entry.inode) != (stat.size, stat.mtime_ns, stat.inode):
        return False
    return entry.size == remote.size and digests_match(remote, entry.sha256, entry.blob_sha1)


def digests_match(remote: RemoteFile, sha256: str, blob_sha1: str | None) -> bool:
    """Whether a file's digests are those the hub reports (sha256 for LFS files, else the git blob sha1)."""
    if remote.sha256 is not None:
        return sha256 == remote.sha256
    if remote.blob_sha1 is not None:
        return blob_sha1 == remote.blob_sha1
    return True  # nothing to compare with (a source directory): the size decides


def plan(
    remote: Sequence[RemoteFile],
    local: Mapping[str, LocalStat],
    manifest: Mapping[str, ManifestEntry],
    rehash: bool = False,
) -> Plan:
    """Sort the remote files into cached / to hash / to replace / to fetch."""
    cached, to_hash, to_replace, to_fetch = [], [], [], []
    for file in remote:
        stat = local.get(file.path)
        if stat is None:
            to_fetch.append(file.path)
        elif stat.size != file.size:
            to_replace.append(file.path)
        elif not rehash and entry_matches(file, manifest.get(file.path), stat):
            cached.append(file.path)
        else:
            to_hash.append(file.path)
    return Plan(tuple(cached), tuple(to_hash), tuple(to_replace), tuple(to_fetch))


def bytes_to_fetch(remote: Sequence[RemoteFile], paths: Iterable[str]) -> int:
    """Total size of these remote files."""
    sizes = {f.path: f.size for f in remote}
    return sum(sizes[p] for p in set(paths))


def human_size(count: int) -> str:
    """Bytes as GB (two decimals) from 1 GB up, as MB below."""
    return f"{count / GB:.2f} GB" if count >= GB else f"{count / 1000**2:.1f} MB"


def space_problem(needed: int, free: int, margin_gb: float, local_dir: str) -> str | None:
    """None when needed bytes fit with the margin left free; else a message that says what to change."""
    margin = int(margin_gb * GB)
    if needed + margin <= free:
        return None
    return (
        f"not enough disk space for the checkpoint in {local_dir}: {human_size(needed)} still to download "
        f"plus a margin of {margin_gb:g} GB (min_free_margin_gb; role variable "
        f"model_checkpoint_min_free_margin_gb) = {human_size(needed + margin)}, but only {human_size(free)} "
        f"is free. Free {human_size(needed + margin - free)} there, point local_dir "
        "(model_checkpoint_local_dir) at a larger filesystem, or lower the margin. Nothing was downloaded."
    )


def partial_key(filename: str) -> str:
    """The key huggingface_hub gives the partial files of one repository file (its `_short_hash`)."""
    return base64.urlsafe_b64encode(hashlib.sha1(f"{filename}.metadata".encode()).digest()).decode()


def partial_owner(partial_name: str, lock_names: Iterable[str]) -> str | None:
    """The .lock file (in the same directory) of the repository file a partial belongs to, if any."""
    match = _PARTIAL.fullmatch(partial_name)
    if match is None:
        return None
    for lock in lock_names:
        if lock.endswith(".lock") and partial_key(lock[: -len(".lock")]) == match["key"]:
            return lock
    return None


def stale_partials(partials: Iterable[tuple[str, int, bool]], run_started_ns: int) -> list[str]:
    """Partials (path, mtime_ns, lock_held) that no running download writes: older than the run, unlocked."""
    return sorted(path for path, mtime_ns, locked in partials if mtime_ns < run_started_ns and not locked)


def progress_line(phase: str, done_bytes: int, total_bytes: int, done_files: int, total_files: int) -> str:
    """One human line: phase, files and bytes."""
    percent = 100.0 * done_bytes / total_bytes if total_bytes else 100.0
    sizes = f"{human_size(done_bytes)} of {human_size(total_bytes)}"
    return f"{phase}: {done_files}/{total_files} files, {sizes} ({percent:.0f}%)"


# --- file helpers (I/O, tested on temporary files) -----------------------------------------------------


def hash_file(
    path: str | os.PathLike[str], blob: bool = False, block: int = 8 << 20
) -> tuple[str, str | None]:
    """(sha256, git blob sha1 or None) of a file, in one read."""
    sha256 = hashlib.sha256()
    sha1 = None
    if blob:
        sha1 = hashlib.sha1()
        sha1.update(b"blob %d\x00" % os.stat(path).st_size)
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(block)
        view = memoryview(buffer)
        while True:
            count = f.readinto(buffer)
            if not count:
                break
            sha256.update(view[:count])
            if sha1 is not None:
                sha1.update(view[:count])
    return sha256.hexdigest(), sha1.hexdigest() if sha1 is not None else None


def hash_workers(requested: int = 0) -> int:
    """Threads to hash with: ``requested``, else the cores this process may run on."""
    if requested > 0:
        return requested
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def hash_files(
    jobs: Sequence[tuple[str, str | os.PathLike[str], bool, int]], workers: int
) -> Iterator[tuple[str, tuple[str, str | None]]]:
    """``(key, hash_file(path, blob))`` for each job ``(key, path, blob, size)``, in the order they finish,
    on ``workers`` threads at once: hashlib lets go of the GIL while it hashes a block, so each thread hashes
    on a core of its own. The largest files start first, so that the last to finish is a small one."""
    ordered = sorted(jobs, key=lambda job: -job[3])
    if workers <= 1 or len(ordered) <= 1:
        for key, path, blob, _size in ordered:
            yield key, hash_file(path, blob=blob)
        return
    with ThreadPoolExecutor(max_workers=min(workers, len(ordered))) as pool:
        futures = {pool.submit(hash_file, path, blob): key for key, path, blob, _size in ordered}
        for future in as_completed(futures):
            yield futures[future], future.result()


def try_lock(path: str | os.PathLike[str]) -> bool:
    """True when nobody holds an flock on this existing file (huggingface_hub's locks are flocks)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def local_stat(path: Path) -> LocalStat | None:
    """LocalStat of a regular file, None when it is missing or not a regular file."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if st.st_mode & 61440 != 32768:
        return None
    return LocalStat(size=st.st_size, mtime_ns=st.st_mtime_ns, inode=st.st_ino)
