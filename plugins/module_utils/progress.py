"""Progress lines for long steps (pure functions): what the stdout callback glm5_default prints in place of
Ansible's retry lines while a release installs, a checkpoint downloads or a server starts.

``progress_words`` turns what is measurable on the node (bytes done and expected, the step's own line, the
time since it started) into one line: bytes, percent, rate and ETA when they are known, elapsed always.
``throttled`` decides whether a host's line is printed now (at most one per host and task every few seconds).
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping

GB = 1000**3
MB = 1000**2


def size(count: float) -> str:
    """Bytes as GB from 1 GB up, MB below."""
    return f"{count / GB:.1f} GB" if count >= GB else f"{count / MB:.0f} MB"


def duration(seconds: float) -> str:
    """'45 s', '6 min 28 s', '2 h 05 min'; '?' for a time no clock can show."""
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def progress_words(
    elapsed: float,
    done: float | None = None,
    total: float | None = None,
    line: str = "",
    about: bool = False,
) -> str:
    """One line: the step's own ``line`` (when it has one; it names its own bytes), else ``done`` of
    ``total`` bytes with percent; then what the numbers allow - the mean rate since the start and the ETA at
    that rate - and the time elapsed. ``about``: ``total`` is an estimate (said as 'about'; the percent is
    capped below 100 until the step ends)."""
    words = [line] if line else []
    if done is not None and done >= 0:
        if not line:
            measured = size(done)
            if total:
                percent = 100.0 * done / total
                if about:
                    percent = min(percent, 99.0)
                measured += f" of {'about ' if about else ''}{size(total)} ({percent:.0f}%)"
            words.append(measured)
        rate = done / elapsed if elapsed > 0 else 0.0
        if rate > 0 and math.isfinite(rate):
            words.append(f"{size(rate)}/s")
            eta = (total - done) / rate if total and total > done else None
            if eta is not None and math.isfinite(eta):
                words.append(f"ETA {duration(eta)}")
    words.append(f"{duration(elapsed)} elapsed")
    return ", ".join(words)


def throttled(last: MutableMapping[str, float], key: str, now: float, interval: float) -> bool:
    """True when ``key``'s line must wait (its last one was under ``interval`` seconds ago); otherwise
    records ``now`` as its last line and returns False."""
    if now - last.get(key, float("-inf")) < interval:
        return True
    last[key] = now
    return False
