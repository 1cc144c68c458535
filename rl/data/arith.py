"""Procedural arithmetic prompts: sums (optionally differences) of k operands with worked-step answers.

A problem ``12+45+7=`` has the reference response ``12+45=57;57+7=64;#64``: running partial results
separated by ``;`` and the final answer after ``#``, so responses grow with the number of operands.
Problems go to the train or test split by a hash of their operand tuple, so the two splits never
share an operand tuple, whatever the seed or counts.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from rl.types import PromptRow

Split = Literal["train", "test"]
Problem = tuple[tuple[int, ...], tuple[str, ...]]  # operands, operators between them

_TEST_BUCKETS = 5  # one operand tuple in five (by hash) belongs to the test split
_ENUMERATE_LIMIT = 50_000  # operand counts with at most this many problems are listed exhaustively
_MAX_MISSES = 1_000  # failed draws in a row after which an operand count counts as used up


class ArithConfig(BaseModel):
    """Size and difficulty of the arithmetic dataset; operands are integers in ``[0, 10**digits)``."""

    seed: int = Field(default=0, description="seed of the generated problems")
    num_train: int = Field(1000, ge=0, description="training problems generated")
    num_test: int = Field(100, ge=0, description="held-out problems generated (disjoint from training)")
    min_operands: int = Field(2, ge=2, description="fewest numbers in a problem")
    max_operands: int = Field(4, ge=2, description="most numbers in a problem")
    digits: int = Field(2, ge=1, description="operands are integers below 10**digits")
    allow_subtraction: bool = Field(default=False, description="mix minus signs in with plus signs")

    @model_validator(mode="after")
    def _check_operand_range(self) -> ArithConfig:
        if self.max_operands < self.min_operands:
            raise ValueError(f"max_operands ({self.max_operands}) < min_operands ({self.min_operands})")
        return self


def prompt_text(operands: Sequence[int], ops: Sequence[str]) -> str:
    """The question, e.g. ``"12+45+7="``."""
    _check_problem(operands, ops)
    return str(operands[0]) + "".join(f"{op}{x}" for op, x in zip(ops, operands[1:], strict=True)) + "="


def solution_text(operands: Sequence[int], ops: Sequence[str]) -> str:
    """The worked reference response, e.g. ``"12+45=57;57+7=64;#64"``."""
    _check_problem(operands, ops)
    total = operands[0]
    steps = []
    for op, x in zip(ops, operands[1:], strict=True):
        result = total + x if op == "+" else total - x
        steps.append(f"{total}{op}{x}={result}")
        total = result
    return ";".join(steps) + f";#{total}"


def make_split(cfg: ArithConfig, split: Split) -> list[PromptRow]:
    """Exactly ``cfg.num_train`` / ``cfg.num_test`` distinct problems of ``split``, deterministic in ``cfg``.

    Raises ``ValueError`` when the problem space holds too few problems of that split.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    count = cfg.num_train if split == "train" else cfg.num_test
    rows = []
    for n, (operands, ops) in enumerate(_problems(cfg, split, count)):
        solution = solution_text(operands, ops)
        rows.append(
            PromptRow(
                prompt_id=f"arith-{split}-{n}",
                prompt=prompt_text(operands, ops),
                answer=solution.rsplit("#", 1)[1],
                columns={"solution": solution, "num_operands": len(operands)},
            )
        )
    return rows


def _check_problem(operands: Sequence[int], ops: Sequence[str]) -> None:
    if len(operands) < 2 or len(ops) != len(operands) - 1:
        raise ValueError(f"need at least 2 operands and one operator between each pair: {operands}, {ops}")
    if any(op not in ("+", "-") for op in ops):
        raise ValueError(f"operators must be '+' or '-': {ops}")


def _split_of(operands: tuple[int, ...]) -> Split:
    digest = hashlib.sha256(",".join(map(str, operands)).encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") % _TEST_BUCKETS == 0 else "train"


def _op_choices(cfg: ArithConfig) -> tuple[str, ...]:
    return ("+", "-") if cfg.allow_subtraction else ("+",)


def _space_size(cfg: ArithConfig, k: int) -> int:
    return (10**cfg.digits) ** k * len(_op_choices(cfg)) ** (k - 1)


def _enumerate(cfg: ArithConfig, k: int, split: Split) -> list[Problem]:
    """Every problem with ``k`` operands that belongs to ``split``, in a fixed order."""
    op_seqs = list(itertools.product(_op_choices(cfg), repeat=k - 1))
    return [
        (operands, ops)
        for operands in itertools.product(range(10**cfg.digits), repeat=k)
        if _split_of(operands) == split
        for ops in op_seqs
    ]


def _draw(cfg: ArithConfig, k: int, rng: random.Random) -> Problem:
    operands = tuple(rng.randrange(10**cfg.digits) for _ in range(k))
    return operands, tuple(rng.choice(_op_choices(cfg)) for _ in range(k - 1))


def _problems(cfg: ArithConfig, split: Split, count: int) -> list[Problem]:
    """``count`` distinct problems of ``split``, operand count drawn uniformly from the allowed range.

    Small operand counts are listed exhaustively and dealt out in shuffled order; large ones are
    sampled, and only up to half their share of the space is promised, so sampling stays fast.
    """
    rng = random.Random(f"arith:{cfg.seed}:{split}")
    share = 1 / _TEST_BUCKETS if split == "test" else 1 - 1 / _TEST_BUCKETS
    pools: dict[int, list[Problem]] = {}
    capacity = 0
    for k in range(cfg.min_operands, cfg.max_operands + 1):
        size = _space_size(cfg, k)
        if size <= _ENUMERATE_LIMIT:
            pools[k] = _enumerate(cfg, k, split)
            rng.shuffle(pools[k])
            capacity += len(pools[k])
        else:
            capacity += int(size * share) // 2
    too_few = (
        f"cannot make {count} distinct {split} problems with digits={cfg.digits}, "
        f"operands {cfg.min_operands}..{cfg.max_operands}, allow_subtraction={cfg.allow_subtraction}"
    )
    if count > capacity:
        raise ValueError(f"{too_few}: about {capacity} available; raise digits or max_operands")

    active = list(range(cfg.min_operands, cfg.max_operands + 1))
    seen: set[Problem] = set()
    out: list[Problem] = []
    while len(out) < count:
        if not active:
            raise ValueError(f"{too_few}: found only {len(out)}")
        k = rng.choice(active)
        if k in pools:
            problem = pools[k].pop() if pools[k] else None
        else:
            problem = _sample_new(cfg, k, split, seen, rng)
        if problem is None:
            active.remove(k)
        else:
            out.append(problem)
    return out


def _sample_new(cfg: ArithConfig, k: int, split: Split, seen: set[Problem], rng: random.Random) -> Problem | None:
    """A random ``k``-operand problem of ``split`` not in ``seen`` (then added), or None if none turns up."""
    for _ in range(_MAX_MISSES):
        problem = _draw(cfg, k, rng)
        if problem not in seen and _split_of(problem[0]) == split:
            seen.add(problem)
            return problem
    return None
