"""Build a shaping policy by name: ``plain``, ``darts``, ``sart`` or ``darts+sart``."""

from __future__ import annotations

from typing import Any

from rl.shaping.compose import DartsSartPolicy
from rl.shaping.darts import DartsPolicy
from rl.shaping.plain import PlainPolicy
from rl.shaping.policy import ShapingPolicy
from rl.shaping.sart import SartPolicy
from rl.shaping.scorers import ExternalScorer, RepetitionScorer, Scorer

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
