"""glm5_template_cache: a template compiled once is read back by every later worker and run, and gives the
same results, errors and all; an entry that no longer fits (another format, a filter now called differently)
is compiled anew."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jinja2
from ansible_collections.glm5.deploy.plugins.module_utils import template_cache as tc
from controller_play import ROOT, ansible_playbook


def unoptimized(**settings) -> jinja2.Environment:
    """An environment as Ansible's is: without Jinja2's compile-time folding (the only kind cached)."""
    return jinja2.Environment(optimized=False, **settings)


def lookup_of(env: jinja2.Environment):
    return lambda kind, name: (env.filters if kind == "filter" else env.tests).get(name)


def test_the_key_changes_with_every_part_of_a_compile() -> None:
    env = unoptimized()
    context = (tc.environment_fingerprint(env), (True, False))
    key = tc.entry_key("template", "{{ a }}", None, None, context)
    assert key == tc.entry_key("template", "{{ a }}", None, None, context)
    others = {
        tc.entry_key("expression", "{{ a }}", None, None, context),
        tc.entry_key("template", "{{ b }}", None, None, context),
        tc.entry_key("template", "{{ a }}", "name", None, context),
        tc.entry_key("template", "{{ a }}", None, "file.j2", context),
        tc.entry_key("template", "{{ a }}", None, None, (context[0], (False, False))),
        tc.entry_key(
            "template",
            "{{ a }}",
            None,
            None,
            (tc.environment_fingerprint(unoptimized(trim_blocks=True)), (True, False)),
        ),
        tc.entry_key(
            "template",
            "{{ a }}",
            None,
            None,
            (tc.environment_fingerprint(unoptimized(variable_start_string="[[")), (True, False)),
        ),
    }
    assert key not in others and len(others) == 7


def test_an_autoescape_decided_per_template_is_never_cached() -> None:
    assert tc.environment_fingerprint(unoptimized(autoescape=jinja2.select_autoescape())) is None
    assert tc.environment_fingerprint(unoptimized(autoescape=True)) is not None


def test_an_environment_that_folds_constants_at_compile_time_is_never_cached() -> None:
    # Jinja2's optimizer writes a filter's result into the code ({{ "a" | upper }} compiles to "A"): that code
    # depends on what the filter does, which no key can name.
    folded = jinja2.Environment()
    assert folded.optimized and tc.environment_fingerprint(folded) is None
    assert tc.environment_fingerprint(unoptimized()) is not None


def test_a_directory_another_user_could_write_to_is_not_trusted(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    assert tc.trust_problem([tmp_path, mine]) is None
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert tc.trust_problem([mine, shared]) == f"{shared} can be written by other users (mode 0777)"
    assert tc.trust_problem([mine], uid=os.geteuid() + 1) == (
        f"{mine} belongs to uid {os.geteuid()}, not to this user (uid {os.geteuid() + 1})"
    )
    (tmp_path / "file").write_text("")
    assert tc.trust_problem([tmp_path / "file"]) == f"{tmp_path / 'file'} is not a directory"
    assert "No such file or directory" in tc.trust_problem([tmp_path / "missing"])


def test_prepare_makes_the_root_and_the_version_directory_private(tmp_path: Path) -> None:
    directory = tmp_path / "root" / "py-version"
    assert tc.prepare(directory) is None
    assert {oct(path.stat().st_mode & 0o777) for path in (directory, directory.parent)} == {"0o700"}
    # A root made by someone else, or shared, keeps the cache off; so does one that cannot be made.
    directory.parent.chmod(0o775)
    assert tc.prepare(directory) == f"{directory.parent} can be written by other users (mode 0775)"
    (tmp_path / "file").write_text("")
    assert "Not a directory" in tc.prepare(tmp_path / "file" / "root" / "py-version")


def test_dependencies_are_the_filters_and_tests_with_how_each_is_called() -> None:
    env = unoptimized()
    node = env.parse(
        "{% if x is defined %}{{ x | upper | default('y') }}{% endif %}{{ y | nosuch if y is string }}"
    )
    assert tc.dependencies(node, lookup_of(env)) == (
        ("filter", "default", "none"),
        ("filter", "nosuch", "missing"),
        ("filter", "upper", "none"),
        ("test", "defined", "none"),
        ("test", "string", "none"),
    )
    # map is called with the context: the compiler writes that into the code.
    assert tc.dependencies(env.parse("{{ a | map('upper') }}"), lookup_of(env)) == (
        ("filter", "map", "context"),
    )


def test_an_entry_is_current_only_while_its_filters_are_called_as_when_it_was_compiled() -> None:
    env = unoptimized()
    deps = tc.dependencies(env.parse("{{ a | shout }}"), lookup_of(env))
    assert deps == (("filter", "shout", "missing"),) and tc.current(deps, lookup_of(env))
    env.filters["shout"] = str.upper
    assert not tc.current(deps, lookup_of(env))
    env.filters["shout"] = jinja2.pass_context(lambda context, value: value)
    assert not tc.current(
        (*tc.dependencies(env.parse("{{ a | upper }}"), lookup_of(env)), ("filter", "shout", "none")),
        lookup_of(env),
    )


def test_entries_round_trip_and_anything_else_is_no_entry() -> None:
    code = compile("x = 1", "<template>", "exec")
    deps = (("filter", "upper", "none"),)
    assert tc.load_entry(tc.dump_entry(code, deps)) == (deps, code)
    assert tc.load_entry(b"") is None
    assert tc.load_entry(tc.dump_entry(code, deps)[:-3]) is None
    assert tc.load_entry(b"\x00garbage") is None
    import marshal

    assert tc.load_entry(marshal.dumps((tc.FORMAT + 1, deps, code))) is None
    assert tc.load_entry(marshal.dumps((tc.FORMAT, deps, "not code"))) is None


def test_the_cache_reads_back_what_another_process_wrote(tmp_path: Path) -> None:
    env = unoptimized()
    code = env.compile("{{ a }}")
    writer = tc.TemplateCache(tmp_path / "cache")
    writer.put("ab" * 32, code, ())
    reader = tc.TemplateCache(tmp_path / "cache")
    assert reader.get("ab" * 32, lookup_of(env)) == code and reader.hits == 1
    assert reader.get("cd" * 32, lookup_of(env)) is None and reader.misses == 1
    # A file cut short is a miss, not an error; the compile that follows writes it whole again.
    path = writer.path("ef" * 32)
    path.parent.mkdir(parents=True)
    path.write_bytes(tc.dump_entry(code, ())[:5])
    assert reader.get("ef" * 32, lookup_of(env)) is None


def test_a_directory_it_cannot_write_costs_only_the_compile(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    cache = tc.TemplateCache(blocked / "cache")
    code = compile("x = 1", "<template>", "exec")
    cache.put("ab" * 32, code, ())
    assert cache.get("ab" * 32, lambda kind, name: None) == code  # from this process's memory
    assert not (blocked / "cache").exists()


def test_the_version_directory_names_python_jinja_and_ansible(tmp_path: Path) -> None:
    path = tc.version_directory(tmp_path, "3.1.6", "2.19.14")
    assert path.parent == tmp_path
    assert f"py{sys.version_info.major}{sys.version_info.minor}-" in path.name
    assert "jinja3.1.6" in path.name and "ansible2.19.14" in path.name and path.name.endswith(f"f{tc.FORMAT}")


INSTALLED = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import jinja2
    from ansible_collections.glm5.deploy.plugins.module_utils import template_cache as tc

    cache = tc.install(Path(sys.argv[1]), lambda env: ())
    assert tc.install(Path(sys.argv[1]), lambda env: ()) is cache
    env = jinja2.Environment(optimized=False)
    out = [
        env.from_string("{% for x in xs %}{{ x | upper }},{% endfor %}").render(xs=["a", "b"]),
        env.compile_expression("a + 1")(a=1),
        env.compile_expression("missing", undefined_to_none=False)() is None,
        jinja2.Environment(optimized=False, variable_start_string="[[", variable_end_string="]]")
        .from_string("[[ a ]] {{ a }}")
        .render(a=1),
    ]
    try:
        env.from_string("{{ a | nosuchfilter }}")
    except jinja2.TemplateAssertionError as error:
        out.append(str(error))
    try:
        env.from_string("{{ a ")
    except jinja2.TemplateSyntaxError as error:
        out.append(type(error).__name__)
    print(repr(out), cache.hits, cache.misses)
    """
)


def test_installed_it_renders_as_jinja_does_and_the_next_process_compiles_nothing(tmp_path: Path) -> None:
    def run() -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", INSTALLED, str(tmp_path / "cache")],
            env={**os.environ, "PYTHONPATH": str(ROOT / "collections")},
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.rsplit(" ", 2)

    out, hits, misses = run()
    assert out == repr(
        ["A,B,", 2, False, "1 {{ a }}", "No filter named 'nosuchfilter'.", "TemplateSyntaxError"]
    )
    assert (int(hits), int(misses)) == (0, 6)
    out_again, hits, misses = run()
    assert out_again == out
    # The four that compiled are read back; the two that failed to compile are compiled (and fail) again.
    assert (int(hits), int(misses)) == (4, 2)


PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    base: {a: 1, b: [1, 2, 3]}
    name: test1_name
    derived: "{{ base | combine({'c': base.a + 1}) }}"
  tasks:
    - name: Templates of every kind
      ansible.builtin.set_fact:
        r1: "Test Case 1\\\\3; {{ name | regex_replace('^(.*)_name$', '\\\\1') }}"
        r2: "{{ derived }}"
        r3: "{% for x in base.b %}{{ x * 2 }},{% endfor %}"
        r4: "{{ base.b | map('string') | join('-') }}"
        r5: "{{ base | dict2items | selectattr('key', 'equalto', 'a') | list }}"
        r6: "{{ 'x' if (base.a is number) else 'y' }}"
        r7: "{{ undefined_thing | default('dflt') }}"
    - name: Show them
      ansible.builtin.debug:
        msg: "{{ [r1, r2, r3, r4, r5, r6, r7] }}"
      when: base.a == 1 and r6 is string
    - name: Fail on an undefined variable
      ansible.builtin.debug:
        msg: "{{ base.nothing_here }}"
"""


def test_a_play_gives_the_same_output_and_error_with_the_cache_cold_warm_and_without(
    tmp_path: Path, monkeypatch
) -> None:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    monkeypatch.setenv("GLM5_TEMPLATE_CACHE_DIR", str(tmp_path / "cache"))

    def shown(*callbacks: str) -> str:
        """The tasks' output, then the run's warnings (stderr), each warning on one line."""
        monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", ",".join(callbacks))
        run = ansible_playbook(str(play))
        assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
        warnings = " ".join(run.stderr.split()).replace("[WARNING]", "\n[WARNING]")
        return run.stdout[run.stdout.index("TASK [Show them]") : run.stdout.index("PLAY RECAP")] + warnings

    without = shown("glm5.deploy.glm5_preload")
    assert "Test Case 1\\3; test1" in without, without
    assert "object of type 'dict' has no attribute 'nothing_here'" in without, without
    assert not (tmp_path / "cache").exists()
    cold = shown("glm5.deploy.glm5_preload", "glm5.deploy.glm5_template_cache")
    entries = sorted(path.name for path in (tmp_path / "cache").rglob("*") if path.is_file())
    assert entries and not [name for name in entries if name.startswith(".tmp-")]
    warm = shown("glm5.deploy.glm5_preload", "glm5.deploy.glm5_template_cache")
    assert without == cold == warm
    # The warm run compiled nothing new.
    assert sorted(path.name for path in (tmp_path / "cache").rglob("*") if path.is_file()) == entries
    # A cache other users could write to is code they could make the controller run: off, with a warning.
    (tmp_path / "cache").chmod(0o777)
    off = (
        f"\n[WARNING]: glm5_template_cache is off for this run: {tmp_path / 'cache'} can be written by other"
        " users (mode 0777) "
    )
    shared = shown("glm5.deploy.glm5_preload", "glm5.deploy.glm5_template_cache")
    assert off in shared and shared.replace(off, "", 1) == without


def test_ansible_core_without_the_private_compile_options_turns_the_cache_off(
    tmp_path: Path, monkeypatch
) -> None:
    """The compile-time options live in ansible-core's private templating module: read once when the
    callback starts, so an ansible-core without them runs without the cache, with a warning, instead of
    failing every compile."""
    import types

    from ansible._internal._templating._jinja_bits import _TemplateConfig
    from ansible.plugins.callback import CallbackBase
    from ansible_collections.glm5.deploy.plugins.callback import glm5_template_cache as callback

    options = callback.ansible_compile_options()
    # Outside Ansible's own compile (no backslash escaping decided), with its embedded-templates setting.
    assert options(unoptimized()) == (None, _TemplateConfig.allow_embedded_templates)
    debugging = unoptimized()
    debugging._debuggable_template_source = True
    assert options(debugging) is None

    monkeypatch.setitem(sys.modules, "ansible._internal._templating._jinja_bits", types.ModuleType("moved"))
    warnings: list[str] = []
    installed: list[Path] = []
    monkeypatch.setattr(CallbackBase, "set_options", lambda self, **kwargs: None)
    monkeypatch.setattr(callback, "install", lambda directory, options: installed.append(directory))
    plugin = callback.CallbackModule()
    monkeypatch.setattr(plugin, "get_option", lambda name: str(tmp_path / "cache"))
    monkeypatch.setattr(plugin, "_display", types.SimpleNamespace(warning=warnings.append))
    plugin.set_options()
    assert not installed and not (tmp_path / "cache").exists()
    assert [w.split(": ")[0] for w in warnings] == ["glm5_template_cache is off for this run"], warnings
    assert "cannot import name '_TemplateCompileContext'" in warnings[0], warnings
