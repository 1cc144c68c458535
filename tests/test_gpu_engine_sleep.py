"""vLLM sleep mode on one GPU (``rollout.sleep_while_training``): a sleeping engine gives its share of the GPU
back, wakes its weights, takes a sync through the real channel while its KV cache still sleeps, and then samples
with the trainer's weights. Skipped without exactly one CUDA GPU (run on the device machine:
``bash benchmarks/gpu/run_on_device.sh tests``)."""

import asyncio
import subprocess

import pytest
import ray
import torch
from rl.rollout.engine import EngineSpec
from rl.trainer.engine import TrainerSpec
from rl.trainer.worker import TrainerWorker
from test_weight_sync import PROMPT_TEXT, actor_gap, sample_once

from rl.loop.weight_channel import make_weight_channel
from rl.types import Group, PromptRow

pytestmark = [
    pytest.mark.skipif(torch.cuda.device_count() != 1, reason="needs one CUDA GPU (run on the device machine)"),
    pytest.mark.integration,
]
SHARE = 0.3  # the engine's gpu_memory_utilization


def gpu_used_bytes() -> int:
    """The GPU's memory in use, every process's (nvidia-smi: this process holds no CUDA context of its own)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True, text=True
    )
    return int(out.stdout.split()[0]) << 20


def test_a_sleeping_engine_gives_its_memory_back_and_wakes_with_the_synced_weights(ray_session, tiny_model_dir, encode):
    from rl.rollout.worker import remote_rollout_worker

    spec = EngineSpec(model=tiny_model_dir, max_model_len=128, gpu_memory_utilization=SHARE, sleep_mode=True)
    worker = remote_rollout_worker(num_cpus=1, num_gpus=0.5).remote(spec)
    trainer = ray.remote(num_cpus=1, num_gpus=0.5)(TrainerWorker).remote(TrainerSpec(model=tiny_model_dir, lr=5e-2))
    prompt = encode(PROMPT_TEXT)
    try:
        samples = sample_once(worker, "sleep-0", prompt)
        awake = gpu_used_bytes()
        ray.get(worker.sleep.remote(2))
        asleep = gpu_used_bytes()
        assert ray.get(worker.is_sleeping.remote())
        share = SHARE * torch.cuda.get_device_properties(0).total_memory
        print(f"sleep freed {(awake - asleep) / 2**30:.2f} GiB of the engine's {share / 2**30:.2f} GiB share")
        assert awake - asleep > share / 2  # the KV cache (most of the share) and the weights

        group = Group(prompt=PromptRow("w", "3+1=", "4"), prompt_tokens=prompt, samples=samples, advantages=[1.0, 0.5])
        ray.get(trainer.train_step.remote([group]))
        ray.get(trainer.release_memory.remote())
        ray.get(worker.wake_up.remote(["weights"]))
        report = asyncio.run(make_weight_channel("cpu", [trainer], [worker]).send(7))
        assert ray.get(worker.is_sleeping.remote())  # the KV cache still sleeps: no request is scheduled yet
        ray.get(worker.wake_up.remote(["kv_cache"]))
        assert not ray.get(worker.is_sleeping.remote())
        assert gpu_used_bytes() > asleep + share / 2  # the whole share again

        synced = sample_once(worker, "sleep-1", prompt)
        gap = actor_gap(trainer, synced, prompt)
        print(f"sync into the woken weights {report.seconds:.3f} s; log-prob gap {gap:.4f}")
        assert all(v == 7 for s in synced for v in s.versions)
        assert gap < 0.05  # bf16 engine against the trainer: near, not bit-equal; level 2 discarded the old weights
    finally:
        ray.get(worker.shutdown.remote())
        ray.kill(worker)
        ray.kill(trainer)
