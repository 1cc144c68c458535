"""Per-prompt response-length statistics: DARTS's EMA of the length std and TIE's log-t length model.

Both are learned from a prompt's own history (the lengths ``ShapingPolicy.observe`` is fed), so an
unseen prompt falls back to the average over the prompts seen so far.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import integrate
from scipy import stats as sps

POOLED_HISTORY = 512  # lengths of all prompts kept for unseen prompts' windows
NU = 3.5  # TIE fixes the degrees of freedom at 3.5 (papers.md §3.2)


@dataclass(frozen=True)
class LogT:
    """Log-t length distribution: ``ln X ~ mu + sigma * T_nu`` (TIE, papers.md §3.2).

    A log-t has no finite mean, so every moment here is of the censored length ``min(X, cap)``, where
    ``cap`` is the generation limit (max_tokens), as TIE censors at ``x_max``.
    """

    mu: float
    sigma: float
    nu: float = NU

    def cdf(self, x: ArrayLike) -> np.ndarray:
        """P(X <= x) of the uncensored distribution."""
        x = np.asarray(x, dtype=float)
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(x, 0.0)) - self.mu) / self.sigma
        return sps.t.cdf(z, self.nu)

    def tail_prob(self, cap: float) -> float:
        """P(X > cap): the chance a response is truncated at ``cap``."""
        return float(sps.t.sf((np.log(cap) - self.mu) / self.sigma, self.nu))

    def quantile(self, q: ArrayLike, cap: float | None = None) -> np.ndarray:
        """Quantile of X (of ``min(X, cap)`` when ``cap`` is given)."""
        x = np.exp(self.mu + self.sigma * sps.t.ppf(q, self.nu))
        return x if cap is None else np.minimum(x, cap)

    def sample(self, rng: np.random.Generator, size: int | tuple[int, ...], cap: float | None = None) -> np.ndarray:
        """Draw lengths (censored at ``cap`` when given)."""
        x = np.exp(self.mu + self.sigma * rng.standard_t(self.nu, size=size))
        return x if cap is None else np.minimum(x, cap)

    def mean(self, cap: float) -> float:
        """E[min(X, cap)]."""
        t_cap = (np.log(cap) - self.mu) / self.sigma
        return self._head(-np.inf, t_cap) + cap * float(sps.t.sf(t_cap, self.nu))

    def cvar(self, cap: float, alpha: float = 0.9) -> float:
        """CVaR_alpha of min(X, cap): the mean of its worst (longest) ``1 - alpha`` fraction."""
        t_cap = (np.log(cap) - self.mu) / self.sigma
        t_alpha = float(sps.t.ppf(alpha, self.nu))
        if t_alpha >= t_cap:
            return float(cap)
        return (self._head(t_alpha, t_cap) + cap * float(sps.t.sf(t_cap, self.nu))) / (1.0 - alpha)

    def tie(self, cap: float, beta: float, alpha: float = 0.9) -> float:
        """Tail Inflated Expectation ``E[X~] + beta * CVaR_alpha[X~]`` with ``X~ = min(X, cap)`` (§3.3).

        TIE estimates both terms from 10,000 Monte-Carlo draws; we integrate them numerically instead
        (the same quantities, without sampling noise). TIE's anti-starvation aging factor belongs to a
        waiting queue, not to a length model, and is left out.
        """
        return self.mean(cap) + beta * self.cvar(cap, alpha)

    def _head(self, lo: float, hi: float) -> float:
        """Integral of exp(mu + sigma t) over t in [lo, hi] under the t_nu density."""
        value, _ = integrate.quad(lambda t: np.exp(self.sigma * t) * sps.t.pdf(t, self.nu), lo, hi, limit=200)
        return float(np.exp(self.mu) * value)


def tie_beta(queue_len: int, max_batch: int) -> float:
    """TIE's load-dependent tail weight ``min(0.5, max(0.1, 0.1 * L_q / B))`` (papers.md §3.3)."""
    return min(0.5, max(0.1, 0.1 * queue_len / max_batch))


def fit_log_t(lengths: ArrayLike, nu: float = NU, min_sigma: float = 0.05, iters: int = 200) -> LogT:
    """Maximum-likelihood (mu, sigma) of a log-t with fixed ``nu`` for the given lengths.

    Uses the EM iteration for a Student-t location/scale with known degrees of freedom (reweight each
    point by ``(nu + 1) / (nu + z^2)``), which converges to the same MLE as
    ``scipy.stats.t.fit(log_lengths, fix_df=nu)`` in microseconds. Lengths below 1 count as 1 (log 0 is
    undefined); ``sigma`` is floored at ``min_sigma`` so identical lengths still give a proper law.
    """
    x = np.log(np.maximum(np.asarray(lengths, dtype=float), 1.0))
    if x.size == 0:
        raise ValueError("fit_log_t needs at least one length")
    mu = float(np.median(x))
    var = max(float(np.mean((x - mu) ** 2)), min_sigma**2)
    for _ in range(iters):
        w = (nu + 1.0) / (nu + (x - mu) ** 2 / var)
        new_mu = float(np.sum(w * x) / np.sum(w))
        new_var = max(float(np.mean(w * (x - new_mu) ** 2)), min_sigma**2)
        converged = abs(new_mu - mu) < 1e-10 and abs(new_var - var) < 1e-10 * var
        mu, var = new_mu, new_var
        if converged:
            break
    return LogT(mu=mu, sigma=float(np.sqrt(var)), nu=nu)


class LengthStats:
    """Length history per prompt id: EMA of the length std (DARTS) and a log-t fit (TIE).

    ``observe`` takes the lengths of one finished group. The std is the unbiased sample std of those
    lengths, smoothed per prompt as ``s <- alpha * s_new + (1 - alpha) * s`` (the first observation is
    taken as is), as in DARTS's ``VarienceFilter``. The log-t is fitted on the prompt's last
    ``history`` lengths when it is read (``log_t``; only a TIE priority reads it), so a policy that never reads
    it pays no fit per group. Groups with fewer than two lengths carry no spread and are ignored.
    """

    def __init__(self, alpha: float = 0.3, history: int = 64, nu: float = NU) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.history = history
        self.nu = nu
        self._std: dict[str, float] = {}
        self._std_sum = 0.0
        self._lengths: dict[str, deque[int]] = {}
        self._pooled: deque[int] = deque(maxlen=POOLED_HISTORY)
        self._fits: dict[str, LogT] = {}
        self._unfitted: set[str] = set()  # prompts observed since their last fit
        self._mu_sum = 0.0
        self._sigma_sum = 0.0

    def observe(self, prompt_id: str, lengths: list[int]) -> None:
        """Fold one group's lengths into the prompt's statistics."""
        if len(lengths) < 2:
            return
        new = float(np.std(lengths, ddof=1))
        old = self._std.get(prompt_id)
        value = new if old is None else self.alpha * new + (1.0 - self.alpha) * old
        self._std_sum += value - (old or 0.0)
        self._std[prompt_id] = value

        window = self._lengths.setdefault(prompt_id, deque(maxlen=self.history))
        window.extend(lengths)
        self._pooled.extend(lengths)
        self._unfitted.add(prompt_id)

    def __setstate__(self, state: dict) -> None:
        """Unpickle (a checkpoint's shaping state); one written before fits were lazy has every fit current."""
        self.__dict__.update(state)
        self.__dict__.setdefault("_unfitted", set())

    def _refit(self) -> None:
        """Fit the log-t of every prompt observed since its last fit, on its window as it is now."""
        for prompt_id in self._unfitted:
            old_fit = self._fits.get(prompt_id)
            fit = fit_log_t(list(self._lengths[prompt_id]), nu=self.nu)
            self._mu_sum += fit.mu - (old_fit.mu if old_fit else 0.0)
            self._sigma_sum += fit.sigma - (old_fit.sigma if old_fit else 0.0)
            self._fits[prompt_id] = fit
        self._unfitted.clear()

    def window(self, prompt_id: str) -> list[int]:
        """The prompt's last ``history`` observed lengths; an unseen prompt gets the last ``POOLED_HISTORY``
        lengths of all prompts (wider than any one prompt's spread), empty if none was seen."""
        return list(self._lengths.get(prompt_id, self._pooled))

    def std(self, prompt_id: str) -> float | None:
        """Smoothed length std; an unseen prompt gets the mean over known prompts, None if none is known."""
        if prompt_id in self._std:
            return self._std[prompt_id]
        return self._std_sum / len(self._std) if self._std else None

    def log_t(self, prompt_id: str) -> LogT | None:
        """The prompt's log-t fit; an unseen prompt gets the mean (mu, sigma) of known fits, None if none."""
        self._refit()
        if prompt_id in self._fits:
            return self._fits[prompt_id]
        n = len(self._fits)
        return LogT(self._mu_sum / n, self._sigma_sum / n, self.nu) if n else None
