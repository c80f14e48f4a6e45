"""A node's managed paths, users and groups against what a role would write: one read instead of one per task.

A role lists what it manages (paths with their state, owner, group, mode and content; users; groups). The
node_state module reads all of it in one round trip and reports the drift; the role runs its writing tasks
only when there is some. On a converged node that is one module call where there were one per file.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# Files larger than this are not hashed: they never match content, so the role's own task decides.
MAX_HASHED_BYTES = 16 * 1024 * 1024

PATH_STATES = ("file", "directory", "absent")


def sha1_text(content: str) -> str:
    """The SHA-1 of text as ansible.builtin.copy writes it (UTF-8)."""
    return hashlib.sha1(content.encode("utf-8")).hexdigest()  # a checksum, as copy's own


def expect(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A role's managed paths for the module: `content` becomes its `sha1`, so no content (and no secret in
    it) goes to the node or into a verbose log."""
    out = []
    for item in items:
        entry = {k: v for k, v in item.items() if k != "content" and v is not None}
        if "content" in item and item["content"] is not None:
            entry["sha1"] = sha1_text(str(item["content"]))
        out.append(entry)
    return out


def files(paths: Iterable[str], contents: Iterable[str], **attrs: Any) -> list[dict[str, Any]]:
    """Managed files from their paths and contents, in the same order, with the same owner, group and mode."""
    paths, contents = list(paths), list(contents)
    if len(paths) != len(contents):
        raise ValueError(f"{len(paths)} paths but {len(contents)} contents")
    return [
        {"path": path, "content": content, **attrs} for path, content in zip(paths, contents, strict=True)
    ]


def present(items: Iterable[Mapping[str, Any]], wanted: Any) -> list[dict[str, Any]]:
    """A role's optional files: the items as they are when ``wanted``, else each file as absent (path and
    ``state: absent``, so the role removes what an earlier run wrote). Directories are left out when not
    wanted: they may hold other files."""
    items = [dict(item) for item in items]
    if wanted:
        return items
    return [{"path": i["path"], "state": "absent"} for i in items if i.get("state", "file") != "directory"]


def normal_mode(mode: Any) -> int | None:
    """An octal mode as given to Ansible ("0644", "644", 0o644) as an int; None for a symbolic one."""
    if mode is None:
        return None
    if isinstance(mode, int):
        return mode
    text = str(mode).strip()
    if text and all(c in "01234567" for c in text):
        return int(text, 8)
    return None


def describe_path(path: str) -> dict[str, Any]:
    """What is at a path: its type, owner, group, mode and, for a regular file, its SHA-1."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"state": "absent"}
    if stat.S_ISDIR(st.st_mode):
        kind = "directory"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISLNK(st.st_mode):
        kind = "link"
    else:
        kind = "other"
    entry: dict[str, Any] = {
        "state": kind,
        "owner": _name(pwd.getpwuid, st.st_uid),
        "group": _name(grp.getgrgid, st.st_gid),
        "mode": f"{stat.S_IMODE(st.st_mode):04o}",
    }
    if kind == "file" and st.st_size <= MAX_HASHED_BYTES:
        digest = hashlib.sha1()  # a checksum, as copy's own
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        entry["sha1"] = digest.hexdigest()
    return entry


def describe_user(name: str) -> dict[str, Any]:
    """A user's primary group, home and shell, or that it does not exist."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return {"exists": False}
    return {
        "exists": True,
        "group": _name(grp.getgrgid, entry.pw_gid),
        "home": entry.pw_dir,
        "shell": entry.pw_shell,
    }


def group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def _name(lookup: Callable[[int], Any], number: int) -> str:
    try:
        return lookup(number)[0]
    except KeyError:
        return str(number)


def path_drift(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """How one path differs from what the role would write (empty when it matches)."""
    path = expected["path"]
    want = expected.get("state", "file")
    if want not in PATH_STATES:
        raise ValueError(f"{path}: state {want!r} is not one of {', '.join(PATH_STATES)}")
    have = actual.get("state", "absent")
    if want == "absent":
        return [] if have == "absent" else [f"{path}: is a {have}, should be absent"]
    if have != want:
        return [f"{path}: is {'absent' if have == 'absent' else 'a ' + have}, should be a {want}"]
    out = []
    for key in ("owner", "group"):
        if expected.get(key) is not None and str(expected[key]) != actual.get(key):
            out.append(f"{path}: {key} {actual.get(key)}, should be {expected[key]}")
    if "mode" in expected and expected["mode"] is not None:
        mode = normal_mode(expected["mode"])
        if mode is None or f"{mode:04o}" != actual.get("mode"):
            out.append(f"{path}: mode {actual.get('mode')}, should be {expected['mode']}")
    if want == "file" and expected.get("sha1") and expected["sha1"] != actual.get("sha1"):
        out.append(f"{path}: content differs")
    return out


def user_drift(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """How one user differs from what the role would create (empty when it matches)."""
    name = expected["name"]
    if not actual.get("exists"):
        return [f"user {name}: missing"]
    return [
        f"user {name}: {key} {actual.get(key)}, should be {expected[key]}"
        for key in ("group", "home", "shell")
        if expected.get(key) is not None and str(expected[key]) != actual.get(key)
    ]


def unit_drift(expected: Mapping[str, Any], props: Mapping[str, str]) -> list[str]:
    """How one systemd unit differs from enabled and running (``systemctl show`` properties; empty when it
    matches). A unit whose files changed since systemd read them (NeedDaemonReload) differs too."""
    name = expected["name"]
    out = []
    if props.get("LoadState") != "loaded":
        return [f"unit {name}: {props.get('LoadState') or 'unknown'}, should be loaded"]
    if expected.get("active") and props.get("ActiveState") != "active":
        out.append(f"unit {name}: {props.get('ActiveState')}, should be active")
    if expected.get("enabled") and props.get("UnitFileState") != "enabled":
        out.append(f"unit {name}: {props.get('UnitFileState')}, should be enabled")
    if props.get("NeedDaemonReload") == "yes":
        out.append(f"unit {name}: changed on disk, systemd has not reloaded it")
    return out


# The properties unit_drift reads (systemctl show -p ...).
UNIT_PROPERTIES = ("LoadState", "ActiveState", "UnitFileState", "NeedDaemonReload")


def drift(
    paths: Iterable[Mapping[str, Any]] = (),
    users: Iterable[Mapping[str, Any]] = (),
    groups: Iterable[str] = (),
    units: Iterable[Mapping[str, Any]] = (),
    *,
    read_path: Callable[[str], Mapping[str, Any]] = describe_path,
    read_user: Callable[[str], Mapping[str, Any]] = describe_user,
    has_group: Callable[[str], bool] = group_exists,
    read_unit: Callable[[str], Mapping[str, str]] = lambda name: {},
) -> list[str]:
    """Every difference between the node and what the role would write, in the order given: groups, users,
    paths, then units (which run from those files)."""
    out = [f"group {name}: missing" for name in groups if not has_group(name)]
    for user in users:
        out += user_drift(user, read_user(user["name"]))
    for path in paths:
        out += path_drift(path, read_path(path["path"]))
    for unit in units:
        out += unit_drift(unit, read_unit(unit["name"]))
    return out
