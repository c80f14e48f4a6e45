"""Verify the driver scenario after the upgrade: the newer driver is installed, pinned, held and loaded."""

from __future__ import annotations

import pytest

DRIVER = "580.159.04"
PACKAGES = [
    "nvidia-open",
    "nvidia-kernel-open-dkms",
    "nvidia-driver-cuda",
    "nvidia-persistenced",
    "nvidia-modprobe",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_driver_package_upgraded_and_held(host, name: str) -> None:
    package = host.package(name)
    assert package.is_installed
    assert package.version == f"{DRIVER}-1"
    assert name in host.check_output("apt-mark showhold").split()


def test_apt_pin_follows_the_upgrade(host) -> None:
    pin = host.file("/etc/apt/preferences.d/nvidia-driver").content_string
    assert f"Pin: version {DRIVER}-1" in pin
    assert "Pin-Priority: 1001" in pin


def test_cuda_source_is_signed_and_points_at_the_mirror(host) -> None:
    source = host.file("/etc/apt/sources.list.d/cuda.sources").content_string
    assert "Signed-By: /usr/share/keyrings/cuda-archive-keyring.gpg" in source
    assert "Suites: /" in source
    assert host.package("cuda-keyring").version == "1.1-1"
    # apt trusts the repository: the signed InRelease is accepted, and the pin wins.
    update = host.run("apt-get update")
    assert update.rc == 0, update.stderr
    assert "NO_PUBKEY" not in update.stderr and "not signed" not in update.stderr
    policy = host.check_output("apt-cache policy nvidia-open")
    assert "http://glm5-mol-driver-gateway:8080/apt/debian12/x86_64" in policy
    assert f"*** {DRIVER}-1 1001" in policy


def test_loaded_driver_and_persistence_mode(host) -> None:
    rows = set(
        host.check_output(
            "nvidia-smi --query-gpu=driver_version,persistence_mode --format=csv,noheader"
        ).splitlines()
    )
    assert rows == {f"{DRIVER}, Enabled"}
    assert host.service("nvidia-persistenced").is_running
    assert host.service("nvidia-persistenced").is_enabled


def test_host_settings(host) -> None:
    assert "blacklist nouveau" in host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string
    assert "iommu=pt" in host.file("/etc/default/grub.d/90-glm5-iommu.cfg").content_string


@pytest.mark.parametrize(("release", "version"), [("12.9", "12.9.1-1"), ("13.0", "13.0.2-1")])
def test_each_lanes_cuda_toolkit_side_by_side(host, release: str, version: str) -> None:
    """converge installed the seed lane's toolkit (12.9), side_effect the current lane's (13.0) beside it."""
    assert host.package("cuda-toolkit-" + release.replace(".", "-")).version == version
    assert f"release {release}," in host.check_output(f"/usr/local/cuda-{release}/bin/nvcc --version")
