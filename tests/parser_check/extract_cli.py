"""Print the long options of the installed sglang's real server parser as JSON (stdlib + sglang only).

Run by an interpreter that has sglang installed (see parser_venvs.py); it builds the parser exactly as
sglang's prepare_server_args does (argparse.ArgumentParser + ServerArgs.add_cli_args) and never parses,
so no GPU, model or __post_init__ is involved.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata


def main() -> None:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags: dict[str, dict[str, object]] = {}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if not longs or isinstance(action, argparse._HelpAction):
            continue
        entry: dict[str, object] = {
            "dest": action.dest,
            "takes_value": action.nargs != 0,
        }
        if action.nargs not in (None, 0):
            entry["nargs"] = str(action.nargs)
        if action.choices is not None:
            choices = [str(c) for c in action.choices]
            # choices given as a set have no stable order across interpreter runs
            entry["choices"] = sorted(choices) if isinstance(action.choices, (set, frozenset)) else choices
        if "Deprecated" in type(action).__name__:
            entry["deprecated"] = True
        for flag in longs:
            flags[flag] = entry
    doc = {
        "sglang_version": metadata.version("sglang"),
        "generated_by": "tests/parser_check/parser_venvs.py regenerate",
        "flags": dict(sorted(flags.items())),
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
