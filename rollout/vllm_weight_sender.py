"""vLLM's native weight transfer, sending side (GPU only): the trainer's half of vLLM's RL weight-sync API.

Apart from the engine adapter (``vllm_adapter.py``) because it runs in the trainer's process: the weight channel
hands ``NativeWeightSender`` to the trainer actor (``init_native_weight_sync``), so ``trainer/`` never imports
``rollout/`` and every vLLM call stays in ``rollout/``.
"""

from __future__ import annotations

from typing import Any


class NativeWeightSender:
    """vLLM's native weight transfer, sending side (GPU only): NCCL broadcast or CUDA IPC handles.

    Built on the trainer's rank 0 from the HF policy module and the rollout workers' Ray handles, which
    expose vLLM's ``VLLMWeightSyncClient`` methods (``RolloutWorker`` forwards them to its engine).
    Written against vLLM 0.32's documented trainer API; not run here (no GPU with vLLM was available).
    """

    def __init__(self, backend: str, model: Any, rollout_handles: list[Any]) -> None:
        from vllm.distributed.weight_transfer import (
            ModuleSource,
            RayVLLMWeightSyncClient,
            WeightTransferTrainerFactory,
        )

        if backend == "nccl":
            from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo
            from vllm.utils.network_utils import get_ip, get_open_port

            # rank 0 is this sender; each rollout engine (tensor parallel 1) is one more NCCL rank
            info = NCCLTrainerInitInfo(
                master_address=get_ip(), master_port=get_open_port(), world_size=1 + len(rollout_handles), rank=0
            )
        elif backend == "ipc":
            from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

            info = IPCTrainerInitInfo(rank=0)
        else:
            raise ValueError(f"unknown native weight-transfer backend {backend!r}; use 'nccl' or 'ipc'")
        self.engine = WeightTransferTrainerFactory.trainer_init(
            info, client=RayVLLMWeightSyncClient(rollout_handles), source=ModuleSource(model)
        )

    def send(self) -> None:
        """start -> update (concurrently with the broadcast) -> finish on every rollout engine."""
        self.engine.send_weights()
