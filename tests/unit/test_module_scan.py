"""glm5_module_bytecode's kept import scans: a payload is built from the same sources, whether its sources'
scans are kept, read back or made anew, and a source that changes is scanned again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils import module_scan as ms
from controller_play import play_keeping_payloads

NAME = ("ansible", "module_utils", "basic")


def test_a_scan_reads_back_as_it_was_kept_and_anything_else_is_not_a_scan(tmp_path: Path) -> None:
    store = ms.ScanStore(tmp_path)
    key = ms.digest("ansible.module_utils.x", False, b"import os\n")
    assert store.read(key) is None
    store.write(key, {NAME, ("_six",)}, {NAME})
    assert store.read(key) == ({NAME, ("_six",)}, {NAME})
    assert ms.encode({NAME, ("_six",)}, {NAME}) == ms.encode({("_six",), NAME}, {NAME})
    for broken in (b"", b"{", b"[]", b'{"submodules": []}', b'{"submodules": [[1]], "optional": []}'):
        assert ms.decode(broken) is None, broken
    # An optional import is one of the imports found.
    assert ms.decode(b'{"submodules": [], "optional": [["a", "b"]]}') is None


def test_the_key_is_the_name_the_package_flag_and_the_source() -> None:
    keys = {
        ms.digest("a.b", False, b"x = 1\n"),
        ms.digest("a.c", False, b"x = 1\n"),
        ms.digest("a.b", True, b"x = 1\n"),
        ms.digest("a.b", False, b"x = 2\n"),
    }
    assert len(keys) == 4
    assert ms.digest("a.b", False, "x = 1\n") == ms.digest("a.b", False, b"x = 1\n")


def test_a_tree_is_parsed_on_first_use_only(monkeypatch) -> None:
    parsed: list[str] = []

    def parse(name, source):
        parsed.append(name)
        return compile(source, name, "exec", ast.PyCF_ONLY_AST)

    tree = ms.lazy_parse(parse)("m", b"METADATA = 1\n")
    assert parsed == []
    assert type(tree.body[0]).__name__ == "Assign" and tree.tree() is tree.tree()
    assert parsed == ["m"]


def test_the_finder_reads_a_kept_scan_and_walks_a_tree_it_has_none_for(tmp_path: Path, monkeypatch) -> None:
    from ansible.executor import module_common

    monkeypatch.setattr(module_common, "_compile_module_ast", module_common._compile_module_ast)
    monkeypatch.setattr(module_common.ModuleDepFinder, "__init__", module_common.ModuleDepFinder.__init__)
    walked: list[str] = []
    walk = module_common.ModuleDepFinder.__init__

    def counted(self, module_fqn, tree, is_pkg_init=False):
        walked.append(module_fqn)
        walk(self, module_fqn, tree, is_pkg_init)

    monkeypatch.setattr(module_common.ModuleDepFinder, "__init__", counted)
    store = ms.ScanStore(tmp_path)
    ms.install(module_common, store)
    ms.install(module_common, store)  # a second install changes nothing
    source = (
        b"from ansible.module_utils.basic import AnsibleModule\n"
        b"try:\n    import ansible.module_utils.six\nexcept ImportError:\n    pass\n"
    )

    def found(name: str, data: bytes, is_package: bool = False) -> tuple[set, set]:
        tree = module_common._compile_module_ast(name, data)
        finder = module_common.ModuleDepFinder(name, tree, is_package)
        return finder.submodules, finder.optional_imports

    first = found("ansible.modules.probe", source)
    assert first == (
        {("ansible", "module_utils", "basic", "AnsibleModule"), ("ansible", "module_utils", "six")},
        {("ansible", "module_utils", "six")},
    )
    assert walked == ["ansible.modules.probe"]
    assert found("ansible.modules.probe", source) == first and walked == ["ansible.modules.probe"]
    # Another source, or the same one as a package's __init__ (its relative imports differ), is walked.
    found("ansible.modules.probe", source + b"\n")
    found("ansible.modules.probe", source, True)
    assert len(walked) == 3
    # A tree handed over already parsed is walked as before and not kept.
    tree = module_common._compile_module_ast.__wrapped__("ansible.modules.other", source)
    module_common.ModuleDepFinder("ansible.modules.other", tree)
    assert len(walked) == 4 and sum(path.is_file() for path in tmp_path.rglob("*")) == 3
    # A source that does not parse fails as ansible-core says, and keeps nothing.
    from ansible.errors import AnsibleError

    with pytest.raises(AnsibleError, match=r"Unable to compile 'ansible\.modules\.broken'"):
        found("ansible.modules.broken", b"def (:\n")
    assert sum(path.is_file() for path in tmp_path.rglob("*")) == 3


def test_install_refuses_an_ansible_core_without_the_finder_it_was_written_for() -> None:
    import types

    def parse(name, source):
        return None

    with pytest.raises(AttributeError):
        ms.install(
            types.SimpleNamespace(_compile_module_ast=parse, ModuleDepFinder=object()),
            ms.ScanStore(Path("/")),
        )
    # A finder class without an __init__ of its own: nothing to read the kept scans into.
    with pytest.raises(AttributeError, match="ModuleDepFinder"):
        ms.install(
            types.SimpleNamespace(_compile_module_ast=parse, ModuleDepFinder=type("F", (), {})),
            ms.ScanStore(Path("/")),
        )
    # A module_common without the parse it defers.
    finder = type("F", (), {"__init__": lambda self: None})
    with pytest.raises(AttributeError, match="_compile_module_ast"):
        ms.install(types.SimpleNamespace(ModuleDepFinder=finder), ms.ScanStore(Path("/")))


PLAY = """\
- name: A module of the play's library with the play's module_utils, and one of the collection
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: The play's module
      glm5_scan_probe:
      register: probe
    - name: A module of the collection, with its module_utils, that fails
      glm5.deploy.nvidia_gpu_facts:
        nvidia_smi_path: /nonexistent/nvidia-smi
      register: gpus
      ignore_errors: true
    - name: A stat
      ansible.builtin.stat:
        path: /
      register: root
    - name: Show them
      ansible.builtin.debug:
        msg: "{{ [probe.value, gpus.msg, root.stat.isdir] }}"
"""

MODULE = """\
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.glm5_scan_probe import value


def main():
    AnsibleModule(argument_spec={}).exit_json(changed=False, value=value())


if __name__ == "__main__":
    main()
"""


def test_a_play_sends_the_same_payloads_with_scans_kept_read_and_made_anew(
    tmp_path: Path, monkeypatch
) -> None:
    project = tmp_path / "project"
    (project / "library").mkdir(parents=True)
    (project / "module_utils").mkdir()
    (project / "library" / "glm5_scan_probe.py").write_text(MODULE)
    utils = project / "module_utils" / "glm5_scan_probe.py"
    utils.write_text("def value():\n    return 'first'\n")
    play = project / "play.yml"
    play.write_text(PLAY)
    cache = tmp_path / "cache"
    monkeypatch.setenv("GLM5_MODULE_BYTECODE_DIR", str(cache))

    def shown(name: str, *callbacks: str) -> tuple[str, dict[str, dict[str, bytes]]]:
        return play_keeping_payloads(play, tmp_path / name, callbacks, monkeypatch)

    def scans() -> list[Path]:
        return sorted(path for path in cache.glob("scan-*/*/*") if not path.name.startswith(".tmp-"))

    callbacks = ("glm5.deploy.glm5_preload", "glm5.deploy.glm5_module_bytecode")
    without, plain = shown("without", "glm5.deploy.glm5_preload")
    assert "first" in without and "nvidia-smi is not installed" in without, without
    made, cold = shown("cold", *callbacks)
    kept = scans()
    assert made == without and len(kept) > 50
    read, warm = shown("warm", *callbacks)
    assert read == without and scans() == kept
    assert len(plain) == 3, sorted(plain)
    for module, entries in plain.items():
        for each in (cold, warm):
            assert {n: d for n, d in each[module].items() if not n.endswith(".pyc")} == entries, module
    # The play's module_utils changes, and now imports another of ansible-core's: scanned anew, and its
    # payload carries the new source and what it imports.
    new = "ansible/module_utils/compat/version.py"
    assert not [entries for entries in plain.values() if new in entries]
    utils.write_text(
        "from ansible.module_utils.compat.version import LooseVersion\n\n\n"
        "def value():\n    return str(LooseVersion('2.second'))\n"
    )
    changed, payloads_after = shown("changed", *callbacks)
    assert "2.second" in changed and set(kept) < set(scans())
    probe = next(entries for module, entries in payloads_after.items() if "glm5_scan_probe" in module)
    assert b"second" in probe["ansible/module_utils/glm5_scan_probe.py"] and new in probe
