"""The GPU memory plan: what the trainer and the rollout engine need when they share one GPU, computed before any
actor starts, so a run that cannot fit is refused in one line instead of failing out of memory minutes later.

Every figure is bytes, from the model's ``config.json`` shape (``ModelShape``) and the run's config. P is the
parameter count, T the trainable ones (P, or the LoRA adapters'), L layers, h hidden size, i intermediate size,
V vocabulary, n the tokens of one micro-batch. What Tailor keeps (trainer/fsdp_engine.py, kernels/token_logprobs.py):

trainer (one rank; FSDP shards weights, gradients and AdamW over k ranks)
  weights      4P      the model is loaded in float32 (master weights); a KL reference adds another 4P
  gradients    4T      float32, kept between steps (``zero_grad(set_to_none=False)``)
  AdamW        8T      two float32 moments (torch.optim.AdamW)
  bf16 copies  2P      autocast's bfloat16 casts of the weights, saved by autograd for the backward pass
  activations  n L (36h + 8i)  without checkpointing; with it n L 4h (each layer's float32 input) plus one layer's
               n (36h + 8i) recomputed in the backward pass
  logits       4sV     the bf16 logits the chunked log-prob function keeps, and their bf16 gradient, for the s
               scored positions: the LM head runs from the first response position (HF ``logits_to_keep``), so
               s = n x (max_tokens + 1) / max_model_len (exact when a micro-batch's prompts are equally long);
               plus its float32 block temporaries, 2 x min(sV, 2**26) x 4 (kernels/token_logprobs.py)
  step         4T      AdamW's foreach denominator (one float32 per trainable parameter) while it steps

engine (vLLM, one per rollout worker)
  weights      P x dtype bytes (bfloat16 on GPU unless model.dtype says float32)
  KV cache     max_num_seqs x max_model_len (rounded up to vLLM's 16-token blocks) x 2 L kv_heads head_dim x dtype
  overhead     VLLM_OVERHEAD_BYTES, plus VLLM_CUDA_GRAPH_BYTES when CUDA graphs are captured

plus CUDA_CONTEXT_BYTES per process (the trainer ranks and the engines).

With ``rollout.sleep_while_training`` the engines' weights and KV cache are given back while the trainers step, so
the plan takes the larger of two moments instead of their sum: sampling (the trainers' state beside the engines'
whole need) and training (the trainers' peak beside what a sleeping engine keeps, its vLLM overhead).

The per-token-per-layer activation bytes count the tensors autograd saves in one Llama/Qwen2 decoder layer under
Tailor's bf16 autocast with a float32 residual stream (the method of Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", arXiv:2205.05198, which gives 34 h per token for a GPT layer in 16-bit
with dropout; this layer has no dropout, a SwiGLU MLP and float32 norms): two RMSNorms, each its float32 input and
normalized output, 16h; attention, the bf16 casts of the norm output for q, k and v (6h), q after RoPE, k and v
repeated to every head (transformers' SDPA path repeats them whenever a padding mask is given), the attention output
and o_proj's contiguous input, 2h each (10h); MLP, the bf16 casts for gate and up (4h), gate, SiLU(gate), up and
their product, 2i each (8i). LoRA saves the same (its adapters save the bf16 inputs the frozen layers no longer need).

The peak is the largest of the backward pass (everything above but the step's) and the optimizer step (the state
and the step's 4T); with checkpointing the bf16 copies live only through the forward (autocast's cast cache), so
its backward peak holds the larger of the copies and the recomputed layer plus the logits' gradient. Checked against
the H100 train-step peaks recorded in benchmarks/gpu/ (SmolLM2-135M and Qwen2.5-1.5B shapes, with and without
checkpointing: within 3 %, tests/test_memory_plan.py); the whole run on one GPU awaits the ``memplan`` device step
(benchmarks/gpu/run_on_device.sh).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl.config import LoraConfig, RunConfig

GIB = 1 << 30
CUDA_CONTEXT_BYTES = GIB // 2  # per process: the CUDA context and the kernels loaded into it, outside torch's
# allocator (0.3-0.6 GiB on CUDA 12/13 GPUs); assumed, the memplan device step records nvidia-smi against torch's
VLLM_OVERHEAD_BYTES = 2 * GIB  # vLLM's memory beside weights and KV cache: its non-torch memory and the activation
# peak of its profile run. vLLM's own profile of Llama-3-8B on an H100 (vllm-project/vllm#10511): 1.79 GiB non-torch
# plus 1.26 GiB activations at an 8192-token profile batch; Tailor's engines profile 2048 tokens (AsyncLLM's
# default max_num_batched_tokens), a quarter of those activations: 1.79 + 0.32 GiB, taken as 2 GiB
VLLM_CUDA_GRAPH_BYTES = GIB  # with rollout.enforce_eager=false: vLLM >= 0.21 counts its CUDA graphs within its share;
# its "Estimated CUDA graph memory" log line read 0.36 GiB (gpustack/runner#251) to 1.62 GiB (vllm-project/vllm#39559)
VLLM_DEFAULT_MAX_NUM_SEQS = 128  # rollout.max_num_seqs=None: vLLM's SchedulerConfig.DEFAULT_MAX_NUM_SEQS (0.26-0.32)
VLLM_BLOCK_TOKENS = 16  # vLLM's KV cache block on CUDA: a sequence takes whole blocks
LOGPROB_BLOCK_ELEMENTS = 1 << 26  # kernels/token_logprobs.py BLOCK_ELEMENTS (not imported: it imports torch)
IPC_BUFFER_BYTES = GIB  # weight_sync.transport=ipc: the packed buffer vLLM 0.26 allocates on the trainer's GPU for a
# sync (DEFAULT_PACKED_BUFFER_SIZE_BYTES), between steps


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only Llama/Qwen2 model's shape, as its ``config.json`` gives it."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool  # the LM head shares the embedding matrix
    qkv_bias: bool  # q, k and v projections have biases (Qwen2 always; Llama when attention_bias)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        """From ``config.json`` fields; head_dim defaults to hidden / heads, kv heads to heads."""
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return cls(
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            tied=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
        )

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder layer, by its HF module name."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    @property
    def layer_params(self) -> int:
        """One decoder layer: its linear weights, q/k/v biases if any, two RMSNorm weights."""
        weights = sum(a * b for a, b in self.linear_shapes().values())
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return weights + bias + 2 * self.hidden

    @property
    def params(self) -> int:
        """Every parameter: embeddings (twice unless tied), the layers, the final norm."""
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return embeddings + self.layers * self.layer_params + self.hidden

    def lora_params(self, rank: int, targets: list[str]) -> int:
        """Adapter parameters: r x (in + out) for each targeted linear layer of every decoder layer (a target
        outside the decoder layers' linears, e.g. lm_head, is not counted)."""
        shapes = self.linear_shapes()
        return self.layers * sum(rank * sum(shapes[t]) for t in targets if t in shapes)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Keys and values of one token over every layer: 2 x L x kv_heads x head_dim x dtype bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    @property
    def activation_bytes_per_token_layer(self) -> int:
        """Bytes autograd keeps per token and decoder layer without checkpointing: 36h + 8i (module docstring)."""
        return 36 * self.hidden + 8 * self.intermediate


@dataclass(frozen=True)
class TrainerNeed:
    """One trainer rank's bytes, by part; ``peak`` is what it holds at its largest."""

    weights: int
    gradients: int
    optimizer: int
    bf16_copies: int
    activations: int  # saved through the backward pass (with checkpointing: the layer inputs)
    recompute: int  # with checkpointing, one layer's activations recomputed in the backward pass; else 0
    logits: int  # the bf16 logits kept, plus the log-prob function's block temporaries
    logit_grads: int
    step: int  # AdamW's temporaries while it steps
    checkpointing: bool
    tokens: int  # of the largest micro-batch
    sync: int = 0  # a weight sync's own buffer on the trainer's GPU, between steps (ipc); 0 where none

    @property
    def state(self) -> int:
        return self.weights + self.gradients + self.optimizer

    @property
    def peak(self) -> int:
        if self.checkpointing:
            backward = self.activations + self.logits + max(self.bf16_copies, self.recompute + self.logit_grads)
        else:
            backward = self.bf16_copies + self.activations + self.logits + self.logit_grads
        return self.state + max(backward, self.step, self.sync)


@dataclass(frozen=True)
class EngineNeed:
    """One vLLM engine's bytes, by part."""

    weights: int
    kv_cache: int
    overhead: int
    seqs: int  # the sequences its KV cache holds at max_model_len

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.overhead


def micro_batch_tokens(cfg: RunConfig) -> int:
    """The most token positions one micro-batch computes (padding included): ``micro_batch_size`` rows of
    ``max_model_len``, or with ``micro_batch_tokens`` that budget (a longer row gets a micro-batch of its own)."""
    t, longest = cfg.train, cfg.rollout.max_model_len
    rows = t.micro_batch_size * longest
    return rows if t.micro_batch_tokens is None else min(rows, max(t.micro_batch_tokens, longest))


def trainer_need(shape: ModelShape, cfg: RunConfig) -> TrainerNeed:
    """One trainer rank's needs (module docstring); ``train.num_workers`` ranks shard the state."""
    t = cfg.train
    p = shape.params
    trainable = p if t.lora is None else shape.lora_params(t.lora.rank, t.lora.target_modules)
    weights = 4 * p + 4 * trainable * (t.lora is not None)  # LoRA: frozen base plus float32 adapters
    if cfg.algorithm.kl_coef > 0:
        weights += 4 * p  # the frozen reference policy
    n, per_layer = micro_batch_tokens(cfg), shape.activation_bytes_per_token_layer
    scored = n * min(cfg.rollout.max_tokens + 1, cfg.rollout.max_model_len) // cfg.rollout.max_model_len
    if t.gradient_checkpointing:
        activations, recompute = n * shape.layers * 4 * shape.hidden, n * per_layer
    else:
        activations, recompute = n * shape.layers * per_layer, 0
    k = t.num_workers
    return TrainerNeed(
        weights=weights // k,
        gradients=4 * trainable // k,
        optimizer=8 * trainable // k,
        bf16_copies=2 * p,
        activations=activations,
        recompute=recompute,
        logits=2 * scored * shape.vocab + 8 * min(scored * shape.vocab, LOGPROB_BLOCK_ELEMENTS),
        logit_grads=2 * scored * shape.vocab,
        tokens=n,
        step=4 * trainable // k,
        checkpointing=t.gradient_checkpointing,
        sync=IPC_BUFFER_BYTES if cfg.weight_sync.transport == "ipc" else 0,
    )


def engine_need(shape: ModelShape, cfg: RunConfig, seqs: int | None = None) -> EngineNeed:
    """One engine's needs for ``seqs`` sequences (default ``rollout.max_num_seqs``, or vLLM's default) of
    ``rollout.max_model_len`` tokens."""
    r = cfg.rollout
    dtype_bytes = 4 if cfg.model.dtype == "float32" else 2
    seqs = seqs or r.max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS
    blocks = math.ceil(r.max_model_len / VLLM_BLOCK_TOKENS)
    overhead = VLLM_OVERHEAD_BYTES + (0 if r.enforce_eager else VLLM_CUDA_GRAPH_BYTES)
    kv = seqs * blocks * VLLM_BLOCK_TOKENS * shape.kv_bytes_per_token(dtype_bytes)
    return EngineNeed(weights=shape.params * dtype_bytes, kv_cache=kv, overhead=overhead, seqs=seqs)


@dataclass(frozen=True)
class MemoryPlan:
    """The trainer ranks and the engines of a run on one GPU of ``total`` bytes, of which ``budget`` may be used.

    Invariant: when it ``fits``, ``engine_share`` x ``total`` covers one engine's need plus its part of half the
    spare memory (the other half is the trainer's headroom), and the engines' shares leave the trainer its need.
    """

    trainer: TrainerNeed
    engine: EngineNeed
    ranks: int
    engines: int
    budget: int
    total: int
    sleep: bool = False  # the engines sleep while the trainers step (rollout.sleep_while_training)

    @property
    def contexts(self) -> int:
        return CUDA_CONTEXT_BYTES * (self.ranks + self.engines)

    @property
    def need(self) -> int:
        trainers, engines = self.ranks * self.trainer.peak, self.engines * self.engine.total
        if self.sleep:
            sampling = self.ranks * self.trainer.state + engines
            training = trainers + self.engines * self.engine.overhead
            return max(sampling, training) + self.contexts
        return trainers + engines + self.contexts

    @property
    def spare(self) -> int:
        return self.budget - self.need

    @property
    def fits(self) -> bool:
        return self.spare >= 0

    @property
    def engine_share(self) -> float:
        """``rollout.gpu_memory_utilization`` for each engine: its need plus half the spare split over the engines,
        as a fraction of the GPU (vLLM's unit), rounded up to 1e-4."""
        grant = self.engine.total + max(self.spare, 0) // (2 * self.engines)
        return min(math.ceil(grant / self.total * 1e4) / 1e4, 1.0)

    def line(self) -> str:
        """The plan in one line."""
        t, e = self.trainer, self.engine
        how = "checkpointing" if t.checkpointing else "no checkpointing"
        ranks = f"{self.ranks} x " if self.ranks > 1 else ""
        engines = f"{self.engines} x " if self.engines > 1 else ""
        return (
            f"memory plan: trainer {ranks}{_gib(t.peak)} GiB (weights {_gib(t.weights)}, gradients "
            f"{_gib(t.gradients)}, AdamW {_gib(t.optimizer)}, bf16 copies {_gib(t.bf16_copies)}, activations "
            f"{_gib(t.activations + t.recompute)}, logits {_gib(t.logits + t.logit_grads)} for {t.tokens} tokens "
            f"a micro-batch, {how}) + engine {engines}{_gib(e.total)} GiB (weights {_gib(e.weights)}, KV cache "
            f"{_gib(e.kv_cache)} for {e.seqs} sequences, vLLM {_gib(e.overhead)}"
            f"{', asleep while the trainer steps' if self.sleep else ''}) + CUDA contexts {_gib(self.contexts)} = "
            f"{_gib(self.need)} of {_gib(self.budget)} GiB"
        )


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def make_plan(shape: ModelShape, cfg: RunConfig, budget: int, total: int | None = None) -> MemoryPlan:
    """The plan of ``cfg`` on one GPU with ``budget`` bytes usable (of ``total``, default ``budget``)."""
    return MemoryPlan(
        trainer=trainer_need(shape, cfg),
        engine=engine_need(shape, cfg),
        ranks=cfg.train.num_workers,
        engines=cfg.rollout.num_workers,
        budget=budget,
        total=total or budget,
        sleep=cfg.rollout.sleep_while_training,
    )


def refusal(plan: MemoryPlan, shape: ModelShape, cfg: RunConfig) -> str:
    """Why ``plan`` does not fit, in one line, with the single changes that would make it fit."""
    fixes = _fixes(shape, cfg, plan)
    what = (
        f"fits with any one of: {', '.join(fixes)}"
        if fixes
        else "no single change fits (fewer sequences, smaller micro-batches, gradient checkpointing, LoRA); use a "
        "smaller model, a shorter rollout.max_model_len, or a GPU with more memory"
    )
    return f"{plan.line()}: short by {_gib(-plan.spare)} GiB; {what}"


def _fixes(shape: ModelShape, cfg: RunConfig, plan: MemoryPlan) -> list[str]:
    """The overrides that each, alone, make ``cfg`` fit the same GPU."""
    fixes = []
    seqs = _most_sequences(shape, cfg, plan)
    if seqs:
        fixes.append(f"rollout.max_num_seqs={seqs}")
    tokens = _most_micro_batch_tokens(shape, cfg, plan)
    if tokens:
        fixes.append(f"train.micro_batch_tokens={tokens}")
    if not cfg.train.gradient_checkpointing and _fits(shape, _with(cfg, "train", gradient_checkpointing=True), plan):
        fixes.append("train.gradient_checkpointing=true")
    if cfg.train.lora is None and cfg.train.num_workers == 1 and cfg.weight_sync.transport == "cpu":  # LoRA's needs
        lora = LoraConfig()  # its default rank
        if _fits(shape, _with(cfg, "train", lora=lora), plan):
            fixes.append(f"train.lora.rank={lora.rank}")
    synchronous = cfg.train.max_staleness == 0 and not cfg.train.periodic_async
    if synchronous and not plan.sleep and _fits(shape, _with(cfg, "rollout", sleep_while_training=True), plan):
        fixes.append("rollout.sleep_while_training=true")
    return fixes


def _most_sequences(shape: ModelShape, cfg: RunConfig, plan: MemoryPlan) -> int | None:
    """The most engine sequences (below the planned number) that fit, or None if not even one does."""
    return _largest(1, plan.engine.seqs - 1, lambda seqs: _fits(shape, _with(cfg, "rollout", max_num_seqs=seqs), plan))


def _most_micro_batch_tokens(shape: ModelShape, cfg: RunConfig, plan: MemoryPlan) -> int | None:
    """The largest ``train.micro_batch_tokens`` below the planned micro-batch that fits (at least
    ``rollout.max_model_len``: a longer row gets a micro-batch of its own), or None."""

    def fits(tokens: int) -> bool:
        return _fits(shape, _with(cfg, "train", micro_batch_tokens=tokens), plan)

    return _largest(cfg.rollout.max_model_len, plan.trainer.tokens - 1, fits)


def _largest(low: int, high: int, fits: Callable[[int], bool]) -> int | None:
    """The largest value in [low, high] that ``fits`` (true up to some value, false above it), or None."""
    if high < low or not fits(low):
        return None
    while low < high:  # fits(low) holds; the answer lies in [low, high]
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def _fits(shape: ModelShape, cfg: RunConfig, plan: MemoryPlan) -> bool:
    return make_plan(shape, cfg, plan.budget, plan.total).fits


def _with(cfg: RunConfig, section: str, **fields: Any) -> RunConfig:
    """``cfg`` with ``fields`` of one section replaced."""
    return cfg.model_copy(update={section: getattr(cfg, section).model_copy(update=fields)})


def model_shape(model_dir: str, revision: str | None = None) -> ModelShape | None:
    """The shape in ``model_dir``'s ``config.json``; for a hub name, the copy of that ``revision`` in the local
    Hugging Face cache (no network); None where neither is there."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model_dir, "config.json", revision=revision)
        if not isinstance(cached, str):
            return None
        path = Path(cached)
    return ModelShape.from_config(json.loads(path.read_text(encoding="utf-8")))


_PROBE = "import torch; f, t = torch.cuda.mem_get_info(0); print(torch.cuda.device_count(), f, t)"


def visible_gpu() -> tuple[int, int, int] | None:
    """(GPUs, free bytes, total bytes of GPU 0) as this machine's torch sees them, or None without CUDA. Measured in
    a child process, so this one holds no CUDA context on the GPU the actors will share."""
    import torch

    if not torch.cuda.is_available():
        return None
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
    count, free, total = (int(x) for x in out.stdout.split()[-3:])
    return count, free, total


def apply_memory_plan(cfg: RunConfig, model_dir: str) -> RunConfig:
    """The run's config with the engines' GPU share (``rollout.gpu_memory_utilization``) set from its memory plan,
    printed in one line; raises ``BadInput`` with one line when it cannot fit. Planned when ``memory.gpu_gib`` gives
    the budget (on any machine), or when a local Ray instance puts every actor on this machine's one GPU (its free
    memory the budget); otherwise ``cfg`` as it is."""
    from rl.inputs.preflight import BadInput

    gpu = visible_gpu() if cfg.ray.address is None or cfg.memory.gpu_gib is not None else None
    if cfg.memory.gpu_gib is not None:
        budget = int(cfg.memory.gpu_gib * GIB)
        total = gpu[2] if gpu else budget
    elif gpu is not None and gpu[0] == 1:
        budget, total = gpu[1], gpu[2]
    else:
        if gpu is None and cfg.ray.address is None:  # the engines run on this machine's CPU
            check_cpu_kv_cache(cfg, model_dir)
        return cfg
    shape = model_shape(model_dir, cfg.model.revision)
    if shape is None:
        print(f"memory plan: skipped, no local config.json for model.path {cfg.model.path!r} yet", flush=True)
        return cfg
    plan = make_plan(shape, cfg, budget, total)
    if not plan.fits:
        raise BadInput(refusal(plan, shape, cfg))
    if "gpu_memory_utilization" in cfg.rollout.model_fields_set:  # the user's share stands, if the plan allows it
        share = cfg.rollout.gpu_memory_utilization
        low = plan.engines * plan.engine.total / plan.total
        high = (plan.budget - plan.need + plan.engines * plan.engine.total) / plan.total
        if not low <= share * plan.engines <= high:
            given, need = int(share * plan.engines * plan.total), plan.engines * plan.engine.total
            raise BadInput(
                f"memory plan: rollout.gpu_memory_utilization={share:g} gives the engines {_gib(given)} GiB where "
                f"they need {_gib(need)} and the trainer leaves {_gib(int(high * plan.total))}; set it to "
                f"{plan.engine_share:g} or leave it unset"
            )
        print(f"{plan.line()}; rollout.gpu_memory_utilization={share:g} (the recipe's)", flush=True)
        return cfg
    share = plan.engine_share
    print(f"{plan.line()}; rollout.gpu_memory_utilization={share:g}", flush=True)
    return _with(cfg, "rollout", gpu_memory_utilization=share)


CPU_KV_BLOCK_TOKENS = 32  # vLLM 0.32's CPU attention block (its first block is its null block, never used)


def check_cpu_kv_cache(cfg: RunConfig, model_dir: str) -> None:
    """A CPU engine's KV cache is ``rollout.kv_cache_bytes``, and vLLM refuses to start one that cannot hold a whole
    ``rollout.max_model_len`` sequence (with a hint about GPU memory); refused here in one line instead."""
    from rl.inputs.preflight import BadInput

    try:
        shape = model_shape(model_dir, cfg.model.revision)
    except (KeyError, TypeError, ValueError):  # a config.json of fields this plan does not read: left to the engine
        return
    if shape is None:
        return
    r = cfg.rollout
    token = shape.kv_bytes_per_token(2 if cfg.model.dtype == "bfloat16" else 4)  # auto is float32 on the CPU
    need = (math.ceil(r.max_model_len / CPU_KV_BLOCK_TOKENS) + 1) * CPU_KV_BLOCK_TOKENS * token  # + the null block
    if r.kv_cache_bytes < need:
        raise BadInput(
            f"rollout.kv_cache_bytes ({r.kv_cache_bytes}) cannot hold one sequence of rollout.max_model_len "
            f"({r.max_model_len}) tokens on this model ({token} bytes of KV cache a token, {need} in all); raise it "
            f"to at least {need} (each sequence decoded at once takes as much), or lower rollout.max_model_len"
        )
