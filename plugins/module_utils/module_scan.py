"""The import scan of Ansible's module payloads, kept between runs: the pure parts of glm5_module_bytecode's
second half.

To build a module's payload (AnsiballZ), ansible-core reads every source it ships (the module, then each
module_utils it imports, 54 sources for ansible.builtin.file), parses each into an abstract syntax tree and
walks the tree for the imports of ansible.module_utils and of collections (``ModuleDepFinder``). A payload is
built once per module and run, in whichever worker process first needs it, so every run parses
ansible.module_utils.basic and its imports again for each module it runs. Measured on this project's
controller (a cProfile of one build): the parse and the walk were 55-60 % of a build's CPU.

What the walk finds depends on the source, the name the source is scanned under and whether it is a
package's ``__init__``, nothing else: ``ScanStore`` keeps it in a file named by a digest of the three, in a
directory per ansible-core version and Python (whose ast the walk reads). Where each import is found (the
collections and module_utils paths of this run), what the zip holds and every error stay ansible-core's own:
a source is parsed, as before, whenever its scan is not kept, and only a scan of a source that parsed is
kept. The store is used only in directories of the controller's user that no other user can write to
(template_cache.prepare): a scan decides which sources a payload carries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.template_cache import write_whole

# An import found by the walk: the dotted name's parts, ("ansible", "module_utils", "basic").
Name = tuple[str, ...]


def digest(name: str, is_package: bool, source: str | bytes) -> str:
    """The key of a source's scan: its name, whether it is a package's __init__, and its bytes."""
    data = source.encode() if isinstance(source, str) else bytes(source)
    return hashlib.sha256(b"%s\0%d\0%s" % (name.encode(), is_package, data)).hexdigest()


def encode(submodules: set[Name], optional: set[Name]) -> bytes:
    """A scan as its file holds it (sorted, so the same scan is the same bytes)."""
    return json.dumps({"submodules": sorted(submodules), "optional": sorted(optional)}).encode()


def decode(data: bytes) -> tuple[set[Name], set[Name]] | None:
    """The (submodules, optional imports) a scan's file holds; None for anything else (the source is
    scanned again and the file written anew)."""
    try:
        doc = json.loads(data)
        found = [{tuple(name) for name in doc[key]} for key in ("submodules", "optional")]
    except (ValueError, KeyError, TypeError):
        return None
    if not all(isinstance(part, str) for names in found for name in names for part in name):
        return None
    submodules, optional = found
    return (submodules, optional) if optional <= submodules else None


class ScanStore:
    """The scans this ansible-core and Python made, one file each under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def read(self, key: str) -> tuple[set[Name], set[Name]] | None:
        try:
            return decode(self.path(key).read_bytes())
        except OSError:
            return None

    def write(self, key: str, submodules: set[Name], optional: set[Name]) -> None:
        write_whole(self.path(key), encode(submodules, optional))


def store_directory(root: Path, ansible_version: str, python_magic: bytes) -> Path:
    """The directory of the scans of this ansible-core (whose walk makes them) and Python (whose ast it
    walks) under ``root``."""
    return root / f"scan-{ansible_version}-py{python_magic.hex()}"


class LazyTree:
    """What the payload builder's parse returns with the store on: the source and its name, parsed on first
    use by the builder's own parse (its errors unchanged). Attributes of the tree (``body``, read by the
    experimental module metadata) parse it too."""

    __slots__ = ("_parse", "_tree", "name", "source")

    def __init__(self, parse: Callable[[str, Any], Any], name: str, source: Any) -> None:
        self._parse, self.name, self.source, self._tree = parse, name, source, None

    def tree(self) -> Any:
        if self._tree is None:
            self._tree = self._parse(self.name, self.source)
        return self._tree

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.tree(), attr)


def lazy_parse(parse: Callable[[str, Any], Any]) -> Callable[[str, Any], LazyTree]:
    """The builder's parse (``_compile_module_ast(name, source)``), deferred to the tree's first use."""

    def deferred(name: str, source: Any) -> LazyTree:
        return LazyTree(parse, name, source)

    deferred.__wrapped__ = parse  # type: ignore[attr-defined]
    return deferred


def keep_scans(finder: type, store: ScanStore) -> None:
    """Make ansible-core's ``ModuleDepFinder(module_fqn, tree, is_pkg_init=False)`` (``finder``) read its two
    results (``submodules``, ``optional_imports``) from ``store`` for a LazyTree whose scan is kept, else walk
    the parsed tree as before and keep what it found. Its ``__init__`` is replaced in place: the class keeps
    its name, which its own ``super()`` call looks up."""
    walk = finder.__init__

    def __init__(self: Any, module_fqn: str, tree: Any, is_pkg_init: bool = False) -> None:
        key = digest(module_fqn, is_pkg_init, tree.source) if isinstance(tree, LazyTree) else None
        kept = store.read(key) if key else None
        if kept is not None:
            self.module_fqn, self.is_pkg_init = module_fqn, is_pkg_init
            self.submodules, self.optional_imports = kept[0], kept[1]
            return
        walk(self, module_fqn, tree.tree() if isinstance(tree, LazyTree) else tree, is_pkg_init)
        if key:
            store.write(key, self.submodules, self.optional_imports)

    __init__.__wrapped__ = walk  # type: ignore[attr-defined]
    finder.__init__ = __init__  # type: ignore[misc]


def install(module_common: Any, store: ScanStore) -> None:
    """Make ``module_common`` (ansible.executor.module_common) read the scans kept in ``store``: its parse
    deferred (lazy_parse), its finder reading and keeping scans (keep_scans). Raises AttributeError when it
    lacks either (another ansible-core: the caller warns and builds as without this)."""
    parse, finder = module_common._compile_module_ast, module_common.ModuleDepFinder
    if getattr(parse, "__wrapped__", None) is not None:
        return
    if not isinstance(finder, type) or "__init__" not in vars(finder):
        raise AttributeError("module_common.ModuleDepFinder is not the class this was written for")
    keep_scans(finder, store)
    module_common._compile_module_ast = lazy_parse(parse)
