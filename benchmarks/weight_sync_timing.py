"""Time one weight sync into a vLLM CPU engine by route: safetensors bytes through the engine's RPC, or a
shared-memory file the engine memory-maps (the cpu transport's two routes), with the phases inside the engine.

    python benchmarks/weight_sync_timing.py builtin:smollm2-135m --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from rl.rollout.vllm_extension import WeightLoaderExtension

EXTENSION = f"{__name__}.TimedExtension" if __name__ != "__main__" else "weight_sync_timing.TimedExtension"


class TimedExtension(WeightLoaderExtension):
    """The shipped loader, with each phase timed inside the engine process."""

    def timed_load(self, weights: bytes | str) -> tuple[float, float]:
        from safetensors import safe_open
        from safetensors.torch import load

        t0 = time.perf_counter()
        if isinstance(weights, str):
            with safe_open(weights, framework="pt") as f:
                named = [(name, f.get_tensor(name)) for name in f.keys()]
        else:
            named = list(load(weights).items())
        t1 = time.perf_counter()
        self._reload(named)
        return t1 - t0, time.perf_counter() - t1


async def main(model: str, repeats: int) -> None:
    import rl.rollout.vllm_adapter as adapter
    import torch
    from safetensors.torch import save, save_file
    from transformers import AutoModelForCausalLM

    from rl.models import resolve_model

    adapter.EXTENSION_CLS = EXTENSION
    path = resolve_model(model)
    engine = adapter.VllmEngine(adapter.EngineSpec(model=path, max_model_len=256, kv_cache_bytes=128 << 20))
    await engine.start()
    named = {
        n: p.detach().contiguous()
        for n, p in AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).named_parameters()
    }
    shm = f"/dev/shm/weight-sync-timing-{os.getpid()}.safetensors"
    print("| route | export s | pause s | engine call s | read s | reload s | resume s | total s |")
    print("|---|---|---|---|---|---|---|---|")
    for _ in range(repeats):
        for route in ("bytes", "file"):
            t = time.perf_counter()
            weights = save(named) if route == "bytes" else (save_file(named, shm) or shm)
            export = time.perf_counter() - t
            t = time.perf_counter()
            await engine.pause()
            pause = time.perf_counter() - t
            t = time.perf_counter()
            ((read, reload),) = await engine.engine.collective_rpc("timed_load", args=(weights,))
            call = time.perf_counter() - t
            t = time.perf_counter()
            await engine.resume()
            resume = time.perf_counter() - t
            total = export + pause + call + resume
            cells = [export, pause, call, read, reload, resume, total]
            print(f"| {route} | " + " | ".join(f"{c:.3f}" for c in cells) + " |", flush=True)
    os.unlink(shm)
    engine.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="builtin:NAME or a model directory")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")
    asyncio.run(main(args.model, args.repeats))
