"""Build a shaping policy by name: ``plain``, ``darts``, ``sart`` or ``darts+sart`` (and its options from a run
config, ``shaping_options``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rl.shaping.compose import DartsSartPolicy
from rl.shaping.darts import DartsPolicy
from rl.shaping.plain import PlainPolicy
from rl.shaping.policy import ShapingPolicy
from rl.shaping.sart import SartPolicy
from rl.shaping.scorers import ExternalScorer, RepetitionScorer, Scorer

if TYPE_CHECKING:
    from rl.config import RunConfig

POLICIES = ("plain", "darts", "sart", "darts+sart")
PRUNING_OPTIONS = ("scorer", "alpha", "beta")


def make_scorer(scorer: Scorer | str | None) -> Scorer | None:
    """A scorer instance as is, ``"repetition"`` for the built-in one, ``"external"`` for scores given with
    the samples (a scorer worker's), ``None``/``"none"`` for no pruning."""
    if scorer is None or scorer == "none":
        return None
    if scorer == "repetition":
        return RepetitionScorer()
    if scorer == "external":
        return ExternalScorer()
    if isinstance(scorer, str):
        raise ValueError(f"unknown scorer {scorer!r}; built in: 'repetition', 'external', 'none'")
    return scorer


def make_policy(name: str, m_keep: int, **options: Any) -> ShapingPolicy:
    """The named policy keeping ``m_keep`` samples per prompt.

    ``options`` go to the policy's constructor (``DartsPolicy``, ``SartPolicy``); for ``darts+sart``
    ``scorer``, ``alpha`` and ``beta`` configure pruning and the rest DARTS. The scorer defaults to the
    built-in repetition scorer; ``scorer="none"`` keeps SART's early stop without pruning.
    """
    if name == "plain":
        if options:
            raise TypeError(f"plain takes no options, got {sorted(options)}")
        return PlainPolicy(m_keep)
    if name == "darts":
        return DartsPolicy(m_keep, **options)
    scorer = make_scorer(options.pop("scorer", "repetition"))
    if name == "sart":
        return SartPolicy(m_keep, scorer=scorer, **options)
    if name == "darts+sart":
        if scorer is None:
            raise ValueError("darts+sart needs a scorer; use 'darts' for no pruning")
        pruning = {k: options.pop(k) for k in PRUNING_OPTIONS[1:] if k in options}
        return DartsSartPolicy(DartsPolicy(m_keep, **options), scorer, **pruning)
    raise ValueError(f"unknown shaping policy {name!r}; choose one of {', '.join(POLICIES)}")


def shaping_options(cfg: RunConfig) -> dict[str, Any]:
    """Constructor options for ``make_policy`` from a run config (shared by training and the rollout bench)."""
    s = cfg.shaping
    options: dict[str, Any] = {"m_keep": s.m_keep}
    if s.policy in ("darts", "darts+sart"):
        options.update(
            avg_redundancy=s.avg_redundancy,
            n_min=round(s.min_redundancy * s.m_keep),
            n_max=round(s.max_redundancy * s.m_keep),
            long_slots=s.long_slots,
            warmup_steps=s.warmup_steps,
            max_tokens=cfg.rollout.max_tokens,
            priority=s.priority,
            tie_beta=s.tie_beta,
            long_wait=s.long_wait,
            spare_gate=s.spare_gate,
        )
    if s.policy in ("sart", "darts+sart"):
        options.update(alpha=s.alpha, beta=s.beta, scorer="external" if s.scorer_worker else s.scorer)
    if s.policy == "sart":
        options["redundancy"] = s.avg_redundancy
    return options
