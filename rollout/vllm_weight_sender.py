"""vLLM's native weight transfer, sending side (GPU only): the trainer's half of vLLM's RL weight-sync API.

Apart from the engine adapter (``vllm_adapter.py``) because it runs in the trainer's process: the weight channel
hands ``NativeWeightSender`` to the trainer actor (``init_native_weight_sync``), so ``trainer/`` never imports
``rollout/`` and every vLLM call stays in ``rollout/``.

Two trainer-side APIs exist. vLLM >= 0.27 has trainer engines (``WeightTransferTrainerFactory.trainer_init`` with a
``TrainerInitInfo``; one ``send_weights`` drives the whole round). vLLM 0.26, the last release built for torch 2.11,
has only the pieces: the trainer drives the start / update / finish calls itself around the NCCL broadcast
(``_Vllm026NcclSender``; its rendezvous ran on an H200 up to NCCL's refusal of two ranks on one GPU) or the CUDA IPC
handles of packed buffers (``_Vllm026IpcSender``). The receiving side is the same in both.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any


class NativeWeightSender:
    """vLLM's native weight transfer, sending side (GPU only): NCCL broadcast or CUDA IPC handles.

    Built on the trainer's rank 0 from the HF policy module and the rollout workers' Ray handles, which
    expose vLLM's ``VLLMWeightSyncClient`` methods (``RolloutWorker`` forwards them to its engine).
    """

    def __init__(self, backend: str, model: Any, rollout_handles: list[Any]) -> None:
        from vllm.distributed.weight_transfer import RayVLLMWeightSyncClient, nccl_engine

        client = RayVLLMWeightSyncClient(rollout_handles)
        if backend not in ("nccl", "ipc"):
            raise ValueError(f"unknown native weight-transfer backend {backend!r}; use 'nccl' or 'ipc'")
        if not hasattr(nccl_engine, "NCCLTrainerInitInfo"):  # vLLM 0.26
            self.engine: Any = (
                _Vllm026NcclSender(model, client, len(rollout_handles))
                if backend == "nccl"
                else _Vllm026IpcSender(model, client)
            )
            return
        from vllm.distributed.weight_transfer import ModuleSource, WeightTransferTrainerFactory

        if backend == "nccl":
            from vllm.utils.network_utils import get_ip, get_open_port

            # rank 0 is this sender; each rollout engine (tensor parallel 1) is one more NCCL rank
            info: Any = nccl_engine.NCCLTrainerInitInfo(
                master_address=get_ip(), master_port=get_open_port(), world_size=1 + len(rollout_handles), rank=0
            )
        else:
            from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

            info = IPCTrainerInitInfo(rank=0)
        self.engine = WeightTransferTrainerFactory.trainer_init(info, client=client, source=ModuleSource(model))

    def send(self) -> None:
        """start -> update (concurrently with the broadcast) -> finish on every rollout engine."""
        self.engine.send_weights()


class _Vllm026NcclSender:
    """vLLM 0.26's NCCL transfer driven by hand: one rendezvous, then per sync start -> (the engines receive while
    this process broadcasts, packed) -> finish. Parameters go in the trainer's dtype; the engine casts them as it
    loads."""

    def __init__(self, model: Any, client: Any, engines: int) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine
        from vllm.utils.network_utils import get_ip, get_open_port

        self.model, self.client, self.nccl = model, client, NCCLWeightTransferEngine
        group = {"master_address": get_ip(), "master_port": get_open_port(), "world_size": 1 + engines}
        with ThreadPoolExecutor(1) as pool:  # both sides block in the rendezvous
            engines_joined = pool.submit(client.init_weight_transfer_engine, {**group, "rank_offset": 1})
            self.group = NCCLWeightTransferEngine.trainer_init(group)
            engines_joined.result()

    def send_weights(self) -> None:
        params = [(name, p.detach()) for name, p in self.model.named_parameters()]
        update = {
            "names": [name for name, _ in params],
            "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in params],
            "shapes": [list(t.shape) for _, t in params],
            "packed": True,
        }
        self.client.start_weight_update()
        with ThreadPoolExecutor(1) as pool:
            received = pool.submit(self.client.update_weights, update)
            self.nccl.trainer_send_weights(iter(params), {"group": self.group, "packed": True})
            received.result()
        self.client.finish_weight_update()


class _Vllm026IpcSender:
    """vLLM 0.26's CUDA IPC transfer driven by hand, for a trainer and engines on one GPU: per sync start -> the
    parameters packed into buffers of vLLM's default size, each buffer's IPC handle sent to every engine, which loads
    from it before the next is packed -> finish. Nothing crosses the host. The handles reach the engine core
    pickled (``ipc_handles_pickled``): the adapter allows that for an ``ipc`` engine."""

    def __init__(self, model: Any, client: Any) -> None:
        from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferEngine

        self.model, self.client, self.ipc = model, client, IPCWeightTransferEngine
        client.init_weight_transfer_engine({})  # IPC needs no rendezvous

    def send_weights(self) -> None:
        params = ((name, p.detach()) for name, p in self.model.named_parameters())
        self.client.start_weight_update()
        self.ipc.trainer_send_weights(params, {"send_mode": self._update, "packed": True})
        self.client.finish_weight_update()

    def _update(self, info: Any) -> None:
        """One packed buffer to every engine; returns once they have loaded it (the buffer is then reused)."""
        import base64
        import pickle

        handles = base64.b64encode(pickle.dumps(info.ipc_handles)).decode()
        fields = ("names", "dtype_names", "shapes", "tensor_sizes", "packed")
        self.client.update_weights({**{f: getattr(info, f) for f in fields}, "ipc_handles_pickled": handles})
