"""Byte-code in Ansible's module payloads: the pure parts of the callback glm5_module_bytecode.

A Python module reaches its host as a zip (AnsiballZ) of its source and every module_utils it imports, and
the host's Python imports them from the zip with zipimport, which never writes byte-code: every task compiles
ansible.module_utils.basic and the rest again, on every host. Measured on a lab node (debian12, Python 3.11):
ansible.builtin.command took 0.23-0.30 CPU-s a run from the payload as ansible-core builds it, 0.13-0.18 with
each module's byte-code beside its source (docs/journal/measurements.md).

zipimport reads a ``name.pyc`` beside ``name.py`` in the zip first. The entry written here is a checked
hash-based pyc (PEP 552): the host's Python uses it only when its magic number is the host's own and the hash
of the source beside it matches; a host with another Python, or any mismatch, imports the source as before.
A traceback names the module's path inside the payload (``ansible/module_utils/basic.py``), not the
temporary directory the host unpacked it into.

ansible-core builds each module's payload once per run; the pycs of a source are kept in a directory per
Python version (BytecodeStore), named by a digest of the source and its name, so that later runs read them
instead of compiling again. A pyc is code the hosts run: the store is used only in directories of the
controller's user that no other user can write to (template_cache.prepare).
"""

from __future__ import annotations

import hashlib
import importlib.util
import types
import zipfile
from importlib import _bootstrap_external  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.template_cache import write_whole

# Entries that zipimport never imports as a module, or that the host rewrites (AnsiballZ appends its own
# sitecustomize.py to the zip before it runs).
SKIPPED = ("sitecustomize.py",)


def bytecode(name: str, source: bytes) -> bytes | None:
    """The checked hash-based pyc of ``source`` for this Python (compiled as zipimport compiles: the
    interpreter's own flags, none inherited), naming ``name`` in its tracebacks; None for a source this
    Python cannot compile (the host imports the source and reports the error, as without the pyc)."""
    try:
        code = compile(source, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return bytes(
        _bootstrap_external._code_to_hash_pyc(code, importlib.util.source_hash(source), checked=True)
    )


def fits(pyc: bytes, source: bytes) -> bool:
    """Whether ``pyc`` is a checked hash-based pyc of ``source`` for this Python."""
    return (
        pyc[:4] == importlib.util.MAGIC_NUMBER
        and int.from_bytes(pyc[4:8], "little") == 0b11
        and pyc[8:16] == importlib.util.source_hash(source)
    )


class BytecodeStore:
    """The pycs this Python compiled, one file each under ``directory``, named by a digest of the source and
    the name it is compiled under."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, name: str, source: bytes) -> Path:
        digest = hashlib.sha256(b"%s\0%s" % (name.encode(), source)).hexdigest()
        return self.directory / digest[:2] / digest

    def bytecode(self, name: str, source: bytes) -> bytes | None:
        """``bytecode(name, source)``, read from its file when that fits the source, else compiled, kept."""
        path = self.path(name, source)
        try:
            kept = path.read_bytes()
        except OSError:
            kept = b""
        if fits(kept, source):
            return kept
        pyc = bytecode(name, source)
        if pyc is not None:
            write_whole(path, pyc)
        return pyc


def store_directory(root: Path) -> Path:
    """The directory of this Python's pycs under ``root``."""
    return root / f"py{importlib.util.MAGIC_NUMBER.hex()}"


def wanted(name: str) -> bool:
    """Whether the payload entry ``name`` is a Python source that gets its byte-code beside it (the zip's
    writestr also leaves out an empty source, such as a package's ``__init__.py``: nothing to compile)."""
    return name.endswith(".py") and name.rsplit("/", 1)[-1] not in SKIPPED


class BytecodeZipFile(zipfile.ZipFile):
    """A ZipFile that writes each Python source's byte-code beside it, when ``with_bytecode`` is set (the
    payload builder's entry points set it; any other use of the class writes what it is given)."""

    with_bytecode = False
    # Where compiled pycs are kept between runs (install's); None compiles every one.
    store: BytecodeStore | None = None

    def writestr(self, zinfo_or_arcname: Any, data: Any, *args: Any, **kwargs: Any) -> None:
        super().writestr(zinfo_or_arcname, data, *args, **kwargs)
        if not self.with_bytecode:
            return
        if isinstance(zinfo_or_arcname, zipfile.ZipInfo):
            name, date_time = zinfo_or_arcname.filename, zinfo_or_arcname.date_time
            compress_type = zinfo_or_arcname.compress_type
        else:
            name, date_time, compress_type = zinfo_or_arcname, None, self.compression
        if not wanted(name) or f"{name}c" in self.NameToInfo:
            return
        source = data.encode() if isinstance(data, str) else bytes(data)
        compiled = self.store.bytecode if self.store is not None else bytecode
        pyc = compiled(name, source) if source.strip() else None
        if pyc is None:
            return
        entry = zipfile.ZipInfo(f"{name}c", date_time=date_time or (1980, 1, 1, 0, 0, 0))
        entry.compress_type = compress_type
        entry.external_attr = 0o644 << 16
        super().writestr(entry, pyc)


def zipfile_module() -> types.ModuleType:
    """A stand-in for the ``zipfile`` module, as the payload builder's module sees it: everything zipfile
    has, with ZipFile writing byte-code."""
    module = types.ModuleType("zipfile")
    module.__dict__.update({k: v for k, v in vars(zipfile).items() if not k.startswith("__")})
    module.ZipFile = BytecodeZipFile
    return module


def builder(entry: Any) -> Any:
    """``entry`` (a function of the payload builder called with the open zip as its 4th or 1st argument and
    the extension manager as a keyword or last argument), turning byte-code on for that zip unless a
    debugger or coverage extension is in the payload: those map the source files' paths, which a pyc
    compiled on the controller does not carry."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        zf = next((a for a in args if isinstance(a, BytecodeZipFile)), None)
        manager = kwargs.get("extension_manager", args[-1] if args else None)
        if zf is not None:
            zf.with_bytecode = not getattr(manager, "extension_names", ())
        return entry(*args, **kwargs)

    wrapped.__wrapped__ = entry  # type: ignore[attr-defined]
    return wrapped


def install(module_common: Any, store: BytecodeStore | None = None) -> None:
    """Make ``module_common`` (ansible.executor.module_common) build payloads with byte-code, kept in
    ``store`` between runs: its zipfile becomes zipfile_module(), and its two writers of payload entries
    turn byte-code on for their zip. Raises AttributeError when it lacks one of them (another ansible-core:
    the caller warns and runs as without this)."""
    finder, adder = module_common.recursive_finder, module_common._add_module_to_zip
    if not isinstance(module_common.zipfile, types.ModuleType):
        raise AttributeError("module_common.zipfile is not the zipfile module")
    BytecodeZipFile.store = store
    if getattr(finder, "__wrapped__", None) is not None:
        return
    module_common.zipfile = zipfile_module()
    module_common.recursive_finder = builder(finder)
    module_common._add_module_to_zip = builder(adder)
