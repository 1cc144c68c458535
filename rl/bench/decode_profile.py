"""Per-token decode latency by batch size, measured through Tailor's own vLLM engine (the cost model's PTL).

``profile_decode`` starts one engine with ``rollout.engine.start_engine`` and, for each batch size ``b`` and each
output mode, submits ``b`` requests at once (distinct random prompts, ``ignore_eos``) and times them, in the process
that consumes their outputs as Tailor's rollout worker does, from submission to the last finish. The per-token
latency is ``(T(b, steps) - T(b, 1)) / (steps - 1)``: subtracting a batch of one-token requests removes prefill,
admission and the round trip, leaving ``steps - 1`` decode steps with ``b`` sequences running. Median of ``repeats``.

Output modes, one column each: ``final`` (unstreamed, one output per request when it ends), ``delta`` (streamed,
every token) and ``interval{k}`` (streamed every ``k`` tokens). Streamed columns include the host's (Python) cost of
each output. A line ``a + c·b`` is fitted to every column; a streamed column's slope above ``final``'s is the host
cost of streaming per sequence-step, and times its interval the cost of one streamed output.

Wall time shows host work only where it does not overlap the engine's step (vLLM's engine core is a process of its
own). So the same differences are also taken in this process's CPU time (``time.process_time``: the frontend, where
outputs are built and consumed, without the engine core): the host's cost of a streamed output whether or not it
delays the step.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import random
import statistics
import time
from collections.abc import Sequence

from rl.output.provenance import describe_device, stack_versions
from rl.rollout.engine import EngineSpec, InferenceEngine, RequestTrace, SamplingSpec

log = logging.getLogger("rl.bench")
FINAL = "final"
MEASURE_TRIES = 3  # a decode step measured as not positive is measured again, at most this many times in all


def output_modes(stream_interval: int) -> dict[str, int | None]:
    """Column name -> the stream interval its requests use (``None``: unstreamed)."""
    return {FINAL: None, "delta": 1, f"interval{stream_interval}": stream_interval}


def check_options(
    model_dir: str, batch_sizes: Sequence[int], steps: int, prompt_len: int, stream_interval: int, repeats: int
) -> int:
    """The engine's ``max_model_len`` for these options; ``ValueError`` naming the first bad one."""
    from transformers import AutoConfig

    if not batch_sizes or min(batch_sizes) < 1 or list(batch_sizes) != sorted(set(batch_sizes)):
        raise ValueError(f"batch sizes must be increasing and >= 1, got {list(batch_sizes)}")
    if steps < 2:
        raise ValueError("steps must be at least 2 (a one-token batch is subtracted)")
    if prompt_len < 1 or repeats < 1:
        raise ValueError("prompt length and repeats must be at least 1")
    if stream_interval < 2:
        raise ValueError("stream interval must be at least 2 (1 is the delta column)")
    max_len = 32 * math.ceil((prompt_len + steps) / 32)
    limit = getattr(AutoConfig.from_pretrained(model_dir), "max_position_embeddings", None)
    if limit is not None and prompt_len + steps > limit:
        raise ValueError(f"prompt length + steps exceeds the model's {limit} positions")
    return min(max_len, limit) if limit is not None else max_len


def profile_decode(
    model_dir: str,
    batch_sizes: Sequence[int],
    steps: int = 128,
    stream_interval: int = 16,
    repeats: int = 3,
    prompt_len: int = 16,
    dummy_weights: bool = False,
    enforce_eager: bool | None = None,
    model_name: str | None = None,
    seed: int = 0,
) -> dict:
    """The profile JSON: ``per_token_latency_s`` (the ``final`` column, what ``DecodeProfile`` reads), every column
    in ``per_token_latency_by_output``, their line fits and the host cost of streaming.

    ``dummy_weights``: random weights from ``model_dir``'s config.json (latency does not depend on weight values).
    ``enforce_eager``: ``None`` is eager on a CPU, CUDA graphs on a GPU. Raises ``ValueError`` for bad options.
    """
    from rl.rollout.vllm_adapter import configure_cpu_threads, is_cpu_platform

    max_len = check_options(model_dir, batch_sizes, steps, prompt_len, stream_interval, repeats)
    configure_cpu_threads(None)
    cpu = is_cpu_platform()
    eager = cpu if enforce_eager is None else enforce_eager
    spec = engine_spec(model_dir, max(batch_sizes), max_len, dummy_weights, eager)
    modes = output_modes(stream_interval)
    columns, host_cpu = asyncio.run(_measure_on_new_engine(spec, batch_sizes, steps, modes, repeats, prompt_len, seed))
    fits = {mode: fit_line(batch_sizes, column) for mode, column in columns.items()}
    per_step, per_output = streaming_cost(fits, modes)
    cpu_fits = {mode: fit_line(batch_sizes, column) for mode, column in host_cpu.items()}
    return {
        "device": describe_device(cpu),
        "model": model_name or model_dir,
        "batch_sizes": [int(b) for b in batch_sizes],
        "per_token_latency_s": columns[FINAL],
        "engine": f"vllm {stack_versions().get('vllm', 'unknown')}",
        "method": "Tailor's vLLM engine: b requests at once, ignore_eos, (T(steps) - T(1)) / (steps - 1)",
        "per_token_latency_by_output": columns,
        "fit_by_output": fits,
        "host_s_per_seq_step": per_step,
        "host_s_per_streamed_output": per_output,
        "host_cpu_s_per_step_by_output": host_cpu,
        "host_cpu_fit_by_output": cpu_fits,
        "host_cpu_s_per_streamed_output": streaming_cost(cpu_fits, modes)[1],
        "steps": steps,
        "prompt_len": prompt_len,
        "repeats": repeats,
        "stream_interval": stream_interval,
        "max_num_seqs": spec.max_num_seqs,
        "enforce_eager": spec.enforce_eager,
        "weights": "dummy (random, from config.json)" if dummy_weights else "checkpoint",
    }


def engine_spec(model_dir: str, max_seqs: int, max_len: int, dummy_weights: bool, enforce_eager: bool) -> EngineSpec:
    """One engine where every batch runs at once (no admission wait, no preemption for lack of KV cache)."""
    from rl.bench.rollout import kv_cache_size

    return EngineSpec(
        model=model_dir,
        max_model_len=max_len,
        kv_cache_bytes=kv_cache_size(model_dir, max_len, max_seqs),
        enforce_eager=enforce_eager,
        max_num_seqs=max_seqs,
        load_format="dummy" if dummy_weights else "auto",
    )


async def _measure_on_new_engine(
    spec: EngineSpec,
    batch_sizes: Sequence[int],
    steps: int,
    modes: dict[str, int | None],
    repeats: int,
    prompt_len: int,
    seed: int,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Start the engine, measure every column (``measure``), stop it."""
    from transformers import AutoConfig

    from rl.rollout.engine import start_engine

    t0 = time.monotonic()
    log.info("starting the engine on %s", spec.model)
    engine = start_engine(spec)
    try:
        await engine.start()
        log.info("engine up in %.1f s", time.monotonic() - t0)
        prompts = RandomPrompts(AutoConfig.from_pretrained(spec.model).vocab_size, prompt_len, seed)
        return await measure(engine, batch_sizes, steps, modes, repeats, prompts)
    finally:
        engine.shutdown()


class RandomPrompts:
    """Distinct random token-id prompts (no two share a prefix block, so prefix caching never helps)."""

    def __init__(self, vocab_size: int, length: int, seed: int = 0) -> None:
        self.vocab_size, self.length = vocab_size, length
        self.rng = random.Random(seed)
        self.ids = itertools.count()

    def batch(self, b: int) -> list[list[int]]:
        return [[self.rng.randrange(self.vocab_size) for _ in range(self.length)] for _ in range(b)]

    def request_id(self) -> str:
        return f"profile-{next(self.ids)}"


async def measure(
    engine: InferenceEngine,
    batch_sizes: Sequence[int],
    steps: int,
    modes: dict[str, int | None],
    repeats: int,
    prompts: RandomPrompts,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall seconds and this process's CPU seconds per decode step, by batch size for every mode (medians of
    ``repeats``). One untimed pass per mode at the largest batch first; then the modes take turns within every
    repeat and batch size, so drift hits them alike. Each measured batch size and mode is a step of the progress
    line."""
    from rl.output.progress import Progress

    wall: dict[str, list[list[float]]] = {mode: [[] for _ in batch_sizes] for mode in modes}
    cpu: dict[str, list[list[float]]] = {mode: [[] for _ in batch_sizes] for mode in modes}
    bar = Progress(len(modes) * (1 + repeats * len(batch_sizes)), "profile", "batch")
    try:
        for mode, interval in modes.items():
            await decode_step(engine, batch_sizes[-1], steps, interval, prompts)
            bar.advance(f"warm-up, b={batch_sizes[-1]} {mode}")
        for _ in range(repeats):
            for i, b in enumerate(batch_sizes):
                for mode, interval in modes.items():
                    step_wall, step_cpu = await decode_step(engine, b, steps, interval, prompts)
                    wall[mode][i].append(step_wall)
                    cpu[mode][i].append(step_cpu)
                    bar.advance(f"b={b} {mode}: {step_wall * 1e3:.1f} ms a step")
    finally:
        bar.close()
    return _medians(wall), _medians(cpu)


def _medians(samples: dict[str, list[list[float]]]) -> dict[str, list[float]]:
    return {mode: [statistics.median(s) for s in by_size] for mode, by_size in samples.items()}


async def decode_step(
    engine: InferenceEngine, b: int, steps: int, interval: int | None, prompts: RandomPrompts
) -> tuple[float, float]:
    """Wall and host CPU seconds per decode step with ``b`` sequences: a ``steps``-token batch less a one-token
    batch. ``interval``: the stream interval (``None``: unstreamed). A pair whose difference is not positive (a
    stall of the machine during the short batch) is measured again, up to ``MEASURE_TRIES`` times."""
    if interval is not None:
        engine.set_stream_interval(interval)  # type: ignore[attr-defined]  # VllmEngine's, not the protocol's
    for _ in range(MEASURE_TRIES):
        long_wall, long_cpu = await time_batch(engine, prompts, b, steps, streamed=interval is not None)
        short_wall, short_cpu = await time_batch(engine, prompts, b, 1, streamed=interval is not None)
        if long_wall > short_wall:
            break
    return (long_wall - short_wall) / (steps - 1), (long_cpu - short_cpu) / (steps - 1)


async def time_batch(
    engine: InferenceEngine, prompts: RandomPrompts, b: int, tokens: int, streamed: bool
) -> tuple[float, float]:
    """Wall and this process's CPU seconds from submitting ``b`` requests of ``tokens`` tokens each to the last
    one's finish."""
    sampling = SamplingSpec(max_tokens=tokens, ignore_eos=True)
    on_output = _ignore if streamed else None
    batch = prompts.batch(b)
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(
        *(engine.generate(RequestTrace(prompts.request_id()), p, sampling, on_output=on_output) for p in batch)
    )
    return time.perf_counter() - wall, time.process_time() - cpu


def _ignore(trace: RequestTrace) -> None:
    """A streamed request's consumer that reads nothing: the adapter's own per-output work is what is timed."""


def fit_line(batch_sizes: Sequence[int], latencies: Sequence[float]) -> dict[str, float]:
    """Least-squares ``latency = a + c·b``: ``{"a_s": a, "c_s_per_seq": c}`` (``c = 0`` for a single size)."""
    n = len(batch_sizes)
    mean_b, mean_t = sum(batch_sizes) / n, sum(latencies) / n
    spread = sum((b - mean_b) ** 2 for b in batch_sizes)
    covariance = sum((b - mean_b) * (t - mean_t) for b, t in zip(batch_sizes, latencies, strict=True))
    c = covariance / spread if spread else 0.0
    return {"a_s": mean_t - c * mean_b, "c_s_per_seq": c}


def streaming_cost(
    fits: dict[str, dict[str, float]], modes: dict[str, int | None]
) -> tuple[dict[str, float], dict[str, float]]:
    """Each streamed mode's fitted slope above ``final``'s: seconds per sequence-step, and per streamed output (one
    every ``k`` sequence-steps)."""
    per_step = {mode: fits[mode]["c_s_per_seq"] - fits[FINAL]["c_s_per_seq"] for mode in modes if mode != FINAL}
    return per_step, {mode: per_step[mode] * k for mode, k in modes.items() if k is not None}
