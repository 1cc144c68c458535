"""Length-balanced data parallelism: a step's samples split over the trainer ranks by token count.

A rank's trainer work grows with the tokens it computes, and the ranks of a data-parallel step wait for the
slowest one at every collective. Splitting by group index (round robin) hands the long tail to whichever rank
draws it; ``balanced_shards`` splits the samples themselves with the Karmarkar–Karp largest differencing method
(as verl balances sequence lengths over its data-parallel ranks).

Invariants: every kept sample goes to exactly one rank with the advantage it was given before the split (group
normalisation happens first, so it is unchanged); the trainer divides the summed loss by the global loss units of
all ranks, so the update does not depend on the split beyond float rounding; the largest rank total exceeds the
smallest by at most the longest sample (the differencing method's bound, see ``karmarkar_karp``).
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from rl.types import Group


def karmarkar_karp(weights: list[int], parts: int) -> list[list[int]]:
    """Indices of ``weights`` split into ``parts`` lists with near-equal sums (largest differencing method).

    Every item starts as a partial solution of ``parts`` subsets, one holding it. The two solutions with the
    largest spread (largest minus smallest subset sum) are merged, the heaviest subset of one joined with the
    lightest of the other, and so on, until one solution is left. Joining a descending with an ascending order
    makes the merged spread at most the larger of the two spreads, so the final spread is at most ``max(weights)``.
    """
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    heap: list[tuple[int, int, list[tuple[int, list[int]]]]] = []
    for i, w in enumerate(weights):
        subsets = [(w, [i])] + [(0, []) for _ in range(parts - 1)]
        heapq.heappush(heap, (-w, i, subsets))  # (minus the spread, a tie-break, subsets by descending sum)
    if not heap:
        return [[] for _ in range(parts)]
    while len(heap) > 1:
        _, tie, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        merged = [(sa + sb, ia + ib) for (sa, ia), (sb, ib) in zip(a, reversed(b), strict=True)]
        merged.sort(key=lambda s: s[0], reverse=True)
        heapq.heappush(heap, (merged[-1][0] - merged[0][0], tie, merged))
    return [sorted(indices) for _, indices in heap[0][2]]


def sample_tokens(group: Group, index: int) -> int:
    """The tokens the trainer computes for one sample: its prompt and its response."""
    return len(group.prompt_tokens) + len(group.samples[index].tokens)


def balanced_shards(groups: list[Group], ranks: int) -> list[list[Group]]:
    """``groups`` split over ``ranks`` by token count, sample by sample (advantages must be assigned already).

    A rank gets, for each group it has samples of, a copy of the group holding just those samples and their
    advantages, in the group's order; groups with no samples on a rank are left out of its shard.
    """
    where = [(g, i) for g, group in enumerate(groups) for i in range(len(group.samples))]
    parts = karmarkar_karp([sample_tokens(groups[g], i) for g, i in where], ranks)
    shards: list[list[Group]] = []
    for part in parts:
        picked: dict[int, list[int]] = {}
        for k in part:
            g, i = where[k]
            picked.setdefault(g, []).append(i)
        shard = []
        for g in sorted(picked):
            group, kept = groups[g], picked[g]
            samples = [group.samples[i] for i in kept]
            shard.append(replace(group, samples=samples, advantages=[group.advantages[i] for i in kept]))
        shards.append(shard)
    return shards


def round_robin_shards(groups: list[Group], ranks: int) -> list[list[Group]]:
    """Whole groups dealt out in turn (rank r gets groups r, r + ranks, ...)."""
    return [groups[r::ranks] for r in range(ranks)]


def shard_tokens(shards: list[list[Group]]) -> list[int]:
    """Each shard's trainer tokens (prompt and response of every sample)."""
    return [sum(sample_tokens(g, i) for g in shard for i in range(len(g.samples))) for shard in shards]
