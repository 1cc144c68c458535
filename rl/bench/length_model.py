"""A per-prompt model of response lengths, fitted to measured lengths, for benchmarks whose model cannot stop.

A config-only model (random weights, ``rl/model_shapes.py``) never emits a meaningful end of sequence, so the
benchmark draws each sample's length from this model instead (``rl/bench/synthetic_lengths.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

NATURAL_MODES = ("plain", "raw", "shadow")  # bench modes that abort nothing: their lengths are uncensored


@dataclass(frozen=True)
class LengthModel:
    """Response lengths as fractions of the length cap, so they scale with the cap.

    Prompt p has a median m_p with log m_p ~ N(log ``median``, ``prompt_spread``^2): medians spread log-normally
    across prompts. Sample i of prompt p runs to the cap with probability ``runaway``; otherwise its length is
    cap x exp(log m_p + ``sample_spread`` x z_i), z_i ~ N(0, 1), rounded and clipped to [1, cap]. The shared m_p
    correlates the lengths within a prompt.
    """

    median: float  # the typical prompt's median length / cap
    prompt_spread: float  # std of log prompt medians across prompts
    sample_spread: float  # std of log lengths within a prompt
    runaway: float  # share of samples that run to the cap

    def prompt_log_median(self, prompt: int) -> float:
        """log(m_p / cap) of the prompt keyed ``prompt`` (a non-negative integer)."""
        z = np.random.default_rng([prompt]).standard_normal()
        return math.log(self.median) + self.prompt_spread * float(z)

    def draw(self, cap: int, prompt: int, sample: int) -> int:
        """The length of sample ``sample`` of prompt ``prompt`` (non-negative integer keys) under cap ``cap``."""
        rng = np.random.default_rng([prompt, sample])
        runaway, z = rng.random() < self.runaway, float(rng.standard_normal())
        if runaway:
            return cap
        fraction = math.exp(min(self.prompt_log_median(prompt) + self.sample_spread * z, 0.0))
        return max(1, min(cap, round(cap * fraction)))

    @classmethod
    def fit(cls, groups: Iterable[Sequence[tuple[int, str]]], cap: int) -> LengthModel:
        """Moment fit to groups of ``(length, finish_reason)`` under ``cap``: samples that stopped give the
        log-normal part (pooled within-group variance, variance of group means less its sampling share); the share
        that hit the cap, less the log-normal mass above the cap, gives ``runaway``. Assumes the log-normal part
        seldom reaches the cap (its censoring is ignored)."""
        groups = [list(g) for g in groups]
        n_all = sum(len(g) for g in groups)
        capped = sum(reason == "length" for g in groups for _, reason in g)
        logs = [np.log(np.array([max(n, 1) for n, r in g if r == "stop"]) / cap) for g in groups]
        logs = [x for x in logs if len(x)]
        if n_all == 0 or len(logs) < 2:
            raise ValueError("fitting lengths needs at least two groups with a sample that stopped")
        within = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
        dof = sum(len(x) - 1 for x in logs)
        sample_var = within / dof if dof else 0.0
        means = np.array([x.mean() for x in logs])
        share = float(np.mean([1 / len(x) for x in logs]))
        prompt_var = max(0.0, float(means.var(ddof=1)) - sample_var * share)
        mu = float(means.mean())
        tail = _normal_tail(-mu / math.sqrt(max(prompt_var + sample_var, 1e-12)))
        runaway = max(0.0, (capped / n_all - tail) / (1 - tail)) if tail < 1 else 0.0
        return cls(math.exp(mu), math.sqrt(prompt_var), math.sqrt(sample_var), runaway)

    @classmethod
    def fit_bench(cls, path: Path) -> LengthModel:
        """Fit to the natural-length passes (``NATURAL_MODES``) of a ``bench_rollout.json`` (or its folder)."""
        path = path / "bench_rollout.json" if path.is_dir() else path
        result = json.loads(path.read_text())
        cap = int(result["config"]["max_tokens"])
        groups: dict[tuple[int, int], list[tuple[int, str]]] = defaultdict(list)
        for n, run in enumerate(result["runs"]):
            if run["mode"] in NATURAL_MODES:
                for s in run["samples"]:
                    groups[n, s["group"]].append((s["length"], s["finish_reason"]))
        if not groups:
            raise ValueError(f"{path} has no pass of a mode that aborts nothing ({', '.join(NATURAL_MODES)})")
        return cls.fit(groups.values(), cap)

    @classmethod
    def load(cls, spec: str) -> LengthModel:
        """A preset by name, or the fit to a ``bench_rollout.json`` (or its folder); a one-line ValueError else."""
        if spec in PRESETS:
            return PRESETS[spec]
        path = Path(spec).expanduser()
        if not (path.is_file() or (path / "bench_rollout.json").is_file()):
            raise ValueError(f"lengths {spec!r}: neither a preset ({', '.join(PRESETS)}) nor a bench_rollout.json")
        try:
            return cls.fit_bench(path)
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"lengths {spec!r}: not a readable bench_rollout.json ({type(e).__name__}: {e})") from None

    def describe(self) -> dict[str, float]:
        return asdict(self)


def stable_key(*parts: str | bytes) -> int:
    """A 64-bit key of ``parts``, the same in every process (unlike ``hash``)."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return int.from_bytes(h.digest(), "little")


def _normal_tail(x: float) -> float:
    """P(Z > x) for a standard normal Z."""
    return 0.5 * math.erfc(x / math.sqrt(2))


PRESETS: dict[str, LengthModel] = {
    # SmolLM2-135M-Instruct on the arith_smollm2 recipe's prompts, temperature 1.0, cap 512: `rl bench rollout --recipe
    # recipes/arith_smollm2.yaml --max-tokens 512 --prompts 16 --m-keep 8 --modes plain --seed 10` and the same with
    # --seed 11 (2 x 128 samples, CPU, 2026-11-26): median 35 tokens, 10 % at the cap; the prompt medians do not
    # spread beyond what 8 samples' noise explains (fit 0), so the samples of a prompt are independent
    "arith_smollm2": LengthModel(median=0.0682, prompt_spread=0.0, sample_spread=1.02, runaway=0.0978),
}
