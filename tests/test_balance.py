"""Length-balanced data parallelism: Karmarkar–Karp partitions and sample-level shards of a step's groups."""

import random

import pytest
from synthetic import make_groups

from rl.algorithm.balance import balanced_shards, karmarkar_karp, round_robin_shards, shard_tokens
from rl.types import Group, PromptRow, Sample


def _long_tail(n: int, seed: int) -> list[int]:
    """Lengths like a reasoning batch: most short, a few running to the cap."""
    rng = random.Random(seed)
    return [min(int(rng.lognormvariate(4.0, 1.0)), 2048) for _ in range(n)]


@pytest.mark.parametrize("parts", [2, 3, 4, 8])
@pytest.mark.parametrize("seed", range(5))
def test_every_index_once_and_spread_within_the_longest_item(parts, seed):
    weights = _long_tail(40, seed)
    split = karmarkar_karp(weights, parts)
    assert len(split) == parts
    assert sorted(i for part in split for i in part) == list(range(len(weights)))
    sums = [sum(weights[i] for i in part) for part in split]
    assert max(sums) - min(sums) <= max(weights)  # the differencing method's bound


def test_beats_round_robin_on_a_long_tail():
    worse = 0
    for seed in range(20):
        weights = _long_tail(32, seed)
        kk = max(sum(weights[i] for i in part) for part in karmarkar_karp(weights, 2))
        rr = max(sum(weights[r::2]) for r in range(2))
        worse += kk > rr
        assert kk <= rr or kk - sum(weights) / 2 <= max(weights) / 2
    assert worse == 0


def test_a_perfect_split_is_found_and_edge_cases():
    assert sorted(sum([10, 7, 5, 3, 1][i] for i in part) for part in karmarkar_karp([10, 7, 5, 3, 1], 2)) == [13, 13]
    assert karmarkar_karp([], 3) == [[], [], []]
    assert sorted(karmarkar_karp([5], 2)) == [[], [0]]
    with pytest.raises(ValueError, match="parts"):
        karmarkar_karp([1, 2], 0)


def _group(name: str, lengths: list[int]) -> Group:
    samples = [
        Sample(index=i, tokens=[5] * n, logprobs=[-1.0] * n, versions=[0] * n, finish_reason="stop")
        for i, n in enumerate(lengths)
    ]
    advantages = [float(i) - 1.5 for i in range(len(lengths))]
    return Group(prompt=PromptRow(name, "", ""), prompt_tokens=[1, 2], samples=samples, advantages=advantages)


def test_shards_keep_every_sample_with_its_advantage():
    groups = [_group("a", [300, 10, 12, 9]), _group("b", [11, 8, 13, 10]), *make_groups(4)]
    shards = balanced_shards(groups, 2)
    pairs = sorted(
        (g.prompt.prompt_id, id(s), a)
        for shard in shards
        for g in shard
        for s, a in zip(g.samples, g.advantages, strict=True)
    )
    expected = sorted(
        (g.prompt.prompt_id, id(s), a) for g in groups for s, a in zip(g.samples, g.advantages, strict=True)
    )
    assert pairs == expected
    tokens = shard_tokens(shards)
    assert max(tokens) - min(tokens) <= max(shard_tokens([[g] for g in groups]))
    assert max(tokens) < max(shard_tokens(round_robin_shards(groups, 2)))  # the long group no longer sinks one rank
    assert groups[0].samples[0].tokens == [5] * 300 and len(groups[0].samples) == 4  # the input is untouched
