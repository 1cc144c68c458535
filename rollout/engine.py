"""The inference-engine seam: what the rollout side asks of an engine, and the plain data it passes.

``InferenceEngine`` is the protocol the group runner, the rollout worker and the rollout benchmark are written
against; ``rollout/vllm_adapter.py`` implements it on vLLM (every vLLM call stays there). Another engine (SGLang,
say) is one more file implementing it, chosen in ``start_engine``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rl.config import LoraConfig


@dataclass(frozen=True)
class EngineSpec:
    """What an engine is built from (plain data, so it can be sent to a Ray actor)."""

    model: str
    load_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)  # from_pretrained's (ModelConfig.load_kwargs)
    dtype: str = "auto"
    max_model_len: int = 128
    kv_cache_bytes: int = 64 << 20
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True
    seed: int = 0
    weight_transfer: str = "cpu"  # cpu | nccl | ipc
    priority_scheduling: bool = False
    max_num_seqs: int | None = None  # cap on running sequences; None: vLLM's default
    stream_interval: int = 1  # a streamed request's output comes every this many tokens (and at its first and last)
    load_format: str = "auto"  # "dummy": random weights from the model's config.json alone (benchmarks at real shapes)
    skip_tokenizer_init: bool = False  # no tokenizer (a config-only model folder): token-id prompts, no texts
    lora: LoraConfig | None = None  # serve the policy as this adapter on the base model: weights are its tensors
    sleep_mode: bool = False  # vLLM sleep mode (GPU engines): ``sleep`` gives the engine's GPU memory back


@dataclass(frozen=True)
class SamplingSpec:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: every token
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    ignore_eos: bool = False  # benchmarks and tests: force every sample to run to max_tokens
    stop: tuple[str, ...] = ()  # stop strings: a sample ends once its text holds one, its tokens kept


@dataclass
class RequestTrace:
    """Live state of one request, updated as deltas stream in (readable by a pruning controller), or once when it
    ends if it was not streamed."""

    request_id: str
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    version_spans: list[tuple[int, int, int]] = field(default_factory=list)  # (version, start, end)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    resubmits: int = 0  # times a weight sync interrupted it and it was resubmitted

    def token_versions(self, default: int) -> list[int]:
        """One policy version per generated token (``default`` where the engine gave no span)."""
        versions = [default] * len(self.tokens)
        for version, start, end in self.version_spans:
            versions[start:end] = [version] * (min(end, len(self.tokens)) - start)
        return versions

    @property
    def generated(self) -> int:
        """Tokens sampled so far (every token of a request is the model's)."""
        return len(self.tokens)

    def stop(self) -> list[str]:
        """The ids to abort to stop this request: its own."""
        return [self.request_id]


class InferenceEngine(Protocol):
    """One engine serving many requests, each its own sample, with weights that change under it."""

    spec: EngineSpec
    version: int  # the policy version stamped on tokens generated now

    async def start(self) -> None:
        """Ready to serve: tokens carry ``version`` from here on."""

    async def generate(
        self,
        trace: RequestTrace,
        prompt_tokens: list[int],
        sampling: SamplingSpec,
        priority: int = 0,
        on_output: Callable[[RequestTrace], None] | None = None,
    ) -> RequestTrace:
        """Run one request to its end (stop, length or abort). With ``on_output`` the request is streamed: ``trace``
        fills as outputs arrive (every ``spec.stream_interval`` tokens) and ``on_output(trace)`` runs after each;
        without, ``trace`` fills once at the end: no per-token work, for callers that never read a running trace."""

    async def generate_n(
        self, request_id: str, prompt_tokens: list[int], sampling: SamplingSpec, n: int
    ) -> list[RequestTrace]:
        """One request with ``n`` completions by the engine's own parallel sampling (the benchmark's ceiling)."""

    async def abort(self, request_ids: list[str]) -> None:
        """Stop requests for good, by their trace ids."""

    async def pause(self, interrupt: bool = False) -> None:
        """Stop scheduling; in-flight requests are kept, or aborted for resubmission with ``interrupt``."""

    async def resume(self) -> None:
        """Schedule again after ``pause``."""

    async def sleep(self, level: int) -> None:
        """Give the GPU memory back until ``wake_up``: the KV cache is discarded, the weights moved to host memory
        (level 1) or discarded (level 2: the next ``load_weights`` brings them). Requests still running are aborted
        and resubmitted once the engine is fully awake, like a sync's ``interrupt``."""

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Take back the memory of ``tags`` (``"weights"``, ``"kv_cache"``; None: both): weights first, so a sync
        can load into them, then the KV cache; requests run again once both are back. Nothing on an engine awake."""

    async def is_sleeping(self) -> bool:
        """Whether any of the engine's memory sleeps or its scheduling is paused (the engine's own answer)."""

    async def load_weights(self, weights: bytes | str, version: int, interrupt: bool = False) -> float:
        """Load safetensors weights (bytes, or a file's path on this host) as ``version``: the whole model's, or
        with ``spec.lora`` the adapter's (PEFT names); returns seconds."""

    async def set_version(self, version: int) -> None:
        """Stamp tokens generated from now on with ``version``."""

    def num_unfinished(self) -> int:
        """Requests still running."""

    def shutdown(self) -> None:
        """Stop the engine and its processes."""


class EngineStartError(RuntimeError):
    """An engine that did not start (a model vLLM does not serve, too little memory, ...): the message is the error's
    type and reason on one line (``error_reason``), the error itself the cause. Unlike some of vLLM's errors, it
    pickles, so Ray hands it to the driver as it is."""


def error_reason(error: BaseException, limit: int = 200) -> str:
    """``Type: message`` on one line, cut at ``limit`` characters (vLLM lists every architecture it supports); for a
    pydantic ``ValidationError`` (vLLM's configs) the failed checks' messages."""
    from pydantic_core import ValidationError

    if isinstance(error, ValidationError):
        message = "; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())
    else:
        message = str(error)
    text = f"{type(error).__name__}: {' '.join(message.split())}"
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def start_engine(spec: EngineSpec) -> InferenceEngine:
    """Build the engine ``spec`` describes (vLLM: the only one so far); ``await engine.start()`` before use. Raises
    ``EngineStartError`` where it cannot be built."""
    from rl.rollout.vllm_adapter import VllmEngine

    try:
        return VllmEngine(spec)
    except Exception as e:
        raise EngineStartError(error_reason(e)) from e
