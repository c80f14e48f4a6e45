"""The health wait's judgement (module_utils/service_start.py): healthy on a 200, a crash loop as soon as
systemd shows one, the restarts counted from this run's start, and the symptom in words."""

from __future__ import annotations

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.service_start import (
    CRASH_LOOP,
    HEALTHY,
    WAITING,
    restarts_since,
    start_verdict,
    symptom,
)
from ansible_collections.glm5.deploy.plugins.module_utils.systemd_unit import parse_systemctl_show

RUNNING = {"ActiveState": "active", "SubState": "running", "NRestarts": "0", "Result": "success"}
AUTO_RESTART = {
    "ActiveState": "activating",
    "SubState": "auto-restart",
    "NRestarts": "2",
    "Result": "exit-code",
}
GAVE_UP = {"ActiveState": "failed", "SubState": "failed", "NRestarts": "5", "Result": "start-limit-hit"}


def test_parse_show() -> None:
    text = "ActiveState=active\nSubState=running\nNRestarts=3\nResult=success\n"
    assert parse_systemctl_show(text) == {**RUNNING, "NRestarts": "3"}


def test_a_200_is_healthy_whatever_the_restarts() -> None:
    assert start_verdict(200, AUTO_RESTART, 0, 2) == HEALTHY


@pytest.mark.parametrize("status", [None, 503, 500])
def test_a_running_service_that_does_not_answer_yet_is_waited_for(status: int | None) -> None:
    assert start_verdict(status, RUNNING, 0, 2) == WAITING


def test_systemd_giving_up_is_a_crash_loop_at_once() -> None:
    assert start_verdict(None, GAVE_UP, 5, 2) == CRASH_LOOP
    assert start_verdict(None, {**RUNNING, "ActiveState": "failed"}, 0, 2) == CRASH_LOOP


def test_restarts_since_this_run_make_a_crash_loop() -> None:
    assert start_verdict(None, AUTO_RESTART, 0, 2) == CRASH_LOOP
    assert start_verdict(None, {**AUTO_RESTART, "NRestarts": "1"}, 0, 2) == WAITING


def test_restarts_before_this_run_do_not_count() -> None:
    # A restart by hand does not zero NRestarts: 3 from an earlier crash loop, 1 since this start.
    assert restarts_since({"NRestarts": "4"}, 3) == 1
    assert start_verdict(None, {**AUTO_RESTART, "NRestarts": "4"}, 3, 2) == WAITING
    assert restarts_since({"NRestarts": "1"}, 3) == 0


def test_zero_crash_restarts_waits_for_the_timeout() -> None:
    assert start_verdict(None, {**AUTO_RESTART, "NRestarts": "9"}, 0, 0) == WAITING


@pytest.mark.parametrize(
    ("state", "before", "words"),
    [
        (GAVE_UP, 0, "a crash loop: systemd restarted it 5 times and then gave up (start limit hit)"),
        (AUTO_RESTART, 0, "a crash loop: the service is activating/auto-restart after 2 restart(s)"),
        (RUNNING, 0, "a stalled start: the service is running without restarts"),
        ({**RUNNING, "NRestarts": "3"}, 3, "a stalled start"),
    ],
)
def test_symptom(state: dict, before: int, words: str) -> None:
    assert words in symptom(state, before)
