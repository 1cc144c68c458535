"""``rl bench dp-balance``: data-parallel trainer steps split round robin by group vs balanced by tokens.

A recipe's trainer (its model, loss, micro-batching) runs as ``train.num_workers`` FSDP2 ranks. Each step trains
on the same synthetic batch in both modes, in alternating order: ``groups`` prompts of ``group_size`` samples
whose response lengths follow a long tail (log-normal, capped at ``max_len``), as reasoning batches do. Per mode
it reports (after one warm-up step) the step time, each rank's tokens, the rank imbalance (largest over mean
tokens) and the straggler wait: the seconds the lighter ranks waited for the heaviest (in idle micro-batches,
or at the barrier before the gradient reduce-scatter with ``train.fsdp_keep_gathered=true``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

from rl.algorithm.balance import balanced_shards, round_robin_shards, shard_tokens
from rl.config import RunConfig
from rl.types import Group, PromptRow, Sample

MODES = {"round-robin": round_robin_shards, "balanced": balanced_shards}


@dataclass
class BalanceBenchOptions:
    """What one ``rl bench dp-balance`` run measures."""

    steps: int = 3
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    groups: int = 8
    group_size: int = 4
    prompt_len: int = 48
    median_len: int = 60
    max_len: int = 512
    out_dir: Path = Path("runs/bench-dp-balance")


def long_tail_batch(opts: BalanceBenchOptions, vocab: int, seed: int) -> list[Group]:
    """``groups`` prompts of ``group_size`` random-token samples, lengths log-normal around ``median_len``."""
    rng = random.Random(seed)
    batch = []
    for g in range(opts.groups):
        prompt = [rng.randrange(vocab) for _ in range(opts.prompt_len)]
        samples = []
        for i in range(opts.group_size):
            n = max(1, min(opts.max_len, int(rng.lognormvariate(0.0, 1.0) * opts.median_len)))
            tokens = [rng.randrange(vocab) for _ in range(n)]
            samples.append(Sample(i, tokens, [-2.0] * n, [0] * n, "length" if n == opts.max_len else "stop"))
        advantages = [rng.gauss(0.0, 1.0) for _ in samples]
        batch.append(Group(PromptRow(f"p{g}", "", ""), prompt, samples, advantages))
    return batch


def _step(trainers: list, shards: list[list[Group]]) -> dict[str, Any]:
    import ray

    t0 = time.monotonic()
    metrics = ray.get([t.train_step.remote(s) for t, s in zip(trainers, shards, strict=True)])
    return {
        "step_s": time.monotonic() - t0,
        "rank_tokens": shard_tokens(shards),
        "rank_s": [m["seconds"] for m in metrics],
        "straggler_wait_s": sum(m["dp_wait_s"] for m in metrics),
    }


def run_dp_balance_bench(cfg: RunConfig, model_dir: str, opts: BalanceBenchOptions) -> dict[str, Any]:
    """Both modes on the same batches; returns (and writes) the per-step records and the per-mode summary."""
    from transformers import AutoConfig

    from rl.loop.actors import form_process_group, place_trainers, start_ray

    vocab = AutoConfig.from_pretrained(model_dir, **cfg.model.load_kwargs(model_dir)).vocab_size
    start_ray(cfg)
    trainers, _ = place_trainers(cfg, model_dir)  # the group goes with Ray when this process ends
    asyncio.run(form_process_group(trainers))
    _step(trainers, round_robin_shards(long_tail_batch(opts, vocab, -1), len(trainers)))  # warm-up, not recorded
    records = []
    for seed in opts.seeds:
        for step in range(opts.steps):
            batch = long_tail_batch(opts, vocab, seed * 1000 + step)
            order = list(MODES) if step % 2 == 0 else list(reversed(MODES))
            for mode in order:
                record = _step(trainers, MODES[mode](batch, len(trainers)))
                records.append({"seed": seed, "step": step, "mode": mode, **record})
                print(f"seed {seed} step {step} {mode}: {record['step_s']:.2f} s, tokens {record['rank_tokens']}")
    result = {
        "options": {**asdict(opts), "out_dir": str(opts.out_dir)},
        "records": records,
        "modes": summarize(records),
    }
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    (opts.out_dir / "bench_dp_balance.json").write_text(json.dumps(result, indent=2))
    (opts.out_dir / "bench_dp_balance.md").write_text(markdown(result["modes"]))
    return result


def summarize(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per mode: mean step time, rank imbalance (max over mean tokens), straggler wait, speed-up vs round robin."""
    out = {}
    for mode in MODES:
        rows = [r for r in records if r["mode"] == mode]
        out[mode] = {
            "step_s": mean(r["step_s"] for r in rows),
            "imbalance": mean(max(r["rank_tokens"]) / mean(r["rank_tokens"]) for r in rows),
            "straggler_wait_s": mean(r["straggler_wait_s"] for r in rows),
            "rank_s_spread": mean(max(r["rank_s"]) - min(r["rank_s"]) for r in rows),
        }
    for mode in MODES:
        out[mode]["speedup"] = out["round-robin"]["step_s"] / out[mode]["step_s"]
    return out


def markdown(modes: dict[str, dict[str, float]]) -> str:
    lines = [
        "| split | step s | tokens max/mean | straggler wait s | speed-up vs round robin |",
        "| --- | --- | --- | --- | --- |",
    ]
    for mode, m in modes.items():
        lines.append(
            f"| {mode} | {m['step_s']:.2f} | {m['imbalance']:.3f} | {m['straggler_wait_s']:.2f} | {m['speedup']:.2f}x |"
        )
    return "\n".join(lines) + "\n"
