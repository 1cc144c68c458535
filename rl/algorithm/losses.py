"""Policy-gradient losses: PPO / GSPO clipped surrogates, CISPO's clipped weights and SAPO's soft gate, with
decoupled off-policy correction.

Three policies meet per token: the current one (``logprobs``, differentiated), the proximal one that anchors the
clip, and the behaviour one that sampled the response (e.g. vLLM's log-probs). Decoupled PPO (Hilton et al. 2021,
arXiv 2110.00641; papers.md §4.4) factors ``pi / pi_behav`` into the clipped ratio ``r = pi / pi_prox`` and the
detached correction weight ``w = pi_prox / pi_behav``, which is truncated (TIS) or masked (MIS) at ``correction_cap``.
Without a proximal policy, or with ``decoupled=False``, it is classic coupled PPO: ``r = pi / pi_behav`` and ``w = 1``;
the trainer's log-probs, when given, still feed the diagnostics (log-prob gap, importance weights, ESS).

Aggregation contract, for gradient accumulation over micro-batches and data-parallel ranks: ``LossOutput.loss`` is
the unnormalized sum over this call's units and ``LossOutput.units`` counts them; the caller backpropagates the sum
and divides the accumulated gradient by the global unit count, so ``loss / units`` is the mean of a single call.
Rows without masked tokens contribute nothing, neither to the sum nor to ``units``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from rl.algorithm.loss_names import Aggregation, Correction, KlEstimator, LossKind
from rl.algorithm.off_policy import ess_ratio, sequence_weights, token_weights

# Stats combined with max, and with min, (not a sum) across micro-batches and ranks.
MAX_STATS: frozenset[str] = frozenset({"is_weight_max", "seq_high_clipped_max", "logprob_gap_max", "correction_w_max"})
MIN_STATS: frozenset[str] = frozenset({"seq_low_clipped_min", "correction_w_min"})  # inf where nothing counted
# Every key of ``LossOutput.stats``: a fixed set, so ranks can all-reduce them as one vector.
STAT_KEYS: tuple[str, ...] = (
    "tokens",
    "seqs",
    "clipped_tokens",
    "low_clipped_tokens",
    "high_clipped_tokens",
    "seq_low_clipped_min",
    "seq_high_clipped_max",
    "ratio_sum",
    "approx_kl_sum",
    "is_weight_sum",
    "is_weight_sq_sum",
    "is_weight_max",
    "seq_w_sum",
    "seq_w_sq_sum",
    "masked_units",
    "masked_tokens",
    "opsm_masked_seqs",
    "logprob_gap_abs_sum",
    "logprob_gap_max",
    "correction_w_sum",
    "correction_w_units",
    "correction_w_min",
    "correction_w_max",
    "kl_ref_sum",
    "entropy_sum",
    "entropy_bonus_sum",  # the entropy bonus's part of the loss sum, in loss units (TRL's policy_loss leaves it out)
    "cispo_capped_tokens",  # cispo: tokens whose ratio is capped under a positive advantage (TRL's cispo_clip_ratio)
    "vespo_phi_sum",  # vespo: each token's sequence weight phi, summed (TRL's vespo/phi_seq_mean)
)


@dataclass(frozen=True)
class LossSpec:
    """What ``policy_loss`` computes.

    ``kind``: ``ppo`` (token ratio); ``gspo`` (sequence ratio, Zheng et al. 2025, arXiv 2507.18071; use small
    clips such as 3e-4 / 4e-4); ``cispo`` (MiniMax-M1, arXiv 2506.13585: the token ratio, capped at
    ``1 + clip_high`` and detached, weighs ``A * log pi``, so a capped token keeps its gradient; no lower bound, as
    in the paper: a weight raised to ``1 - clip_low`` would keep pushing down a token already made unlikely);
    ``sapo`` (Gao et al. 2025, arXiv 2511.20347: no clip; the token ratio passes a soft gate
    ``sigmoid(tau * (r - 1)) * 4 / tau`` whose slope, 1 at ``r = 1``, fades as ``r`` moves away; ``sapo_tau_pos`` /
    ``sapo_tau_neg`` for positive and other advantages); ``vespo`` (arXiv 2602.10693: no clip; each sequence's
    ``A * log pi`` weighed by a detached ``phi(w) = e^lam * w^k * e^(-lam w)`` of its whole-sequence ratio ``w``, 1 at
    ``w = 1`` and fading as ``w`` leaves it; ``vespo_k_pos`` / ``vespo_lambda_pos`` for advantages of at least 0,
    ``vespo_k_neg`` / ``vespo_lambda_neg`` for the others). ``clip_low`` / ``clip_high``: asymmetric clip range
    ``[1 - low, 1 + high]`` (clip-higher, DAPO arXiv 2503.14476). ``dual_clip`` (``ppo`` and ``gspo``): a token
    with a negative advantage loses at most ``dual_clip * |A|``, so a ratio far above 1 cannot blow its loss up
    (dual-clip PPO, Ye et al. 2020, arXiv 1912.09729; verl's ``clip_ratio_c``, TRL's ``delta``). ``off_policy_mask``:
    a sequence with a negative advantage whose mean ``log pi_behav - log pi`` exceeds it is no loss term (off-policy
    sequence masking, DeepSeek-V3.2, arXiv 2512.02556; TRL's ``off_policy_mask_threshold``). ``agg``:
    how tokens become units (see ``policy_loss``); ``seq-mean-token-sum`` with ``gspo`` is LUSPO (each sequence's
    loss scaled by its length, arXiv 2602.05261; TRL's ``loss_type="luspo"``); ``norm_len`` is the constant divisor
    of ``seq-mean-token-sum-norm`` (Dr.GRPO, arXiv 2503.20783). ``kl_coef`` / ``kl_estimator``: penalty on
    KL(current || ref) with Schulman's k1/k2/k3 estimators; ``kl_correction`` weights it by ``pi / pi_behav``, the
    importance ratio of the sampling policy, which makes it an estimate of the current policy's KL (DeepSeek-V3.2,
    arXiv 2512.02556; TRL's ``use_bias_correction_kl``). ``entropy_coef``: entropy bonus. ``top_entropy_quantile``:
    below 1, only the tokens whose entropy is at least the call's ``1 - top_entropy_quantile`` quantile (over its
    masked tokens) carry the surrogate and the bonus (Wang et al. 2025, arXiv 2506.01939; TRL's
    ``top_entropy_quantile``); the KL term and the units keep every token, as in TRL.
    ``correction`` / ``correction_cap``: behaviour correction, token or sequence level, truncated (tis) or masked
    outside ``[1/cap, cap]`` (mis). ``decoupled``: use ``proximal_logprobs`` as the clip anchor when given.
    """

    kind: LossKind = "ppo"
    clip_low: float = 0.2
    clip_high: float = 0.28
    agg: Aggregation = "token-mean"
    norm_len: int | None = None
    kl_coef: float = 0.0
    kl_estimator: KlEstimator = "k3"
    kl_correction: bool = False
    entropy_coef: float = 0.0
    top_entropy_quantile: float = 1.0
    correction: Correction = "none"
    correction_cap: float = 2.0
    decoupled: bool = True
    dual_clip: float | None = None
    off_policy_mask: float | None = None
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0

    def __post_init__(self) -> None:
        _one_of("kind", self.kind, get_args(LossKind))
        _one_of("agg", self.agg, get_args(Aggregation))
        _one_of("kl_estimator", self.kl_estimator, get_args(KlEstimator))
        _one_of("correction", self.correction, get_args(Correction))
        if not (0.0 <= self.clip_low < 1.0) or self.clip_high < 0.0:
            raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {self.clip_low}, {self.clip_high}")
        if self.agg == "seq-mean-token-sum-norm" and (self.norm_len is None or self.norm_len <= 0):
            raise ValueError("agg 'seq-mean-token-sum-norm' needs a positive norm_len")
        if self.correction != "none" and not self.decoupled:
            raise ValueError(f"correction {self.correction!r} weights by pi_prox / pi_behav: it needs decoupled=True")
        if not 0.0 <= self.top_entropy_quantile <= 1.0:
            raise ValueError(f"top_entropy_quantile must be in [0, 1], got {self.top_entropy_quantile}")
        if self.correction_cap < 1.0:
            raise ValueError(f"correction_cap must be >= 1, got {self.correction_cap}")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be above 1, got {self.dual_clip}")
        if self.sapo_tau_pos <= 0 or self.sapo_tau_neg <= 0:
            raise ValueError(f"SAPO's temperatures must be > 0, got {self.sapo_tau_pos}, {self.sapo_tau_neg}")
        if min(self.vespo_k_pos, self.vespo_k_neg, self.vespo_lambda_pos, self.vespo_lambda_neg) <= 0:
            raise ValueError("VESPO's k and lambda must be > 0")


@dataclass
class LossOutput:
    loss: torch.Tensor  # unnormalized sum over this call's units: backpropagate, then divide grads by global units
    units: float  # how many units (tokens or sequences, per ``LossSpec.agg``) this call contributed
    stats: dict[str, float]  # additive sums (``MAX_STATS`` combine with max); turn into means with finalize_stats


def policy_loss(
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    spec: LossSpec,
    proximal_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> LossOutput:
    """The clipped policy-gradient loss of one micro-batch as an unnormalized sum over units.

    Shapes: ``[B, T]`` for log-probs, ``mask`` and ``entropy``; ``[B]`` for advantages. Per token the loss is
    ``-w * min(r * A, clip(r) * A) + kl_coef * KL - entropy_coef * entropy`` (CISPO's surrogate:
    ``-w * sg(min(r, 1 + clip_high)) * A * log pi``; SAPO's: ``-w * gate(r) * A``); the weight ``w`` applies to
    the surrogate only. Units: ``token-mean`` sums tokens (units = masked tokens); ``seq-mean-token-mean`` sums each
    sequence's token mean; ``seq-mean-token-sum`` each sequence's token sum; ``seq-mean-token-sum-norm`` each
    sequence's token sum over ``norm_len``; the sequence modes count sequences with at least one masked token.
    Values at unmasked positions are ignored.
    """
    if spec.kl_coef > 0 and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs")
    if (spec.entropy_coef > 0 or spec.top_entropy_quantile < 1) and entropy is None:
        raise ValueError("entropy_coef > 0 and top_entropy_quantile < 1 need entropy")
    m = mask.bool()
    # Padding may hold anything (even inf): zero it so neither the loss nor the gradient sees it.
    dtype = torch.promote_types(logprobs.dtype, torch.float32)  # at least float32 for the arithmetic
    logp = torch.where(m, logprobs, 0.0).to(dtype)
    behav = torch.where(m, behaviour_logprobs.detach(), 0.0).to(dtype)
    # the trainer's log-probs of the sampled tokens: the clip anchor when decoupled, diagnostics either way
    trainer = torch.where(m, proximal_logprobs.detach(), 0.0).to(dtype) if proximal_logprobs is not None else behav
    decoupled = spec.decoupled and proximal_logprobs is not None
    prox = trainer if decoupled else behav
    adv = advantages.detach().to(dtype).unsqueeze(-1)
    n_tok = m.sum(-1)
    has = n_tok > 0

    w_tok = token_weights(trainer, behav)
    w_seq = sequence_weights(trainer, behav, m)
    weight, masked_tokens, masked_units = _correction(spec, w_tok, w_seq, m)  # correction is "none" when coupled
    applied = _applied_weights(spec, weight, m, n_tok > 0)  # TRL's importance_sampling_ratio: per token or sequence
    opsm = _off_policy_masked(spec, logp, behav, advantages, m, n_tok)
    weight = torch.where(opsm.unsqueeze(-1), 0.0, weight)
    high_entropy = _high_entropy(spec, entropy, m)

    log_ratio = logp - prox
    if spec.kind != "gspo":
        ratio = torch.exp(log_ratio)
    else:  # GSPO-token: value of the sequence ratio, gradient of each token's own log-prob
        seq_log_ratio = log_ratio.sum(-1) / n_tok.clamp(min=1)
        ratio = torch.exp(seq_log_ratio.detach().unsqueeze(-1) + logp - logp.detach())
    phi = torch.zeros_like(ratio)  # vespo's sequence weights, per token
    if spec.kind == "cispo":  # the capped ratio is a detached weight: every token keeps a gradient
        capped = ratio.detach().clamp(max=1.0 + spec.clip_high)
        surrogate = capped * adv * logp
        was_clipped = capped != ratio.detach()
    elif spec.kind == "sapo":  # a soft trust region: nothing is clipped
        tau = torch.where(adv > 0, adv.new_tensor(spec.sapo_tau_pos), adv.new_tensor(spec.sapo_tau_neg))
        surrogate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau) * adv
        was_clipped = torch.zeros_like(m)
    elif spec.kind == "vespo":  # a detached weight of the whole sequence's ratio: every token keeps a gradient
        phi = _vespo_weight(spec, log_ratio.detach(), adv, m).expand_as(ratio)
        surrogate = phi * adv * logp
        was_clipped = torch.zeros_like(m)
    else:  # the pessimistic bound: a token whose clipped side is the minimum has no gradient
        unclipped = ratio * adv
        clipped = ratio.clamp(1.0 - spec.clip_low, 1.0 + spec.clip_high) * adv
        surrogate = torch.minimum(unclipped, clipped)
        was_clipped = clipped.detach() < unclipped.detach()
        if spec.dual_clip is not None:  # a negative advantage's loss stops at dual_clip * |A|
            floor = spec.dual_clip * adv
            dual = (adv < 0) & (surrogate.detach() < floor)
            surrogate = torch.where(dual, floor, surrogate)
            was_clipped = was_clipped | dual
    low_clipped, high_clipped = _clipped_sides(spec, ratio.detach(), adv, m)
    per_token = -weight.to(dtype) * surrogate
    if high_entropy is not None:
        per_token = torch.where(high_entropy, per_token, 0.0)

    kl = None
    if ref_logprobs is not None:
        kl = _kl(spec.kl_estimator, logp, torch.where(m, ref_logprobs.detach(), 0.0).to(dtype))
        if spec.kl_correction:  # gradient through the weight too: the gradient of the corrected estimate is KL's
            kl = torch.exp(logp - behav) * kl
        if spec.kl_coef > 0:
            per_token = per_token + spec.kl_coef * kl
    ent = torch.where(m, entropy, 0.0).to(dtype) if entropy is not None else None
    bonus = torch.zeros_like(per_token)
    if spec.entropy_coef > 0:
        bonus = spec.entropy_coef * (ent if high_entropy is None else torch.where(high_entropy, ent, 0.0))
        per_token = per_token - bonus
    per_token = torch.where(m, per_token, 0.0)
    loss, units = _aggregated(spec, per_token, n_tok, has)

    with torch.no_grad():
        fm = m.double()
        w_tok_m = torch.where(m, w_tok, 0.0)
        w_seq_h = torch.where(has, w_seq, 0.0)
        ratio_d, log_ratio_d = ratio.detach().double(), log_ratio.detach().double()
        gap = (trainer.double() - behav.double()).abs()
        values = {
            "tokens": fm.sum(),
            "seqs": has.double().sum(),
            "clipped_tokens": (was_clipped & m).double().sum(),
            "low_clipped_tokens": low_clipped.double().sum(),
            "high_clipped_tokens": high_clipped.double().sum(),
            "seq_low_clipped_min": _seq_min(_seq_share(low_clipped, n_tok), has),
            "seq_high_clipped_max": _seq_max(_seq_share(high_clipped, n_tok), has),
            "ratio_sum": (ratio_d * fm).sum(),
            "approx_kl_sum": ((torch.exp(log_ratio_d) - 1.0 - log_ratio_d) * fm).sum(),
            "is_weight_sum": w_tok_m.sum(),
            "is_weight_sq_sum": (w_tok_m * w_tok_m).sum(),
            "is_weight_max": w_tok_m.max() if w_tok_m.numel() else fm.new_zeros(()),
            "seq_w_sum": w_seq_h.sum(),
            "seq_w_sq_sum": (w_seq_h * w_seq_h).sum(),
            "masked_units": masked_units.double(),
            "masked_tokens": masked_tokens.double(),
            "opsm_masked_seqs": opsm.double().sum(),
            "logprob_gap_abs_sum": (gap * fm).sum(),
            "logprob_gap_max": (gap * fm).max() if gap.numel() else fm.new_zeros(()),
            "correction_w_sum": applied.double().sum(),
            "correction_w_units": fm.new_tensor(float(applied.numel())),
            "correction_w_min": applied.double().min() if applied.numel() else fm.new_tensor(math.inf),
            "correction_w_max": applied.double().max() if applied.numel() else fm.new_zeros(()),
            "kl_ref_sum": (kl.detach().double() * fm).sum() if kl is not None else fm.new_zeros(()),
            "entropy_sum": (ent.detach().double() * fm).sum() if ent is not None else fm.new_zeros(()),
            "entropy_bonus_sum": -_aggregated(spec, torch.where(m, bonus.detach(), 0.0), n_tok, has)[0].double(),
            "cispo_capped_tokens": (was_clipped & (adv > 0) & m).double().sum()
            if spec.kind == "cispo"
            else fm.new_zeros(()),
            "vespo_phi_sum": (phi.detach().double() * fm).sum(),
            "units": units.double(),
        }
        flat = torch.stack(list(values.values())).tolist()
    stats = dict(zip(values, flat, strict=True))
    units = stats.pop("units")
    return LossOutput(loss=loss, units=units, stats=stats)


def _aggregated(
    spec: LossSpec, per_token: torch.Tensor, n_tok: torch.Tensor, has: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A masked per-token term summed over ``spec.agg``'s units, and the units."""
    if spec.agg == "token-mean":
        return per_token.sum(), n_tok.sum()
    if spec.agg == "seq-mean-token-mean":
        return (per_token.sum(-1) / n_tok.clamp(min=1)).sum(), has.sum()
    if spec.agg == "seq-mean-token-sum":
        return per_token.sum(), has.sum()
    return per_token.sum() / spec.norm_len, has.sum()


def empty_stats() -> dict[str, float]:
    """The start of a fold with ``merge_stats``: sums at zero, ``MAX_STATS`` at zero (every such value is >= 0, so 0
    is a safe max), ``MIN_STATS`` at infinity."""
    return {k: math.inf if k in MIN_STATS else 0.0 for k in STAT_KEYS}


def combined_by(key: str) -> Literal["sum", "max", "min"]:
    """How a stat combines across micro-batches and ranks: ``MAX_STATS`` by max, ``MIN_STATS`` by min, the rest
    (and the loss's units and sum) by sum."""
    return "max" if key in MAX_STATS else "min" if key in MIN_STATS else "sum"


def merge_stats(total: dict[str, float], new: dict[str, float]) -> dict[str, float]:
    """Combine two stats dicts as ``combined_by`` says; an empty ``total`` starts the fold."""

    def merged(k: str, v: float) -> float:
        kind = combined_by(k)
        if kind == "sum":
            return total.get(k, 0.0) + v
        return (max if kind == "max" else min)(total.get(k, v), v)

    return {k: merged(k, v) for k, v in new.items()}


def finalize_stats(sums: dict[str, float]) -> dict[str, float]:
    """Turn summed stats (of one call, or merged over micro-batches and ranks) into per-token means.

    ``ess_ratio`` is over sequences (VCPO); ``is_weight_*`` are raw token weights ``pi_prox / pi_behav`` before
    capping; ``masked_fraction`` is the fraction of tokens that MIS removed from the surrogate,
    ``opsm_masked_fraction`` the fraction of sequences that off-policy sequence masking removed.
    """
    tokens = sums["tokens"]

    def per_token(key: str) -> float:
        return sums[key] / tokens if tokens > 0 else 0.0

    return {
        "clip_fraction": per_token("clipped_tokens"),
        "clip_low_fraction": per_token("low_clipped_tokens"),
        "clip_high_fraction": per_token("high_clipped_tokens"),
        "clip_low_seq_min": _finite(sums["seq_low_clipped_min"]),
        "clip_high_seq_max": sums["seq_high_clipped_max"],
        "ratio_mean": per_token("ratio_sum"),
        "approx_kl": per_token("approx_kl_sum"),
        "is_weight_mean": per_token("is_weight_sum"),
        "is_weight_max": sums["is_weight_max"],
        "ess_ratio": ess_ratio(sums["seq_w_sum"], sums["seq_w_sq_sum"], sums["seqs"]),
        "masked_fraction": per_token("masked_tokens"),
        "opsm_masked_fraction": sums["opsm_masked_seqs"] / sums["seqs"] if sums["seqs"] > 0 else 0.0,
        "logprob_gap": per_token("logprob_gap_abs_sum"),
        "logprob_gap_max": sums["logprob_gap_max"],
        "kl_ref": per_token("kl_ref_sum"),
        "entropy": per_token("entropy_sum"),
        **_correction_weights(sums),
    }


def kind_metrics(kind: str, sums: dict[str, float]) -> dict[str, float]:
    """What TRL logs for ``kind``'s loss alone, per token: ``cispo_clip_ratio`` (the share of tokens whose ratio CISPO
    capped under a positive advantage) and ``vespo/phi_seq_mean`` (VESPO's sequence weight, token-weighted)."""
    tokens = max(sums["tokens"], 1.0)
    if kind == "cispo":
        return {"cispo_clip_ratio": sums["cispo_capped_tokens"] / tokens}
    if kind == "vespo":
        return {"vespo/phi_seq_mean": sums["vespo_phi_sum"] / tokens}
    return {}


def _finite(value: float) -> float:
    """A ``MIN_STATS`` value, 0 where nothing was counted."""
    return value if math.isfinite(value) else 0.0


def _correction_weights(sums: dict[str, float]) -> dict[str, float]:
    """The correction's applied weights (after the cap or the mask), per token or per sequence as it weighs them:
    mean, least and most; none without a correction."""
    units = sums["correction_w_units"]
    if units == 0:
        return {}
    mean = sums["correction_w_sum"] / units
    return {
        "correction_w_mean": mean,
        "correction_w_min": _finite(sums["correction_w_min"]),
        "correction_w_max": sums["correction_w_max"],
    }


def _correction(
    spec: LossSpec, w_tok: torch.Tensor, w_seq: torch.Tensor, m: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token correction weight (float64), tokens masked by MIS, units masked by MIS (tokens or sequences)."""
    none = m.new_zeros((), dtype=torch.long)
    if spec.correction == "none":
        return torch.ones_like(w_tok), none, none
    seq_level = spec.correction.endswith("-seq")
    w = w_seq.unsqueeze(-1).expand_as(w_tok) if seq_level else w_tok
    cap = spec.correction_cap
    if spec.correction.startswith("tis"):
        return w.clamp(max=cap), none, none
    keep = (w >= 1.0 / cap) & (w <= cap)
    rejected = ~keep & m
    masked_tokens = rejected.sum()
    masked_units = rejected.any(-1).sum() if seq_level else masked_tokens
    return torch.where(keep, w, 0.0), masked_tokens, masked_units


def _high_entropy(spec: LossSpec, entropy: torch.Tensor | None, m: torch.Tensor) -> torch.Tensor | None:
    """Per token, whether its entropy is at least the ``1 - top_entropy_quantile`` quantile of the masked tokens'
    (None: every token counts, ``top_entropy_quantile`` 1)."""
    if spec.top_entropy_quantile >= 1.0 or entropy is None:
        return None
    if not m.any():
        return m
    ent = entropy.detach().float()
    return (ent >= torch.quantile(ent[m], 1.0 - spec.top_entropy_quantile)) & m


def _clipped_sides(
    spec: LossSpec, ratio: torch.Tensor, adv: torch.Tensor, m: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token, whether the clip's lower side (a negative advantage, the ratio below ``1 - clip_low``) or its upper
    side (a positive advantage, above ``1 + clip_high``) holds it: the tokens TRL counts as ``clip_ratio/low_*`` and
    ``high_*``. Only ``ppo`` and ``gspo`` clip so; other kinds have neither."""
    if spec.kind not in ("ppo", "gspo"):
        return torch.zeros_like(m), torch.zeros_like(m)
    low = (ratio < 1.0 - spec.clip_low) & (adv < 0) & m
    high = (ratio > 1.0 + spec.clip_high) & (adv > 0) & m
    return low, high


def _seq_share(flags: torch.Tensor, n_tok: torch.Tensor) -> torch.Tensor:
    """Per row, the share of its masked tokens that ``flags`` marks (0 for a row without any)."""
    return flags.double().sum(-1) / n_tok.clamp(min=1)


def _seq_max(values: torch.Tensor, has: torch.Tensor) -> torch.Tensor:
    """The largest of ``values`` over rows with masked tokens (0 when there are none: every value here is >= 0)."""
    return torch.where(has, values, 0.0).max() if values.numel() else values.new_zeros(())


def _seq_min(values: torch.Tensor, has: torch.Tensor) -> torch.Tensor:
    """The least of ``values`` over rows with masked tokens (infinity when there are none)."""
    return torch.where(has, values, math.inf).min() if values.numel() else values.new_tensor(math.inf)


def _applied_weights(spec: LossSpec, weight: torch.Tensor, m: torch.Tensor, has: torch.Tensor) -> torch.Tensor:
    """The correction's weights as applied, flat: one per masked token (token modes) or per sequence with tokens
    (sequence modes); empty without a correction."""
    if spec.correction == "none":
        return weight.new_zeros(0)
    if spec.correction.endswith("-seq"):
        return weight[:, 0][has] if weight.numel() else weight.new_zeros(0)
    return weight[m]


def _off_policy_masked(
    spec: LossSpec,
    logp: torch.Tensor,
    behav: torch.Tensor,
    advantages: torch.Tensor,
    m: torch.Tensor,
    n_tok: torch.Tensor,
) -> torch.Tensor:
    """Per sequence, whether off-policy sequence masking drops it: a negative advantage and a mean
    ``log pi_behav - log pi`` over its tokens above ``spec.off_policy_mask`` (all False without the setting)."""
    if spec.off_policy_mask is None:
        return torch.zeros_like(n_tok, dtype=torch.bool)
    seq_kl = torch.where(m, behav - logp.detach(), 0.0).sum(-1) / n_tok.clamp(min=1)
    return (advantages.detach() < 0) & (seq_kl > spec.off_policy_mask) & (n_tok > 0)


def _vespo_weight(spec: LossSpec, log_ratio: torch.Tensor, adv: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``phi(w) = exp(lam + k log w - lam w)`` per sequence (``[B, 1]``), ``w`` the product of its tokens' ratios
    (log-ratios clamped to +-20, ``log w`` to [log 1e-8, 20] as the paper's code does); 0 where it overflows."""
    log_w = torch.where(m, log_ratio.clamp(-20.0, 20.0), 0.0).sum(-1, keepdim=True).clamp(math.log(1e-8), 20.0)
    positive = adv >= 0
    k = torch.where(positive, adv.new_tensor(spec.vespo_k_pos), adv.new_tensor(spec.vespo_k_neg))
    lam = torch.where(positive, adv.new_tensor(spec.vespo_lambda_pos), adv.new_tensor(spec.vespo_lambda_neg))
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def _kl(estimator: str, logp: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(current || ref) from tokens sampled by the current policy (Schulman 2020)."""
    log_rho = ref - logp
    if estimator == "k1":
        return -log_rho
    if estimator == "k2":
        return 0.5 * log_rho * log_rho
    return torch.exp(log_rho) - log_rho - 1.0


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; expected one of {', '.join(allowed)}")
