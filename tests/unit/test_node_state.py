"""node_state: one read of a role's managed paths, users and groups, and the drift in words."""

from __future__ import annotations

import getpass
import grp
import os
from pathlib import Path

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.node_state import (
    describe_path,
    describe_user,
    drift,
    expect,
    files,
    group_exists,
    normal_mode,
    path_drift,
    present,
    sha1_text,
    unit_drift,
    user_drift,
)

ME = getpass.getuser()
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


def test_expect_replaces_content_with_its_sha1_and_drops_unset_keys() -> None:
    items = expect([{"path": "/etc/x", "content": "key=secret\n", "mode": "0600", "owner": None}])
    assert items == [{"path": "/etc/x", "mode": "0600", "sha1": sha1_text("key=secret\n")}]
    assert "secret" not in repr(items)


def test_normal_mode_reads_octal_text_and_ints_and_refuses_symbolic() -> None:
    assert normal_mode("0644") == normal_mode("644") == normal_mode(0o644) == 0o644
    assert normal_mode("u=rw,g=r") is None
    assert normal_mode(None) is None


def test_a_written_file_matches_what_wrote_it(tmp_path: Path) -> None:
    target = tmp_path / "unit.service"
    target.write_text("[Service]\nExecStart=/bin/true\n", encoding="utf-8")
    target.chmod(0o640)
    want = expect(
        [
            {
                "path": str(target),
                "content": "[Service]\nExecStart=/bin/true\n",
                "mode": "0640",
                "owner": ME,
                "group": MY_GROUP,
            }
        ]
    )
    assert drift(want) == []


def test_each_difference_is_named(tmp_path: Path) -> None:
    target = tmp_path / "env"
    target.write_text("A=1\n", encoding="utf-8")
    target.chmod(0o644)
    found = drift(expect([{"path": str(target), "content": "A=2\n", "mode": "0600", "owner": "nobody-here"}]))
    assert f"{target}: owner {ME}, should be nobody-here" in found
    assert f"{target}: mode 0644, should be 0600" in found
    assert f"{target}: content differs" in found


def test_missing_paths_and_wrong_types(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    found = drift(
        [
            {"path": str(tmp_path / "missing"), "state": "file"},
            {"path": str(tmp_path / "d"), "state": "file"},
            {"path": str(tmp_path / "d"), "state": "directory"},
            {"path": str(tmp_path / "d"), "state": "absent"},
            {"path": str(tmp_path / "gone"), "state": "absent"},
        ]
    )
    assert found == [
        f"{tmp_path / 'missing'}: is absent, should be a file",
        f"{tmp_path / 'd'}: is a directory, should be a file",
        f"{tmp_path / 'd'}: is a directory, should be absent",
    ]


def test_a_symbolic_mode_never_matches_so_the_roles_task_decides() -> None:
    assert path_drift({"path": "/x", "state": "file", "mode": "u=rw"}, {"state": "file", "mode": "0600"}) == [
        "/x: mode 0600, should be u=rw"
    ]


def test_an_unknown_state_is_an_error() -> None:
    with pytest.raises(ValueError, match="not one of"):
        path_drift({"path": "/x", "state": "link"}, {"state": "link"})


def test_a_symlink_is_not_the_file_it_points_to(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("x", encoding="utf-8")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert describe_path(str(tmp_path / "link"))["state"] == "link"
    assert describe_path(str(tmp_path / "real"))["sha1"] == sha1_text("x")


def test_users_and_groups() -> None:
    me = describe_user(ME)
    assert me["exists"] and me["group"]
    assert describe_user("no-such-user-glm5") == {"exists": False}
    assert group_exists(MY_GROUP) and not group_exists("no-such-group-glm5")
    assert user_drift({"name": ME, "shell": me["shell"], "home": me["home"]}, me) == []
    assert user_drift({"name": ME, "shell": "/usr/sbin/nologin-x"}, me) == [
        f"user {ME}: shell {me['shell']}, should be /usr/sbin/nologin-x"
    ]
    assert drift(users=[{"name": "no-such-user-glm5"}], groups=["no-such-group-glm5"]) == [
        "group no-such-group-glm5: missing",
        "user no-such-user-glm5: missing",
    ]


def test_the_readers_can_be_given() -> None:
    found = drift(
        [{"path": "/etc/a", "state": "directory", "mode": "0750", "owner": "root", "group": "sglang"}],
        read_path=lambda path: {"state": "directory", "mode": "0750", "owner": "root", "group": "root"},
    )
    assert found == ["/etc/a: group root, should be sglang"]


def test_units_must_be_loaded_active_enabled_and_reloaded() -> None:
    good = {
        "LoadState": "loaded",
        "ActiveState": "active",
        "UnitFileState": "enabled",
        "NeedDaemonReload": "no",
    }
    want = {"name": "x.service", "active": True, "enabled": True}
    assert unit_drift(want, good) == []
    assert unit_drift(want, {**good, "LoadState": "not-found"}) == [
        "unit x.service: not-found, should be loaded"
    ]
    assert unit_drift(want, {**good, "ActiveState": "failed", "UnitFileState": "disabled"}) == [
        "unit x.service: failed, should be active",
        "unit x.service: disabled, should be enabled",
    ]
    assert unit_drift(want, {**good, "NeedDaemonReload": "yes"}) == [
        "unit x.service: changed on disk, systemd has not reloaded it"
    ]
    assert unit_drift({"name": "x.service"}, {**good, "ActiveState": "inactive"}) == []
    assert drift(units=[want], read_unit=lambda name: good) == []


def test_files_pairs_paths_with_contents() -> None:
    assert files(["/a", "/b"], ["1", "2"], mode="0644") == [
        {"path": "/a", "content": "1", "mode": "0644"},
        {"path": "/b", "content": "2", "mode": "0644"},
    ]
    with pytest.raises(ValueError, match="2 paths but 1 contents"):
        files(["/a", "/b"], ["1"])


def test_optional_files_are_written_or_removed_and_their_directories_kept() -> None:
    items = [
        {"path": "/etc/x", "state": "directory", "owner": "root", "mode": "0755"},
        {"path": "/etc/x/a", "owner": "root", "mode": "0600", "content": "secret"},
    ]
    assert present(items, True) == items
    assert present(items, False) == [{"path": "/etc/x/a", "state": "absent"}]
