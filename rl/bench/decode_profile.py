"""Per-token decode latency by batch size, measured with a plain HF decode loop (the cost model's PTL).

``profile_decode`` prefills a random prompt for ``b`` sequences, then times ``steps`` greedy decode steps
with the KV cache (``use_cache=True``); the latency of one step is the per-token latency with ``b``
sequences running. The same function runs on a CPU or a GPU (``device="cuda"``).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence


def profile_decode(
    model_dir: str,
    batch_sizes: Sequence[int],
    steps: int = 32,
    device: str = "cpu",
    prompt_len: int = 16,
    warmup_steps: int = 4,
    repeats: int = 3,
    model_name: str | None = None,
    threads: int | None = None,
    random_weights: bool = False,
    cuda_graph: bool = False,
) -> dict:
    """``{"device", "model", "batch_sizes", "per_token_latency_s", ...}``: the median of ``repeats`` timings.

    float32 on CPU, bfloat16 on a GPU. ``threads`` sets torch's CPU threads (on a small shared host one
    thread matches vLLM's CPU engine, which binds its OpenMP threads to one core). ``random_weights`` builds
    the model from ``model_dir``'s config alone (decode latency does not depend on weight values), so a
    profile can be taken where the weights cannot be brought. ``cuda_graph`` (GPU only) replays one captured
    decode step over a static KV cache, as vLLM's GPU engine does, so the latency is the GPU's rather than
    Python's kernel-launch overhead. Raises ``ValueError`` for ``cuda_graph`` off a GPU and when prompt plus
    decode steps do not fit the model's positions.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if cuda_graph and not device.startswith("cuda"):
        raise ValueError("cuda_graph needs a CUDA device")

    if threads:
        torch.set_num_threads(threads)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    if random_weights:
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir), dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    model.eval()
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and prompt_len + warmup_steps + steps > limit:
        raise ValueError(f"prompt_len + warmup_steps + steps exceeds the model's {limit} positions")
    gen = torch.Generator().manual_seed(0)
    latencies = [
        statistics.median(
            _step_latency(model, b, prompt_len, warmup_steps, steps, device, gen, cuda_graph) for _ in range(repeats)
        )
        for b in batch_sizes
    ]
    return {
        "device": describe_device(device),
        "model": model_name or model_dir,
        "batch_sizes": [int(b) for b in batch_sizes],
        "per_token_latency_s": latencies,
        "method": "HF decode step captured in a CUDA graph, static KV cache, greedy"
        if cuda_graph
        else "HF decode loop, greedy, use_cache=True",
        "steps": steps,
        "prompt_len": prompt_len,
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "weights": "random (same config)" if random_weights else "pretrained",
    }


def _step_latency(
    model, batch: int, prompt_len: int, warmup: int, steps: int, device: str, gen, cuda_graph: bool
) -> float:
    """Seconds per decode step with ``batch`` sequences (after ``warmup`` untimed steps)."""
    import torch

    ids = torch.randint(0, model.config.vocab_size, (batch, prompt_len), generator=gen).to(device)
    with torch.inference_mode():
        step = (
            _GraphDecodeStep(model, ids, prompt_len + warmup + steps + 4)
            if cuda_graph
            else _eager_decode_step(model, ids)
        )
        start = 0.0
        for i in range(warmup + steps):
            if i == warmup:
                _sync(device)
                start = time.perf_counter()
            step()
        _sync(device)
    return (time.perf_counter() - start) / steps


def _eager_decode_step(model, ids) -> Callable[[], None]:
    """Prefill ``ids``; the returned call decodes one greedy token per sequence with the dynamic KV cache."""
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)

    def step() -> None:
        nonlocal out
        token = out.logits[:, -1:].argmax(-1)
        out = model(input_ids=token, past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)

    return step


class _GraphDecodeStep:
    """Prefill ``ids`` into a static KV cache and capture one decode step in a CUDA graph; a call replays it and
    feeds the greedy token back. The graph writes into the cache's memory, so this object keeps both alive."""

    def __init__(self, model, ids, cache_len: int) -> None:
        import torch
        from transformers import StaticCache

        self.cache = StaticCache(config=model.config, max_cache_len=cache_len)
        prompt_len = ids.shape[1]
        positions = torch.arange(prompt_len, device=ids.device)
        out = model(input_ids=ids, past_key_values=self.cache, cache_position=positions, logits_to_keep=1)
        self.token = out.logits[:, -1:].argmax(-1)
        self.position = torch.tensor([prompt_len], device=ids.device)

        def forward() -> torch.Tensor:
            return model(
                input_ids=self.token, past_key_values=self.cache, cache_position=self.position, logits_to_keep=1
            ).logits

        side = torch.cuda.Stream()  # warm up off the capture stream, as torch's CUDA-graph notes advise
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                forward()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = forward()

    def __call__(self) -> None:
        self.graph.replay()
        self.token.copy_(self.logits[:, -1:].argmax(-1))
        self.position.add_(1)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def describe_device(device: str) -> str:
    """A human label: the GPU's name, or the CPU's model and core count."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(device)
    return f"{_cpu_model()} ({os.cpu_count()} cores)"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
