"""A step's record carries TRL's metric names, each the quantity TRL computes under it."""

from __future__ import annotations

import pytest
import torch

from rl.loop.records import step_metrics
from rl.output.metrics import summarize_groups
from rl.output.trl_metrics import aliases, trained_tokens
from rl.types import Group, PromptRow, Sample


def _group(lengths: list[int], finishes: list[str], rewards: list[float], stats: dict | None = None) -> Group:
    samples = [
        Sample(index=i, tokens=[1] * n, logprobs=[0.0] * n, versions=[0] * n, finish_reason=f, reward=r)
        for i, (n, f, r) in enumerate(zip(lengths, finishes, rewards, strict=True))
    ]
    return Group(PromptRow("p", "p?", "7"), [5], samples, [0.0] * len(samples), stats=stats or {})


def test_completion_lengths_and_the_reward_spread_are_trls():
    groups = [_group([3, 5], ["stop", "length"], [1.0, 0.0]), _group([2, 9], ["stop", "length"], [0.5, 0.5])]
    m = summarize_groups(groups, trainer_version=0)
    m |= aliases(m)  # as step_metrics adds them
    assert (m["completions/mean_length"], m["completions/min_length"], m["completions/max_length"]) == (4.75, 2, 9)
    assert m["completions/mean_terminated_length"] == 2.5 and m["completions/max_terminated_length"] == 3
    assert m["reward_std"] == pytest.approx(torch.tensor([1.0, 0.0, 0.5, 0.5]).std().item())  # unbiased, as TRL's
    capped = summarize_groups([_group([4, 4], ["length", "length"], [1.0, 0.0])], trainer_version=0)
    assert capped["completions/mean_terminated_length"] == capped["completions/max_terminated_length"] == 0.0
    assert "tools/call_frequency" not in m


def test_tool_frequencies_are_per_launched_sample_and_per_call():
    stats = {"launched": 3, "tool_calls": 6, "tool_failures_timeout": 1, "tool_failures_raised": 2}
    m = summarize_groups([_group([3, 5], ["stop", "stop"], [1.0, 0.0], stats)], trainer_version=0)
    assert m["tools/call_frequency"] == 6 / 3 and m["tools/failure_frequency"] == 3 / 6


def test_a_step_record_names_reward_kl_and_clipping_as_trl_does():
    batch = summarize_groups([_group([3, 5], ["stop", "length"], [1.0, 0.0])], trainer_version=0)
    trainer = {"seconds": 1.0, "dp_wait_s": 0.0, "kl_ref": 0.02, "clip_fraction": 0.1, "entropy": 0.7}
    record = step_metrics([], [trainer], batch, {}, 0.0, 0, {"pass_rate": 2})
    assert (record["reward"], record["kl"], record["clip_ratio/region_mean"]) == (0.5, 0.02, 0.1)
    assert record["completions/clipped_ratio"] == record["truncated_frac"] == 0.5 and record["entropy"] == 0.7
    assert (record["zero_variance_dropped"], record["pass_rate_dropped"]) == (0.0, 2.0)  # dynamic sampling's
    without_reference = step_metrics([], [{k: v for k, v in trainer.items() if k != "kl_ref"}], batch, {}, 0.0, 0, {})
    assert "kl" not in without_reference


def test_num_tokens_counts_each_samples_prompt_and_response():
    groups = [_group([3, 5], ["stop", "length"], [1.0, 0.0]), _group([2], ["stop"], [0.5])]  # prompts of 1 token
    assert trained_tokens(groups) == (1 + 3) + (1 + 5) + (1 + 2)


def test_an_evaluation_names_reward_and_lengths_as_trl_does():
    from rl.evaluation.held_out import ProblemRecord, summarize

    records = [
        ProblemRecord("a", "1", [1.0, 0.0], [True, False], [4, 8], ["stop", "length"], "x"),
        ProblemRecord("b", "2", [0.5, 0.5], [True, True], [2, 2], ["stop", "stop"], "y"),
    ]
    m = summarize(records)
    assert (m["reward"], m["completions/mean_length"], m["completions/max_length"]) == (0.5, 4.0, 8.0)
    assert m["completions/clipped_ratio"] == m["truncated_frac"] == 0.25 and m["accuracy"] == 0.75
