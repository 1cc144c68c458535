"""DAPO dynamic sampling's verdict on a group's rewards: equal ones dropped, near-equal ones too under a std floor,
at most the step's cap dropped."""

from rl.algorithm.dynamic_sampling import DynamicSampling
from rl.config import load_config


def sampling(*overrides: str) -> DynamicSampling:
    return DynamicSampling(load_config(None, list(overrides)).algorithm, batch_groups=2)


def test_equal_rewards_are_dropped_up_to_the_cap_and_only_when_on():
    assert sampling().verdict([1.0, 1.0]) == "keep"
    on = sampling("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_max_factor=1")
    assert [on.verdict(r) for r in ([1.0, 1.0], [0.0, 1.0], [0.5, 0.5], [0.0, 0.0])] == [
        "drop",
        "keep",
        "drop",
        "over_cap",  # 1 x 2 groups dropped this step already
    ]
    assert on.end_step() == 2 and on.verdict([0.0, 0.0]) == "drop"
    assert on.verdict([0.50, 0.51]) == "keep"  # any difference is signal without a floor


def test_a_std_floor_drops_near_equal_continuous_rewards():
    floor = sampling("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_min_std=0.05")
    assert floor.verdict([0.50, 0.51, 0.50, 0.52]) == "drop"  # std 0.008
    assert floor.verdict([0.2, 0.28, 0.2, 0.28]) == "drop"  # std 0.04
    assert floor.verdict([0.0, 0.3, 0.1, 0.2]) == "keep"  # std 0.11
