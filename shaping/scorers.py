"""Scorers that rate a partial response for SART-style pruning (higher is better).

A scorer is anything with ``score(prompt, partial_text) -> float | None``. ``RepetitionScorer`` is the
cheap built-in one. A model scorer runs in a separate worker (``rl.rollout.scorer_worker``): the rollout
side scores a group's texts there in one batched call and hands the scores to the controller with the
samples (``RunningSample.score``), whose scorer is then an ``ExternalScorer``.
"""

from __future__ import annotations

from typing import Protocol


class Scorer(Protocol):
    """Rates a partial response to ``prompt``; pruning compares these scores with thresholds.

    ``None`` means no score: the sample is not pruned on it. ``absolute``: whether a score is a test on a fixed scale
    (a loop detector) rather than a rating of quality. SART's phase 2 takes a completed sample's score as the bar
    for the running ones; an absolute score is no such bar (a short answer scores 1 for lack of loops, not for
    being good), so an absolute scorer's phase 2 keeps the threshold ``alpha``.
    """

    absolute: bool

    def score(self, prompt: str, partial_text: str) -> float | None: ...


class ExternalScorer:
    """Scores come with the samples, computed outside the controller (a scorer worker); none of its own. A model's
    scores rate quality: a completed sample's is SART's phase-2 bar."""

    absolute = False

    def score(self, prompt: str, partial_text: str) -> float | None:
        return None


class RepetitionScorer:
    """Distinct word n-gram ratio over the last ``window`` words, in [0, 1]; 1 means no repetition.

    Degenerate loops, the commonest way a sample runs into the length cap, drive it towards 0. Texts
    with fewer than ``ngram + 1`` words score 1 (no evidence yet). With ``length_budget`` set, a text
    longer than that many words is scaled by ``length_budget / words``. Absolute: it tells loops from text, not good
    answers from poor ones (measured on SmolLM2's arith samples at 512 tokens, benchmarks/README.md: of the samples
    still running at 128 tokens, those that went on to finish show a repeated 4-gram as often as those that ran to
    the cap), so a completed answer's score is no bar for the others.
    """

    absolute = True

    def __init__(self, ngram: int = 4, window: int = 200, length_budget: int | None = None) -> None:
        if ngram < 1 or window < ngram:
            raise ValueError(f"need 1 <= ngram <= window, got ngram={ngram}, window={window}")
        self.ngram = ngram
        self.window = window
        self.length_budget = length_budget

    def score(self, prompt: str, partial_text: str) -> float:
        words = partial_text.split()
        tail = words[-self.window :]
        grams = [tuple(tail[i : i + self.ngram]) for i in range(len(tail) - self.ngram + 1)]
        ratio = len(set(grams)) / len(grams) if len(grams) >= 2 else 1.0
        if self.length_budget is not None and len(words) > self.length_budget:
            ratio *= self.length_budget / len(words)
        return ratio
