"""The trainer worker: the Ray actor around one rank's ``TrainEngine`` (``trainer/engine.py``).

It forms the data-parallel process group (gloo on CPU, NCCL on GPU) and turns the engine's whole weights into
what the weight channel carries (safetensors bytes or a shared-memory file) or pushes them through vLLM's native
transfer; every training call goes to the engine unchanged. With several ranks every call is made on every rank
in the same order (the engine's gathers meet); rank 0's answer is the one that counts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Protocol

import torch
from rl.trainer import rendezvous
from rl.trainer.engine import TrainEngine, TrainerSpec, make_train_engine

from rl.types import Group


class WeightSender(Protocol):
    """The sending side of a native weight transfer, built on rank 0 from the policy module."""

    def send(self) -> None:
        """Push the current parameters to every rollout engine."""


class TrainerWorker:
    """One data-parallel rank: a process-group member holding a ``TrainEngine``."""

    def __init__(self, spec: TrainerSpec, rank: int = 0, world_size: int = 1) -> None:
        self.rank, self.world_size = rank, world_size
        self.engine: TrainEngine = make_train_engine(spec, rank, world_size)
        self.listener = None  # rank 0's store socket, from rendezvous_address until join_process_group

    def rendezvous_address(self) -> str:
        """``tcp://IP:PORT`` on this worker's node address, already listened on, where the process group's store
        will be served (asked of rank 0)."""
        import ray

        self.listener = rendezvous.listen_on(ray.util.get_node_ip_address())
        return rendezvous.store_address(self.listener)

    def join_process_group(self, address: str) -> None:
        """Join the data-parallel group (gloo on CPU, NCCL on GPU) through the store at ``address`` and shard the
        engine; every rank calls it at once."""
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        store = rendezvous.tcp_store(address, self.rank, self.world_size, self.listener)
        self.listener = None
        torch.distributed.init_process_group(backend, store=store, rank=self.rank, world_size=self.world_size)
        self.engine.shard()

    def accumulate(self, groups: list[Group]) -> float:
        return self.engine.accumulate(groups)

    def finish_step(self) -> dict[str, float]:
        return self.engine.finish_step()

    def train_step(self, groups: list[Group]) -> dict[str, float]:
        return self.engine.train_step(groups)

    def release_memory(self) -> None:
        """Give the blocks torch's allocator caches on the GPU back to the device (rollout.sleep_while_training: the
        engines sharing the GPU take them while they are awake)."""
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def sequence_logprobs(self, prompt_tokens: list[int], response_tokens: list[int]) -> list[float]:
        return self.engine.sequence_logprobs(prompt_tokens, response_tokens)

    def full_weights(self) -> dict[str, torch.Tensor]:
        return self.engine.full_weights()

    def save(self, path: str) -> str:
        return self.engine.save(path)

    def load(self, path: str) -> int:
        return self.engine.load(path)

    def state_digest(self) -> str:
        return self.engine.state_digest()

    def weights_for_sync(self, path: str | None = None) -> bytes | str | None:
        """What the engines load (``TrainEngine.sync_weights``: HF-named parameters, tied weights once, or a LoRA
        adapter's tensors) in safetensors format: as bytes, or written to the file ``path`` (complete once it
        exists: written under a temporary name, then renamed) and its path. Rank 0 answers; other ranks take part
        in the gather and return None."""
        from safetensors.torch import save, save_file

        named = self.engine.sync_weights()
        if self.rank > 0:
            return None
        if path is None:
            return save(named)
        save_file(named, f"{path}.tmp")
        os.replace(f"{path}.tmp", path)
        return path

    def export_nbytes(self) -> int:
        """The size of one ``weights_for_sync`` export's tensors; every rank takes part in the gather, rank 0's
        count is the one."""
        return sum(t.numel() * t.element_size() for t in self.engine.sync_weights().values())

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def init_native_weight_sync(
        self, make_sender: Callable[[torch.nn.Module, list], WeightSender], rollout_handles: list
    ) -> None:
        """Rank 0: open a native weight transfer to the rollout workers (vLLM's ``nccl`` / ``ipc`` on GPUs):
        ``make_sender(policy module, rollout handles)`` builds the sender (the weight channel chooses it)."""
        if self.world_size > 1:
            raise ValueError("vLLM's native weight transfer sends whole parameters: it needs train.num_workers=1")
        self.sender = make_sender(self.engine.model, rollout_handles)

    def send_native_weights(self) -> float:
        """Push the current parameters through the native transfer; returns the seconds it took."""
        t0 = time.monotonic()
        self.sender.send()
        return time.monotonic() - t0

    def parameter_checksum(self) -> float:
        """Sum of all parameters (rank 0; every rank calls it when sharded)."""
        return float(sum(t.double().sum() for t in self.engine.full_weights().values()))

    def shutdown(self) -> None:
        if self.world_size > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
