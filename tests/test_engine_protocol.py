"""The inference-engine seam: vLLM's adapter implements ``InferenceEngine``; only it and the native weight sender (both
in rollout/) import vLLM; the group runner, rollout worker and rollout benchmark name the protocol, not the adapter's
class; the trainer package never imports the rollout package."""

import inspect
import re
from pathlib import Path

from rl.rollout.engine import InferenceEngine
from rl.rollout.vllm_adapter import VllmEngine

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["rl", "rollout", "trainer", "shaping", "kernels", "benchmarks"]


def protocol_methods() -> list[str]:
    return [n for n, v in vars(InferenceEngine).items() if inspect.isfunction(v) and not n.startswith("_")]


def test_the_vllm_adapter_implements_every_protocol_member_with_its_signature():
    assert {"generate", "abort", "pause", "resume", "load_weights", "set_version", "shutdown"} <= set(
        protocol_methods()
    )
    for name in protocol_methods():
        ours, theirs = inspect.signature(getattr(InferenceEngine, name)), inspect.signature(getattr(VllmEngine, name))
        assert ours == theirs, f"VllmEngine.{name}{theirs} differs from the protocol's {ours}"
        assert inspect.iscoroutinefunction(getattr(InferenceEngine, name)) == inspect.iscoroutinefunction(
            getattr(VllmEngine, name)
        ), name
    init = inspect.getsource(VllmEngine.__init__)
    for attribute in InferenceEngine.__annotations__:
        assert f"self.{attribute} =" in init, attribute


def test_only_the_adapter_imports_vllm_and_the_callers_name_the_protocol():
    importers = [
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if re.search(r"^\s*(import vllm|from vllm[ .])", path.read_text(), re.M)
    ]
    assert sorted(importers) == [
        "rollout/vllm_adapter.py",
        "rollout/vllm_inproc_client.py",
        "rollout/vllm_tool_parser.py",
        "rollout/vllm_weight_sender.py",
    ]
    for caller in ["rollout/group_runner.py", "rollout/worker.py", "rl/bench/rollout.py"]:
        text = (ROOT / caller).read_text()
        assert "InferenceEngine" in text and "VllmEngine" not in text, caller


def test_the_trainer_package_does_not_import_the_rollout_package():
    importers = [
        path.name for path in (ROOT / "trainer").rglob("*.py") if re.search(r"\brl\.rollout\b", path.read_text())
    ]
    assert importers == []


def test_the_worker_hands_native_weight_transfer_calls_to_the_engine_unchanged():
    """vLLM's weight-sync client calls these by name on the worker's actor handle; each reaches the engine."""
    import asyncio

    from rl.rollout.worker import RolloutWorker

    class Engine:
        def __init__(self) -> None:
            self.calls: list[tuple] = []

        def __getattr__(self, name: str):
            async def record(*args):
                self.calls.append((name, *args))

            return record

    worker = RolloutWorker.__new__(RolloutWorker)
    worker.engine = Engine()
    names = ["init_weight_transfer_engine", "start_weight_update", "update_weights", "finish_weight_update"]
    for name in names:
        method = getattr(RolloutWorker, name)
        assert method.__name__ == name and inspect.iscoroutinefunction(method)  # a Ray async actor method
        with_request = name in ("init_weight_transfer_engine", "update_weights")
        asyncio.run(getattr(worker, name)(*([{"request": name}] if with_request else [])))
    assert worker.engine.calls == [
        ("init_weight_transfer_engine", {"request": "init_weight_transfer_engine"}),
        ("start_weight_update",),
        ("update_weights", {"request": "update_weights"}),
        ("finish_weight_update",),
    ]


def test_an_output_adds_its_tokens_with_one_log_prob_each():
    from types import SimpleNamespace

    import pytest
    from rl.rollout.engine import RequestTrace
    from rl.rollout.vllm_adapter import _append_output

    def output(tokens: list[int], logprobs: list[float]) -> SimpleNamespace:
        return SimpleNamespace(token_ids=tokens, logprobs=SimpleNamespace(logprobs=logprobs), finish_reason=None)

    trace = RequestTrace(request_id="r")
    _append_output(trace, output([5, 6], [-0.1, -0.2]))
    _append_output(trace, output([], [-0.1, -0.2]))  # vLLM 0.26's last delta of an aborted stream (seen on a GPU)
    _append_output(trace, output([7], [-0.3]))
    assert trace.tokens == [5, 6, 7] and trace.logprobs == [-0.1, -0.2, -0.3]
    with pytest.raises(RuntimeError, match="2 log-probs for 1 tokens"):
        _append_output(trace, output([8], [-0.4, -0.5]))


def test_an_aborted_delta_merged_with_vllm_0_26s_repeat_keeps_its_own_log_probs():
    """vLLM 0.26's empty last delta of an aborted stream repeats every earlier log-prob; when the consumer is slower
    than the engine (seen on an H200), vLLM's output collector merges it into the pending delta. Built here with
    vLLM's own output classes and merge."""
    from rl.rollout.engine import RequestTrace
    from rl.rollout.vllm_adapter import _append_output
    from vllm.logprobs import FlatLogprobs, Logprob
    from vllm.outputs import CompletionOutput, RequestOutput

    def flat(values: list[float]) -> FlatLogprobs:
        out = FlatLogprobs()
        out.extend({7: Logprob(logprob=v, rank=1)} for v in values)
        return out

    def request(tokens: list[int], logprobs: list[float], finish: str | None) -> RequestOutput:
        completion = CompletionOutput(0, "", tokens, None, flat(logprobs), finish_reason=finish)
        return RequestOutput("r", None, [1], None, [completion], finished=finish is not None)

    trace = RequestTrace(request_id="r")
    first = request([5, 6, 7], [-0.1, -0.2, -0.3], None)
    _append_output(trace, first.outputs[0])
    pending = request([8], [-0.4], None)
    pending.add(request([], [-0.1, -0.2, -0.3, -0.4], "abort"), aggregate=True)  # the abort's repeat, merged
    assert len(pending.outputs[0].logprobs) == 5
    _append_output(trace, pending.outputs[0])
    assert trace.tokens == [5, 6, 7, 8] and trace.logprobs == [-0.1, -0.2, -0.3, -0.4]


def test_the_vllm_026_ipc_sender_drives_start_each_buffer_then_finish():
    """Sequencing only (CUDA IPC itself runs on a GPU: tests/test_gpu_weight_ipc.py): every parameter goes to vLLM's
    packer, each packed buffer's update reaches the engines with its handles pickled as 0.26's parser reads them."""
    import base64
    import pickle
    from types import SimpleNamespace

    import torch
    from rl.rollout.vllm_weight_sender import _Vllm026IpcSender

    calls: list[tuple] = []

    class Client:  # vLLM's weight-sync client: records each call
        def __getattr__(self, name: str):
            return lambda *args: calls.append((name, *args))

    class Packer:  # stands in for IPCWeightTransferEngine: two buffers of the parameters it is handed
        @staticmethod
        def trainer_send_weights(iterator, args):
            names = [name for name, _ in iterator]
            for i, half in enumerate((names[:1], names[1:])):
                n = len(half)
                info = SimpleNamespace(names=half, dtype_names=["float32"] * n, shapes=[[2]] * n,
                                       tensor_sizes=[8] * n, packed=args["packed"], ipc_handles={"gpu": i})  # fmt: skip
                args["send_mode"](info)

    sender = _Vllm026IpcSender(torch.nn.Linear(2, 2), Client())
    sender.ipc = Packer
    sender.send_weights()
    assert [c[0] for c in calls] == ["init_weight_transfer_engine", "start_weight_update", "update_weights",
                                     "update_weights", "finish_weight_update"]  # fmt: skip
    updates = [c[1] for c in calls if c[0] == "update_weights"]
    assert [u["names"] for u in updates] == [["weight"], ["bias"]] and all(u["packed"] for u in updates)
    assert [pickle.loads(base64.b64decode(u["ipc_handles_pickled"])) for u in updates] == [{"gpu": 0}, {"gpu": 1}]


def test_an_engine_error_is_said_on_one_line_its_checks_named_and_cut_short():
    """``error_reason``: vLLM's configs fail as pydantic errors whose first line names only the class; the reason is
    in the failed checks, and vLLM's list of every supported architecture is cut."""
    from pydantic import BaseModel, field_validator
    from rl.rollout.engine import error_reason

    class ModelConfig(BaseModel):
        architecture: str

        @field_validator("architecture")
        @classmethod
        def served(cls, value: str) -> str:
            raise ValueError(f"Model architectures [{value!r}] are not supported for now. Supported: {'A, ' * 200}")

    try:
        ModelConfig(architecture="FooForCausalLM")
    except Exception as e:
        reason = error_reason(e)
    assert reason.startswith("ValidationError: Model architectures ['FooForCausalLM'] are not supported for now.")
    assert len(reason) == 200 and reason.endswith(" ...")
    assert error_reason(ValueError("No available memory\n  for the cache blocks.")) == (
        "ValueError: No available memory for the cache blocks."
    )


def test_the_recipes_sampling_settings_reach_vllm_and_trls_mirror(tmp_path):
    """TRL's top_k, min_p and repetition_penalty, set as rollout.*, reach vLLM's sampling parameters (the adapter's
    one place) and the GRPOConfig that `rl bench peer` gives TRL; their defaults leave sampling as it was."""
    from rl.rollout.engine import SamplingSpec

    from rl.bench.trl_peer import grpo_arguments
    from rl.cli.common import recipe_path
    from rl.config import load_config
    from rl.loop.groups import rollout_sampling

    overrides = ["rollout.top_k=5", "rollout.min_p=0.05", "rollout.repetition_penalty=1.2", "rollout.top_p=0.9"]
    cfg = load_config(recipe_path("arith_tiny"), overrides)
    params = VllmEngine._params(None, rollout_sampling(cfg.rollout))  # type: ignore[arg-type]  # reads only its argument
    assert (params.top_k, params.min_p, params.repetition_penalty, params.top_p) == (5, 0.05, 1.2, 0.9)
    plain = VllmEngine._params(None, SamplingSpec(8))  # type: ignore[arg-type]
    assert (plain.top_k, plain.min_p, plain.repetition_penalty, plain.top_p) == (0, 0.0, 1.0, 1.0)
    trl = grpo_arguments(cfg, 0, 1, tmp_path, use_vllm=False)
    assert (trl["top_k"], trl["min_p"], trl["repetition_penalty"]) == (5, 0.05, 1.2)
