"""``rl bench rollout`` on a config-only model (``dummy:NAME``): real shapes, random tokens, drawn lengths.

The engine serves random weights (``load_format="dummy"``) with no tokenizer; prompts are seeded random token ids
of ``PROMPT_TOKENS`` tokens, distinct per prompt; each sample's length comes from a ``LengthModel`` (``lengths``:
a preset or a measured ``bench_rollout.json``) through ``SyntheticLengthEngine``; nothing is decoded or rewarded.
SART modes are refused unless their scorer is ``none``: their scorer reads response text, and random tokens have
none worth reading (use ``darts`` or ``darts@long_wait=1.5``).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from rl.bench.cost_model import DecodeProfile
from rl.bench.length_model import LengthModel
from rl.bench.rollout import Batch, Completion, RolloutBench, mode_shaping, policy_name
from rl.bench.synthetic_lengths import SyntheticLengthEngine
from rl.model_shapes import dummy_config, is_dummy, vocab_size
from rl.rollout.engine import EngineSpec, InferenceEngine, SamplingSpec
from rl.types import PromptRow, Sample

if TYPE_CHECKING:
    from rl.bench.rollout import RolloutBenchConfig

PROMPT_TOKENS = 96  # every random prompt's length
FIRST_ID = 100  # prompt ids start above the low ids where tokenizers keep their special tokens


def check_synthetic(cfg: RolloutBenchConfig) -> None:
    """One-line ValueErrors for options a dummy model cannot take, or ``lengths`` without one."""
    if not is_dummy(cfg.model):
        if cfg.lengths is not None:
            raise ValueError("lengths are for dummy: models only; a real model has its own lengths")
        return
    dummy_config(cfg.model)  # a known name
    if cfg.lengths is None:
        raise ValueError(f"model {cfg.model!r} needs lengths: a preset name or a bench_rollout.json to fit")
    LengthModel.load(cfg.lengths)
    if cfg.recipe is not None or cfg.dataset is not None:
        raise ValueError(f"model {cfg.model!r} takes random token prompts: no recipe or dataset")
    if cfg.reward not in (None, "none"):
        raise ValueError(f"model {cfg.model!r} writes random tokens: there is nothing to reward")
    for mode in cfg.modes:
        if "sart" in policy_name(mode) and mode_shaping(cfg, mode).scorer != "none":
            raise ValueError(
                f"mode {mode!r}: SART scores response text, and a dummy model's is random; "
                f"use darts or darts@long_wait=1.5 (or sart@scorer=none)"
            )


def random_batch(count: int, vocab: int, seed: int) -> Batch:
    """``count`` prompts of ``PROMPT_TOKENS`` random token ids drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(min(FIRST_ID, vocab // 2), vocab, size=(count, PROMPT_TOKENS)).tolist()
    rows = [PromptRow(f"random-{seed}-{g}", "", "") for g in range(count)]
    return Batch(rows, tokens)


class SyntheticRolloutBench(RolloutBench):
    """``RolloutBench`` on a config-only model: random prompts, lengths drawn by ``SyntheticLengthEngine``."""

    def __init__(self, cfg: RolloutBenchConfig, model_dir: str) -> None:  # no tokenizer: not RolloutBench's
        assert cfg.lengths is not None  # the config's validation requires it for a dummy model
        self.cfg = cfg
        self.model_dir = model_dir
        self.load_kwargs = {}  # a config-only model built here: no hub revision, no code of its own
        self.encoder = None
        self.enforce_eager = EngineSpec.enforce_eager
        vocab = vocab_size(model_dir)
        self.batches = [random_batch(cfg.prompts, vocab, cfg.seed + r) for r in range(cfg.repeats)]
        self.reward_specs = []
        self.sampling = SamplingSpec(cfg.max_tokens, cfg.temperature)
        self.profile = DecodeProfile.load(cfg.cost_model) if cfg.cost_model else None
        self._pass_ids = itertools.count()
        self.lengths = LengthModel.load(cfg.lengths)

    def engine_spec(self) -> EngineSpec:
        """The bench's engine on random weights and no tokenizer."""
        return replace(super().engine_spec(), load_format="dummy", skip_tokenizer_init=True)

    def decode(self, tokens: list[int]) -> str:
        return ""

    def completions(self, row: PromptRow, samples: list[Sample], episodes: list) -> list[Completion]:
        return ["" for _ in samples]  # no tokenizer, and no reward reads them

    async def run(self, engine: InferenceEngine) -> list[dict]:
        """Every pass of ``RolloutBench.run``, on ``engine`` with drawn lengths."""
        return await super().run(SyntheticLengthEngine(engine, self.lengths, self.cfg.seed))
