import math

import pytest
import torch

from rl.algorithm.off_policy import MAX_LOG_WEIGHT, ess_lr_scale, ess_ratio, sequence_weights, token_weights


def test_ess_ratio_equal_weights_is_one():
    # w = [2, 2, 2, 2]: (8)^2 / (4 * 16) = 1
    assert ess_ratio(8.0, 16.0, 4) == pytest.approx(1.0)


def test_ess_ratio_one_dominant_weight_is_about_one_over_n():
    # w = [1000, 1, 1, 1]: 1003^2 / (4 * 1000003) = 0.2515 ~ 1/4
    assert ess_ratio(1003.0, 1_000_003.0, 4) == pytest.approx(1003.0**2 / 4_000_012.0)
    assert ess_ratio(1003.0, 1_000_003.0, 4) == pytest.approx(0.25, abs=2e-3)


def test_ess_ratio_degenerate():
    assert ess_ratio(0.0, 0.0, 0) == 1.0
    assert ess_ratio(0.0, 0.0, 3) == 0.0


def test_ess_lr_scale_sqrt_and_floor():
    assert ess_lr_scale(0.25) == pytest.approx(0.5)
    assert ess_lr_scale(0.25, floor=0.6) == pytest.approx(0.6)
    assert ess_lr_scale(1.0, floor=0.1) == pytest.approx(1.0)


def test_sequence_weights_sum_masked_gaps():
    prox = torch.tensor([[0.1, 0.2, 9.0], [5.0, 5.0, 5.0]])
    behav = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    w = sequence_weights(prox, behav, mask)
    # row 0: exp(0.1 + 0.2) (the padded 9.0 is ignored); row 1 has no tokens -> exp(0) = 1
    assert w.dtype == torch.float64
    assert w.tolist() == pytest.approx([math.exp(0.3), 1.0], rel=1e-6)


def test_weights_are_detached_and_clamped_finite():
    prox = torch.tensor([[1000.0, math.log(2.0)]], requires_grad=True)
    behav = torch.zeros(1, 2)
    w = token_weights(prox, behav)
    assert not w.requires_grad
    # exp(1000) would overflow; clamped to exp(300), and its square still fits in float64
    assert w[0, 0].item() == pytest.approx(math.exp(MAX_LOG_WEIGHT))
    assert math.isfinite((w * w).sum().item())
    assert w[0, 1].item() == pytest.approx(2.0)
    assert math.isfinite(sequence_weights(prox, behav, torch.ones(1, 2)).item())
