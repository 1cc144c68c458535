import math

import pytest

from rl.algorithm.advantages import ESTIMATORS, compute_advantages, is_group_local


def test_grpo():
    adv = compute_advantages("grpo", [[3.0, 1.0], [1.0, 0.0, 0.0, 1.0]])
    # group 0: mean 2, std 1 -> [1, -1]; group 1: mean 0.5, std 0.5 -> [1, -1, -1, 1]
    assert adv[0] == pytest.approx([1.0, -1.0], abs=1e-5)
    assert adv[1] == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)


def test_drgrpo_has_no_std():
    adv = compute_advantages("drgrpo", [[3.0, 1.0, 2.0], [5.0]])
    # group 0: mean 2 -> [1, -1, 0]; a lone sample equals its own mean -> [0]
    assert adv == [[1.0, -1.0, 0.0], [0.0]]


def test_rloo_leave_one_out():
    adv = compute_advantages("rloo", [[3.0, 1.0, 2.0], [7.0]])
    # 3 - (1+2)/2 = 1.5 ; 1 - (3+2)/2 = -1.5 ; 2 - (3+1)/2 = 0 ; a group of one has no other sample -> 0
    assert adv[0] == pytest.approx([1.5, -1.5, 0.0])
    assert adv[1] == [0.0]


def test_reinforce_pp_uses_batch_statistics():
    adv = compute_advantages("reinforce++", [[1.0, 0.0], [1.0, 1.0]])
    # batch mean 0.75; deviations .25, -.75, .25, .25 -> variance (3 * .0625 + .5625) / 4 = .1875, std = sqrt(3)/4
    # .25 / (sqrt(3)/4) = 1/sqrt(3) ; -.75 / (sqrt(3)/4) = -sqrt(3). The all-equal group is NOT zero here.
    s3 = math.sqrt(3.0)
    assert adv[0] == pytest.approx([1 / s3, -s3], abs=1e-5)
    assert adv[1] == pytest.approx([1 / s3, 1 / s3], abs=1e-5)


def test_reinforce_pp_baseline_centres_groups_then_batch_std():
    adv = compute_advantages("reinforce++-baseline", [[2.0, 0.0], [5.0, 5.0]])
    # centred per group: [1, -1], [0, 0]; batch std of those = sqrt((1 + 1 + 0 + 0) / 4) = 1/sqrt(2)
    # -> [sqrt(2), -sqrt(2)], [0, 0]   (GRPO would give [1, -1], [0, 0])
    s2 = math.sqrt(2.0)
    assert adv[0] == pytest.approx([s2, -s2], abs=1e-5)
    assert adv[1] == [0.0, 0.0]


def test_grpo_batch_centres_groups_then_divides_by_the_rewards_batch_std():
    adv = compute_advantages("grpo-batch", [[2.0, 0.0], [5.0, 5.0]])
    # centred per group: [1, -1], [0, 0]; the rewards' batch std (not the centred values'): mean 3,
    # sqrt((1 + 9 + 4 + 4) / 4) = sqrt(4.5) -> [1/sqrt(4.5), -1/sqrt(4.5)], [0, 0] (reinforce++-baseline: +-sqrt(2))
    s = math.sqrt(4.5)
    assert adv[0] == pytest.approx([1 / s, -1 / s], abs=1e-5)
    assert adv[1] == [0.0, 0.0]


def test_all_equal_rewards_give_exact_zeros_for_group_baselines():
    # 0.1 three times: the float mean is off by an ulp, still the result is exactly 0
    for est in ("grpo", "drgrpo", "rloo", "reinforce++-baseline", "grpo-batch"):
        assert compute_advantages(est, [[0.1, 0.1, 0.1]]) == [[0.0, 0.0, 0.0]], est
    assert compute_advantages("gdpo", [[0.2] * 3], function_rewards=[[[0.1] * 3] * 2], weights=[1, 1]) == [[0.0] * 3]
    # the whole batch equal: reinforce++ has nothing to normalize either
    assert compute_advantages("reinforce++", [[0.1, 0.1], [0.1]]) == [[0.0, 0.0], [0.0]]


def test_empty_batch_and_empty_group():
    for est in ESTIMATORS:
        functions = dict(function_rewards=[[[]], [[1.0, 0.0]]], weights=[1.0])
        assert compute_advantages(est, [], **functions) == []
        assert compute_advantages(est, [[], [1.0, 0.0]], **functions)[0] == []


def test_gdpo_normalizes_each_function_in_its_group_then_the_weighted_sum_over_the_batch():
    # group 0: f1 [1, 0] -> [1, -1], f2 [0.1, 0] -> [1, -1]; group 1: f1 [1, 1] -> [0, 0], f2 [0.3, 0.1] -> [1, -1]
    functions = [[[1.0, 0.0], [0.1, 0.0]], [[1.0, 1.0], [0.3, 0.1]]]
    sums = [[1.1, 0.0], [1.3, 1.1]]
    adv = compute_advantages("gdpo", sums, function_rewards=functions, weights=[1.0, 1.0])
    # sums [2, -2], [1, -1]: batch mean 0, std sqrt(10 / 4)
    s = math.sqrt(2.5)
    assert adv == [pytest.approx([2 / s, -2 / s], abs=1e-5), pytest.approx([1 / s, -1 / s], abs=1e-5)]
    assert compute_advantages("grpo", sums) == [pytest.approx([1, -1], abs=1e-5)] * 2  # the sum's view: alike
    weighted = compute_advantages("gdpo", sums, function_rewards=functions, weights=[2.0, 0.5])
    # sums [2.5, -2.5], [0.5, -0.5]: std sqrt(13 / 4)
    s = math.sqrt(3.25)
    assert weighted == [pytest.approx([2.5 / s, -2.5 / s], abs=1e-5), pytest.approx([0.5 / s, -0.5 / s], abs=1e-5)]


def test_gdpo_leaves_a_missing_value_out_and_gives_an_unscored_sample_zero():
    # f2 did not score sample 1 (None), no function scored sample 2: f1 over [1, 0] -> [1, -1], f2 over [0.5] -> [0]
    functions = [[[1.0, 0.0, None], [0.5, None, None]]]
    adv = compute_advantages("gdpo", [[1.5, 0.0, 0.0]], function_rewards=functions, weights=[1.0, 1.0])
    assert adv == [[pytest.approx(1.0, abs=1e-5), pytest.approx(-1.0, abs=1e-5), 0.0]]  # batch of [1, -1]


def test_gdpo_needs_each_functions_values():
    with pytest.raises(ValueError, match="gdpo needs each reward function's values and weights"):
        compute_advantages("gdpo", [[1.0, 0.0]])


def test_unknown_estimator_names_the_valid_ones():
    with pytest.raises(ValueError, match="rloo"):
        compute_advantages("ppo-gae", [[1.0]])
    with pytest.raises(ValueError, match="drgrpo"):
        is_group_local("nope")


def test_is_group_local():
    assert [is_group_local(e) for e in ESTIMATORS] == [True, True, True, False, False, False, False]


def test_a_steps_gdpo_reads_each_groups_reward_log_in_the_recipes_order_and_weights():
    """``assign_advantages`` on groups as the reward pool logs them: each function's values by name, in
    ``reward.functions`` order, the weights from the config."""
    from rl.config import load_config
    from rl.loop.steps import assign_advantages, reward_weights
    from rl.types import Group, PromptRow, RewardLog, Sample

    cfg = load_config(
        None,
        [
            "reward.functions=[{fn: arith_exact, weight: 2.0}, {fn: arith_steps, weight: 0.5}]",
            "algorithm.advantage=gdpo",
        ],
    )
    assert reward_weights(cfg) == [2.0, 0.5]

    def group(exact: list[float], steps: list[float]) -> Group:
        samples = [
            Sample(i, [1], [0.0], [0], "stop", reward=2 * e + 0.5 * s)
            for i, (e, s) in enumerate(zip(exact, steps, strict=True))
        ]
        log = RewardLog(functions={"arith_exact": exact, "arith_steps": steps})
        return Group(PromptRow(str(len(exact)), "1+1=", "2"), [0], samples, reward_log=log)

    groups = [group([1.0, 0.0], [0.1, 0.0]), group([1.0, 1.0], [0.3, 0.1])]
    assign_advantages(cfg.algorithm.advantage, groups, reward_weights(cfg))
    s = math.sqrt(3.25)  # as the weighted hand computation above
    assert [g.advantages for g in groups] == [
        pytest.approx([2.5 / s, -2.5 / s], abs=1e-5),
        pytest.approx([0.5 / s, -0.5 / s], abs=1e-5),
    ]
