#!/usr/bin/env python
"""sglang-nan-tripwire: stop sglang at the first NaN its sampler reports, on a lane whose engine only logs it.

sglang 0.5.9 (the seed lane) has no switch that ends the server at the first NaN: with --enable-nan-detection
its sampler logs "Detected errors during sampling! NaN in the logits." and samples on, from logits it replaced
with -1e5, so the server answers garbage while /health stays green (srt/layers/sampler.py; docs/serving.md
'Fail-stop on NaN'). This daemon follows the service's journal and turns that line into a stop: it kills the
service's whole process tree with SIGKILL, so systemd records a failure and restarts it (Restart=always)
until its start limit, and the router's health check takes the replica out within seconds. It holds no key and
talks to no router.

A line is acted on only when it belongs to the service's current run (its journal entry's invocation ID is the
unit's InvocationID): a line read late, after systemd already restarted the service, never kills the new run.
Standard library only; the role installs it with the unit sglang-nan-tripwire.service when the lane's
nan_fail_stop names a tripwire line (plugins/data/lanes.yml), executable, and the unit runs it with
/usr/bin/python3 (a node need not have a ``python`` for the shebang):

    /usr/bin/python3 sglang_nan_tripwire.py --unit sglang.service --line "<the lane's tripwire line>"
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence

PREFIX = "sglang-nan-tripwire:"


def journal_command(unit: str) -> list[str]:
    """journalctl following the unit's new messages, one JSON object per line."""
    return [
        "journalctl", "--follow", "--lines=0", "--unit", unit, "--output", "json",
        "--output-fields", "MESSAGE,_SYSTEMD_INVOCATION_ID",
    ]  # fmt: skip


def parse_entry(raw: str) -> tuple[str, str] | None:
    """(message, invocation ID) of one journalctl JSON line, or None for a line that is not one. journalctl
    writes a message that is not valid UTF-8 as a list of bytes."""
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    message = entry.get("MESSAGE", "")
    if isinstance(message, list):
        message = bytes(b for b in message if isinstance(b, int) and 0 <= b < 256).decode("utf-8", "replace")
    return str(message), str(entry.get("_SYSTEMD_INVOCATION_ID", ""))


def decide(message: str, invocation: str, needle: str, current_invocation: str) -> str | None:
    """Why to stop the service for this journal message, or None. Only a message of the current run counts."""
    if needle not in message:
        return None
    if invocation and current_invocation and invocation != current_invocation:
        return None
    return f"{PREFIX} NaN in the logits of the running server, stopping it: {message.strip()[:300]}"


def watch(
    lines: Iterable[str],
    needle: str,
    current_invocation: Callable[[], str],
    stop: Callable[[], bool],
    say: Callable[[str], None],
) -> int:
    """Follow journal lines; stop the service at each run's first NaN line. Returns the number of stops."""
    stops = 0
    stopped: set[str] = set()
    for raw in lines:
        parsed = parse_entry(raw)
        if parsed is None:
            continue
        message, invocation = parsed
        if needle not in message or (invocation and invocation in stopped):
            continue
        reason = decide(message, invocation, needle, current_invocation())
        if reason is None:
            continue
        say(reason)
        if stop():
            stops += 1
            stopped.add(invocation)
        else:
            say(f"{PREFIX} the stop failed; the next NaN line tries again")
    return stops


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", default="sglang.service")
    parser.add_argument(
        "--line", required=True, help="the engine's NaN log line (a substring of the message)"
    )
    parser.add_argument("--systemctl", default="systemctl")
    parser.add_argument("--journalctl", default="", help="a command to read instead of journalctl (tests)")
    args = parser.parse_args(argv)

    def current_invocation() -> str:
        shown = subprocess.run(
            [args.systemctl, "show", args.unit, "--property", "InvocationID", "--value"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return shown.stdout.strip()

    def stop() -> bool:
        killed = subprocess.run(
            [args.systemctl, "kill", "--kill-whom=all", "--signal=SIGKILL", args.unit],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if killed.returncode != 0:
            print(f"{PREFIX} systemctl kill {args.unit} failed: {killed.stderr.strip()}", flush=True)
        return killed.returncode == 0

    def say(text: str) -> None:
        print(text, flush=True)

    command = args.journalctl.split() if args.journalctl else journal_command(args.unit)
    say(f"{PREFIX} watching {args.unit} for {args.line!r}")
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, errors="replace") as journal:
        assert journal.stdout is not None
        watch(journal.stdout, args.line, current_invocation, stop, say)
    # journalctl --follow never ends on its own: an end is an error, and systemd restarts the tripwire.
    say(f"{PREFIX} the journal stream ended (rc {journal.returncode})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
