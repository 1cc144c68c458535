"""After a sync, vLLM's behaviour log-probs equal the trainer's recomputed log-probs (fp32)."""

import time
from types import SimpleNamespace

import numpy as np
import pytest
import ray
from rl.rollout.engine import EngineSpec, SamplingSpec
from rl.shaping.plain import PlainController
from rl.shaping.policy import GroupPlan
from rl.trainer.engine import TrainerSpec
from rl.trainer.worker import TrainerWorker
from small_runs import base_weights

from rl.config import LoraConfig
from rl.types import Group, PromptRow

pytestmark = pytest.mark.integration  # starts real Ray or vLLM

PROMPT_TEXT = "3+1="


def sample_once(worker, tag: str, prompt: list[int]):
    plan = GroupPlan(prompt_id="w", n_launch=2, m_keep=2)
    result = ray.get(worker.generate_group.remote(tag, prompt, SamplingSpec(max_tokens=20), PlainController(plan)))
    return result.samples


def mean_abs_gap(trainer: TrainerWorker, samples, prompt: list[int]) -> float:
    gaps = [
        np.abs(np.array(trainer.sequence_logprobs(prompt, s.tokens)) - np.array(s.logprobs)).mean() for s in samples
    ]
    return float(np.mean(gaps))


def actor_gap(trainer, samples, prompt: list[int]) -> float:
    """``mean_abs_gap`` against a trainer actor (``ray.remote(TrainerWorker)``)."""
    remote = SimpleNamespace(sequence_logprobs=lambda p, tokens: ray.get(trainer.sequence_logprobs.remote(p, tokens)))
    return mean_abs_gap(remote, samples, prompt)


LORA_ADAPTER = LoraConfig(rank=4, sync="adapter")  # served by vLLM's LoRA support: a sync sends the adapter only
LORA_MERGED = LoraConfig(rank=4, sync="merged")


@pytest.fixture(scope="module")
def lora_rollout_worker(ray_session, tiny_model_dir):
    """A second real engine, started with LoRA serving (rank 4 adapters)."""
    from rl.rollout.worker import remote_rollout_worker

    spec = EngineSpec(model=tiny_model_dir, max_model_len=128, lora=LORA_ADAPTER)
    worker = remote_rollout_worker(num_cpus=1).remote(spec, "0")
    ray.get(worker.stats.remote(), timeout=900)
    yield worker
    ray.get(worker.shutdown.remote())
    ray.kill(worker)


def test_a_worker_started_with_a_cpu_bind_runs_every_thread_on_those_cores(lora_rollout_worker):
    """``lora_rollout_worker`` was started with the bind "0", as the recipes start theirs."""

    def cores(worker):
        import os

        return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}

    assert ray.get(lora_rollout_worker.__ray_call__.remote(cores)) == {frozenset({0})}


@pytest.mark.parametrize("lora", [None, LORA_MERGED, LORA_ADAPTER], ids=["full", "lora-merged", "lora-adapter"])
def test_sync_makes_engine_logprobs_match_trainer(request, tiny_model_dir, encode, lora):
    """Full fine-tuning; LoRA with merged weights synced; LoRA served as an adapter, only its tensors synced."""
    worker = request.getfixturevalue("lora_rollout_worker" if lora is LORA_ADAPTER else "rollout_worker")
    prompt = encode(PROMPT_TEXT)
    trainer = TrainerWorker(TrainerSpec(model=tiny_model_dir, lr=5e-2, lora=lora))
    # move the trainer away from the engine's weights with one real GRPO step; both advantages positive, so two
    # identical samples (the tiny model often answers alike) cannot cancel into a zero gradient and no update
    samples = sample_once(worker, "ws-0", prompt)
    group = Group(prompt=PromptRow("w", "3+1=", "4"), prompt_tokens=prompt, samples=samples, advantages=[1.0, 0.5])
    trainer.train_step([group])

    before = mean_abs_gap(trainer, sample_once(worker, "ws-1", prompt), prompt)
    assert before > 1e-2, f"trainer and engine should differ before the sync, gap {before}"

    blob = trainer.weights_for_sync()
    full_bytes = len(base_weights(tiny_model_dir))
    assert (len(blob) < full_bytes / 5) == (lora is LORA_ADAPTER)  # the adapter alone is a fraction of the model
    seconds = ray.get(worker.load_weights.remote(blob, 7))
    assert seconds > 0
    synced = sample_once(worker, "ws-2", prompt)
    after = mean_abs_gap(trainer, synced, prompt)
    assert after < 1e-3, f"after the sync the gap is {after}"
    assert all(v == 7 for s in synced for v in s.versions)


def test_in_flight_request_survives_a_sync_with_version_spans(rollout_worker, tiny_model_dir, encode):
    trainer = TrainerWorker(TrainerSpec(model=tiny_model_dir))
    blob = trainer.weights_for_sync()
    plan = GroupPlan(prompt_id="k", n_launch=1, m_keep=1)
    long_run = rollout_worker.generate_group.remote(
        "keep-1", encode(PROMPT_TEXT), SamplingSpec(max_tokens=120, ignore_eos=True), PlainController(plan)
    )
    ray.get(rollout_worker.load_weights.remote(blob, 11))  # paused with mode="keep", then resumed
    sample = ray.get(long_run).samples[0]
    assert sample.finish_reason == "length" and len(sample.tokens) == 120
    assert sample.versions[-1] == 11
    assert sample.versions == sorted(sample.versions)  # spans are contiguous and ordered


def test_interrupted_request_is_resubmitted_with_its_partial_response(rollout_worker, tiny_model_dir, encode):
    trainer = TrainerWorker(TrainerSpec(model=tiny_model_dir))
    blob = trainer.weights_for_sync()
    old = ray.get(rollout_worker.stats.remote())["version"]
    plan = GroupPlan(prompt_id="r", n_launch=1, m_keep=1)
    long_run = rollout_worker.generate_group.remote(
        "resubmit-1", encode(PROMPT_TEXT), SamplingSpec(max_tokens=120, ignore_eos=True), PlainController(plan)
    )
    while ray.get(rollout_worker.stats.remote())["unfinished"] == 0:  # wait until the request is running
        time.sleep(0.01)
    ray.get(rollout_worker.load_weights.remote(blob, old + 1, True))  # pause "abort", load, resume, resubmit
    result = ray.get(long_run)
    sample = result.samples[0]
    assert result.resubmits == 1
    assert sample.finish_reason == "length" and len(sample.tokens) == 120  # budget = partial + continuation
    assert len(sample.logprobs) == 120
    assert sample.versions[0] == old and sample.versions[-1] == old + 1
    assert sample.versions == sorted(sample.versions)


def _stamps_versions(worker, value: bool) -> None:
    ray.get(worker.__ray_call__.remote(lambda w: setattr(w.engine, "stamps_versions", value)))


def test_without_version_stamping_a_sync_resubmits_in_flight_requests(rollout_worker, tiny_model_dir, encode):
    """vLLM 0.26 (the GPU machines' torch) has no per-token weight versions: a sync there interrupts and resubmits
    in-flight requests even when asked to keep them, so every token's version is still exact."""
    blob = TrainerWorker(TrainerSpec(model=tiny_model_dir)).weights_for_sync()
    old = ray.get(rollout_worker.stats.remote())["version"]
    plan = GroupPlan(prompt_id="nv", n_launch=1, m_keep=1)
    _stamps_versions(rollout_worker, False)
    try:
        long_run = rollout_worker.generate_group.remote(
            "unstamped-1", encode(PROMPT_TEXT), SamplingSpec(max_tokens=120, ignore_eos=True), PlainController(plan)
        )
        while ray.get(rollout_worker.stats.remote())["unfinished"] == 0:
            time.sleep(0.01)
        ray.get(rollout_worker.load_weights.remote(blob, old + 1))  # keep asked for, interrupt done
        result = ray.get(long_run)
    finally:
        _stamps_versions(rollout_worker, True)
    sample = result.samples[0]
    assert result.resubmits == 1 and len(sample.tokens) == len(sample.logprobs) == 120
    assert sample.versions[0] == old and sample.versions[-1] == old + 1
    assert sample.versions == sorted(sample.versions)


def test_channel_syncs_through_a_shared_memory_file(rollout_worker, tiny_model_dir, encode):
    import asyncio
    from pathlib import Path

    from rl.loop.weight_channel import CpuWeightChannel

    prompt = encode(PROMPT_TEXT)
    trainer = ray.remote(TrainerWorker).remote(TrainerSpec(model=tiny_model_dir, lr=5e-2))
    samples = sample_once(rollout_worker, "shm-0", prompt)
    group = Group(prompt=PromptRow("w", "3+1=", "4"), prompt_tokens=prompt, samples=samples, advantages=[-1.0, 1.0])
    ray.get(trainer.train_step.remote([group]))
    channel = CpuWeightChannel(trainer, [rollout_worker])
    asyncio.run(channel.start())
    assert channel.host is not None  # one machine: the route is a file in shared memory

    def gap(tag: str, version: int) -> float:
        synced = sample_once(rollout_worker, tag, prompt)
        assert all(v == version for s in synced for v in s.versions)
        return actor_gap(trainer, synced, prompt)

    exported = channel.export()
    assert exported.path.startswith("/dev/shm/")
    report = asyncio.run(channel.send(21, exported))
    assert report.dead == [] and not Path(exported.path).exists()  # loaded, then removed
    assert gap("shm-1", 21) < 1e-3

    ray.get(trainer.train_step.remote([group]))
    channel.nodes[rollout_worker] = "another-node"  # as a replacement started on another host would be
    exported = channel.export()
    asyncio.run(channel.send(22, exported))  # the file's bytes go through the object store instead
    assert not Path(exported.path).exists()
    assert gap("shm-2", 22) < 1e-3
    ray.kill(trainer)


def test_too_little_shared_memory_sends_through_the_object_store(rollout_worker, tiny_model_dir, encode, monkeypatch):
    """A container's /dev/shm holds 64 MB unless given more (SmolLM2's export alone is 513 MB): with less free than
    two exports, the channel says so once and sends the weights through Ray's object store, still exactly."""
    import asyncio
    import logging
    from types import SimpleNamespace

    import rl.loop.weight_channel as weight_channel

    prompt = encode(PROMPT_TEXT)
    trainer = ray.remote(TrainerWorker).remote(TrainerSpec(model=tiny_model_dir, lr=5e-2))
    nbytes = ray.get(trainer.export_nbytes.remote())
    assert 0 < len(ray.get(trainer.weights_for_sync.remote())) - nbytes < 64 * 1024  # the export: tensors + header
    free = weight_channel.SHARED_EXPORTS * nbytes - 1
    monkeypatch.setattr(weight_channel.shutil, "disk_usage", lambda path: SimpleNamespace(free=free))
    samples = sample_once(rollout_worker, "small-shm-0", prompt)
    group = Group(prompt=PromptRow("w", "3+1=", "4"), prompt_tokens=prompt, samples=samples, advantages=[-1.0, 1.0])
    ray.get(trainer.train_step.remote([group]))
    channel = weight_channel.CpuWeightChannel(trainer, [rollout_worker])
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger(weight_channel.log.name).addHandler(handler)
    try:
        asyncio.run(channel.start())
    finally:
        logging.getLogger(weight_channel.log.name).removeHandler(handler)
    assert channel.host is None  # the object store's route
    assert [r.getMessage().split(";")[0] for r in records] == [
        f"weights: /dev/shm has {free / 2**20:.0f} MB free, less than the 2 exports of {nbytes / 2**20:.0f} MB a sync "
        "may hold there at once"
    ]
    exported = channel.export()
    assert exported.path is None
    asyncio.run(channel.send(31, exported))
    synced = sample_once(rollout_worker, "small-shm-1", prompt)
    assert all(v == 31 for s in synced for v in s.versions)
    trainer_lps = [ray.get(trainer.sequence_logprobs.remote(prompt, s.tokens)) for s in synced]
    gaps = [np.abs(np.array(t) - np.array(s.logprobs)).mean() for t, s in zip(trainer_lps, synced, strict=True)]
    assert float(np.mean(gaps)) < 1e-3
    ray.kill(trainer)
