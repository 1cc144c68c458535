"""Where should vLLM's engine core run on a CPU: in a process of its own (``AsyncLLM``, what the rollout adapter
uses) or in the caller's (``LLMEngine`` with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``)? Batches of 128 unstreamed
requests (16 random 8-token prompts x 8, 40 tokens, sampled-token log-probs, the adapter's CPU engine settings) on
the offline tiny model; prints wall time and the process tree's CPU per batch.

    VLLM_CPU_OMP_THREADS_BIND=0 python benchmarks/engine_process_probe.py async|inproc [BATCHES]

A probe for a design question, not a Tailor code path: ``LLMEngine`` gives an aborted request no final output, so
the rollout adapter cannot use it as it stands (benchmarks/README.md, "The engine core in-process").
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from typing import Any

import psutil

PROMPTS, SAMPLES, MAX_TOKENS = 16, 8, 40


def engine_kwargs() -> dict[str, Any]:
    from rl.models import resolve_model

    return dict(
        model=resolve_model("builtin:arith-tiny"),
        max_model_len=96,
        enforce_eager=True,
        seed=0,
        disable_log_stats=True,
        logprobs_mode="processed_logprobs",
        enable_prefix_caching=True,
        dtype="float32",
        block_size=32,
        kv_cache_memory_bytes=64 << 20,
        distributed_executor_backend="uni",
    )


def batch_requests(batch: int) -> list[tuple[str, list[int]]]:
    """(request id, prompt tokens) of one batch: 16 random prompts, 8 requests each."""
    rng = random.Random(batch)
    prompts = [[rng.randrange(4, 20) for _ in range(8)] for _ in range(PROMPTS)]
    return [(f"{batch}-{g}-{i}", p) for g, p in enumerate(prompts) for i in range(SAMPLES)]


def sampling() -> Any:
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    return SamplingParams(
        max_tokens=MAX_TOKENS,
        temperature=1.0,
        logprobs=0,
        flat_logprobs=True,
        output_kind=RequestOutputKind.FINAL_ONLY,
        detokenize=False,
    )


def tree_cpu() -> float:
    """User + system CPU seconds of this process and every process below it."""
    me = psutil.Process()
    return sum(sum(p.cpu_times()[:2]) for p in [me, *me.children(recursive=True)])


def run_inproc(batches: int) -> tuple[float, float, int]:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    engine = LLMEngine.from_engine_args(EngineArgs(**engine_kwargs()))
    params = sampling()

    def batch(b: int) -> int:
        for request_id, prompt in batch_requests(b):
            engine.add_request(request_id, {"prompt_token_ids": prompt}, params)
        tokens = 0
        while engine.has_unfinished_requests():
            tokens += sum(len(out.outputs[0].token_ids) for out in engine.step() if out.finished)
        return tokens

    batch(-1)  # warm-up
    cpu, t0 = tree_cpu(), time.monotonic()
    tokens = sum(batch(b) for b in range(batches))
    return time.monotonic() - t0, tree_cpu() - cpu, tokens


def run_async(batches: int) -> tuple[float, float, int]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    async def main() -> tuple[float, float, int]:
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_kwargs()))
        params = sampling()

        async def one(request_id: str, prompt: list[int]) -> int:
            async for out in engine.generate({"prompt_token_ids": prompt}, params, request_id=request_id):
                if out.finished:
                    return len(out.outputs[0].token_ids)
            return 0

        async def batch(b: int) -> int:
            return sum(await asyncio.gather(*[one(r, p) for r, p in batch_requests(b)]))

        await batch(-1)  # warm-up
        cpu, t0 = tree_cpu(), time.monotonic()
        tokens = 0
        for b in range(batches):
            tokens += await batch(b)
        result = time.monotonic() - t0, tree_cpu() - cpu, tokens
        engine.shutdown()
        return result

    return asyncio.run(main())


if __name__ == "__main__":  # the engine-core process is spawned: it imports this file again
    mode, batches = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    # both modes as the adapter runs vLLM: "0" keeps the model in the engine core (vLLM's CPU platform otherwise
    # moves it to a worker process of its own); AsyncLLM keeps its engine-core process whatever this says
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    wall, cpu, tokens = (run_inproc if mode == "inproc" else run_async)(batches)
    print(
        f"{mode}: {batches} batches, {wall / batches * 1e3:.1f} ms/batch wall, "
        f"{cpu / batches * 1e3:.1f} ms/batch CPU, {tokens / batches:.0f} tokens/batch",
        flush=True,
    )
    os._exit(0)  # skip vLLM's slow teardown
