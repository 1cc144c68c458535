import dataclasses
import math

import pytest
import torch

from rl.algorithm.losses import (
    MIN_STATS,
    STAT_KEYS,
    LossSpec,
    empty_stats,
    finalize_stats,
    kind_metrics,
    merge_stats,
    policy_loss,
)

L = math.log
NAN = float("nan")


def _leaf(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64, requires_grad=True)


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


# ---- PPO surrogate -------------------------------------------------------------------------------------------


def test_ppo_matches_hand_computation_with_asymmetric_clip():
    # two sequences, three positions, the last position of the second is padding (holding garbage)
    behav = torch.zeros(2, 3)
    new = torch.tensor([[L(1.5), 0.0, L(0.5)], [L(1.1), L(0.7), 5.0]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    out = policy_loss(new, behav, adv, mask, LossSpec(clip_low=0.2, clip_high=0.28))
    # row 0 (A=+1): ratio 1.5 -> clipped to 1+0.28 ; 1.0 ; 0.5 -> min(0.5, 0.8) = 0.5 -> losses -1.28, -1, -0.5
    # row 1 (A=-1): 1.1 -> -min(-1.1, -1.1) = 1.1 ; 0.7 -> clipped to 1-0.2: -min(-0.7, -0.8) = 0.8
    expected_sum = -1.28 - 1.0 - 0.5 + 1.1 + 0.8  # = -0.88
    assert out.loss.item() == pytest.approx(expected_sum, abs=1e-6)
    assert out.units == 5.0
    assert out.stats["clipped_tokens"] == 2.0  # 1.5 (A>0, upper bound) and 0.7 (A<0, lower bound)
    assert out.stats["ratio_sum"] == pytest.approx(1.5 + 1.0 + 0.5 + 1.1 + 0.7, rel=1e-6)
    means = finalize_stats(out.stats)
    assert means["clip_fraction"] == pytest.approx(2 / 5)
    assert means["ratio_mean"] == pytest.approx(4.8 / 5, rel=1e-6)


def test_clip_sides_are_counted_as_trl_counts_them():
    # row 0 (A=+1): ratios 1.5, 1.0, 0.5 -> one upper-side token of 3 (0.5 is below 1 - 0.2, but A > 0 keeps it)
    # row 1 (A=-1): ratios 1.5, 0.7, 0.6 (last padding) -> one lower-side token of 2 (1.5 gets no upper clip at A < 0)
    # row 2 (A=-1): ratios 0.5, 0.5 -> both lower-side
    new = torch.tensor([[L(1.5), 0.0, L(0.5)], [L(1.5), L(0.7), L(0.6)], [L(0.5), L(0.5), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, -1.0, -1.0])
    means = finalize_stats(policy_loss(new, torch.zeros(3, 3), adv, mask, LossSpec(clip_low=0.2, clip_high=0.28)).stats)
    assert means["clip_low_fraction"] == pytest.approx(3 / 7)
    assert means["clip_high_fraction"] == pytest.approx(1 / 7)
    assert means["clip_low_seq_min"] == pytest.approx(0.0)  # row 0 has no lower-side token
    assert means["clip_high_seq_max"] == pytest.approx(1 / 3)
    assert means["clip_fraction"] == pytest.approx(4 / 7)  # the region: either side
    low_everywhere = finalize_stats(policy_loss(new[1:], torch.zeros(2, 3), adv[1:], mask[1:], LossSpec()).stats)
    assert low_everywhere["clip_low_seq_min"] == pytest.approx(1 / 2)  # row 1's share; row 2's is 1
    merged = finalize_stats(
        merge_stats(
            merge_stats({}, policy_loss(new[:1], torch.zeros(1, 3), adv[:1], mask[:1], LossSpec()).stats),
            policy_loss(new[1:], torch.zeros(2, 3), adv[1:], mask[1:], LossSpec()).stats,
        )
    )
    assert merged["clip_low_seq_min"] == pytest.approx(0.0) and merged["clip_high_seq_max"] == pytest.approx(1 / 3)
    unclipped = policy_loss(new, torch.zeros(3, 3), adv, mask, LossSpec(kind="sapo")).stats
    assert finalize_stats(unclipped)["clip_low_fraction"] == finalize_stats(unclipped)["clip_high_fraction"] == 0.0


def test_ppo_gradient_sign_and_clipped_tokens_have_no_gradient():
    logp = _leaf([[L(1.5), 0.0, L(0.5)], [L(1.5), 0.0, L(0.7)]])
    out = policy_loss(
        logp, torch.zeros(2, 3), _t([1.0, -1.0]), torch.ones(2, 3), LossSpec(clip_low=0.2, clip_high=0.28)
    )
    out.loss.backward()
    # d(-r A)/dlogp = -r A where the unclipped branch is active, 0 where the clipped one is
    # A=+1: 1.5 clipped -> 0 ; 1.0 -> -1 ; 0.5 (pessimistic side is never clipped) -> -0.5
    # A=-1: 1.5 unclipped (min(-1.5, -1.28) = -1.5) -> +1.5 ; 1.0 -> +1 ; 0.7 clipped at 0.8 -> 0
    assert logp.grad.tolist()[0] == pytest.approx([0.0, -1.0, -0.5])
    assert logp.grad.tolist()[1] == pytest.approx([1.5, 1.0, 0.0])


def test_dual_clip_bounds_a_negative_advantages_loss_and_stops_its_gradient():
    """Dual-clip PPO: with A < 0 a ratio above ``dual_clip`` loses ``dual_clip * |A|`` and gets no gradient; below
    it, and for A > 0, PPO is unchanged."""
    logp = _leaf([[L(5.0), L(2.0)], [L(5.0), L(2.0)]])
    spec = LossSpec(clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    out = policy_loss(logp, torch.zeros(2, 2), _t([-1.0, 1.0]), torch.ones(2, 2), spec)
    out.loss.backward()
    # A=-1: r 5 -> min(-5, -1.28) = -5, floored at -3 -> loss 3, no gradient; r 2 -> loss 2, gradient +2
    # A=+1: r 5 and 2 clipped at 1.28 -> loss -1.28 each, no gradient (the dual clip leaves A > 0 alone)
    assert out.loss.item() == pytest.approx(3.0 + 2.0 - 1.28 - 1.28)
    assert logp.grad.tolist() == [pytest.approx([0.0, 2.0]), pytest.approx([0.0, 0.0])]
    assert out.stats["clipped_tokens"] == 3.0  # the dual-clipped token and the two above 1.28 with A > 0
    plain = policy_loss(logp.detach(), torch.zeros(2, 2), _t([-1.0, 1.0]), torch.ones(2, 2), LossSpec())
    assert plain.loss.item() == pytest.approx(5.0 + 2.0 - 1.28 - 1.28)  # without it the r = 5 token loses 5
    with pytest.raises(ValueError, match="dual_clip"):
        LossSpec(dual_clip=1.0)


def test_off_policy_sequence_masking_drops_negative_sequences_that_drifted():
    """DeepSeek-V3.2's rule: a sequence is dropped when its advantage is negative and its mean
    log pi_behav - log pi is above the threshold; a positive one, or one that stayed close, is kept."""
    behav = torch.zeros(4, 2)
    drifted, close = [L(0.5), L(0.5)], [L(0.9), L(0.9)]  # mean log(pi_b / pi): 0.69 and 0.105
    logp = _leaf([drifted, close, drifted, [L(0.5), 9.0]])  # the last row's second position is padding
    adv, mask = _t([-1.0, -1.0, 1.0, -1.0]), _t([[1, 1], [1, 1], [1, 1], [1, 0]])
    out = policy_loss(logp, behav, adv, mask, LossSpec(off_policy_mask=0.5))
    out.loss.backward()
    assert logp.grad[0].tolist() == [0.0, 0.0] and logp.grad[3].tolist() == [0.0, 0.0]  # dropped
    assert logp.grad[1].abs().sum() > 0 and logp.grad[2].abs().sum() > 0  # close, or a positive advantage
    assert out.stats["opsm_masked_seqs"] == 2.0
    assert finalize_stats(out.stats)["opsm_masked_fraction"] == pytest.approx(2 / 4)
    assert policy_loss(logp.detach(), behav, adv, mask, LossSpec()).stats["opsm_masked_seqs"] == 0.0


# ---- aggregation and the sum/units contract ------------------------------------------------------------------


def _agg_batch():
    # ratio 1 everywhere, so each masked token's loss is -A; row 2 is an empty response full of garbage
    logp = _leaf([[-1.0, -1.0, -1.0], [-2.0, NAN, NAN], [float("inf"), NAN, -3.0]])
    behav = _t([[-1.0, -1.0, -1.0], [-2.0, 0.0, float("-inf")], [0.0, 0.0, 0.0]])
    adv = _t([1.0, 2.0, 5.0])
    mask = _t([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    return logp, behav, adv, mask


@pytest.mark.parametrize(
    "agg, norm_len, loss_sum, units, grad",
    [
        # token losses: row 0 -1 -1 -1, row 1 -2 -> sum -5 over 4 tokens; d/dlogp = -A per masked token
        ("token-mean", None, -5.0, 4.0, [[-1, -1, -1], [-2, 0, 0], [0, 0, 0]]),
        # per-sequence token means: -1 and -2 -> sum -3 over 2 sequences (the empty row is not a unit)
        ("seq-mean-token-mean", None, -3.0, 2.0, [[-1 / 3, -1 / 3, -1 / 3], [-2, 0, 0], [0, 0, 0]]),
        # per-sequence token sums: -3 and -2 -> sum -5 over 2 sequences (LUSPO's: a sequence weighs its length)
        ("seq-mean-token-sum", None, -5.0, 2.0, [[-1, -1, -1], [-2, 0, 0], [0, 0, 0]]),
        # per-sequence token sums over norm_len=4: -3/4 and -2/4 -> sum -1.25 over 2 sequences
        ("seq-mean-token-sum-norm", 4, -1.25, 2.0, [[-0.25, -0.25, -0.25], [-0.5, 0, 0], [0, 0, 0]]),
    ],
)
def test_aggregations_hand_computed_with_empty_row(agg, norm_len, loss_sum, units, grad):
    logp, behav, adv, mask = _agg_batch()
    out = policy_loss(logp, behav, adv, mask, LossSpec(agg=agg, norm_len=norm_len))
    assert out.loss.item() == pytest.approx(loss_sum)
    assert out.units == units
    out.loss.backward()
    assert torch.isfinite(logp.grad).all()
    assert logp.grad.tolist() == [pytest.approx(row) for row in grad]
    assert out.stats["tokens"] == 4.0 and out.stats["seqs"] == 2.0
    assert all(math.isfinite(v) for k, v in out.stats.items() if k not in MIN_STATS)  # those: inf over nothing
    assert out.stats["correction_w_min"] == math.inf  # no correction: no weight counted


def test_all_empty_batch_is_zero_without_nan():
    logp = _leaf([[NAN, NAN]])
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        out = policy_loss(logp, _t([[0.0, 0.0]]), _t([1.0]), _t([[0, 0]]), LossSpec(agg=agg, norm_len=8))
        assert out.loss.item() == 0.0 and out.units == 0.0
        means = finalize_stats(out.stats)
        assert all(math.isfinite(v) for v in means.values())
        assert means["ess_ratio"] == 1.0


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("kind", ["ppo", "gspo", "cispo", "sapo", "vespo"])
def test_two_half_batches_summed_equal_one_full_call(agg, kind):
    g = torch.Generator().manual_seed(0)
    b, t = 4, 5
    base = -torch.rand(b, t, generator=g, dtype=torch.float64) * 2
    behav = base + 0.1 * torch.randn(b, t, generator=g, dtype=torch.float64)
    prox = base + 0.1 * torch.randn(b, t, generator=g, dtype=torch.float64)
    ref = base + 0.1 * torch.randn(b, t, generator=g, dtype=torch.float64)
    ent = torch.rand(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    mask = _t([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    spec = LossSpec(
        kind=kind,
        agg=agg,
        norm_len=5,
        kl_coef=0.1,
        entropy_coef=0.01,
        correction="tis-seq",
        correction_cap=1.1,
        off_policy_mask=0.05,  # drops some of the random sequences
    )
    if kind == "gspo":
        spec = dataclasses.replace(spec, clip_low=0.05, clip_high=0.05)
    if kind in ("ppo", "gspo"):
        spec = dataclasses.replace(spec, dual_clip=1.08)  # binds on some of the random tokens

    def run(rows):
        logp = (base + 0.1 * torch.randn(b, t, generator=torch.Generator().manual_seed(1), dtype=torch.float64))[rows]
        logp.requires_grad_(True)
        out = policy_loss(logp, behav[rows], adv[rows], mask[rows], spec, prox[rows], ref[rows], ent[rows])
        out.loss.backward()
        return out, logp.grad

    full, full_grad = run(slice(0, 4))
    first, grad_a = run(slice(0, 2))
    second, grad_b = run(slice(2, 4))
    units = first.units + second.units
    assert units == full.units
    assert (first.loss + second.loss).item() / units == pytest.approx(full.loss.item() / full.units, rel=1e-12)
    # the caller divides the summed gradient by the global units
    assert torch.allclose(torch.cat([grad_a, grad_b]) / units, full_grad / full.units, rtol=1e-12, atol=1e-15)
    merged = merge_stats(merge_stats({}, first.stats), second.stats)
    assert merged == pytest.approx(full.stats, rel=1e-12)


# ---- GSPO ----------------------------------------------------------------------------------------------------


def test_gspo_sequence_ratio_and_per_token_gradient():
    prox = _t([[-1.0, -2.0], [-1.0, 0.0]])
    logp = _leaf([[-0.9, -1.7], [-1.2, 99.0]])  # row 1's second position is padding
    spec = LossSpec(kind="gspo", agg="seq-mean-token-mean", clip_low=0.5, clip_high=0.5)
    out = policy_loss(logp, torch.zeros(2, 2), _t([1.0, 1.0]), _t([[1, 1], [1, 0]]), spec, proximal_logprobs=prox)
    # row 0: log-ratios 0.1, 0.3 -> s = exp(mean) = exp(0.2) = 1.22140 on both tokens
    # row 1: log-ratio -0.2 (padding ignored) -> s = exp(-0.2) = 0.81873
    s0, s1 = math.exp(0.2), math.exp(-0.2)
    assert out.stats["ratio_sum"] == pytest.approx(2 * s0 + s1)
    assert out.loss.item() == pytest.approx(-s0 - s1)  # token means of -s*A per row, summed
    out.loss.backward()
    # each token's gradient is sg[s] * dlogp_t / |y| with A=1: -s0/2 on BOTH tokens of row 0, although their own
    # log-ratios differ (PPO would give -exp(0.1)/2 and -exp(0.3)/2); this equals the gradient of the
    # sequence-level GSPO objective -exp(mean(logp - prox)) * A
    assert logp.grad.tolist()[0] == pytest.approx([-s0 / 2, -s0 / 2])
    assert logp.grad.tolist()[1] == pytest.approx([-s1, 0.0])
    seq_logp = logp.detach()[:1].clone().requires_grad_(True)
    (-torch.exp((seq_logp - prox[:1]).mean())).backward()
    assert seq_logp.grad.tolist()[0] == pytest.approx(logp.grad.tolist()[0])


def test_luspo_is_trls_formula():
    """TRL 1.16's loss_type="luspo" with importance_sampling_level="sequence": the sequence's mean log-ratio as its
    ratio, PPO's clipped surrogate on it at every token, summed per sequence, averaged over the sequences."""
    g = torch.Generator().manual_seed(3)
    behav = -torch.rand(3, 4, generator=g, dtype=torch.float64)
    logp = (behav + 0.3 * torch.randn(3, 4, generator=g, dtype=torch.float64)).requires_grad_(True)
    adv = _t([1.0, 0.5, -2.0])
    mask = _t([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    spec = LossSpec(kind="gspo", agg="seq-mean-token-sum", clip_low=0.02, clip_high=0.02, decoupled=False)
    out = policy_loss(logp, behav, adv, mask, spec)

    ratio = torch.exp(((logp - behav) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True))
    a = adv.unsqueeze(1)
    per_token = -torch.min(ratio * a, torch.clamp(ratio, 0.98, 1.02) * a)
    trl = (per_token * mask).sum(-1).mean()
    assert (out.loss / out.units).item() == pytest.approx(trl.item(), rel=1e-12)
    assert out.stats["clipped_tokens"] > 0  # the clip binds somewhere: the comparison covers it


def test_gspo_small_clip_clips_whole_sequence():
    prox = _t([[-1.0, -2.0]])
    logp = _leaf([[-0.9, -1.7]])  # s = exp(0.2) > 1 + 4e-4 with A > 0: clipped
    spec = LossSpec(kind="gspo", clip_low=3e-4, clip_high=4e-4)
    out = policy_loss(logp, torch.zeros(1, 2), _t([1.0]), torch.ones(1, 2), spec, proximal_logprobs=prox)
    assert out.loss.item() == pytest.approx(-2 * 1.0004)
    assert out.stats["clipped_tokens"] == 2.0
    out.loss.backward()
    assert logp.grad.abs().sum().item() == 0.0


# ---- CISPO ---------------------------------------------------------------------------------------------------


def test_cispo_capped_tokens_keep_a_gradient_and_nothing_is_raised():
    """The same tokens as ``test_ppo_gradient_sign_and_clipped_tokens_have_no_gradient``: where PPO's clipped side
    gives no gradient, CISPO's is -min(r, 1 + clip_high) * A (MiniMax-M1, eq. 4-5: sg(r^) * A * grad log pi); a
    ratio below 1 - clip_low is its own weight, not raised to the bound."""
    logp = _leaf([[L(1.5), 0.0, L(0.5)], [L(1.5), 0.0, L(0.7)]])
    spec = LossSpec(kind="cispo", clip_low=0.2, clip_high=0.28)
    out = policy_loss(logp, torch.zeros(2, 3), _t([1.0, -1.0]), torch.ones(2, 3), spec)
    out.loss.backward()
    assert logp.grad.tolist()[0] == pytest.approx([-1.28, -1.0, -0.5])
    assert logp.grad.tolist()[1] == pytest.approx([1.28, 1.0, 0.7])
    # the value: -sg(r^) * A * log pi, summed
    expected = -(1.28 * L(1.5) + 0.5 * L(0.5)) + (1.28 * L(1.5) + 0.7 * L(0.7))
    assert out.loss.item() == pytest.approx(expected)
    assert out.stats["clipped_tokens"] == 2.0  # the ratios above 1.28, whatever the advantage's sign
    assert kind_metrics("cispo", out.stats) == {"cispo_clip_ratio": 1 / 6}  # TRL's: under a positive advantage only
    assert kind_metrics("ppo", out.stats) == {}
    assert out.stats["ratio_sum"] == pytest.approx(1.5 + 1.0 + 0.5 + 1.5 + 1.0 + 0.7)


@pytest.mark.parametrize("kind", ["gspo", "cispo", "sapo", "vespo"])
def test_on_policy_every_kind_gives_the_policy_gradient(kind):
    """At r = 1 every loss's gradient is PPO's, -A * grad log pi per token: the on-policy policy gradient."""
    g = torch.Generator().manual_seed(3)
    base = -torch.rand(3, 4, generator=g, dtype=torch.float64)
    adv, mask = torch.randn(3, generator=g, dtype=torch.float64), _t([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    grads = {}
    for name in ("ppo", kind):
        logp = base.clone().requires_grad_(True)
        policy_loss(logp, base, adv, mask, LossSpec(kind=name, agg="seq-mean-token-mean")).loss.backward()
        grads[name] = logp.grad
    assert torch.allclose(grads[kind], grads["ppo"], rtol=1e-12, atol=0)
    assert torch.allclose(grads["ppo"], -(adv.unsqueeze(-1) * mask) / mask.sum(-1, keepdim=True))


# ---- SAPO ----------------------------------------------------------------------------------------------------


def test_sapo_soft_gate_value_and_gradient_hand_computed():
    """Per token -gate(r) * A with gate(r) = sigmoid(tau (r - 1)) * 4 / tau; d/dlogp = -A * 4 s (1 - s) * r, where
    s = sigmoid(tau (r - 1)): the slope fades both ways from r = 1 and never reaches 0 (no hard clip)."""
    ratios = [[1.5, 1.0, 0.5], [1.5, 1.0, 0.7]]
    logp = _leaf([[L(r) for r in row] for row in ratios])
    spec = LossSpec(kind="sapo", sapo_tau_pos=1.0, sapo_tau_neg=2.0)
    out = policy_loss(logp, torch.zeros(2, 3), _t([1.0, -1.0]), torch.ones(2, 3), spec)
    out.loss.backward()

    def sig(x: float) -> float:
        return 1.0 / (1.0 + math.exp(-x))

    value, grads = 0.0, []
    for row, adv, tau in ((ratios[0], 1.0, 1.0), (ratios[1], -1.0, 2.0)):
        value += sum(-sig(tau * (r - 1)) * 4 / tau * adv for r in row)
        grads.append([-adv * 4 * sig(tau * (r - 1)) * (1 - sig(tau * (r - 1))) * r for r in row])
    assert out.loss.item() == pytest.approx(value)
    assert logp.grad.tolist() == [pytest.approx(g) for g in grads]
    # PPO gives the A>0 token at r = 1.5 no gradient (clipped); SAPO a damped one, and the tokens at r = 1 a full one
    assert 0 < -grads[0][0] < 1.5 and grads[0][1] == pytest.approx(-1.0)
    assert out.stats["clipped_tokens"] == 0.0


def test_vespo_weighs_each_sequence_by_a_gamma_of_its_whole_ratio_hand_computed():
    """Per token -phi(w) * A * log pi, phi detached: d/dlogp = -phi(w) * A. Sequence 0 (A = 1, k 2, lam 3): token
    ratios 1.5 and 1.2 give w = 1.8, phi = e^3 1.8^2 e^-5.4; sequence 1 (A = -1, k 3, lam 2): w = 0.5 * 1.0, phi =
    e^2 0.5^3 e^-1; a masked token counts in neither."""
    logp = _leaf([[L(1.5), L(1.2), 0.0], [L(0.5), 0.0, 9.0]])
    mask = _t([[1, 1, 0], [1, 1, 0]])
    out = policy_loss(logp, torch.zeros(2, 3), _t([1.0, -1.0]), mask, LossSpec(kind="vespo"))
    out.loss.backward()
    phi = [math.exp(3) * 1.8**2 * math.exp(-3 * 1.8), math.exp(2) * 0.5**3 * math.exp(-2 * 0.5)]
    value = -phi[0] * (L(1.5) + L(1.2)) + phi[1] * L(0.5)
    assert out.loss.item() == pytest.approx(value)
    assert logp.grad.tolist() == [pytest.approx([-phi[0], -phi[0], 0.0]), pytest.approx([phi[1], phi[1], 0.0])]
    assert phi[0] < 1 and phi[1] < 1  # both sequences off-policy: damped, never cut off
    assert out.stats["clipped_tokens"] == 0.0
    assert kind_metrics("vespo", out.stats)["vespo/phi_seq_mean"] == pytest.approx((phi[0] + phi[1]) / 2)  # by token


def test_vespo_needs_positive_shape_parameters():
    with pytest.raises(ValueError, match="VESPO's k and lambda"):
        LossSpec(kind="vespo", vespo_lambda_neg=0.0)


def test_sapo_needs_positive_temperatures():
    with pytest.raises(ValueError, match="temperatures"):
        LossSpec(kind="sapo", sapo_tau_neg=0.0)


# ---- decoupled PPO and behaviour correction ------------------------------------------------------------------


def test_decoupled_splits_ratio_and_weight():
    behav, prox, logp = _t([[0.0]]), _t([[L(1.25)]]), _t([[L(1.5)]])
    a, m = _t([1.0]), _t([[1.0]])
    # coupled: r = 1.5/1 -> clipped to 1.28
    assert policy_loss(logp, behav, a, m, LossSpec()).loss.item() == pytest.approx(-1.28)
    coupled = policy_loss(logp, behav, a, m, LossSpec(decoupled=False), prox)
    assert coupled.loss.item() == pytest.approx(-1.28)
    assert coupled.stats["logprob_gap_abs_sum"] == pytest.approx(L(1.25))  # diagnostics still see the gap
    assert coupled.stats["is_weight_sum"] == pytest.approx(1.25)
    with pytest.raises(ValueError, match="needs decoupled=True"):
        LossSpec(decoupled=False, correction="tis-token")
    # decoupled: r = 1.5/1.25 = 1.2 (inside the clip); correction none ignores w = 1.25
    assert policy_loss(logp, behav, a, m, LossSpec(), prox).loss.item() == pytest.approx(-1.2)
    # tis-token: w = min(1.25, 2) -> -1.25 * 1.2 = -1.5
    out = policy_loss(logp, behav, a, m, LossSpec(correction="tis-token"), prox)
    assert out.loss.item() == pytest.approx(-1.5)
    assert out.stats["logprob_gap_abs_sum"] == pytest.approx(L(1.25))


@pytest.mark.parametrize("correction", ["none", "tis-token", "tis-seq", "mis-token", "mis-seq"])
def test_proximal_equal_to_behaviour_matches_coupled(correction):
    behav = _t([[-1.0, -0.5], [-2.0, -0.1]])
    logp_a = _leaf([[-0.8, -0.7], [-1.5, -0.1]])
    logp_b = logp_a.detach().clone().requires_grad_(True)
    a, m = _t([1.0, -0.5]), _t([[1, 1], [1, 0]])
    spec = LossSpec(correction=correction)
    decoupled = policy_loss(logp_a, behav, a, m, spec, proximal_logprobs=behav.clone())
    coupled = policy_loss(logp_b, behav, a, m, spec)
    assert decoupled.loss.item() == pytest.approx(coupled.loss.item())
    decoupled.loss.backward()
    coupled.loss.backward()
    assert torch.allclose(logp_a.grad, logp_b.grad)


def _correction_batch(correction: str):
    # logp = prox, so r = 1 and each token's loss is -w * A with A = 1
    prox = _t([[L(3.0), L(0.6)], [L(1.5), L(1.6)]])
    return policy_loss(
        prox.clone(), torch.zeros(2, 2), _t([1.0, 1.0]), torch.ones(2, 2), LossSpec(correction=correction), prox
    )


def test_tis_token_and_seq_capping():
    # token weights 3, 0.6, 1.5, 1.6 ; sequence weights 3*0.6 = 1.8 and 1.5*1.6 = 2.4 ; cap 2
    # tis-token: min(w, 2) = 2, 0.6, 1.5, 1.6 -> -5.7
    assert _correction_batch("tis-token").loss.item() == pytest.approx(-5.7)
    # tis-seq: 1.8 on both tokens of row 0, min(2.4, 2) = 2 on both of row 1 -> -(3.6 + 4) = -7.6
    assert _correction_batch("tis-seq").loss.item() == pytest.approx(-7.6)
    assert _correction_batch("none").loss.item() == pytest.approx(-4.0)


def test_the_applied_correction_weights_are_summarized_as_trl_logs_them():
    """TRL's sampling/importance_sampling_ratio/min, mean, max: the weights after the cap or the mask, one per token
    (token modes) or per sequence (sequence modes); nothing without a correction."""
    token = finalize_stats(_correction_batch("tis-token").stats)  # 2 (capped), 0.6, 1.5, 1.6
    assert (token["correction_w_min"], token["correction_w_max"]) == pytest.approx((0.6, 2.0))
    assert token["correction_w_mean"] == pytest.approx(5.7 / 4)
    seq = finalize_stats(_correction_batch("tis-seq").stats)  # 1.8 and 2 (capped), one a sequence
    assert (seq["correction_w_min"], seq["correction_w_mean"], seq["correction_w_max"]) == pytest.approx(
        (1.8, 1.9, 2.0)
    )
    masked = finalize_stats(_correction_batch("mis-token").stats)  # 3 is outside [1/2, 2]: masked to 0
    assert (masked["correction_w_min"], masked["correction_w_max"]) == pytest.approx((0.0, 1.6))
    assert "correction_w_mean" not in finalize_stats(_correction_batch("none").stats)
    folded = merge_stats(
        merge_stats(empty_stats(), _correction_batch("tis-seq").stats), _correction_batch("tis-token").stats
    )
    assert (folded["correction_w_min"], folded["correction_w_max"]) == pytest.approx((0.6, 2.0))  # min and max


def test_mis_token_and_seq_masking_counts():
    out = _correction_batch("mis-token")
    # 3 lies outside [1/2, 2] -> masked; 0.6, 1.5, 1.6 kept -> -3.7
    assert out.loss.item() == pytest.approx(-3.7)
    assert out.stats["masked_units"] == 1.0 and out.stats["masked_tokens"] == 1.0
    out = _correction_batch("mis-seq")
    # row 0 (1.8) kept on both tokens -> -3.6 ; row 1 (2.4) masked: 1 sequence, 2 tokens
    assert out.loss.item() == pytest.approx(-3.6)
    assert out.stats["masked_units"] == 1.0 and out.stats["masked_tokens"] == 2.0
    assert finalize_stats(out.stats)["masked_fraction"] == pytest.approx(2 / 4)
    assert out.units == 4.0  # MIS does not change the units


def test_mis_masks_below_one_over_cap():
    prox = _t([[L(0.4), 0.0]])
    out = policy_loss(
        prox.clone(), torch.zeros(1, 2), _t([1.0]), torch.ones(1, 2), LossSpec(correction="mis-token"), prox
    )
    # 0.4 < 1/2 -> masked ; 1.0 kept -> -1
    assert out.loss.item() == pytest.approx(-1.0)
    assert out.stats["masked_units"] == 1.0


def test_off_policy_stats_hand_computed():
    s = _correction_batch("tis-seq").stats
    # raw token weights 3, 0.6, 1.5, 1.6 (before capping)
    assert s["is_weight_sum"] == pytest.approx(6.7)
    assert s["is_weight_sq_sum"] == pytest.approx(9 + 0.36 + 2.25 + 2.56)
    assert s["is_weight_max"] == pytest.approx(3.0)
    # sequence weights 1.8 and 2.4 (before capping): ESS = 4.2^2 / (2 * (3.24 + 5.76)) = 17.64 / 18 = 0.98
    assert s["seq_w_sum"] == pytest.approx(4.2) and s["seq_w_sq_sum"] == pytest.approx(9.0)
    means = finalize_stats(s)
    assert means["ess_ratio"] == pytest.approx(0.98)
    # |log 3| + |log 0.6| + |log 1.5| + |log 1.6| = log(3 * 1.5 * 1.6 / 0.6) = log 12, over 4 tokens
    assert means["logprob_gap"] == pytest.approx(L(12.0) / 4)
    assert means["logprob_gap_max"] == pytest.approx(L(3.0))  # the largest of the four: TRL's /max
    assert means["approx_kl"] == pytest.approx(0.0)  # current == proximal


# ---- KL and entropy ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "estimator, total",
    [
        # logp - ref = [0.5, -1.0]
        ("k1", 0.5 - 1.0),
        ("k2", 0.5 * 0.25 + 0.5 * 1.0),
        # x = ref - logp = [-0.5, 1.0]: (e^-0.5 + 0.5 - 1) + (e^1 - 1 - 1) = 0.106531 + 0.718282
        ("k3", (math.exp(-0.5) - 0.5) + (math.e - 2.0)),
    ],
)
def test_kl_estimators(estimator, total):
    logp, ref = _leaf([[-1.0, -2.0]]), _t([[-1.5, -1.0]])
    spec = LossSpec(kl_coef=0.1, kl_estimator=estimator)
    out = policy_loss(logp, logp.detach(), _t([0.0]), torch.ones(1, 2), spec, ref_logprobs=ref)  # A=0: KL only
    assert out.loss.item() == pytest.approx(0.1 * total)
    assert out.stats["kl_ref_sum"] == pytest.approx(total)
    if estimator == "k3":
        out.loss.backward()
        # d/dlogp [e^(ref-logp) - (ref-logp) - 1] = 1 - e^(ref-logp): 1 - e^-0.5, 1 - e^1
        assert logp.grad.tolist()[0] == pytest.approx([0.1 * (1 - math.exp(-0.5)), 0.1 * (1 - math.e)])


def test_kl_correction_weights_the_kl_by_the_sampling_policys_importance_ratio():
    """k3 weighted by r = pi / pi_behav (DeepSeek-V3.2's unbiased estimate), its gradient through r as well."""
    logp, behav, ref = _leaf([[-1.0, -2.0]]), _t([[-1.5, -2.0]]), _t([[-1.5, -1.0]])
    spec = LossSpec(kl_coef=0.1, kl_correction=True)
    out = policy_loss(logp, behav, _t([0.0]), torch.ones(1, 2), spec, ref_logprobs=ref)  # A=0: KL only
    k3 = [math.exp(-0.5) - 0.5, math.e - 2.0]  # as in test_kl_estimators
    r = [math.exp(0.5), 1.0]  # logp - behav = [0.5, 0]
    assert out.stats["kl_ref_sum"] == pytest.approx(r[0] * k3[0] + r[1] * k3[1])
    assert out.loss.item() == pytest.approx(0.1 * (r[0] * k3[0] + r[1] * k3[1]))
    out.loss.backward()
    # d/dlogp [r * k3] = r * k3 + r * (1 - e^(ref - logp))
    grads = [r[0] * (k3[0] + 1 - math.exp(-0.5)), r[1] * (k3[1] + 1 - math.e)]
    assert logp.grad.tolist()[0] == pytest.approx([0.1 * g for g in grads])
    plain = policy_loss(logp.detach(), behav, _t([0.0]), torch.ones(1, 2), LossSpec(kl_coef=0.1), ref_logprobs=ref)
    assert plain.stats["kl_ref_sum"] == pytest.approx(sum(k3))  # off: the plain estimate, whatever the sampler


def test_kl_and_entropy_need_their_inputs():
    x, a, m = torch.zeros(1, 2), torch.zeros(1), torch.ones(1, 2)
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(x, x, a, m, LossSpec(kl_coef=0.1))
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(x, x, a, m, LossSpec(entropy_coef=0.1))


def test_entropy_bonus():
    ent = _leaf([[0.5, 1.5, 7.0]])
    out = policy_loss(
        torch.zeros(1, 3), torch.zeros(1, 3), _t([0.0]), _t([[1, 1, 0]]), LossSpec(entropy_coef=0.01), entropy=ent
    )
    # -0.01 * (0.5 + 1.5); the padded 7.0 is ignored
    assert out.loss.item() == pytest.approx(-0.02)
    assert out.stats["entropy_sum"] == pytest.approx(2.0)
    assert out.stats["entropy_bonus_sum"] == pytest.approx(-0.02)  # all of this loss: its policy part (TRL's) is 0
    out.loss.backward()
    assert ent.grad.tolist()[0] == pytest.approx([-0.01, -0.01, 0.0])


def test_top_entropy_quantile_trains_only_the_high_entropy_tokens():
    # five response tokens (the last row's last position is padding with the highest entropy of all, ignored)
    ent = _t([[0.1, 2.0, 0.3], [1.5, 0.2, 9.0]])
    mask = _t([[1, 1, 1], [1, 1, 0]])
    logp = _leaf([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    spec = LossSpec(top_entropy_quantile=0.4, entropy_coef=0.01)  # the top 40 % of 5 tokens: 2.0 and 1.5
    out = policy_loss(logp, torch.zeros(2, 3), _t([1.0, -1.0]), mask, spec, entropy=ent)
    out.loss.backward()
    # ratio 1: d/dlogp of -A * r is -A on a kept token, 0 elsewhere; the bonus, on the kept tokens only
    assert logp.grad.tolist() == [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0]]
    assert out.loss.item() == pytest.approx(-1.0 + 1.0 - 0.01 * (2.0 + 1.5))
    assert out.loss.item() - out.stats["entropy_bonus_sum"] == pytest.approx(-1.0 + 1.0)  # TRL's policy_loss
    assert out.units == 5.0  # the dropped tokens still count, as in TRL
    by_sequence = dataclasses.replace(spec, agg="seq-mean-token-mean")
    per_sequence = policy_loss(logp.detach(), torch.zeros(2, 3), _t([1.0, -1.0]), mask, by_sequence, entropy=ent)
    assert per_sequence.stats["entropy_bonus_sum"] == pytest.approx(-0.01 * (2.0 / 3 + 1.5 / 2))  # each row's mean
    every = policy_loss(logp.detach(), torch.zeros(2, 3), _t([1.0, -1.0]), mask, LossSpec(top_entropy_quantile=1.0))
    assert every.loss.item() == pytest.approx(-3.0 + 2.0)
    top_one = policy_loss(
        logp.detach(), torch.zeros(2, 3), _t([1.0, -1.0]), mask, LossSpec(top_entropy_quantile=0.0), entropy=ent
    )
    assert top_one.loss.item() == pytest.approx(-1.0)  # 0: only the highest-entropy token (2.0, A = +1)
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(logp.detach(), torch.zeros(2, 3), _t([1.0, -1.0]), mask, LossSpec(top_entropy_quantile=0.5))


# ---- edge cases ----------------------------------------------------------------------------------------------


def test_all_equal_rewards_give_zero_loss_and_gradient():
    logp = _leaf([[-0.1, -3.0], [-2.0, -0.2]])  # far from behaviour: ratios are not 1
    out = policy_loss(logp, torch.full((2, 2), -1.0), _t([0.0, 0.0]), torch.ones(2, 2), LossSpec())
    assert out.loss.item() == 0.0
    out.loss.backward()
    assert logp.grad.abs().sum().item() == 0.0


def test_truncated_response_under_constant_length_norm():
    # row 0 ran to the length limit T=4, row 1 stopped after 2 tokens; ratio 1, A=1
    mask = _t([[1, 1, 1, 1], [1, 1, 0, 0]])
    logp = torch.zeros(2, 4)
    spec = LossSpec(agg="seq-mean-token-sum-norm", norm_len=4)
    out = policy_loss(logp, logp, _t([1.0, 1.0]), mask, spec)
    # Dr.GRPO: -4/4 and -2/4 (no per-sequence length division) -> sum -1.5 over 2 sequences
    assert out.loss.item() == pytest.approx(-1.5) and out.units == 2.0
    # token mean per sequence would instead give -1 and -1
    out = policy_loss(logp, logp, _t([1.0, 1.0]), mask, LossSpec(agg="seq-mean-token-mean"))
    assert out.loss.item() == pytest.approx(-2.0)


def test_spec_validation():
    with pytest.raises(ValueError, match="norm_len"):
        LossSpec(agg="seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="kind"):
        LossSpec(kind="trpo")
    with pytest.raises(ValueError, match="correction_cap"):
        LossSpec(correction="tis-token", correction_cap=0.5)


# ---- stats ---------------------------------------------------------------------------------------------------


def test_finalize_and_merge_stats():
    a = {
        "tokens": 3.0,
        "seqs": 1.0,
        "clipped_tokens": 1.0,
        "low_clipped_tokens": 1.0,
        "high_clipped_tokens": 0.0,
        "seq_low_clipped_min": 0.5,
        "seq_high_clipped_max": 0.0,
        "ratio_sum": 3.3,
        "approx_kl_sum": 0.03,
        "is_weight_sum": 3.0,
        "is_weight_sq_sum": 3.0,
        "is_weight_max": 1.0,
        "seq_w_sum": 1.0,
        "seq_w_sq_sum": 1.0,
        "masked_units": 0.0,
        "masked_tokens": 0.0,
        "opsm_masked_seqs": 0.0,
        "logprob_gap_abs_sum": 0.3,
        "logprob_gap_max": 0.2,
        "correction_w_sum": 0.0,
        "correction_w_units": 0.0,
        "correction_w_min": math.inf,
        "correction_w_max": 0.0,
        "kl_ref_sum": 0.6,
        "entropy_sum": 1.5,
    }
    b = {**a, "tokens": 1.0, "clipped_tokens": 0.0, "ratio_sum": 0.7, "is_weight_max": 3.0, "seq_w_sum": 3.0}
    b["low_clipped_tokens"], b["seq_low_clipped_min"] = 0.0, 0.0
    b["seq_w_sq_sum"], b["masked_tokens"], b["masked_units"], b["opsm_masked_seqs"] = 9.0, 1.0, 1.0, 1.0
    merged = merge_stats(merge_stats({}, a), b)
    assert merged["tokens"] == 4.0 and merged["seqs"] == 2.0
    assert merged["is_weight_max"] == 3.0  # max, not 1 + 3
    means = finalize_stats(merged)
    assert means["clip_fraction"] == pytest.approx(1 / 4)
    assert means["clip_low_fraction"] == pytest.approx(1 / 4)
    assert means["clip_low_seq_min"] == 0.0  # b's response had no lower-side token (min, not 0.5 + 0)
    assert means["ratio_mean"] == pytest.approx((3.3 + 0.7) / 4)
    assert means["approx_kl"] == pytest.approx(0.06 / 4)
    assert means["is_weight_mean"] == pytest.approx(6.0 / 4)
    assert means["is_weight_max"] == 3.0
    assert means["ess_ratio"] == pytest.approx((1 + 3) ** 2 / (2 * (1 + 9)))  # weights 1 and 3 -> 16 / 20
    assert means["masked_fraction"] == pytest.approx(1 / 4)
    assert means["opsm_masked_fraction"] == pytest.approx(1 / 2)  # of sequences
    assert means["logprob_gap"] == pytest.approx(0.6 / 4)
    assert means["logprob_gap_max"] == 0.2  # max, not 0.2 + 0.2
    assert means["kl_ref"] == pytest.approx(1.2 / 4)
    assert means["entropy"] == pytest.approx(3.0 / 4)


def test_stats_keys_are_the_fixed_set_and_empty_stats_start_the_fold():
    spec = LossSpec(kl_coef=0.1, entropy_coef=0.01)
    out = policy_loss(
        torch.zeros(2, 3),
        torch.zeros(2, 3),
        torch.tensor([1.0, -1.0]),
        torch.ones(2, 3),
        spec,
        ref_logprobs=torch.zeros(2, 3),
        entropy=torch.ones(2, 3),
    )
    assert tuple(out.stats) == STAT_KEYS  # ranks all-reduce the stats as one vector in this order
    assert merge_stats(empty_stats(), out.stats) == out.stats
