"""Quote values for systemd unit files and environment files, and read ``systemctl show`` (pure functions).

systemd splits ExecStart= into words itself (no shell): double quotes group a word, C-style backslash escapes
are decoded inside them, `$` starts a variable and `%` a specifier, so both are doubled. An EnvironmentFile=
line is KEY="value" with backslash escapes inside the quotes. Sources: systemd.service(5) "Command lines",
systemd.exec(5) "EnvironmentFile=", systemd.unit(5) "Specifiers".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_SAFE_WORD = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_systemctl_show(text: str) -> dict[str, str]:
    """``systemctl show -p A -p B UNIT`` output (KEY=VALUE lines) as a dict."""
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


class SystemdQuoteError(ValueError):
    """A value that cannot be written into a unit or environment file."""


def _check_text(value: str, what: str) -> None:
    if any(ch in value for ch in "\n\r\x00"):
        raise SystemdQuoteError(f"{what} {value!r} contains a newline or NUL, which systemd cannot take")


def quote_exec_word(word: Any) -> str:
    """One ExecStart= word: bare when it is plainly safe, else double-quoted; `$` and `%` always escaped."""
    text = str(word)
    _check_text(text, "command-line word")
    if _SAFE_WORD.match(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def exec_command(argv: Iterable[Any]) -> str:
    """A whole ExecStart= command line from an argument vector."""
    words = [quote_exec_word(w) for w in argv]
    if not words:
        raise SystemdQuoteError("an empty command line")
    return " ".join(words)


def _env_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def environment_file(environment: Mapping[str, Any]) -> str:
    """The text of an EnvironmentFile=, sorted by key, one KEY="value" per line."""
    lines = []
    for key in sorted(environment):
        if not _ENV_KEY.match(str(key)):
            raise SystemdQuoteError(f"environment variable name {key!r} is not a valid name")
        text = _env_text(environment[key])
        _check_text(text, f"value of {key}")
        escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
        lines.append(f'{key}="{escaped}"')
    return "".join(line + "\n" for line in lines)
