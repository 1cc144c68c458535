"""Synthetic training groups for trainer tests: random token responses, fixed behaviour log-probs."""

import random

from rl.types import Group, PromptRow, Sample


def make_groups(n: int, seed: int = 0) -> list[Group]:
    rng = random.Random(seed)
    groups = []
    for g in range(n):
        samples = []
        for i in range(4):
            tokens = [rng.randrange(4, 20) for _ in range(rng.randrange(3, 12))]
            samples.append(
                Sample(
                    index=i,
                    tokens=tokens,
                    logprobs=[-3.0] * len(tokens),
                    versions=[0] * len(tokens),
                    finish_reason="stop",
                )
            )
        groups.append(
            Group(
                prompt=PromptRow(f"p{g}", "", ""),
                prompt_tokens=[7, 14, 5, 16],
                samples=samples,
                advantages=[1.0, -1.0, 0.5, -0.5],
            )
        )
    return groups


def trained_and_reloaded(spec, path, size: int = 2):
    """A trainer built from ``spec`` that took two steps on synthetic groups of ``size`` and saved to ``path``, and a
    fresh one loaded from there (at version 2): what the checkpoint tests compare."""
    from rl.trainer.fsdp_engine import FSDPEngine

    trained = FSDPEngine(spec)
    for seed in range(2):
        trained.train_step(make_groups(size, seed))
    trained.save(str(path))
    fresh = FSDPEngine(spec)
    assert fresh.load(str(path)) == 2
    return trained, fresh
