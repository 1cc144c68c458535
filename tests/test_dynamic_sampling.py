"""DAPO dynamic sampling's verdict on a group: equal rewards dropped, near-equal ones too under a std floor, a share
correct outside a pass-rate band too, each drop naming its reason, at most the step's cap dropped."""

import pytest

from rl.algorithm.dynamic_sampling import DynamicSampling
from rl.config import load_config


def sampling(*overrides: str) -> DynamicSampling:
    return DynamicSampling(load_config(None, list(overrides)).algorithm, batch_groups=2)


def test_equal_rewards_are_dropped_up_to_the_cap_and_only_when_on():
    assert sampling().verdict([1.0, 1.0], [True, True]) == "keep"
    on = sampling("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_max_factor=1")
    rewards = ([1.0, 1.0], [0.0, 1.0], [0.5, 0.5], [0.0, 0.0])
    assert [on.verdict(r, [x > 0 for x in r]) for r in rewards] == [
        "zero_variance",
        "keep",
        "zero_variance",
        "over_cap",  # 1 x 2 groups dropped this step already
    ]
    assert on.end_step() == {"zero_variance": 2} and on.verdict([0.0, 0.0], [False, False]) == "zero_variance"
    assert on.verdict([0.50, 0.51], [True, True]) == "keep"  # any difference is signal without a floor


def test_a_std_floor_drops_near_equal_continuous_rewards():
    floor = sampling("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_min_std=0.05")
    assert floor.verdict([0.50, 0.51, 0.50, 0.52], [True] * 4) == "zero_variance"  # std 0.008
    assert floor.verdict([0.2, 0.28, 0.2, 0.28], [True] * 4) == "zero_variance"  # std 0.04
    assert floor.verdict([0.0, 0.3, 0.1, 0.2], [False, True, True, True]) == "keep"  # std 0.11


def test_a_pass_rate_band_drops_groups_nearly_always_or_nearly_never_right():
    band = sampling("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_pass_rate=[0.25, 0.75]")
    right = [1.0, 1.0, 1.0, 0.0]  # 3 of 4 right: on the band's edge, kept
    assert band.verdict(right, [r > 0 for r in right]) == "keep"
    assert band.verdict([1.0, 0.9, 0.8, 0.0], [True, True, True, False]) == "keep"
    assert band.verdict([1.0, 1.0, 1.0, 1.0, 1.0, 0.0], [True] * 5 + [False]) == "pass_rate"  # 5 of 6
    assert band.verdict([0.1, 0.0, 0.0, 0.0, 0.0, 0.0], [True] + [False] * 5) == "pass_rate"  # 1 of 6
    assert band.end_step() == {"pass_rate": 2}


@pytest.mark.parametrize("band", ["[0.9, 0.1]", "[-0.1, 0.5]", "[0.5, 1.5]"])
def test_a_band_that_is_no_band_of_shares_is_refused(band):
    with pytest.raises(ValueError, match=r"(?s)dynamic_sampling_pass_rate.*not a band \[low, high\]"):
        load_config(None, [f"algorithm.dynamic_sampling_pass_rate={band}"])
