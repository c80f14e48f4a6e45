#!/usr/bin/python
"""Ansible module: wait a bounded window for a starting service's health endpoint, watching systemd too."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_health_wait
short_description: Wait up to a window for a health URL to answer 200, and stop early on a crash loop
description:
  - Polls I(url) every I(interval) seconds on the node itself, for at most I(window) seconds, and reads the
    unit's state from systemd at each poll. Returns as soon as the URL answers 200 (C(verdict=healthy)) or
    systemd shows a crash loop (C(verdict=crash-loop)); else C(verdict=waiting) when the window ends.
  - Meant for C(until) retries, one window per retry, so that the retry lines are the progress of a long start
    and a crash loop ends the wait at once instead of at the timeout.
  - It never fails on the verdict (the caller decides); it fails only on bad options.
  - Read-only. It runs in check mode too.
  - The verdict and the symptom come from the C(service_start) module_utils.
author:
  - glm5-deploy maintainers (@glm5-deploy)
options:
  url:
    description: The health URL, for example C(http://127.0.0.1:30000/health_generate).
    type: str
    required: true
  ca_path:
    description: CA file to verify an https I(url) against; empty for the system's CAs.
    type: path
  unit:
    description: The systemd unit that serves I(url).
    type: str
    default: sglang
  window:
    description: Seconds to wait in this call before returning C(verdict=waiting).
    type: float
    default: 10
  interval:
    description: Seconds between polls.
    type: float
    default: 1
  request_timeout:
    description: Seconds one request to I(url) may take.
    type: float
    default: 30
  restarts_before:
    description: The unit's C(NRestarts) before this run (re)started it; restarts beyond it count.
    type: int
    default: 0
  crash_restarts:
    description: Automatic restarts since this run started the unit that make a crash loop (0 never).
    type: int
    default: 2
  fail_stop_pattern:
    description:
      - The line the engine's NaN fail-stop leaves in the unit's journal (the lane's C(nan_fail_stop)
        C(journal_pattern)), for example C(NaN detected! sampler). Once the unit has restarted or stopped, its
        journal since I(since) is read, and a line that holds the pattern ends the wait at once
        (C(verdict=crash-loop)) with that line in the symptom. Empty to never read the journal.
    type: str
    default: ""
  since:
    description: Epoch seconds; the journal is read from then on (the caller's time before the start).
    type: float
    default: 0
extends_documentation_fragment:
  - glm5.deploy.attributes.read_only
attributes:
  platform:
    description: Hosts with systemd (C(systemctl), C(journalctl)).
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Wait until /health_generate answers 200 (a retry line every 10 s is the progress)
  glm5.deploy.sglang_health_wait:
    url: http://127.0.0.1:30000/health_generate
    restarts_before: 0
  register: health
  until: health.verdict != 'waiting'
  retries: 90
  delay: 1
  failed_when: health.verdict != 'healthy'
"""

RETURN = r"""
verdict:
  description: C(healthy), C(crash-loop) or C(waiting).
  type: str
  returned: always
status:
  description: The last HTTP status of I(url) (C(null) when it did not answer).
  type: int
  returned: always
error:
  description: Why the last request got no HTTP status (connection refused, timeout), else empty.
  type: str
  returned: always
unit_state:
  description: The unit's ActiveState, SubState, NRestarts and Result at the last poll.
  type: dict
  returned: always
restarts:
  description: Automatic restarts since this run started the unit.
  type: int
  returned: always
symptom:
  description: What the unit's state says of a start that is not healthy (empty when healthy).
  type: str
  returned: always
fail_stop_line:
  description: The journal line of the engine's NaN fail-stop, when the start ended on it (else empty).
  type: str
  returned: always
elapsed:
  description: Seconds this call waited.
  type: float
  returned: always
glm5_progress:
  description:
    - The start's progress in one line (the unit's state, what the URL answered, the time since the start),
      which the stdout callback glm5.deploy.glm5_default prints in place of the retry line.
  type: str
  returned: always
  sample: "waiting for /health_generate (active/running, connection refused), 3 min 05 s elapsed"
"""

import time
import urllib.error
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.glm5.deploy.plugins.module_utils.progress import progress_words
from ansible_collections.glm5.deploy.plugins.module_utils.service_start import (
    CRASH_LOOP,
    HEALTHY,
    SHOW_PROPERTIES,
    WAITING,
    fail_stop_line,
    fail_stop_symptom,
    restarts_since,
    start_verdict,
    symptom,
)
from ansible_collections.glm5.deploy.plugins.module_utils.systemd_unit import parse_systemctl_show


def _status(url: str, timeout: float, ca_path: str | None = None) -> tuple[int | None, str]:
    """The URL's HTTP status, or None and why there was none. An https URL is verified against ``ca_path``
    (empty: the system's CAs); no ~/.netrc credentials and no compression, as a plain GET."""
    try:
        response = open_url(url, timeout=timeout, ca_path=ca_path or None, use_netrc=False, decompress=False)
        with response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (OSError, ValueError, UrlsConnectionError) as exc:
        return None, str(getattr(exc, "reason", exc))


def _fail_stop_line(module: AnsibleModule, params: dict) -> str | None:
    """The unit's journal line since ``since`` that holds the fail-stop pattern, if any."""
    journalctl = module.get_bin_path("journalctl")
    if not journalctl:
        return None
    rc, out, _err = module.run_command(
        [journalctl, "--no-pager", "-o", "cat", "-u", params["unit"], "--since", f"@{int(params['since'])}"]
    )
    return fail_stop_line(out.splitlines(), params["fail_stop_pattern"]) if rc == 0 else None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "ca_path": {"type": "path"},
            "unit": {"type": "str", "default": "sglang"},
            "window": {"type": "float", "default": 10},
            "interval": {"type": "float", "default": 1},
            "request_timeout": {"type": "float", "default": 30},
            "restarts_before": {"type": "int", "default": 0},
            "crash_restarts": {"type": "int", "default": 2},
            "fail_stop_pattern": {"type": "str", "default": ""},
            "since": {"type": "float", "default": 0},
        },
        supports_check_mode=True,
    )
    params = module.params
    systemctl = module.get_bin_path("systemctl", required=True)
    show = [systemctl, "show", params["unit"], "-p", ",".join(SHOW_PROPERTIES)]
    started = time.monotonic()
    nan_line = ""
    while True:
        status, error = _status(params["url"], params["request_timeout"], params["ca_path"])
        rc, out, err = module.run_command(show)
        if rc != 0:
            module.fail_json(msg=f"systemctl show {params['unit']} failed: {err.strip() or out.strip()}")
        state = parse_systemctl_show(out)
        verdict = start_verdict(status, state, params["restarts_before"], params["crash_restarts"])
        if (
            verdict != HEALTHY
            and params["fail_stop_pattern"]
            and (restarts_since(state, params["restarts_before"]) > 0 or state.get("ActiveState") != "active")
        ):
            nan_line = _fail_stop_line(module, params) or ""
            if nan_line:
                verdict = CRASH_LOOP
        elapsed = time.monotonic() - started
        if verdict != WAITING or elapsed + params["interval"] > params["window"]:
            break
        time.sleep(params["interval"])
    answer = f"HTTP {status}" if status is not None else (error or "no answer")
    where = urlsplit(params["url"]).path or params["url"]
    since_start = time.time() - params["since"] if params["since"] > 0 else elapsed
    line = f"waiting for {where} ({state.get('ActiveState', '?')}/{state.get('SubState', '?')}, {answer})"
    module.exit_json(
        glm5_progress=progress_words(since_start, line=line if verdict == WAITING else verdict),
        changed=False,
        verdict=verdict,
        status=status,
        error=error,
        unit_state=state,
        restarts=restarts_since(state, params["restarts_before"]),
        symptom=(
            ""
            if verdict == HEALTHY
            else fail_stop_symptom(nan_line)
            if nan_line
            else symptom(state, params["restarts_before"])
        ),
        fail_stop_line=nan_line,
        elapsed=round(elapsed, 1),
    )


if __name__ == "__main__":
    main()
