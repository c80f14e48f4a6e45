"""Ansible module model_checkpoint: fetch a model repository at a pinned revision and verify every file."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_checkpoint
short_description: Download a Hugging Face model repository at a pinned revision and verify every file
description:
  - Reads the file list of O(repo_id) at O(revision) (sizes, LFS sha256, git blob ids) from the hub, a site
    mirror (O(endpoint)), or takes it from a local or NFS directory (O(source_path)).
  - Removes stale partial files that killed downloads left in C(<local_dir>/.cache/huggingface/download/)
    (huggingface_hub 1.18 and later write one per process and do not reuse them).
  - Hashes the files already present that the manifest does not vouch for; deletes any whose size or digest
    is wrong, so that it is fetched again.
  - Refuses, before downloading anything, when the filesystem of O(local_dir) lacks room for the missing
    bytes plus O(min_free_margin_gb).
  - Downloads what is missing with C(snapshot_download) (or copies it from O(source_path)); files already
    complete are never fetched again, so an interrupted download resumes per file.
  - Verifies every file against the revision (size, and sha256 for LFS files or the git blob sha1 for the
    others), and that every shard named by C(model.safetensors.index.json) is present. huggingface_hub does
    not check sha256 on download; this module does.
  - Records the verified state in a manifest (path, size, mtime_ns, inode, digests), so that an unchanged
    re-verify reads no file.
  - Makes every file world-readable (a service with a dynamic user must be able to read the weights).
  - Writes a one-line progress report to C(<local_dir>/.cache/glm5-deploy/progress.json) while it runs; run it
    with C(async) and poll it with M(ansible.builtin.async_status).
  - Needs huggingface_hub on the target's Python (see the model_checkpoint role's tool venv).
version_added: "0.1.0"
author:
  - glm5-deploy maintainers (@glm5-deploy)
options:
  repo_id:
    description: Model repository, C(org/name).
    type: str
    default: nvidia/GLM-5-NVFP4
  revision:
    description:
      - The revision to fetch. Pin a 40-hex commit id; a branch or tag is resolved to its commit at run time
        (the result says which), and a warning says that it is not a pin.
      - Ignored with O(source_path).
    type: str
    required: true
  local_dir:
    description: Where the files land (created when missing).
    type: path
    required: true
  token:
    description: Hugging Face token, for gated or private repositories. Never logged.
    type: str
  endpoint:
    description: Hub endpoint (C(HF_ENDPOINT)), for a site mirror such as olah. Default is the public hub.
    type: str
  source_path:
    description:
      - A local or NFS directory holding the checkpoint, used instead of a hub. Its files (except C(.cache/)
        and C(.git/)) are copied when missing or of the wrong size, and verified by sha256 against the source.
    type: path
  max_workers:
    description: Files downloaded in parallel.
    type: int
    default: 8
  xet_high_performance:
    description:
      - Turn on hf_xet's high-performance mode (C(HF_XET_HIGH_PERFORMANCE=1)). hf_xet is used only when the
        endpoint offers Xet storage (the public hub does; olah does not).
    type: bool
    default: false
  etag_timeout:
    description:
      - Seconds to wait for a file's metadata. olah recomputes a file's sha256 on every such request (about
        2.2 s per GB), so large shards behind olah need more than huggingface_hub's default of 10.
    type: int
    default: 60
  min_free_margin_gb:
    description: GB that must stay free on the filesystem of O(local_dir) after the download.
    type: float
    default: 20
  rehash:
    description: Ignore the manifest and hash every file again.
    type: bool
    default: false
  verify_workers:
    description:
      - Files hashed at once, each on a thread of its own (hashlib hashes outside Python's lock, so each
        uses a core). 0, the cores the module may run on.
    type: int
    default: 0
  slot_file:
    description:
      - Before it reads or writes anything (outside check mode), wait for a slot from the controller - until
        this file exists. The job names the file in its progress file (C(waiting_for)) while it waits; the
        action M(glm5.deploy.async_progress) creates it when its task runs for the node
        (O(glm5.deploy.async_progress#module:release_slot), the same path), and the job deletes it. With
        C(throttle) on that task, at most that many nodes fetch at once (the role's
        C(model_checkpoint_concurrent_downloads)).
      - Give each run its own path (the role names it by the run's start time), so that a job a killed run
        left waiting never takes the next run's slot.
      - The time waited is in RV(timings) as C(slot).
    type: path
attributes:
  check_mode:
    description: Reads metadata and hashes present files; deletes and downloads nothing.
    support: full
  diff_mode:
    description: No diff of the checkpoint's files is returned.
    support: none
  platform:
    description: Any POSIX host, with a Python that has C(huggingface_hub) for a download from a hub.
    support: full
    platforms: posix
notes:
  - C(changed) is true only when bytes were downloaded, copied, replaced or deleted, or modes fixed.
  - The manifest trusts a file whose size, mtime and inode are unchanged since it was hashed; use O(rehash)
    to distrust it.
"""

EXAMPLES = r"""
- name: Fetch GLM-5-NVFP4 at a pinned commit from a site mirror
  glm5.deploy.model_checkpoint:
    repo_id: nvidia/GLM-5-NVFP4
    revision: 0123456789abcdef0123456789abcdef01234567
    local_dir: /var/lib/sglang/models/GLM-5-NVFP4
    endpoint: http://hf-mirror.example.internal:8090
    token: "{{ vault_hf_token }}"
  async: 86400
  poll: 0
  register: fetch
  vars:
    ansible_python_interpreter: /opt/glm5/hf-tools/bin/python

- name: Copy a checkpoint from an NFS share and verify it
  glm5.deploy.model_checkpoint:
    revision: nfs
    source_path: /mnt/models/GLM-5-NVFP4
    local_dir: /var/lib/sglang/models/GLM-5-NVFP4
  vars:
    ansible_python_interpreter: /opt/glm5/hf-tools/bin/python
"""

RETURN = r"""
local_dir:
  description: The local directory.
  returned: success
  type: str
  sample: /var/lib/sglang/models/GLM-5-NVFP4
commit:
  description: The commit the revision resolved to; null with O(source_path).
  returned: success
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
files:
  description: Number of files in the checkpoint.
  returned: success
  type: int
  sample: 88
bytes_total:
  description: Size of the checkpoint.
  returned: success
  type: int
  sample: 440123456789
bytes_downloaded:
  description: Bytes downloaded or copied by this run.
  returned: success
  type: int
  sample: 0
downloaded_files:
  description: Files downloaded or copied by this run (including replaced ones).
  returned: success
  type: list
  elements: str
  sample: [model-00002-of-00004.safetensors]
replaced_files:
  description: Files that were present but had a wrong size or digest, and were deleted and fetched again.
  returned: success
  type: list
  elements: str
  sample: []
stale_partials_removed:
  description: Partial download files of earlier, dead downloads that were deleted.
  returned: success
  type: list
  elements: str
  sample: [.cache/huggingface/download/Cv1oZ3.cf79.1a2b3c4d.incomplete]
hashed_files:
  description: Files whose bytes were read and hashed by this run (0 when the manifest vouched for all).
  returned: success
  type: int
  sample: 0
hashed_bytes:
  description: Bytes hashed by this run.
  returned: success
  type: int
  sample: 0
cached_files:
  description: Files the manifest vouched for (unchanged since verified).
  returned: success
  type: int
  sample: 88
index_shards:
  description: Shards named by model.safetensors.index.json (0 when the repository has no index).
  returned: success
  type: int
  sample: 83
verified:
  description: Every file matches the revision.
  returned: success
  type: bool
  sample: true
manifest:
  description: Path of the manifest.
  returned: success
  type: str
  sample: /var/lib/sglang/models/GLM-5-NVFP4/.cache/glm5-deploy/manifest.json
timings:
  description: Seconds spent per phase (slot, metadata, cleanup, verify, download, total).
  returned: success
  type: dict
  sample: {metadata: 0.4, cleanup: 0.0, verify: 0.01, download: 0.0, total: 0.5}
progress:
  description: The last progress line.
  returned: success
  type: str
  sample: "verified: 88/88 files, 440.12/440.12 GB (100%)"
"""

import json
import os
import re
import stat as stat_module
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.glm5.deploy.plugins.module_utils.model_checkpoint import (
    INDEX_NAME,
    CheckpointError,
    LocalStat,
    ManifestEntry,
    RemoteFile,
    bytes_to_fetch,
    digests_match,
    dump_manifest,
    hash_file,
    hash_files,
    hash_workers,
    index_shards,
    local_stat,
    missing_from,
    parse_index,
    parse_manifest,
    partial_owner,
    plan,
    progress_line,
    remote_files,
    space_problem,
    stale_partials,
    try_lock,
)

NO_HUB = (
    "huggingface_hub is not importable by {python}: {error}. Run this module with the Python of a venv that "
    "has it (the model_checkpoint role creates one: model_checkpoint_tool_venv)."
)
_COMMIT = re.compile(r"[0-9a-f]{40}")


class Run:
    """One run of the module: its paths, its lock, its progress file and its timings."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params
        self.started_ns = time.time_ns()
        self.local_dir = Path(self.params["local_dir"])
        self.state_dir = self.local_dir / ".cache" / "glm5-deploy"
        self.manifest_path = self.state_dir / "manifest.json"
        self.progress_path = self.state_dir / "progress.json"
        self.timings: dict[str, float] = {}
        self.line = "starting"
        self.lock_fd: int | None = None

    def timed(self, phase: str, started: float) -> None:
        self.timings[phase] = round(self.timings.get(phase, 0.0) + time.monotonic() - started, 3)

    def report(
        self, line: str, done: int | None = None, total: int | None = None, waiting_for: str | None = None
    ) -> None:
        """Record the progress line, with the bytes done and the total when the phase counts them (for the
        result, and for anyone watching the progress file: the action async_progress), and the slot file the
        job waits for, if it waits."""
        self.line = line
        if self.module.check_mode or not self.state_dir.is_dir():
            return
        record = {"pid": os.getpid(), "line": line, "updated": time.time(), "done": done, "total": total}
        if waiting_for:
            record["waiting_for"] = waiting_for
        tmp = self.progress_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record) + "\n")
        tmp.replace(self.progress_path)

    def lock(self) -> None:
        """Hold the run lock of local_dir, so that two runs never work on one directory."""
        import fcntl

        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / "run.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            self.module.fail_json(
                msg=f"another model_checkpoint run is working on {self.local_dir} (it holds "
                f"{self.state_dir / 'run.lock'}; its progress: {self.progress_path}). Wait for it to finish."
            )
        self.lock_fd = fd

    def unlock(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def wait_for_slot(run: Run, slot: Path, poll: float = 1.0) -> None:
    """Wait until the controller gives this job its slot: until ``slot`` exists (the progress record names it
    meanwhile, as ``waiting_for``); then delete it."""
    run.state_dir.mkdir(parents=True, exist_ok=True)
    run.report("waiting for a download slot (other nodes are fetching)", waiting_for=str(slot))
    while not slot.exists():
        time.sleep(poll)
    slot.unlink(missing_ok=True)


# --- metadata ------------------------------------------------------------------------------------------


def hub_metadata(run: Run) -> tuple[str, list[RemoteFile]]:
    """The commit and the files of the revision, from the hub or mirror."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    p = run.params
    api = HfApi(endpoint=p["endpoint"], token=p["token"])
    # olah answers model_info only with an explicit revision; the hub accepts both.
    info = api.model_info(p["repo_id"], revision=p["revision"])
    commit = info.sha or p["revision"]
    entries = []
    for item in api.list_repo_tree(p["repo_id"], revision=commit, recursive=True):
        if not isinstance(item, RepoFile):
            continue
        lfs = item.lfs
        entries.append(
            {
                "path": item.path,
                "size": item.size,
                "sha256": lfs.sha256 if lfs else None,
                "blob_sha1": None if lfs else item.blob_id,
            }
        )
    return commit, remote_files(entries)


def source_metadata(source: Path) -> list[RemoteFile]:
    """The files of a source directory (sizes only; digests come from hashing the source)."""
    if not source.is_dir():
        raise CheckpointError(f"source_path {source} is not a directory")
    entries = []
    for root, dirs, files in os.walk(source):
        rel_root = Path(root).relative_to(source)
        if rel_root == Path("."):
            dirs[:] = [d for d in dirs if d not in (".cache", ".git")]
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if path.is_file():
                entries.append({"path": (rel_root / name).as_posix(), "size": path.stat().st_size})
    if not entries:
        raise CheckpointError(f"source_path {source} holds no files")
    return remote_files(entries)


# --- cleanup, verification -----------------------------------------------------------------------------


def clean_stale_partials(run: Run) -> list[str]:
    """Delete the partial files of dead downloads (older than this run, their file's lock free)."""
    roots = [run.local_dir / ".cache" / "huggingface" / "download", run.state_dir / "partial"]
    found: list[tuple[str, int, bool]] = []
    for root in roots:
        if not root.is_dir():
            continue
        for directory, _dirs, files in os.walk(root):
            locks = [f for f in files if f.endswith(".lock")]
            for name in files:
                if not name.endswith(".incomplete"):
                    continue
                path = Path(directory) / name
                owner = partial_owner(name, locks)
                locked = owner is not None and not try_lock(Path(directory) / owner)
                try:
                    found.append((str(path), path.stat().st_mtime_ns, locked))
                except FileNotFoundError:
                    continue
    stale = stale_partials(found, run.started_ns)
    if not run.module.check_mode:
        for path in stale:
            Path(path).unlink(missing_ok=True)
    return [str(Path(p).relative_to(run.local_dir)) for p in stale]


def load_manifest(run: Run) -> dict[str, ManifestEntry]:
    try:
        return parse_manifest(run.manifest_path.read_text())
    except FileNotFoundError:
        return {}
    except (CheckpointError, OSError, UnicodeDecodeError) as exc:
        run.module.warn(f"ignoring the manifest {run.manifest_path}: {exc}; every file is hashed again")
        return {}


def save_manifest(run: Run, entries: dict[str, ManifestEntry], commit: str | None) -> None:
    if run.module.check_mode:
        return
    tmp = run.manifest_path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(dump_manifest(entries, run.params["repo_id"], commit or "source"))
    os.chmod(tmp, 0o644)
    tmp.replace(run.manifest_path)


def forget_download(run: Run, path: str) -> None:
    """Delete a local file and huggingface_hub's metadata of it, so that the next download fetches it."""
    (run.local_dir / path).unlink(missing_ok=True)
    (run.local_dir / ".cache" / "huggingface" / "download" / f"{path}.metadata").unlink(missing_ok=True)


class Verifier:
    """Hashes local files against the remote file list and keeps the manifest entries of the good ones."""

    def __init__(self, run: Run, remote: list[RemoteFile], manifest: dict[str, ManifestEntry]) -> None:
        self.run = run
        self.remote = {f.path: f for f in remote}
        self.entries = dict(manifest)
        self.hashed_files = 0
        self.hashed_bytes = 0
        self.source_sha: dict[str, str] = {}

    def expected(self, path: str) -> RemoteFile:
        """The remote file; with a source directory, its sha256 comes from hashing the source once."""
        remote = self.remote[path]
        source = self.run.params["source_path"]
        if source is None or remote.sha256 is not None:
            return remote
        if path not in self.source_sha:
            self.source_sha[path] = hash_file(Path(source) / path)[0]
            self.hashed_files += 1
            self.hashed_bytes += remote.size
        return RemoteFile(remote.path, remote.size, self.source_sha[path], None)

    def check(
        self, stats: Mapping[str, LocalStat], phase: str, total_bytes: int
    ) -> Iterator[tuple[str, bool]]:
        """Hash the present files ``stats`` names, on every core (hash_files), and judge each against the
        revision as it finishes: ``(path, True)`` with a manifest entry when it matches, ``(path, False)``
        otherwise. A progress line per file."""
        workers = hash_workers(self.run.params["verify_workers"])
        source = self.run.params["source_path"]
        if source is not None:  # the source's digests first, where the hub gives none
            unknown = [p for p in stats if self.remote[p].sha256 is None and p not in self.source_sha]
            jobs = [(p, Path(source) / p, False, self.remote[p].size) for p in unknown]
            for path, (sha256, _blob) in hash_files(jobs, workers):
                self.source_sha[path] = sha256
                self.hashed_files += 1
                self.hashed_bytes += self.remote[path].size
        jobs = [
            (p, self.run.local_dir / p, self.expected(p).sha256 is None, st.size) for p, st in stats.items()
        ]
        done = 0
        for number, (path, (sha256, blob)) in enumerate(hash_files(jobs, workers), 1):
            stat, remote = stats[path], self.expected(path)
            self.hashed_files += 1
            self.hashed_bytes += stat.size
            done += stat.size
            self.run.report(progress_line(phase, done, total_bytes, number, len(jobs)))
            if stat.size == remote.size and digests_match(remote, sha256, blob):
                self.entries[path] = ManifestEntry(stat.size, stat.mtime_ns, stat.inode, sha256, blob)
                yield path, True
            else:
                self.entries.pop(path, None)
                yield path, False


# --- download ------------------------------------------------------------------------------------------


def glob_escape(path: str) -> str:
    """An fnmatch pattern that matches exactly this path (huggingface_hub filters with fnmatch)."""
    return re.sub(r"([\[\]*?])", r"[\1]", path)


def watch_progress(run: Run, remote: list[RemoteFile], paths: list[str], stop: threading.Event) -> None:
    """Report bytes on disk (complete files and partials) every few seconds until stop is set."""
    sizes = {f.path: f.size for f in remote}
    total = sum(sizes[p] for p in paths)
    partial_roots = [run.local_dir / ".cache" / "huggingface" / "download", run.state_dir / "partial"]
    while not stop.wait(2.0):
        done_files = done = 0
        for p in paths:
            st = local_stat(run.local_dir / p)
            if st is not None and st.inode and st.size == sizes[p]:
                done_files += 1
                done += sizes[p]
        for root in partial_roots:
            for partial in root.rglob("*.incomplete") if root.is_dir() else []:
                try:
                    if partial.stat().st_mtime_ns >= run.started_ns:
                        done += partial.stat().st_size
                except FileNotFoundError:
                    continue
        run.report(
            progress_line("downloading", min(done, total), total, done_files, len(paths)),
            min(done, total),
            total,
        )


def hub_download(run: Run, commit: str, paths: list[str]) -> None:
    from huggingface_hub import snapshot_download

    p = run.params
    snapshot_download(
        repo_id=p["repo_id"],
        revision=commit,
        local_dir=str(run.local_dir),
        endpoint=p["endpoint"],
        token=p["token"],
        max_workers=p["max_workers"],
        etag_timeout=p["etag_timeout"],
        allow_patterns=[glob_escape(path) for path in paths],
    )


def source_copy(run: Run, verifier: Verifier, paths: list[str]) -> None:
    """Copy files from the source directory through a partial file, hashing the bytes on the way."""
    import hashlib

    source = Path(run.params["source_path"])
    partial_dir = run.state_dir / "partial"
    partial_dir.mkdir(parents=True, exist_ok=True)
    for path in paths:
        dest = run.local_dir / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = partial_dir / f"{path.replace('/', '%')}.{os.getpid():08x}.incomplete"
        digest = hashlib.sha256()
        with open(source / path, "rb") as src, open(tmp, "wb") as out:
            for block in iter(lambda src=src: src.read(8 << 20), b""):
                digest.update(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(dest)
        verifier.source_sha[path] = digest.hexdigest()


def make_world_readable(run: Run, paths: list[str]) -> bool:
    """Add read (and, for directories, search) permission for everyone; True when a mode changed."""
    changed = False
    targets: dict[Path, int] = {run.local_dir: 0o555}
    for path in paths:
        targets[run.local_dir / path] = 0o444
        for parent in Path(path).parents:
            if str(parent) != ".":
                targets[run.local_dir / parent] = 0o555
    for target, bits in targets.items():
        mode = stat_module.S_IMODE(target.stat().st_mode)
        if mode & bits != bits:
            changed = True
            if not run.module.check_mode:
                os.chmod(target, mode | bits)
    return changed


# --- the run -------------------------------------------------------------------------------------------


def execute(run: Run) -> dict[str, Any]:
    p = run.params
    began = time.monotonic()
    if p["slot_file"] and not run.module.check_mode:
        t = time.monotonic()
        wait_for_slot(run, Path(p["slot_file"]))
        run.timed("slot", t)
    if not run.module.check_mode:
        run.lock()
        run.report("reading the revision's file list")

    t = time.monotonic()
    if p["source_path"]:
        commit, remote = None, source_metadata(Path(p["source_path"]))
    else:
        commit, remote = hub_metadata(run)
        if not _COMMIT.fullmatch(p["revision"]):
            run.module.warn(
                f"revision {p['revision']!r} is not a commit id; it resolved to {commit}. Pin it."
            )
    run.timed("metadata", t)

    t = time.monotonic()
    stale = clean_stale_partials(run)
    run.timed("cleanup", t)

    t = time.monotonic()
    manifest = load_manifest(run)
    local = {f.path: st for f in remote if (st := local_stat(run.local_dir / f.path)) is not None}
    decided = plan(remote, local, manifest, rehash=p["rehash"])
    verifier = Verifier(run, remote, manifest)
    bad = list(decided.to_replace)
    total_bytes = sum(f.size for f in remote)
    present = {path: local[path] for path in decided.to_hash}
    hashed_bytes = sum(st.size for st in present.values())
    bad += [
        path for path, good in verifier.check(present, "verifying present files", hashed_bytes) if not good
    ]
    for path in list(verifier.entries):
        if path not in verifier.remote or path in bad:
            verifier.entries.pop(path)
    save_manifest(run, verifier.entries, commit)
    run.timed("verify", t)

    fetch = sorted(set(decided.to_fetch) | set(bad))
    needed = bytes_to_fetch(remote, fetch)
    probe = run.local_dir
    while not probe.exists():
        probe = probe.parent
    vfs = os.statvfs(probe)
    problem = space_problem(needed, vfs.f_bavail * vfs.f_frsize, p["min_free_margin_gb"], str(run.local_dir))
    if problem:
        run.module.fail_json(msg=problem, bytes_needed=needed, bytes_free=vfs.f_bavail * vfs.f_frsize)

    result: dict[str, Any] = {
        "local_dir": str(run.local_dir),
        "commit": commit,
        "files": len(remote),
        "bytes_total": total_bytes,
        "replaced_files": sorted(bad),
        "stale_partials_removed": stale,
        "manifest": str(run.manifest_path),
    }
    if run.module.check_mode:
        result.update(
            changed=bool(fetch or stale),
            bytes_downloaded=needed,
            downloaded_files=fetch,
            hashed_files=verifier.hashed_files,
            hashed_bytes=verifier.hashed_bytes,
            cached_files=len(decided.cached),
            index_shards=0,
            verified=not fetch,
            timings=run.timings,
            progress=(
                f"check mode: {len(fetch)} files ({needed} bytes) to fetch"
                if fetch or stale
                else "whole: nothing to fetch"
            ),
        )
        return result

    for path in bad:
        forget_download(run, path)
    t = time.monotonic()
    if fetch:
        stop = threading.Event()
        watcher = threading.Thread(target=watch_progress, args=(run, remote, fetch, stop), daemon=True)
        watcher.start()
        try:
            if p["source_path"]:
                source_copy(run, verifier, fetch)
            else:
                hub_download(run, commit or p["revision"], fetch)
        finally:
            stop.set()
            watcher.join()
    run.timed("download", t)

    t = time.monotonic()
    run.report(progress_line("verifying downloaded files", 0, needed, 0, len(fetch)))
    failed = []
    fetched = {}
    for path in fetch:
        st = local_stat(run.local_dir / path)
        if st is None:
            failed.append(f"{path} (missing after the download)")
        else:
            fetched[path] = st
    for path, good in verifier.check(fetched, "verifying downloaded files", needed):
        if not good:
            forget_download(run, path)
            failed.append(f"{path} (size or digest differs from the revision; deleted)")
    save_manifest(run, verifier.entries, commit)
    if failed:
        run.module.fail_json(
            msg=f"{len(failed)} file(s) of {p['repo_id']} did not verify after the download: "
            + ", ".join(failed)
            + ". Run again to fetch them again; if it repeats, the mirror serves other bytes than the hub's "
            "metadata says.",
            failed_files=failed,
        )

    shards = 0
    if INDEX_NAME in verifier.remote:
        weight_map = parse_index((run.local_dir / INDEX_NAME).read_text())
        shards = len(index_shards(weight_map))
        absent = missing_from(index_shards(weight_map), verifier.remote)
        if absent:
            run.module.fail_json(
                msg=f"{INDEX_NAME} of {p['repo_id']} names shard(s) that the revision does not contain: "
                f"{', '.join(absent)}"
            )
    modes_changed = make_world_readable(run, [f.path for f in remote])
    run.timed("verify", t)
    run.timings["total"] = round(time.monotonic() - began, 3)
    line = progress_line("verified", total_bytes, total_bytes, len(remote), len(remote))
    run.report(line)
    result.update(
        changed=bool(fetch or stale or modes_changed),
        bytes_downloaded=needed,
        downloaded_files=fetch,
        hashed_files=verifier.hashed_files,
        hashed_bytes=verifier.hashed_bytes,
        cached_files=len(decided.cached),
        index_shards=shards,
        verified=True,
        timings=run.timings,
        progress=line,
    )
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "repo_id": {"type": "str", "default": "nvidia/GLM-5-NVFP4"},
            "revision": {"type": "str", "required": True},
            "local_dir": {"type": "path", "required": True},
            "token": {"type": "str", "no_log": True},
            "endpoint": {"type": "str"},
            "source_path": {"type": "path"},
            "max_workers": {"type": "int", "default": 8},
            "xet_high_performance": {"type": "bool", "default": False},
            "etag_timeout": {"type": "int", "default": 60},
            "min_free_margin_gb": {"type": "float", "default": 20},
            "rehash": {"type": "bool", "default": False},
            "verify_workers": {"type": "int", "default": 0},
            "slot_file": {"type": "path"},
        },
        supports_check_mode=True,
    )
    # huggingface_hub reads these when it is imported.
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    if module.params["xet_high_performance"]:
        os.environ["HF_XET_HIGH_PERFORMANCE"] = "1"
    if module.params["endpoint"]:
        os.environ["HF_ENDPOINT"] = module.params["endpoint"].rstrip("/")
        module.params["endpoint"] = os.environ["HF_ENDPOINT"]
    if not module.params["source_path"]:
        try:
            import huggingface_hub  # noqa: F401
        except ImportError as exc:
            import sys

            module.fail_json(msg=NO_HUB.format(python=sys.executable, error=exc))
    run = Run(module)
    try:
        result = execute(run)
    except CheckpointError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # huggingface_hub's and the network's errors, with what was asked
        where = module.params["source_path"] or module.params["endpoint"] or "the public hub"
        module.fail_json(
            msg=f"fetching {module.params['repo_id']} at {module.params['revision']} from {where} failed: "
            f"{type(exc).__name__}: {exc}. Check repo_id, revision, endpoint and token (gated repositories "
            "need one).",
            progress=run.line,
        )
    finally:
        run.unlock()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
