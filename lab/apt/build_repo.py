"""Build the lab's signed apt repository of STAND-IN packages (lab only; see standin-packages.yml).

Output: <cache>/apt-repo/<inputs-hash>/<distro>/<arch>/ with the .debs, Packages(.gz), Release, InRelease and
Release.gpg, plus lab-archive-key.asc. Built only when missing; the signing key persists in <cache>/apt-gnupg.
Prints the repository root on the last line.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from email.utils import formatdate
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SPEC = HERE / "standin-packages.yml"
KEY_UID = "glm5-deploy lab apt repository (test double) <lab-apt@glm5-deploy.invalid>"


def inputs_hash() -> str:
    """Hash of everything that shapes the repository, so a changed input rebuilds it."""
    digest = hashlib.sha256()
    for path in sorted([SPEC, Path(__file__).resolve(), *HERE.joinpath("standin").iterdir()]):
        digest.update(path.name.encode() + path.read_bytes())
    digest.update((HERE.parent / "gpu-standin" / "nvidia-smi").read_bytes())
    return digest.hexdigest()[:12]


def gpg(gnupghome: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    kw.setdefault("check", True)
    return subprocess.run(["gpg", "--batch", "--homedir", str(gnupghome), *args], **kw)


def ensure_key(gnupghome: Path) -> None:
    gnupghome.mkdir(mode=0o700, parents=True, exist_ok=True)
    listed = gpg(gnupghome, "--list-secret-keys", KEY_UID, capture_output=True, check=False)
    if listed.returncode != 0:
        gpg(gnupghome, "--passphrase", "", "--quick-gen-key", KEY_UID, "rsa3072", "sign", "never")


def payload(source: str, version: str, keyring: bytes) -> tuple[bytes, int]:
    """The bytes and mode of one file of a stand-in package."""
    if source == "@keyring":
        return keyring, 0o644
    if source == "@version":
        return (version.rsplit("-", 1)[0] + "\n").encode(), 0o644
    if source.startswith("@file:"):
        path = HERE / source.removeprefix("@file:")
        return path.read_bytes(), 0o755 if os.access(path, os.X_OK) else 0o644
    return source.encode(), 0o644


def build_deb(pkg: dict[str, Any], version: str, keyring: bytes, out: Path) -> None:
    arch = pkg.get("architecture", "amd64")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for dest, source in (pkg.get("files") or {}).items():
            data, mode = payload(source, version, keyring)
            target = root / dest.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(mode)
        control = [
            f"Package: {pkg['name']}",
            f"Version: {version}",
            f"Architecture: {arch}",
            "Maintainer: glm5-deploy lab <lab-apt@glm5-deploy.invalid>",
            "Section: lab",
            "Priority: optional",
        ]
        if pkg.get("depends"):
            control.append(f"Depends: {pkg['depends'].format(version=version)}")
        control.append(f"Description: LAB STAND-IN {pkg['description']}")
        (root / "DEBIAN").mkdir()
        (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        deb = out / f"{pkg['name']}_{version}_{arch}.deb"
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
            check=True,
            capture_output=True,
        )


def write_release(repo: Path, origin: str) -> str:
    lines = [
        f"Origin: {origin}",
        "Label: glm5-deploy lab",
        "Architectures: amd64 all",
        f"Date: {formatdate(usegmt=True)}",
        "SHA256:",
    ]
    for name in ("Packages", "Packages.gz"):
        data = (repo / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    text = "\n".join(lines) + "\n"
    (repo / "Release").write_text(text)
    return text


def build(cache: Path) -> Path:
    spec = yaml.safe_load(SPEC.read_text())
    root = cache / "apt-repo" / inputs_hash()
    if (root / "lab-archive-key.asc").exists():
        print(f"apt repo: {root} (present)")
        return root
    gnupghome = cache / "apt-gnupg"
    ensure_key(gnupghome)
    keyring = gpg(gnupghome, "--export", KEY_UID, capture_output=True).stdout
    staging = Path(tempfile.mkdtemp(dir=cache / "apt-repo", prefix=".build-"))
    repo = staging / spec["repo"]["distro"] / spec["repo"]["arch"]
    repo.mkdir(parents=True)
    for pkg in spec["packages"]:
        for version in pkg["versions"]:
            build_deb(pkg, version, keyring, repo)
    packages = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "."], cwd=repo, check=True, capture_output=True
    ).stdout
    (repo / "Packages").write_bytes(packages)
    (repo / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
    write_release(repo, spec["repo"]["origin"])
    gpg(gnupghome, "--yes", "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release"))
    gpg(gnupghome, "--yes", "-abs", "-o", str(repo / "Release.gpg"), str(repo / "Release"))
    armored = gpg(gnupghome, "--armor", "--export", KEY_UID, capture_output=True).stdout
    (staging / "lab-archive-key.asc").write_bytes(armored)
    for path in staging.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    staging.chmod(0o755)
    staging.rename(root)
    for old in (cache / "apt-repo").iterdir():
        if old != root and not old.name.startswith("."):
            shutil.rmtree(old)
    print(f"apt repo: {root} (built)")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--print-dir", action="store_true", help="print the repository root, do not build")
    args = parser.parse_args()
    cache = Path(os.environ.get("GLM5_CACHE", Path.home() / ".cache" / "glm5-deploy"))
    (cache / "apt-repo").mkdir(parents=True, exist_ok=True)
    if args.print_dir:
        print(cache / "apt-repo" / inputs_hash())
        return
    build(cache)


if __name__ == "__main__":
    main()
