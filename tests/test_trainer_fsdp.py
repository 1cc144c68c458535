"""FSDP2 data parallelism on gloo: two sharded trainer ranks make the update one rank makes on the whole batch,
their checkpoint is the single-rank format, and their gathered weights give vLLM the trainer's log-probs."""

import asyncio

import numpy as np
import pytest
import ray
import torch
from rl.trainer.engine import TrainerSpec, make_train_engine
from rl.trainer.fsdp_engine import FSDPEngine
from rl.trainer.worker import TrainerWorker
from synthetic import make_groups
from test_weight_sync import PROMPT_TEXT, sample_once

from rl.algorithm.balance import balanced_shards
from rl.loop.actors import form_process_group
from rl.types import Group, PromptRow

pytestmark = pytest.mark.integration  # starts real Ray or vLLM


@pytest.fixture(scope="module")
def rank_pair(ray_session, tiny_model_dir):
    """Two trainer rank actors in one gloo process group, started once for the file (a rank's process start is
    most of a test's time); each test gives them fresh engines with ``_fresh``."""
    actor = ray.remote(num_cpus=1)(TrainerWorker)
    workers = [actor.remote(TrainerSpec(model=tiny_model_dir), rank, 2) for rank in range(2)]
    asyncio.run(form_process_group(workers))  # meets on rank 0's node address, as multi-node runs do
    yield workers
    ray.get([w.shutdown.remote() for w in workers])
    for w in workers:
        ray.kill(w)


def _fresh(workers: list, spec: TrainerSpec) -> list:
    """``workers`` with new engines built from ``spec`` (the model's initial weights, a new optimizer), sharded over
    the group they already form: as rank actors started with ``spec``."""

    def fresh_engine(worker: TrainerWorker, spec: TrainerSpec) -> None:  # a closure: pickled by value to the actor
        worker.engine = make_train_engine(spec, worker.rank, worker.world_size)
        worker.engine.shard()

    ray.get([w.__ray_call__.remote(fresh_engine, spec) for w in workers])
    return workers


def _noise_gradients(spec: TrainerSpec, groups: list) -> dict[str, torch.Tensor]:
    """Per parameter, the elements whose gradient on a mini-batch of ``groups`` is below 1e-4 of that parameter's
    largest. AdamW divides each gradient by its own magnitude (plus eps), so where a clipped gradient is near eps
    its update follows fp32 rounding, which differs with the order of the sums (one rank or two)."""
    noise: dict[str, torch.Tensor] = {}
    size = len(groups) // spec.mini_batches
    for start in range(0, len(groups), size):
        worker = FSDPEngine(spec)
        worker.accumulate(groups[start : start + size])
        for n, p in worker.model.named_parameters():
            noise[n] = noise.get(n, torch.zeros_like(p, dtype=torch.bool)) | (p.grad.abs() < 1e-4 * p.grad.abs().max())
    return noise


def _assert_same_update(full: dict, expected: dict, before: dict, noise: dict, lr: float, updates: int = 1) -> None:
    """Element by element: equal to fp32 rounding, except the few near-zero gradients (within one AdamW step each).
    After a second update the rounding of the first has moved the gradients a little: a few elements in 10^4 may
    then differ by up to 0.5 % of a step (measured: 19 of 446,592 with padded rows, 110 with prompts shared, whose
    packed rows change with the split more than padded rows do)."""
    assert full.keys() == expected.keys() == noise.keys()
    off = 0
    for name, value in full.items():
        gap, exact = (value - expected[name]).abs(), ~noise[name]
        assert gap.max() <= 2 * lr * updates * 1.001, name
        rounding = ~torch.isclose(value, expected[name], rtol=1e-5, atol=1e-6) & exact
        off += int(rounding.sum())
        assert updates > 1 or not rounding.any(), name
        assert gap[exact].max() <= 5e-3 * lr, name
    assert off <= 5e-4 * sum(v.numel() for v in full.values())
    assert sum(int(m.sum()) for m in noise.values()) < 0.01 * sum(m.numel() for m in noise.values())
    moved = [n for n in expected if not torch.equal(expected[n], before[n])]
    assert len(moved) > 0.9 * len(expected)  # the step really moved the weights


@pytest.mark.parametrize("keep_gathered", [False, True])
@pytest.mark.parametrize(
    ("split", "mini_batches"), [("interleaved", 1), ("one-rank-empty", 1), ("uneven", 2), ("token-balanced", 1)]
)
def test_two_fsdp_ranks_make_the_update_of_one_rank(rank_pair, tiny_model_dir, split, mini_batches, keep_gathered):
    spec = TrainerSpec(
        model=tiny_model_dir, lr=1e-2, micro_batch_size=3, mini_batches=mini_batches, keep_gathered=keep_gathered
    )
    groups = make_groups(6)
    single = FSDPEngine(spec)
    initial = {n: t.clone() for n, t in single.full_weights().items()}  # the live tensors on one CPU rank
    single.train_step(groups)

    workers = _fresh(rank_pair, spec)
    # a rank with nothing, or with fewer micro-batches, runs idle ones: the gathers of both ranks still meet.
    # With 2 mini-batches, update c takes each rank's c-th half: uneven shards whose halves together are the
    # single rank's c-th half (groups 0-2, then 3-5)
    shards = {
        "interleaved": [groups[0::2], groups[1::2]],
        "one-rank-empty": [groups, []],
        "uneven": [[groups[i] for i in (0, 1, 3, 4)], [groups[2], groups[5]]],
        "token-balanced": balanced_shards(groups, 2),  # groups cut sample by sample, advantages kept
    }[split]
    metrics = ray.get([w.train_step.remote(shard) for w, shard in zip(workers, shards, strict=True)])
    full, other = ray.get([w.full_weights.remote() for w in workers])

    assert other == {}  # gathered on rank 0 only
    _assert_same_update(full, single.full_weights(), initial, _noise_gradients(spec, groups), spec.lr, mini_batches)
    assert metrics[0]["updates"] == metrics[1]["updates"] == mini_batches


def test_sharded_checkpoint_round_trips_in_the_single_rank_format(rank_pair, tiny_model_dir, tmp_path):
    spec = TrainerSpec(model=tiny_model_dir, lr=1e-2, micro_batch_size=4)
    workers = _fresh(rank_pair, spec)
    for seed in range(2):
        groups = make_groups(4, seed)
        ray.get([w.train_step.remote(groups[r::2]) for r, w in enumerate(workers)])
    path = str(tmp_path / "ckpt")
    ray.get([w.save.remote(path) for w in workers])
    digest = ray.get([w.state_digest.remote() for w in workers])[0]

    fresh = _fresh(rank_pair, spec)
    assert ray.get([w.load.remote(path) for w in fresh]) == [2, 2]
    assert ray.get([w.state_digest.remote() for w in fresh])[0] == digest  # every parameter and AdamW moment
    single = FSDPEngine(spec)  # one format for any world size
    assert single.load(path) == 2 and single.state_digest() == digest

    groups = make_groups(4, seed=9)
    ray.get([w.train_step.remote(groups[r::2]) for r, w in enumerate(fresh)])
    full = ray.get([w.full_weights.remote() for w in fresh])[0]
    before = {n: t.clone() for n, t in single.full_weights().items()}
    single.train_step(groups)
    _assert_same_update(full, single.full_weights(), before, _noise_gradients(spec, groups), spec.lr)


def test_sharded_ranks_each_reset_their_whole_reference_to_the_gathered_policy(rank_pair, tiny_model_dir):
    """``ref_sync_every`` with ``ref_sync_mix=1`` on two ranks: each rank's whole (unsharded) reference becomes
    the policy the ranks hold in shards."""
    from rl.algorithm.losses import LossSpec

    spec = TrainerSpec(model=tiny_model_dir, lr=1e-2, loss=LossSpec(kl_coef=0.1), ref_sync_every=1, ref_sync_mix=1.0)
    workers = _fresh(rank_pair, spec)
    groups = make_groups(4)
    ray.get([w.train_step.remote(groups[r::2]) for r, w in enumerate(workers)])
    policy = ray.get([w.full_weights.remote() for w in workers])[0]

    def reference(worker: TrainerWorker) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in worker.engine.reference.named_parameters()}

    initial = FSDPEngine(spec).full_weights()
    for ref in ray.get([w.__ray_call__.remote(reference) for w in workers]):
        assert ref.keys() == policy.keys()
        assert all(torch.equal(ref[n], policy[n]) for n in ref)
        assert not all(torch.equal(ref[n], initial[n]) for n in ref)


def test_gathered_weights_give_vllm_the_sharded_trainers_logprobs(rank_pair, rollout_worker, tiny_model_dir, encode):
    from rl.loop.weight_channel import CpuWeightChannel

    prompt = encode(PROMPT_TEXT)
    workers = _fresh(rank_pair, TrainerSpec(model=tiny_model_dir, lr=5e-2))
    samples = sample_once(rollout_worker, "fsdp-0", prompt)
    group = Group(prompt=PromptRow("w", "3+1=", "4"), prompt_tokens=prompt, samples=samples, advantages=[1.0, 0.5])
    ray.get([w.train_step.remote(shard) for w, shard in zip(workers, [[group], []], strict=True)])
    channel = CpuWeightChannel(workers[0], [rollout_worker], peers=workers[1:])
    asyncio.run(channel.start())
    report = asyncio.run(channel.send(31))
    synced = sample_once(rollout_worker, "fsdp-1", prompt)
    gaps = []
    for s in synced:  # every rank computes (the forward gathers), rank 0's answer
        trainer_lps = ray.get([w.sequence_logprobs.remote(prompt, s.tokens) for w in workers])[0]
        gaps.append(np.abs(np.array(trainer_lps) - np.array(s.logprobs)).mean())
    assert report.dead == [] and all(v == 31 for s in synced for v in s.versions)
    assert float(np.mean(gaps)) < 1e-3
