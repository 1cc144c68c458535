"""An ``InferenceEngine`` whose samples end where a length model says, not at an end-of-sequence token.

For benchmarks on config-only models (random weights: their tokens never stop meaningfully). Each request runs
with ``ignore_eos`` and ``max_tokens`` set to its drawn length (``LengthModel``); a sample that ends there below
the cap is reported as a natural stop, so the shaping controllers see the finish events a real model gives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from rl.bench.length_model import LengthModel, stable_key
from rl.rollout.engine import EngineSpec, InferenceEngine, RequestTrace, SamplingSpec


class SyntheticLengthEngine:
    """Wraps ``inner``: lengths from ``lengths``, seeded by ``seed``; everything else passes through."""

    def __init__(self, inner: InferenceEngine, lengths: LengthModel, seed: int = 0) -> None:
        self.inner = inner
        self.lengths = lengths
        self.seed = seed

    @property
    def spec(self) -> EngineSpec:
        return self.inner.spec

    @property
    def version(self) -> int:
        return self.inner.version

    def drawn_length(self, request_id: str, prompt_tokens: list[int], cap: int) -> int:
        """The length of request ``"{tag}-{group}-{index}"`` on ``prompt_tokens`` under ``cap``.

        The prompt's tokens key its median; the tag's letters (the bench's pass kind: warm-up ``w``, timed ``t``,
        steady ``s``), the group and the index key the sample: every mode's timed pass sees the same lengths, its
        warm-up pass other draws of the same prompts (as a real model's would be).
        """
        tag, _, rest = request_id.partition("-")
        prompt = stable_key(str(self.seed), np.asarray(prompt_tokens, dtype=np.int64).tobytes())
        return self.lengths.draw(cap, prompt, stable_key(tag.rstrip("0123456789"), rest))

    async def generate(
        self,
        trace: RequestTrace,
        prompt_tokens: list[int],
        sampling: SamplingSpec,
        priority: int = 0,
        on_output: Callable[[RequestTrace], None] | None = None,
    ) -> RequestTrace:
        """The inner request, run past end-of-sequence to its drawn length; "length" below the cap reads "stop"."""
        cap = sampling.max_tokens
        drawn = self.drawn_length(trace.request_id, prompt_tokens, cap)
        synthetic = replace(sampling, max_tokens=drawn, ignore_eos=True)
        await self.inner.generate(trace, prompt_tokens, synthetic, priority, on_output)
        if trace.finish_reason == "length" and drawn < cap:
            trace.finish_reason = "stop"
        return trace

    async def generate_n(
        self, request_id: str, prompt_tokens: list[int], sampling: SamplingSpec, n: int
    ) -> list[RequestTrace]:
        """``n`` single requests ``"{request_id}-{i}"``, not one ``n>1`` request: vLLM gives all children of one
        request the same ``max_tokens``, so they could not end at their own drawn lengths."""
        traces = [RequestTrace(request_id=f"{request_id}-{i}") for i in range(n)]
        return list(await asyncio.gather(*(self.generate(t, prompt_tokens, sampling) for t in traces)))

    async def start(self) -> None:
        await self.inner.start()

    async def abort(self, request_ids: list[str]) -> None:
        await self.inner.abort(request_ids)

    async def pause(self, interrupt: bool = False) -> None:
        await self.inner.pause(interrupt)

    async def resume(self) -> None:
        await self.inner.resume()

    async def load_weights(self, weights: bytes | str, version: int, interrupt: bool = False) -> float:
        return await self.inner.load_weights(weights, version, interrupt)

    async def set_version(self, version: int) -> None:
        await self.inner.set_version(version)

    def num_unfinished(self) -> int:
        return self.inner.num_unfinished()

    def shutdown(self) -> None:
        self.inner.shutdown()
