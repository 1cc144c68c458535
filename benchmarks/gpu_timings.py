"""GPU timings that need no vLLM: the Triton log-prob kernel vs its torch reference, and a bf16 train step.

Run on a CUDA machine from the repository root (Tailor installed): ``python benchmarks/gpu_timings.py
--model-config DIR --out FILE.json``. ``DIR`` holds a model's config and tokenizer; the weights are random
(timings do not depend on weight values). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import torch
from rl.kernels.token_logprobs import token_logprobs_reference
from rl.kernels.triton_logprobs import triton_token_logprobs
from rl.trainer.engine import TrainerSpec
from rl.trainer.worker import TrainerWorker

from rl.types import Group, PromptRow, Sample


def _time_cuda(fn, repeats: int = 20) -> tuple[float, int]:
    """Median seconds of ``fn()`` and its peak extra GPU memory in bytes."""
    fn()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2], torch.cuda.max_memory_allocated() - base


def logprob_kernel_timings(rows: int, vocab: int) -> dict:
    """Triton kernel vs torch reference on ``[rows, vocab]`` bf16 logits: seconds, peak memory, max error."""
    logits = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16) * 4
    targets = torch.randint(0, vocab, (rows,), device="cuda")
    with torch.no_grad():
        t_ref, m_ref = _time_cuda(lambda: token_logprobs_reference(logits, targets))
        t_tri, m_tri = _time_cuda(lambda: triton_token_logprobs(logits, targets))
        err = (token_logprobs_reference(logits, targets) - triton_token_logprobs(logits, targets)).abs().max()
    return {
        "rows": rows,
        "vocab": vocab,
        "torch_s": t_ref,
        "triton_s": t_tri,
        "speedup": t_ref / t_tri,
        "torch_peak_mib": m_ref / 2**20,
        "triton_peak_mib": m_tri / 2**20,
        "max_abs_error": float(err),
    }


def _random_groups(vocab: int, groups: int, samples: int, prompt_len: int, max_len: int, seed: int) -> list[Group]:
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        items = []
        for i in range(samples):
            n = rng.randint(max_len // 8, max_len)
            items.append(Sample(i, [rng.randrange(vocab) for _ in range(n)], [-2.0] * n, [0] * n, "stop"))
        advantages = [rng.uniform(-1, 1) for _ in range(samples)]
        prompt = [rng.randrange(vocab) for _ in range(prompt_len)]
        out.append(Group(PromptRow(f"p{g}", "", ""), prompt, items, advantages))
    return out


def train_step_timings(
    config_dir: str, groups: int, samples: int, max_len: int, micro_batch: int, checkpointing: bool
) -> dict:
    """Seconds per ``train_step`` (bf16 autocast, fp32 weights, AdamW) on random-weight copies of the model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    work = Path(tempfile.mkdtemp())
    try:
        AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config_dir)).save_pretrained(work)
        for f in Path(config_dir).glob("tokenizer*"):
            shutil.copy(f, work)
        spec = TrainerSpec(model=str(work), lr=1e-6, micro_batch_size=micro_batch, gradient_checkpointing=checkpointing)
        worker = TrainerWorker(spec)
        batch = _random_groups(worker.model.config.vocab_size, groups, samples, 64, max_len, seed=0)
        tokens = sum(len(g.prompt_tokens) + len(s.tokens) for g in batch for s in g.samples)
        try:
            worker.train_step(batch)
        except torch.cuda.OutOfMemoryError:
            return {"micro_batch_size": micro_batch, "gradient_checkpointing": checkpointing, "out_of_memory": True}
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times, metrics = [], {}
        for _ in range(3):
            start = time.perf_counter()
            metrics = worker.train_step(batch)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        step = sorted(times)[1]
        return {
            "groups": groups,
            "samples": samples,
            "tokens_per_step": tokens,
            "micro_batch_size": micro_batch,
            "gradient_checkpointing": checkpointing,
            "step_s": step,
            "tokens_per_s": tokens / step,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "loss_finite": bool(torch.isfinite(torch.tensor(metrics["loss"]))),
            "skipped_nonfinite": metrics["skipped_nonfinite"],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-config", required=True, help="folder with config.json and tokenizer files")
    parser.add_argument("--max-len", type=int, default=512, help="longest response of the train-step batch")
    parser.add_argument(
        "--train-variants",
        default="16,64,64+ckpt",
        help="comma list of micro-batch sizes; '+ckpt' turns on gradient checkpointing",
    )
    parser.add_argument("--skip-kernels", action="store_true", help="time the train step only")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    variants = [(int(v.removesuffix("+ckpt")), v.endswith("+ckpt")) for v in args.train_variants.split(",")]
    shapes = [] if args.skip_kernels else [(4096, 49152), (16384, 49152), (8192, 151936)]
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "model_config": json.loads((Path(args.model_config) / "config.json").read_text()),
        "logprob_kernel": [logprob_kernel_timings(r, v) for r, v in shapes],
        "train_step": [train_step_timings(args.model_config, 16, 8, args.max_len, mb, ck) for mb, ck in variants],
    }
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
