"""dpkg-query output read into what the driver role must still ask apt for."""

from __future__ import annotations

from ansible_collections.glm5.deploy.plugins.module_utils.dpkg_state import packages_plan, parse_dpkg_query

PKGS = ["nvidia-open", "nvidia-persistenced"]


def test_installed_packages_with_their_selection() -> None:
    lines = ["nvidia-open 580.1-1 hi", "nvidia-persistenced 580.1-1 ii", "nvidia-gone 1 un", "junk"]
    assert parse_dpkg_query(lines) == {
        "nvidia-open": {"version": "580.1-1", "selection": "hold"},
        "nvidia-persistenced": {"version": "580.1-1", "selection": "install"},
    }


def test_a_converged_node_needs_nothing() -> None:
    lines = ["nvidia-open 580.1-1 hi", "nvidia-persistenced 580.1-1 hi"]
    assert packages_plan(lines, PKGS, "580.1-1", hold=True) == {"install": [], "select": []}


def test_other_version_missing_package_and_unheld_package_are_named() -> None:
    lines = ["nvidia-open 570.9-1 hi"]
    plan = packages_plan(lines, PKGS, "580.1-1", hold=True)
    assert plan == {"install": PKGS, "select": ["nvidia-persistenced"]}
    assert packages_plan(["nvidia-open 580.1-1 hi"], PKGS, "580.1-1", hold=False)["select"] == PKGS
