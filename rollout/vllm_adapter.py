"""The one place Tailor talks to vLLM's Python API (it changes often; pin and adapt here).

``VllmEngine`` wraps ``AsyncLLM`` (on the CPU with its engine core in this process: ``vllm_inproc_client``):
token-id prompts, one request per sample (``n=1``) so each sample can be aborted on its own, sampled-token log-probs
(``processed_logprobs``), weight loading under a pause that keeps in-flight requests (``mode="keep"``) or aborts and
resubmits them, per-token weight versions.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from rl.rollout.cpu_cores import pin_process
from rl.rollout.engine import EngineSpec, RequestTrace, SamplingSpec

EXTENSION_CLS = "rl.rollout.vllm_extension.WeightLoaderExtension"
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM 0.32 accepts
POLICY_LORA_ID = 1  # the one adapter an engine serves, reloaded in place at each sync
SHUTDOWN_GRACE_S = 1.0  # how long a stopping engine core may take before it is killed


def is_cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class VllmEngine:
    """``InferenceEngine`` (rollout/engine.py) on vLLM's ``AsyncLLM``."""

    def __init__(self, spec: EngineSpec) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.spec = spec
        self.cpu = is_cpu_platform()
        kwargs: dict[str, Any] = dict(
            model=spec.model,
            revision=spec.load_kwargs.get("revision"),
            tokenizer_revision=spec.load_kwargs.get("revision"),
            trust_remote_code=spec.load_kwargs.get("trust_remote_code", False),
            max_model_len=spec.max_model_len,
            enforce_eager=spec.enforce_eager,
            seed=spec.seed,
            disable_log_stats=True,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,
            worker_extension_cls=EXTENSION_CLS,
            stream_interval=spec.stream_interval,
            load_format=spec.load_format,
            skip_tokenizer_init=spec.skip_tokenizer_init,
            use_tqdm_on_load=False,  # no loading bar: an in-process engine (rl eval) would draw it on the console
        )
        if spec.priority_scheduling:
            kwargs["scheduling_policy"] = "priority"
        if spec.max_num_seqs is not None:
            kwargs["max_num_seqs"] = spec.max_num_seqs
        if spec.lora is not None:
            kwargs.update(
                enable_lora=True, max_loras=1, max_lora_rank=next(r for r in LORA_RANKS if r >= spec.lora.rank)
            )
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
            if spec.weight_transfer == "ipc":  # the trainer's CUDA IPC handles reach the engine core pickled, which
                os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # vLLM refuses unless allowed (its own child)
            kwargs["enable_sleep_mode"] = spec.sleep_mode  # vLLM refuses it on a CPU; there sleep frees nothing
        with _engine_core_in_process(self.cpu):
            self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
        # vLLM >= 0.27 stamps every token with the weight version it was sampled under; 0.26 (the last release for
        # torch 2.11, what the GPU machines here run) cannot, so there a sync interrupts in-flight requests instead of
        # keeping them: each resubmission then runs under one known version, and its span is exact
        self.stamps_versions = hasattr(self.engine, "update_weight_version")
        self.version = 0
        self._live: dict[str, str] = {}  # trace id -> vLLM id of its current (possibly resubmitted) request
        self._caller_aborted: set[str] = set()
        self._serving = asyncio.Event()  # cleared while weights load or the engine sleeps: resubmissions wait for it
        self._serving.set()
        self._asleep: set[str] = set()  # what ``sleep`` gave back and ``wake_up`` has not yet taken back
        self._lora: Any = None  # the LoRARequest every request carries, once an adapter is loaded (spec.lora)
        self._lora_dir = tempfile.mkdtemp(prefix="tailor-lora-") if spec.lora is not None else None

    async def start(self) -> None:
        """Stamp the initial weight version so every token carries an integer version."""
        await self.set_version(self.version)

    def _params(self, sampling: SamplingSpec, n: int = 1, stream: bool = True) -> Any:
        """vLLM sampling parameters: sampled-token log-probs in flat lists, no detokenization; deltas streamed (every
        ``spec.stream_interval`` tokens), or one output when the request ends (``stream=False``: no output objects
        while it runs)."""
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        return SamplingParams(
            n=n,
            max_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            min_p=sampling.min_p,
            repetition_penalty=sampling.repetition_penalty,
            ignore_eos=sampling.ignore_eos,
            stop=list(sampling.stop) or None,
            logprobs=0,
            flat_logprobs=True,
            output_kind=RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY,
            detokenize=bool(sampling.stop),  # text only where stop strings are looked for in it
        )

    async def generate(
        self,
        trace: RequestTrace,
        prompt_tokens: list[int],
        sampling: SamplingSpec,
        priority: int = 0,
        on_output: Callable[[RequestTrace], None] | None = None,
    ) -> RequestTrace:
        """Run one request to its end (stop, length or abort), filling ``trace`` as outputs arrive and calling
        ``on_output(trace)`` after each (streamed: every ``spec.stream_interval`` tokens), or once when it ends
        (no ``on_output``). An unstreamed request's one output holds all its tokens, an aborted one's included.

        A request interrupted by a weight sync in ``interrupt`` mode (``load_weights``) is resubmitted as
        prompt + partial response with the remaining token budget: the kept tokens keep their version and
        behaviour log-probs, the continuation comes from the new weights. Caller aborts are final.
        """
        kwargs: dict[str, Any] = {"priority": priority} if self.spec.priority_scheduling else {}
        while True:
            await self._serving.wait()
            if trace.request_id in self._caller_aborted:
                trace.finish_reason = "abort"
                break
            offset, version = len(trace.tokens), self.version
            request_id = trace.request_id if trace.resubmits == 0 else f"{trace.request_id}~{trace.resubmits}"
            self._live[trace.request_id] = request_id
            stream = on_output is not None
            params = self._params(replace(sampling, max_tokens=sampling.max_tokens - offset), stream=stream)
            async for out in self.engine.generate(
                {"prompt_token_ids": prompt_tokens + trace.tokens},
                params,
                request_id=request_id,
                lora_request=self._lora,
                **kwargs,
            ):
                c = out.outputs[0]
                _append_output(trace, c)
                if stream and not out.finished:
                    on_output(trace)
                if out.finished:
                    trace.finish_reason = str(c.finish_reason)
                    spans = (getattr(c, "weight_versions", None) or []) if self.stamps_versions else []
                    trace.version_spans += [(int(s.version), s.start + offset, s.end + offset) for s in spans] or [
                        (version, offset, len(trace.tokens))
                    ]
            interrupted = trace.finish_reason == "abort" and trace.request_id not in self._caller_aborted
            if not interrupted or len(trace.tokens) >= sampling.max_tokens:
                break
            trace.finish_reason = None  # still running, as far as a controller can tell
            trace.resubmits += 1
        self._live.pop(trace.request_id, None)
        self._caller_aborted.discard(trace.request_id)
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
            {"prompt_token_ids": prompt_tokens},
            self._params(sampling, n),
            request_id=request_id,
            lora_request=self._lora,
        ):
            for c in out.outputs:
                trace = traces[c.index]
                _append_output(trace, c)
                if c.finish_reason is not None and trace.finish_reason is None:
                    trace.finish_reason = str(c.finish_reason)
                    trace.finished = time.monotonic()
        return traces

    async def abort(self, request_ids: list[str]) -> None:
        """Abort requests by their trace ids (for good: an aborted request is never resubmitted)."""
        if request_ids:
            self._caller_aborted.update(request_ids)
            await self.engine.abort([self._live.get(r, r) for r in request_ids])

    async def pause(self, interrupt: bool = False) -> None:
        """Stop scheduling: in-flight requests are kept (vLLM ``keep``) or aborted for resubmission (``interrupt``,
        and always where vLLM cannot stamp token versions)."""
        self._serving.clear()
        mode = "keep" if not interrupt and self.stamps_versions else "abort"
        if self.cpu:  # in process: AsyncLLM.pause_generation's 20 ms wait for outputs from a core process is idle time
            await self.engine.engine_core.pause_scheduler_async(mode=mode, clear_cache=True)
        else:
            await self.engine.pause_generation(mode=mode, clear_cache=True)

    async def resume(self) -> None:
        await self.engine.resume_generation()
        self._serving.set()

    async def sleep(self, level: int) -> None:
        """vLLM's sleep: running requests aborted (and resubmitted after the wake), then the memory given back."""
        self._serving.clear()
        await self.engine.sleep(level, mode="abort")
        self._asleep = {"weights", "kv_cache"}

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Wake ``tags`` still asleep, weights before the KV cache; vLLM schedules again once nothing sleeps."""
        waking = [tag for tag in ("weights", "kv_cache") if tag in self._asleep and (tags is None or tag in tags)]
        if waking:
            await self.engine.wake_up(waking)
            self._asleep.difference_update(waking)
            if not self._asleep:
                self._serving.set()

    async def is_sleeping(self) -> bool:
        return await self.engine.is_sleeping()

    async def set_version(self, version: int) -> None:
        """Stamp tokens generated from now on with ``version`` (where vLLM cannot, requests submitted from now on)."""
        if self.stamps_versions:
            await self.engine.update_weight_version(str(version))
        self.version = version

    async def load_weights(self, weights: bytes | str, version: int, interrupt: bool = False) -> float:
        """Pause, load the weights (safetensors bytes, or the path of a safetensors file on this host), bump the
        version, resume. With ``spec.lora`` the weights are the adapter's tensors (PEFT names), loaded in place of
        the previous adapter; the base model's weights never change.

        In-flight requests are kept and continue with the new weights (``interrupt=False``, vLLM's pause
        ``keep``), or aborted and resubmitted by ``generate`` after the load (``interrupt=True``). The pause clears
        the prefix cache, so no KV computed under the old weights or adapter is reused. An engine woken from
        ``sleep`` up to its weights is paused already, and stays so until its KV cache is back.
        """
        t0 = time.monotonic()
        asleep = bool(self._asleep)
        if not asleep:
            await self.pause(interrupt)
        try:
            if self.spec.lora is not None:
                await self._load_adapter(weights)
            else:
                # a path crosses to the engine-core process in bytes of its own; 500 MB of weights took ~5 s that way
                method = "load_hf_weights_file" if isinstance(weights, str) else "load_hf_weights_bytes"
                await self.engine.collective_rpc(method, args=(weights,))
            await self.set_version(version)
        finally:
            if not asleep:
                await self.resume()
        return time.monotonic() - t0

    async def _load_adapter(self, weights: bytes | str) -> None:
        """Write the adapter as a PEFT directory (vLLM loads adapters from a path) and load it in place of the last."""
        from vllm.lora.request import LoRARequest

        lora, folder = self.spec.lora, self._lora_dir
        assert lora is not None and folder is not None
        tensors = os.path.join(folder, "adapter_model.safetensors")
        if isinstance(weights, str):
            shutil.copyfile(weights, tensors)
        else:
            with open(tensors, "wb") as f:
                f.write(weights)
        config = {"peft_type": "LORA", "r": lora.rank, "lora_alpha": lora.alpha, "target_modules": lora.target_modules}
        with open(os.path.join(folder, "adapter_config.json"), "w") as f:
            json.dump({**config, "bias": "none", "base_model_name_or_path": self.spec.model}, f)
        request = LoRARequest("policy", POLICY_LORA_ID, folder, load_inplace=True)
        await self.engine.add_lora(request)
        self._lora = LoRARequest("policy", POLICY_LORA_ID, folder)  # requests use the loaded one, never reload

    # vLLM's native (GPU) weight transfer, receiving side: the four phases its trainer engine drives
    async def init_weight_transfer_engine(self, request: Any) -> None:
        await self.engine.init_weight_transfer_engine(request)

    async def start_weight_update(self) -> None:
        await self.engine.start_weight_update()

    async def update_weights(self, request: Any) -> None:
        await self.engine.update_weights(request)

    async def finish_weight_update(self) -> None:
        await self.engine.finish_weight_update()

    def num_unfinished(self) -> int:
        return self.engine.output_processor.get_num_unfinished_requests()  # AsyncLLM has no shortcut in vLLM 0.26

    def set_stream_interval(self, k: int) -> None:
        """Stream outputs every ``k`` tokens (and at a request's first and last), as ``spec.stream_interval`` would.

        Applies to requests added afterwards: vLLM (0.26 to 0.32) copies ``OutputProcessor.stream_interval`` into
        each request's state when it is added. ``spec`` keeps the interval the engine was built with."""
        self.engine.output_processor.stream_interval = k

    def shutdown(self) -> None:
        """Stop the engine now. An engine-core process (GPU engines) gets ``SHUTDOWN_GRACE_S`` to exit before it is
        killed: its own teardown is garbage collection of a heap about to be freed anyway (three full passes, 4-7 s
        on 2 CPU cores), and a killed core leaves nothing behind; an in-process core (CPU) is released here (~1 s).
        ``AsyncLLM.__del__`` would call its ``shutdown`` again at interpreter exit, after vLLM's module globals are
        gone, and print a TypeError traceback; the stopped engine's is made a no-op."""
        if "timeout" in inspect.signature(self.engine.shutdown).parameters:
            self.engine.shutdown(timeout=SHUTDOWN_GRACE_S)
        else:
            self.engine.shutdown()
        self.engine.shutdown = _stopped  # type: ignore[method-assign]
        if self._lora_dir is not None:
            shutil.rmtree(self._lora_dir, ignore_errors=True)


@contextmanager
def _engine_core_in_process(enabled: bool) -> Iterator[None]:
    """While an ``AsyncLLM`` is built, make its engine-core client ``InprocAsyncClient`` (``enabled``: CPU engines)
    instead of a process of its own. vLLM has no option for it: ``AsyncLLM.__init__`` calls
    ``EngineCoreClient.make_async_mp_client``, swapped here for the time of the call."""
    if not enabled:
        yield
        return
    from rl.rollout.vllm_inproc_client import InprocAsyncClient
    from vllm.v1.engine.core_client import EngineCoreClient

    made = EngineCoreClient.__dict__["make_async_mp_client"]
    EngineCoreClient.make_async_mp_client = staticmethod(InprocAsyncClient)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        EngineCoreClient.make_async_mp_client = made  # type: ignore[method-assign]


def _stopped(timeout: float | None = None) -> None:
    """``AsyncLLM.shutdown`` of an engine already shut down."""


def _append_output(trace: RequestTrace, completion: Any) -> None:
    """Add one ``CompletionOutput`` (a streamed delta, or a whole unstreamed request) to ``trace``: its tokens and
    their log-probs (``FlatLogprobs`` with ``logprobs=0``: exactly the sampled token's, one per position)."""
    trace.tokens.extend(completion.token_ids)
    # vLLM 0.26 ends an aborted stream with an empty delta that repeats all earlier log-probs; alone it adds nothing,
    # and where the consumer lags, vLLM's output collector merges it into the pending delta after that delta's own
    # log-probs (seen on an H200: 177 log-probs for 1 token), so an aborted delta keeps its first positions only
    if completion.logprobs is not None and completion.token_ids:
        logprobs = completion.logprobs.logprobs
        if completion.finish_reason == "abort":
            logprobs = logprobs[: len(completion.token_ids)]
        if len(logprobs) != len(completion.token_ids):
            raise RuntimeError(f"vLLM returned {len(logprobs)} log-probs for {len(completion.token_ids)} tokens")
        trace.logprobs.extend(logprobs)


def configure_cpu_threads(bind: str | None) -> None:
    """On the CPU, run this process on the cores in ``bind`` (``pin_process``; None: anywhere), and keep the model in
    the engine core: with ``VLLM_ENABLE_V1_MULTIPROCESSING`` unset vLLM's CPU platform turns the ``uni`` executor
    into a worker process of its own, one more process and hop per step. vLLM 0.32's own
    ``VLLM_CPU_OMP_THREADS_BIND`` is read only by its multiprocess executor, which is not used here. On a GPU the
    bind is ignored: the engine core runs in a child process there and needs a core apart from its frontend's."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if bind and is_cpu_platform():
        pin_process(bind)
