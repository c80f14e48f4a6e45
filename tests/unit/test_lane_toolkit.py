"""Each lane names the CUDA toolkit it runs on; cuda_toolkit installs that one (lane -> toolkit mapping)."""

from __future__ import annotations

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    SglangFlagError,
    lane_toolkit,
    load_lanes,
)


def test_the_seed_lane_runs_on_cuda_12_9_and_the_current_lane_on_13_0() -> None:
    lanes = load_lanes()
    seed, current = lane_toolkit(lanes["seed"]), lane_toolkit(lanes["current"])
    assert (seed["release"], seed["package"], seed["version"]) == ("12.9", "cuda-toolkit-12-9", "12.9.1-1")
    assert (current["release"], current["package"]) == ("13.0", "cuda-toolkit-13-0")
    assert current["version"] == "13.0.2-1"
    # Side by side on one node during a rollout between the lanes: separate packages and directories.
    assert seed["home"] == "/usr/local/cuda-12.9" and current["home"] == "/usr/local/cuda-13.0"


@pytest.mark.parametrize("name", sorted(load_lanes()))
def test_every_lane_has_a_toolkit_of_its_own_cuda_release_with_a_source(name: str) -> None:
    lane = load_lanes()[name]
    toolkit = lane_toolkit(lane, name)
    assert toolkit["release"] == lane["cuda"]
    assert toolkit["version"].startswith(lane["cuda"] + ".")
    assert toolkit["source"]


@pytest.mark.parametrize(
    ("lane", "words"),
    [
        ({"cuda": "13", "cuda_toolkit": {"version": "13.0.2-1", "source": "s"}}, "like '13.0'"),
        ({"cuda": "13.0"}, "needs a version and a source"),
        ({"cuda": "13.0", "cuda_toolkit": {"version": "13.0.2-1"}}, "needs a version and a source"),
        ({"cuda": "12.9", "cuda_toolkit": {"version": "13.0.2-1", "source": "s"}}, "not a CUDA 12.9 release"),
        ({"cuda": "13.0", "cuda_toolkit": {"version": "13.01-1", "source": "s"}}, "not a CUDA 13.0 release"),
    ],
)
def test_a_lane_whose_toolkit_does_not_match_is_refused(lane: dict, words: str) -> None:
    with pytest.raises(SglangFlagError, match=words):
        lane_toolkit(lane, "lanes.yml lane x")
