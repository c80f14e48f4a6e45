"""Quoting for ExecStart= and EnvironmentFile= (systemd.service(5), systemd.exec(5))."""

from __future__ import annotations

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.systemd_unit import (
    SystemdQuoteError,
    environment_file,
    exec_command,
    quote_exec_word,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def split_like_systemd(line: str) -> list[str]:
    """Decode the subset of systemd's command-line syntax that exec_command writes."""
    words, i = [], 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        if line[i] == '"':
            i += 1
            word = []
            while line[i] != '"':
                if line[i] == "\\":
                    i += 1
                word.append(line[i])
                i += 1
            i += 1
            text = "".join(word)
        else:
            end = line.find(" ", i)
            end = len(line) if end < 0 else end
            text, i = line[i:end], end
        words.append(text.replace("$$", "\0").replace("%%", "%").replace("\0", "$"))
    return words


def test_plain_words_stay_bare() -> None:
    argv = ["/opt/sglang/current/venv/bin/python", "-m", "sglang.launch_server", "--tp-size", 8]
    assert exec_command(argv) == "/opt/sglang/current/venv/bin/python -m sglang.launch_server --tp-size 8"


def test_json_and_specials_are_quoted_and_escaped() -> None:
    assert quote_exec_word('{"a":1}') == '"{\\"a\\":1}"'
    assert quote_exec_word("50%") == '"50%%"'
    assert quote_exec_word("$HOME") == '"$$HOME"'
    assert quote_exec_word("") == '""'
    assert quote_exec_word("a b") == '"a b"'


@pytest.mark.parametrize("bad", ["a\nb", "x\x00", "\r"])
def test_newlines_are_refused(bad: str) -> None:
    with pytest.raises(SystemdQuoteError):
        quote_exec_word(bad)
    with pytest.raises(SystemdQuoteError):
        environment_file({"K": bad})


def test_empty_command_is_refused() -> None:
    with pytest.raises(SystemdQuoteError):
        exec_command([])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\n\r\x00"), max_size=30), min_size=1))
def test_any_argv_round_trips(argv: list[str]) -> None:
    assert split_like_systemd(exec_command(argv)) == argv


def test_environment_file_is_sorted_quoted_and_escaped() -> None:
    text = environment_file({"PATH": "/usr/bin", "B": 'say "hi" $X \\n', "A": True, "N": None, "I": 8})
    assert text.splitlines() == [
        'A="true"',
        'B="say \\"hi\\" \\$X \\\\n"',
        'I="8"',
        'N=""',
        'PATH="/usr/bin"',
    ]


@pytest.mark.parametrize("key", ["1A", "A-B", "", "A B"])
def test_environment_file_refuses_bad_names(key: str) -> None:
    with pytest.raises(SystemdQuoteError, match="not a valid name"):
        environment_file({key: "x"})
