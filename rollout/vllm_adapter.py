"""The one place Tailor talks to vLLM's Python API (it changes often; pin and adapt here).

``VllmEngine`` wraps ``AsyncLLM``: token-id prompts, one request per sample (``n=1``) so each sample
can be aborted on its own, sampled-token log-probs (``processed_logprobs``), pause/resume with
``mode="keep"``, weight loading and per-token weight versions.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

EXTENSION_CLS = "rl.rollout.vllm_extension.WeightLoaderExtension"


@dataclass(frozen=True)
class EngineSpec:
    """What an engine is built from (plain data, so it can be sent to a Ray actor)."""

    model: str
    dtype: str = "auto"
    max_model_len: int = 128
    kv_cache_bytes: int = 64 << 20
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True
    seed: int = 0
    weight_transfer: str = "cpu"  # cpu | nccl | ipc
    priority_scheduling: bool = False
    max_num_seqs: int | None = None  # cap on running sequences; None: vLLM's default


@dataclass(frozen=True)
class SamplingSpec:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    ignore_eos: bool = False  # benchmarks and tests: force every sample to run to max_tokens


@dataclass
class RequestTrace:
    """Live state of one request, updated as deltas stream in (readable by a pruning controller)."""

    request_id: str
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    version_spans: list[tuple[int, int, int]] = field(default_factory=list)  # (version, start, end)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    def token_versions(self, default: int) -> list[int]:
        """One policy version per generated token (``default`` where vLLM gave no span)."""
        versions = [default] * len(self.tokens)
        for version, start, end in self.version_spans:
            versions[start:end] = [version] * (min(end, len(self.tokens)) - start)
        return versions


def is_cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class VllmEngine:
    """An ``AsyncLLM`` plus the few calls the rollout worker needs."""

    def __init__(self, spec: EngineSpec) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.spec = spec
        self.cpu = is_cpu_platform()
        kwargs: dict[str, Any] = dict(
            model=spec.model,
            max_model_len=spec.max_model_len,
            enforce_eager=spec.enforce_eager,
            seed=spec.seed,
            disable_log_stats=True,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,
            worker_extension_cls=EXTENSION_CLS,
        )
        if spec.priority_scheduling:
            kwargs["scheduling_policy"] = "priority"
        if spec.max_num_seqs is not None:
            kwargs["max_num_seqs"] = spec.max_num_seqs
        if self.cpu:
            kwargs.update(
                dtype="float32" if spec.dtype == "auto" else spec.dtype,
                block_size=32,
                kv_cache_memory_bytes=spec.kv_cache_bytes,
                distributed_executor_backend="uni",
            )
        else:
            kwargs.update(
                dtype="bfloat16" if spec.dtype == "auto" else spec.dtype,
                gpu_memory_utilization=spec.gpu_memory_utilization,
            )
            if spec.weight_transfer in ("nccl", "ipc"):
                from vllm.config import WeightTransferConfig

                kwargs["weight_transfer_config"] = WeightTransferConfig(backend=spec.weight_transfer)
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
        self.version = 0

    async def start(self) -> None:
        """Stamp the initial weight version so every token carries an integer version."""
        await self.engine.update_weight_version(str(self.version))

    def _params(self, sampling: SamplingSpec, n: int = 1) -> Any:
        """vLLM sampling parameters: streamed deltas, sampled-token log-probs, no detokenization."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            n=n,
            max_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            ignore_eos=sampling.ignore_eos,
            logprobs=0,
            output_kind=RequestOutputKind.DELTA,
            detokenize=False,
        )

    async def generate(
        self, trace: RequestTrace, prompt_tokens: list[int], sampling: SamplingSpec, priority: int = 0
    ) -> RequestTrace:
        """Run one request to its end (stop, length or abort), filling ``trace`` as tokens arrive."""
        kwargs = {"priority": priority} if self.spec.priority_scheduling else {}
        async for out in self.engine.generate(
            {"prompt_token_ids": prompt_tokens}, self._params(sampling), request_id=trace.request_id, **kwargs
        ):
            c = out.outputs[0]
            _append_delta(trace, c)
            if out.finished:
                trace.finish_reason = str(c.finish_reason)
                trace.version_spans = [
                    (int(s.version), s.start, s.end) for s in (getattr(c, "weight_versions", None) or [])
                ]
        trace.finished = time.monotonic()
        return trace

    async def generate_n(
        self, request_id: str, prompt_tokens: list[int], sampling: SamplingSpec, n: int
    ) -> list[RequestTrace]:
        """One request with ``n`` completions (vLLM's own parallel sampling), run to its end.

        Benchmarks use it as the engine ceiling. vLLM can only abort all ``n`` children together, so
        the rollout path keeps sending ``n`` separate ``generate`` requests. Returns one trace per
        completion in completion-index order (ids ``"{request_id}#{i}"``): tokens, log-probs, finish
        reason and the time that completion finished; no weight versions.
        """
        traces = [RequestTrace(request_id=f"{request_id}#{i}") for i in range(n)]
        async for out in self.engine.generate(
            {"prompt_token_ids": prompt_tokens}, self._params(sampling, n), request_id=request_id
        ):
            for c in out.outputs:
                trace = traces[c.index]
                _append_delta(trace, c)
                if c.finish_reason is not None and trace.finish_reason is None:
                    trace.finish_reason = str(c.finish_reason)
                    trace.finished = time.monotonic()
        return traces

    async def abort(self, request_ids: list[str]) -> None:
        if request_ids:
            await self.engine.abort(request_ids)

    async def load_weights(self, blob: bytes, version: int) -> float:
        """Pause (in-flight requests kept), load safetensors bytes, bump the version, resume."""
        t0 = time.monotonic()
        await self.engine.pause_generation(mode="keep", clear_cache=True)
        try:
            await self.engine.collective_rpc("load_hf_weights_bytes", args=(blob,))
            await self.engine.update_weight_version(str(version))
            self.version = version
        finally:
            await self.engine.resume_generation()
        return time.monotonic() - t0

    def num_unfinished(self) -> int:
        return self.engine.get_num_unfinished_requests()

    def shutdown(self) -> None:
        self.engine.shutdown()


def _append_delta(trace: RequestTrace, completion: Any) -> None:
    """Add one streamed ``CompletionOutput`` delta (tokens and their log-probs) to ``trace``."""
    trace.tokens.extend(completion.token_ids)
    if completion.logprobs:
        trace.logprobs.extend(d[t].logprob for t, d in zip(completion.token_ids, completion.logprobs, strict=True))


def configure_cpu_threads(bind: str | None) -> None:
    """Pin this engine's OpenMP threads (two engines on one host must not share a core)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if bind:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind
