"""Progress lines for long steps (module_utils/progress.py) and the stdout callback that prints them."""

from __future__ import annotations

from ansible_collections.glm5.deploy.plugins.module_utils.progress import duration, progress_words, throttled
from hypothesis import given
from hypothesis import strategies as st

GB = 1000**3


def test_a_download_names_its_own_bytes_then_rate_eta_and_elapsed() -> None:
    line = "downloading: 3/10 files, 120.00 GB of 440.00 GB (27%)"
    words = progress_words(400, done=120 * GB, total=440 * GB, line=line)
    assert words == f"{line}, 300 MB/s, ETA 17 min 46 s, 6 min 40 s elapsed"


def test_an_install_measured_on_disk_says_about_and_never_claims_100_percent() -> None:
    assert progress_words(60, done=3 * GB, total=6 * GB, about=True) == (
        "3.0 GB of about 6.0 GB (50%), 50 MB/s, ETA 1 min 00 s, 1 min 00 s elapsed"
    )
    assert "(99%)" in progress_words(90, done=7 * GB, total=6 * GB, about=True)


def test_a_start_has_only_its_state_and_elapsed() -> None:
    assert progress_words(185, line="waiting for /health_generate (active/running, connection refused)") == (
        "waiting for /health_generate (active/running, connection refused), 3 min 05 s elapsed"
    )
    assert progress_words(0) == "0 s elapsed"


def test_durations() -> None:
    assert [duration(s) for s in (-3, 0, 59, 60, 3599, 3600, 7500)] == [
        "0 s",
        "0 s",
        "59 s",
        "1 min 00 s",
        "59 min 59 s",
        "1 h 00 min",
        "2 h 05 min",
    ]


@given(
    elapsed=st.floats(min_value=0, max_value=1e6, allow_subnormal=True),
    done=st.none() | st.floats(min_value=0, max_value=1e13, allow_subnormal=True),
    total=st.none() | st.floats(min_value=0, max_value=1e13, allow_subnormal=True),
)
def test_any_numbers_make_one_line_that_ends_with_the_elapsed_time(elapsed, done, total) -> None:
    words = progress_words(elapsed, done, total)
    assert "\n" not in words and words.endswith("elapsed")
    assert progress_words(elapsed, done, total, about=True).endswith("elapsed")


def test_rates_too_small_or_too_large_for_a_clock_are_left_out() -> None:
    tiny = progress_words(1e6, done=5e-324, total=1e13)
    assert "/s" not in tiny and "ETA" not in tiny and tiny.endswith("elapsed")
    assert "/s" not in progress_words(1e-300, done=1e13)


def test_one_line_per_host_and_task_every_interval() -> None:
    last: dict[str, float] = {}
    printed = [t for t in (0.0, 2.0, 9.9, 10.0, 15.0, 20.5) if not throttled(last, "gpu01", t, 10.0)]
    assert printed == [0.0, 10.0, 20.5]
    assert not throttled(last, "gpu02", 21.0, 10.0)  # another host has its own
