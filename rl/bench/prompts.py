"""Prompt sets for the rollout benchmark: procedural arithmetic, a built-in long-tail set, or a recipe's split.

``longtail`` depends on the model: a model without a chat template (the tiny arithmetic policy) gets
arithmetic problems with mixed operand counts, beyond what it was warm-started on, so response lengths
spread; a chat model gets ``LONGTAIL_CHAT``, open-ended and math requests whose answers run from a few
tokens to the length cap (math ones carry an answer for ``math_accuracy``; the others score ``None``).
"""

from __future__ import annotations

import random
from typing import Literal

from rl.data.arith import ArithConfig, make_split
from rl.types import PromptRow

Source = Literal["arith", "longtail"]

# (request, reference answer or "" for open-ended)
LONGTAIL_CHAT: tuple[tuple[str, str], ...] = (
    ("What is 7 times 8? Reply with the number only.", "56"),
    ("Say hello in one word.", ""),
    ("What is the capital of France? Answer in one sentence.", ""),
    ("Tom has 12 apples and gives away 5. How many apples are left? Explain briefly.", "7"),
    ("A train travels at 60 km per hour for 3 hours. How far does it go? Show your reasoning.", "180"),
    ("Solve for x: 3x + 7 = 22. Explain each step.", "5"),
    ("What is the sum of the first 10 positive integers? Show your work.", "55"),
    ("What is the area of a rectangle that is 8 cm long and 5 cm wide? Explain.", "40"),
    ("Explain step by step how to compute 15% of 240.", "36"),
    ("List three uses of a paperclip.", ""),
    ("Write a short poem about the sea.", ""),
    ("Explain photosynthesis to a ten-year-old.", ""),
    ("Describe the water cycle in detail.", ""),
    ("Give me a recipe for pancakes with all the steps.", ""),
    ("Write a story about a robot who learns to paint.", ""),
    ("Compare cats and dogs as pets, with pros and cons of each.", ""),
)
ARITH = dict(digits=1, min_operands=2, max_operands=4)  # what the tiny policy was warm-started on
LONGTAIL_ARITH = dict(digits=1, min_operands=2, max_operands=7)


def bench_rows(source: Source, count: int, seed: int, chat: bool) -> list[PromptRow]:
    """``count`` prompts of ``source`` drawn with ``seed``; ``chat`` says whether the model has a chat template."""
    if source == "longtail" and chat:
        return _chat_rows(count, seed)
    if source not in ("arith", "longtail"):
        raise ValueError(f"unknown bench prompt source {source!r}; choose arith or longtail")
    shape = ARITH if source == "arith" else LONGTAIL_ARITH
    return make_split(ArithConfig(seed=seed, num_train=count, num_test=0, **shape), "train")


def default_reward(source: Source, chat: bool) -> str:
    """The built-in reward scoring kept samples of ``source``."""
    return "math_accuracy" if source == "longtail" and chat else "arith_exact"


def _chat_rows(count: int, seed: int) -> list[PromptRow]:
    """A seeded choice of ``count`` prompts from ``LONGTAIL_CHAT`` (cycled when more are asked for)."""
    order = list(range(len(LONGTAIL_CHAT)))
    random.Random(seed).shuffle(order)
    rows = []
    for n in range(count):
        i = order[n % len(order)]
        text, answer = LONGTAIL_CHAT[i]
        suffix = f"-{n // len(order)}" if n >= len(order) else ""
        rows.append(PromptRow(f"longtail-{i}{suffix}", [{"role": "user", "content": text}], answer))
    return rows


def sample_rows(rows: list[PromptRow], count: int, seed: int) -> list[PromptRow]:
    """``count`` distinct rows drawn from ``rows`` with ``seed`` (a recipe's split as a benchmark prompt set)."""
    if count > len(rows):
        raise ValueError(f"the prompt set has {len(rows)} rows, fewer than the {count} prompts asked for")
    return random.Random(seed).sample(rows, count)
