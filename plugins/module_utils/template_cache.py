"""A cache of compiled Jinja2 templates that the controller's workers share (callback glm5_template_cache).

ansible-core 2.19 keeps no compiled template: every template and expression a task renders (its arguments,
its `when`, every variable they reach) is lexed, parsed, turned into Python source and compiled again, in each
worker process that Ansible forks for one host and one task. That is 1-5 ms a template, most of a no-op
site.yml's controller cost per host (docs/journal/measurements.md). Jinja2 has a bytecode cache for the
templates its loader finds by name (`jinja2.BytecodeCache`), not for templates made from strings, which is how
Ansible makes every one.

This keeps the code object of each compiled template in a file named by a digest of everything the compile
reads (the source, the template's name, the environment's syntax and code generator, Ansible's compile-time
options), under a directory per Python, Jinja2 and ansible-core version, and gives it back instead of
compiling again. Each entry records the filters and tests the template names with how each is called (the
argument Jinja2 passes first, which the compiler writes into the code); an entry whose filters or tests are
called differently now is compiled anew. What Jinja2's own bytecode cache keys on, this keys on too, and more.

An entry is code the controller runs: the cache is used only in directories of the controller's user that no
other user can write to (prepare, trust_problem). The pure parts (keys, entries, dependencies) are
functions; `install` patches `jinja2.Environment.compile` and `compile_expression` in the process that calls
it (the controller's main process, before any fork).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib.util
import marshal
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from types import CodeType
from typing import Any

FORMAT = 1
# The settings of an environment that shape the code its compiler writes (jinja2.Environment's own names).
SYNTAX_SETTINGS = (
    "block_start_string",
    "block_end_string",
    "variable_start_string",
    "variable_end_string",
    "comment_start_string",
    "comment_end_string",
    "line_statement_prefix",
    "line_comment_prefix",
    "trim_blocks",
    "lstrip_blocks",
    "newline_sequence",
    "keep_trailing_newline",
    "optimized",
    "is_async",
    "sandboxed",
)


def qualified(obj: Any) -> str:
    """The module and qualified name of a class or function."""
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def pass_arg(func: Any) -> str:
    """How Jinja2 calls a filter or test: what it passes first (context, eval_context, environment), 'none',
    or 'missing' when there is no such filter or test."""
    if func is None:
        return "missing"
    value = getattr(func, "jinja_pass_arg", None)
    return "none" if value is None else str(getattr(value, "name", value))


def environment_fingerprint(env: Any) -> tuple[Any, ...] | None:
    """Everything of ``env`` its compiler reads besides the template, or None when one of them cannot be named
    (an autoescape decided per template by a function: never cached)."""
    if callable(getattr(env, "autoescape", False)):
        return None
    # Jinja2's optimizer calls filters and tests at compile time on constant arguments and writes their
    # results into the code: that code depends on what each filter does, not only on how it is called.
    # Ansible's environment turns the optimizer off (AnsibleEnvironment.optimized = False): it is cached.
    if getattr(env, "optimized", False):
        return None
    return (
        qualified(type(env)),
        qualified(getattr(env, "code_generator_class", None)),
        tuple(repr(getattr(env, name, None)) for name in SYNTAX_SETTINGS),
        repr(env.autoescape),
        tuple(sorted(getattr(env, "extensions", {}))),
        qualified(env.finalize) if env.finalize is not None else None,
        pass_arg(env.finalize) if env.finalize is not None else None,
        tuple(sorted(getattr(env, "intercepted_binops", ()))),
        tuple(sorted(getattr(env, "intercepted_unops", ()))),
    )


def entry_key(
    kind: str, source: str, name: str | None, filename: str | None, context: tuple[Any, ...]
) -> str:
    """The file name of a compiled template: a digest of its kind (template or expression), its source, its
    name and file name (both written into the code) and the compile ``context`` (the environment's
    fingerprint and the compile-time options)."""
    digest = hashlib.sha256()
    for part in (kind, source, repr(name), repr(filename), repr(context)):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def dependencies(node: Any, lookup: Callable[[str, str], Any]) -> tuple[tuple[str, str, str], ...]:
    """The filters and tests a parsed template (a jinja2.nodes.Template) names, each with how ``lookup``
    (kind, name) says it is called now."""
    from jinja2 import nodes

    found = {
        ("filter" if isinstance(each, nodes.Filter) else "test", each.name)
        for each in node.find_all((nodes.Filter, nodes.Test))
    }
    return tuple(sorted((kind, name, pass_arg(lookup(kind, name))) for kind, name in found))


def current(deps: Iterable[tuple[str, str, str]], lookup: Callable[[str, str], Any]) -> bool:
    """Whether every filter and test of an entry is still called as it was when the entry was compiled."""
    return all(pass_arg(lookup(kind, name)) == called for kind, name, called in deps)


def dump_entry(code: CodeType, deps: tuple[tuple[str, str, str], ...]) -> bytes:
    """An entry's bytes: the format, the dependencies and the code object."""
    return marshal.dumps((FORMAT, deps, code))


def load_entry(data: bytes) -> tuple[tuple[tuple[str, str, str], ...], CodeType] | None:
    """The dependencies and code object of an entry's bytes, or None when they are not an entry of this
    format (a file cut short, another version's)."""
    try:
        loaded = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None
    if (
        not isinstance(loaded, tuple)
        or len(loaded) != 3
        or loaded[0] != FORMAT
        or not isinstance(loaded[2], CodeType)
    ):
        return None
    return tuple(tuple(dep) for dep in loaded[1]), loaded[2]


def trust_problem(directories: Iterable[Path], uid: int | None = None) -> str | None:
    """Why the entries under ``directories`` must not be loaded (an entry is code the controller runs), or
    None when each is a directory of user ``uid`` (default: this process's) that no other user
    can write to."""
    owner = os.geteuid() if uid is None else uid
    for directory in directories:
        try:
            status = directory.stat()
        except OSError as error:
            return f"{directory}: {error.strerror or error}"
        if not stat.S_ISDIR(status.st_mode):
            return f"{directory} is not a directory"
        if status.st_uid != owner:
            return f"{directory} belongs to uid {status.st_uid}, not to this user (uid {owner})"
        if status.st_mode & 0o022:
            return f"{directory} can be written by other users (mode {stat.S_IMODE(status.st_mode):04o})"
    return None


def prepare(directory: Path) -> str | None:
    """Make ``directory`` and its parent (the cache's root) with mode 0700 where they are missing; why the
    cache must not be used there (trust_problem, or a directory that cannot be made), or None."""
    for each in (directory.parent, directory):
        try:
            each.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            return f"{each}: {error.strerror or error}"
    return trust_problem((directory.parent, directory))


def version_directory(root: Path, jinja_version: str, ansible_version: str) -> Path:
    """The directory of one Python's, Jinja2's and ansible-core's entries under ``root``."""
    magic = importlib.util.MAGIC_NUMBER.hex()
    python = f"py{sys.version_info.major}{sys.version_info.minor}-{magic}"
    return root / f"{python}-jinja{jinja_version}-ansible{ansible_version}-f{FORMAT}"


class TemplateCache:
    """Entries under one directory, and those this process read or wrote already."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.memory: dict[str, CodeType] = {}
        self.hits = self.misses = 0

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def get(self, key: str, lookup: Callable[[str, str], Any]) -> CodeType | None:
        code = self.memory.get(key)
        if code is not None:
            self.hits += 1
            return code
        try:
            data = self.path(key).read_bytes()
        except OSError:
            self.misses += 1
            return None
        entry = load_entry(data)
        if entry is None or not current(entry[0], lookup):
            self.misses += 1
            return None
        self.memory[key] = entry[1]
        self.hits += 1
        return entry[1]

    def put(self, key: str, code: CodeType, deps: tuple[tuple[str, str, str], ...]) -> None:
        """Keep ``code`` in this process and in its file (write_whole)."""
        self.memory[key] = code
        write_whole(self.path(key), dump_entry(code, deps))


def write_whole(path: Path, data: bytes) -> None:
    """Write ``path`` whole, then rename it into place (a process that reads it meanwhile finds the old file
    or none); its directory is made with mode 0700 when missing. A directory it cannot write only costs the
    entry: the error is swallowed."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temporary, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


# The key of the expression being compiled (set by compile_expression, read by the compile it calls).
_EXPRESSION = contextvars.ContextVar("glm5_template_cache_expression", default=None)


def install(directory: Path, compile_options: Callable[[Any], tuple[Any, ...] | None]) -> TemplateCache:
    """Patch jinja2.Environment's compile and compile_expression in this process to use a cache in
    ``directory``. ``compile_options`` gives, for an environment, the caller's compile-time options for the
    key (Ansible's: whether backslashes in expressions are escaped, whether constants may hold templates), or
    None when a compile must not be cached (Ansible's template debugging). Installing twice keeps the
    first."""
    import jinja2
    from jinja2.environment import TemplateExpression
    from jinja2.exceptions import TemplateSyntaxError
    from jinja2.utils import internalcode

    installed = getattr(jinja2.Environment.compile, "glm5_template_cache", None)
    if installed is not None:
        return installed
    cache = TemplateCache(directory)
    original_compile = jinja2.Environment.compile
    original_expression = jinja2.Environment.compile_expression

    def context(env: Any) -> tuple[Any, ...] | None:
        fingerprint = environment_fingerprint(env)
        options = compile_options(env)
        return None if fingerprint is None or options is None else (fingerprint, options)

    def lookup_in(env: Any) -> Callable[[str, str], Any]:
        def lookup(kind: str, name: str) -> Any:
            table = env.filters if kind == "filter" else env.tests
            try:
                return table.get(name)
            except Exception:  # a plugin that fails to load is the compile's error to raise, not the cache's
                return None

        return lookup

    @internalcode
    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):
        expression = _EXPRESSION.get()
        if expression is not None:
            _EXPRESSION.set(None)
        if raw or defer_init:
            return original_compile(self, source, name, filename, raw, defer_init)
        if isinstance(source, str):
            compiled_in = context(self)
            if compiled_in is None:
                return original_compile(self, source, name, filename)
            key = entry_key("template", source, name, filename, compiled_in)
            code = cache.get(key, lookup_in(self))
            if code is not None:
                return code
            code = original_compile(self, source, name, filename)
            with contextlib.suppress(TemplateSyntaxError):
                cache.put(key, code, dependencies(self._parse(source, name, filename), lookup_in(self)))
            return code
        code = original_compile(self, source, name, filename)
        if expression is not None:
            cache.put(expression, code, dependencies(source, lookup_in(self)))
        return code

    @internalcode
    def compile_expression(self, source, undefined_to_none=True):
        compiled_in = context(self)
        if compiled_in is None:
            return original_expression(self, source, undefined_to_none)
        key = entry_key("expression", source, None, None, compiled_in)
        code = cache.get(key, lookup_in(self))
        if code is not None:
            template = self.template_class.from_code(self, code, self.make_globals(None), None)
            return TemplateExpression(template, undefined_to_none)
        token = _EXPRESSION.set(key)
        try:
            return original_expression(self, source, undefined_to_none)
        finally:
            _EXPRESSION.reset(token)

    compile.glm5_template_cache = cache  # type: ignore[attr-defined]
    jinja2.Environment.compile = compile
    jinja2.Environment.compile_expression = compile_expression
    return cache
