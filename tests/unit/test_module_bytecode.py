"""glm5_module_bytecode: a module's payload carries each source's byte-code beside it; the host's zipimport
imports that when it fits (this Python, this source) and the source otherwise; modules run as they did."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils import module_bytecode as mb
from controller_play import ansible_playbook, play_keeping_payloads

SOURCE = b"VALUE = 6 * 7\n\ndef where():\n    return __file__\n"


def imported(tmp_path: Path, entries: dict[str, bytes]) -> tuple[int, str]:
    """Import the module ``probe`` from a zip of ``entries`` in a new interpreter: its VALUE and __file__."""
    archive = tmp_path / "payload.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    code = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); import probe; print(probe.VALUE, probe.where())"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = run.stdout.split()
    return int(out[0]), out[1]


def test_the_host_imports_the_bytecode_when_it_fits_its_python_and_source(tmp_path: Path) -> None:
    pyc = mb.bytecode("probe.py", SOURCE)
    assert pyc is not None and pyc[:4] == importlib.util.MAGIC_NUMBER
    assert imported(tmp_path, {"probe.py": SOURCE, "probe.pyc": pyc}) == (
        42,
        f"{tmp_path}/payload.zip/probe.pyc",
    )


def test_a_pyc_of_another_source_or_another_python_is_passed_over_for_the_source(tmp_path: Path) -> None:
    stale = mb.bytecode("probe.py", SOURCE.replace(b"6 * 7", b"1"))
    assert stale is not None
    assert imported(tmp_path, {"probe.py": SOURCE, "probe.pyc": stale}) == (
        42,
        f"{tmp_path}/payload.zip/probe.py",
    )
    pyc = mb.bytecode("probe.py", SOURCE)
    assert pyc is not None
    other_python = (int.from_bytes(pyc[:2], "little") + 1).to_bytes(2, "little") + pyc[2:]
    assert imported(tmp_path, {"probe.py": SOURCE, "probe.pyc": other_python})[0] == 42


def test_a_source_this_python_cannot_compile_gets_no_pyc() -> None:
    assert mb.bytecode("broken.py", b"def (:\n") is None
    assert mb.bytecode("nul.py", b"x = 1\0\n") is None


def test_the_zip_writes_bytecode_only_for_python_sources_once_turned_on() -> None:
    buffer = io.BytesIO()
    with mb.BytecodeZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("off.py", SOURCE)
        zf.with_bytecode = True
        # As ansible-core's builder writes an entry: a ZipInfo with its time and the zip's compression.
        entry = zipfile.ZipInfo("pkg/mod.py", date_time=(2026, 12, 6, 10, 0, 0))
        entry.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(entry, SOURCE)
        zf.writestr("pkg/__init__.py", b"")
        zf.writestr("sitecustomize.py", b"import sys\n")
        zf.writestr("data.json", b"{}")
        zf.writestr("broken.py", b"def (:\n")
    with zipfile.ZipFile(buffer) as zf:
        names = zf.namelist()
        assert names == [
            "off.py",
            "pkg/mod.py",
            "pkg/mod.pyc",
            "pkg/__init__.py",
            "sitecustomize.py",
            "data.json",
            "broken.py",
        ]
        info = zf.getinfo("pkg/mod.pyc")
        assert info.date_time == (2026, 12, 6, 10, 0, 0) and info.compress_type == zipfile.ZIP_DEFLATED
        assert zf.read("pkg/mod.pyc") == mb.bytecode("pkg/mod.py", SOURCE)


def test_the_store_compiles_a_source_once_and_reads_it_back_while_it_fits(
    tmp_path: Path, monkeypatch
) -> None:
    store = mb.BytecodeStore(mb.store_directory(tmp_path))
    assert store.directory.name == f"py{importlib.util.MAGIC_NUMBER.hex()}"
    pyc = store.bytecode("probe.py", SOURCE)
    assert pyc == mb.bytecode("probe.py", SOURCE)
    kept = store.path("probe.py", SOURCE)
    assert kept.read_bytes() == pyc and [p.name for p in kept.parent.iterdir()] == [kept.name]
    # Read back: nothing is compiled.
    monkeypatch.setattr(mb, "bytecode", lambda name, source: pytest.fail("compiled again"))
    assert store.bytecode("probe.py", SOURCE) == pyc
    monkeypatch.undo()
    # Another name or source is another entry; an entry that does not fit its source is compiled anew.
    assert store.path("other.py", SOURCE) != kept != store.path("probe.py", SOURCE + b"\n")
    kept.write_bytes(mb.bytecode("probe.py", b"VALUE = 1\n"))
    assert not mb.fits(kept.read_bytes(), SOURCE)
    assert store.bytecode("probe.py", SOURCE) == pyc and kept.read_bytes() == pyc
    # A source this Python cannot compile is kept nowhere.
    assert store.bytecode("broken.py", b"def (:\n") is None
    assert not store.path("broken.py", b"def (:\n").exists()


def test_the_zip_reads_its_pycs_from_the_store(tmp_path: Path, monkeypatch) -> None:
    store = mb.BytecodeStore(tmp_path)
    monkeypatch.setattr(mb.BytecodeZipFile, "store", store)
    with mb.BytecodeZipFile(io.BytesIO(), "w") as zf:
        zf.with_bytecode = True
        zf.writestr("probe.py", SOURCE)
        assert zf.read("probe.pyc") == store.path("probe.py", SOURCE).read_bytes()


def test_install_turns_bytecode_on_only_without_debugger_or_coverage_extensions(monkeypatch) -> None:
    import types

    seen: list[bool] = []

    def finder(name, fqn, data, zf, date_time, extension_manager):
        seen.append(zf.with_bytecode)

    def adder(zf, date_time, fqn, data, path, extension_manager):
        seen.append(zf.with_bytecode)

    module_common = types.SimpleNamespace(zipfile=zipfile, recursive_finder=finder, _add_module_to_zip=adder)
    monkeypatch.setattr(mb.BytecodeZipFile, "store", None)
    mb.install(module_common)
    store = mb.BytecodeStore(Path("/nonexistent"))
    mb.install(module_common, store)  # a second install only changes the store
    assert mb.BytecodeZipFile.store is store
    assert module_common.recursive_finder.__wrapped__ is finder
    zf = module_common.zipfile.ZipFile(io.BytesIO(), "w")
    assert isinstance(zf, mb.BytecodeZipFile) and module_common.zipfile.ZIP_DEFLATED == zipfile.ZIP_DEFLATED
    plain, debugging = (
        types.SimpleNamespace(extension_names=()),
        types.SimpleNamespace(extension_names=("pydevd",)),
    )
    module_common.recursive_finder("m", "m", b"", zf, None, plain)
    module_common._add_module_to_zip(zf, None, "m", b"", "m.py", extension_manager=debugging)
    assert seen == [True, False]
    # The real zipfile module is untouched.
    assert zipfile.ZipFile is not mb.BytecodeZipFile


PLAY = """\
- name: Modules of every kind, run on the controller as on a host
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: A command
      ansible.builtin.command: echo bytecode
      register: echoed
      changed_when: false
    - name: A stat
      ansible.builtin.stat:
        path: /
      register: root
    - name: A module of the collection, with its module_utils, that fails
      glm5.deploy.nvidia_gpu_facts:
        nvidia_smi_path: /nonexistent/nvidia-smi
      register: gpus
      ignore_errors: true
    - name: A module that fails
      ansible.builtin.command: /nonexistent/command
      register: missing
      ignore_errors: true
    - name: Show them
      ansible.builtin.debug:
        msg: "{{ [echoed.stdout, root.stat.isdir, gpus.msg, missing.msg] }}"
"""


def test_a_play_runs_the_same_with_bytecode_in_its_payloads(tmp_path: Path, monkeypatch) -> None:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    monkeypatch.setenv("GLM5_MODULE_BYTECODE_DIR", str(tmp_path / "pycs"))

    def shown(name: str, *callbacks: str) -> tuple[str, dict[str, list[str]]]:
        output, kept = play_keeping_payloads(play, tmp_path / name, callbacks, monkeypatch)
        return output, {module: list(entries) for module, entries in kept.items()}

    without, plain = shown("without", "glm5.deploy.glm5_preload")
    assert "bytecode" in without and "nvidia-smi is not installed" in without, without
    assert "Error executing command" in without, without
    assert not (tmp_path / "pycs").exists()
    with_it, compiled = shown("with", "glm5.deploy.glm5_preload", "glm5.deploy.glm5_module_bytecode")
    assert with_it == without
    kept = sorted(path for path in (tmp_path / "pycs").rglob("*") if path.is_file())
    assert kept and not [path for path in kept if path.name.startswith(".tmp-")]
    # The next run reads the pycs it needs: it compiles nothing and sends the same payloads.
    again, compiled_again = shown("again", "glm5.deploy.glm5_preload", "glm5.deploy.glm5_module_bytecode")
    assert again == without and compiled_again == compiled
    assert sorted(path for path in (tmp_path / "pycs").rglob("*") if path.is_file()) == kept
    assert sorted(plain) == sorted(compiled) and len(plain) == 3, sorted(plain)
    for module, names in compiled.items():
        sources = [n for n in plain[module] if n.endswith(".py") and n != "sitecustomize.py"]
        # Every source has its pyc but the empty package __init__.py's.
        packages = {n for n in sources if n.endswith("__init__.py")}
        assert {n for n in sources if f"{n}c" not in names} <= packages
        assert sum(n.endswith(".pyc") for n in names) > 20, (module, names)
        assert not [n for n in plain[module] if n.endswith(".pyc")]


def test_a_store_other_users_could_write_to_keeps_no_pyc(tmp_path: Path, monkeypatch) -> None:
    import types

    from ansible.plugins.callback import CallbackBase
    from ansible_collections.glm5.deploy.plugins.callback import glm5_module_bytecode as callback

    installed: list[object] = []
    warnings: list[str] = []
    monkeypatch.setattr(CallbackBase, "set_options", lambda self, **kwargs: None)
    monkeypatch.setattr(callback, "install", lambda module_common, store=None: installed.append(store))
    monkeypatch.setattr(callback.module_scan, "install", lambda module_common, store: installed.append(store))
    plugin = callback.CallbackModule()
    monkeypatch.setattr(plugin, "get_option", lambda name: str(tmp_path / "pycs"))
    monkeypatch.setattr(plugin, "_display", types.SimpleNamespace(warning=warnings.append))
    plugin.set_options()
    assert [type(store).__name__ for store in installed] == ["BytecodeStore", "ScanStore"] and not warnings
    (tmp_path / "pycs").chmod(0o777)
    plugin.set_options()
    assert installed[2:] == [None], installed
    assert warnings == [
        f"glm5_module_bytecode keeps no pyc or scan for this run: {tmp_path / 'pycs'} can be written by"
        " other users (mode 0777)"
    ]


def test_ansible_core_without_the_payload_builder_runs_without_it(tmp_path: Path, monkeypatch) -> None:
    import types

    from ansible.executor import module_common
    from ansible.plugins.callback import CallbackBase
    from ansible_collections.glm5.deploy.plugins.callback import glm5_module_bytecode as callback

    monkeypatch.delattr(module_common, "_add_module_to_zip")
    finder = module_common.recursive_finder
    warnings: list[str] = []
    monkeypatch.setattr(CallbackBase, "set_options", lambda self, **kwargs: None)
    plugin = callback.CallbackModule()
    monkeypatch.setattr(plugin, "get_option", lambda name: str(tmp_path / "pycs"))
    monkeypatch.setattr(plugin, "_display", types.SimpleNamespace(warning=warnings.append))
    plugin.set_options()
    assert module_common.recursive_finder is finder and module_common.zipfile is zipfile
    assert warnings == [textwrap.shorten(warnings[0], 400)] and warnings[0].startswith(
        "glm5_module_bytecode is off for this run: "
    ), warnings


ENVIRONMENT_PLAY = """\
- name: The environment a module gets on the controller
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Show PYTHONUNBUFFERED as a module's command sees it
      ansible.builtin.command: printenv PYTHONUNBUFFERED
      register: seen
      changed_when: false
      failed_when: false
    - name: Say it
      ansible.builtin.debug:
        msg: "PYTHONUNBUFFERED={{ seen.stdout | default('') }} rc={{ seen.rc }}"
"""


WITH = ("glm5.deploy.glm5_module_bytecode", "PYTHONUNBUFFERED= rc=1")
WITHOUT = ("ansible.posix.profile_tasks", "PYTHONUNBUFFERED=1 rc=0")


@pytest.mark.parametrize(("callbacks", "seen"), [WITH, WITHOUT], ids=["with", "without"])
def test_the_modules_on_the_controller_run_without_pythonunbuffered(
    tmp_path: Path, monkeypatch, callbacks: str, seen: str
) -> None:
    """With it set, a module's Python reads its payload from a pipe one byte per read (0.19 CPU-s a task)."""
    play = tmp_path / "play.yml"
    play.write_text(ENVIRONMENT_PLAY)
    monkeypatch.setenv("GLM5_MODULE_BYTECODE_DIR", str(tmp_path / "pycs"))
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", callbacks)
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    run = ansible_playbook("-e", f"ansible_python_interpreter={sys.executable}", str(play))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f'"msg": "{seen}"' in run.stdout or f"msg: {seen}" in run.stdout, run.stdout[-2000:]
