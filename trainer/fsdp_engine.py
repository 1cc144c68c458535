"""The FSDP2 train engine: the HF policy in torch, trained on one rank or sharded over many.

One engine per device. Several engines train data-parallel with PyTorch's FSDP2 (``fully_shard`` on every
decoder layer and the root; gloo on CPU, NCCL on GPU, where parameters compute in bf16 with fp32 master weights
and fp32 reductions): each rank holds a shard of the parameters, gradients and AdamW state, computes on its share
of the batch, and the gradients are summed (not averaged) across ranks by FSDP's reduce-scatter. The loss is
normalized by the *global* loss units, so the summed gradient is exactly the token-mean gradient of the whole
batch, whatever the split.

Collectives: with several ranks, every forward gathers parameters from all of them, so the ranks agree on the
number of micro-batches per update before the first gather (a rank with fewer runs idle ones that add zero
gradient), and the calls that gather the full model (``full_weights``, ``save``, ``load``, ``state_digest``,
``sequence_logprobs``) are made on every rank in the same order; rank 0's result is the one that counts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from rl.kernels.token_entropy import token_entropy, token_entropy_metric
from rl.kernels.token_logprobs import token_logprobs
from rl.trainer.batching import Row, TokenBatch, collate, cut_micro_batches, rows_of
from rl.trainer.engine import TrainerSpec
from rl.trainer.hooks import loss_hooks
from rl.trainer.lr_schedule import lr_factor
from rl.trainer.shared_prompt import ForwardCost, collate_packed, cut_packed_micro_batches, unpack

from rl.algorithm.entropy_control import EntropyControl
from rl.algorithm.losses import combined_by, empty_stats, finalize_stats, kind_metrics, merge_stats, policy_loss
from rl.algorithm.off_policy import ess_lr_scale
from rl.config import LoraConfig
from rl.loop.checkpoint import ADAPTER_DIR, ADAPTER_WEIGHTS, REFERENCE_WEIGHTS
from rl.types import Group

log = logging.getLogger("rl.trainer")


@dataclass(frozen=True)
class Update:
    """One optimizer update: its loss, gradient norm, whether it was skipped for a non-finite loss or gradient, its
    global loss-stat sums, and the token positions this rank computed for it (padding included) and how many of them
    were real tokens."""

    loss: float
    policy_loss: float  # the loss without its entropy bonus (TRL's policy_loss)
    grad_norm: float
    nonfinite: bool
    totals: dict[str, float]
    positions: int
    real: int


def even_chunks(rows: list[Row], k: int) -> list[list[Row]]:
    """``rows`` cut into ``k`` contiguous chunks whose sizes differ by at most one (some empty if ``k > len``)."""
    base, extra = divmod(len(rows), k)
    bounds = [0]
    for i in range(k):
        bounds.append(bounds[-1] + base + (i < extra))
    return [rows[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _entropy_of(kind: Literal["bonus", "metric"] | None) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The per-position entropy a forward is asked for: differentiable for the ``bonus``, without gradient for the
    ``metric`` alone; None for neither."""
    return None if kind is None else token_entropy if kind == "bonus" else token_entropy_metric


def _left_pad(values: torch.Tensor, n: int) -> torch.Tensor:
    """``values`` [B, L] preceded by ``n`` zero columns."""
    return torch.nn.functional.pad(values, (n, 0)) if n else values


def _save_model_code(model: torch.nn.Module, path: str) -> None:
    """The Python files of a model whose repository ships its own classes (``model.trust_remote_code``), written into
    the checkpoint ``path`` as ``save_pretrained`` writes them: transformers then loads the checkpoint as it loaded the
    model (the config's own code ``config.save_pretrained`` writes by itself)."""
    from transformers.dynamic_module_utils import custom_object_save

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # under LoRA: the model it wraps
    if getattr(base, "_auto_class", None) is not None:
        custom_object_save(base, path, config=base.config)


def _disable_dropout(model: torch.nn.Module) -> None:
    """Every dropout of ``model`` off, in train mode too: its ``nn.Dropout`` layers and the rates its modules keep as
    numbers (attention's ``attention_dropout``). The trainer's log-probs are then the engine's, which has no
    dropout, as TRL's ``disable_dropout=True`` makes them; a model whose config sets dropout (GPT-2's 0.1) would
    otherwise train on noisy ratios."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        rates = [name for name, value in vars(module).items() if "dropout" in name and isinstance(value, float)]
        for name in rates:
            setattr(module, name, 0.0)


def _with_adapters(model: torch.nn.Module, lora: LoraConfig) -> torch.nn.Module:
    """``model`` with PEFT LoRA adapters on ``lora.target_modules``; only the adapters require gradients (B starts
    at zero, so the policy starts unchanged)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    config = PeftLoraConfig(r=lora.rank, lora_alpha=lora.alpha, target_modules=list(lora.target_modules))
    return get_peft_model(model, config)


@torch.no_grad()
def _merged_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A LoRA model's weights by the base model's HF names, each adapted layer's weight plus its (alpha / r) B A."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    merged = {
        name.replace(".base_layer", ""): p.detach().to("cpu", torch.float32).clone()
        for name, p in base.named_parameters()
        if "lora_" not in name
    }
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            for adapter in module.active_adapters:
                merged[f"{name}.weight"] += module.get_delta_weight(adapter).to("cpu", torch.float32)
    return merged


def _cpu_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A module's parameters by name (tied ones once), fp32 copies on the CPU."""
    return {n: p.detach().to("cpu", torch.float32).contiguous() for n, p in module.named_parameters()}


class FSDPEngine:
    """``TrainEngine`` on PyTorch: one rank, or FSDP2 over the data-parallel ranks once ``shard`` is called."""

    def __init__(self, spec: TrainerSpec, rank: int = 0, world_size: int = 1) -> None:
        from transformers import AutoTokenizer

        self.spec, self.rank, self.world_size = spec, rank, world_size
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.type == "cpu":
            torch.set_num_threads(spec.threads)
        torch.manual_seed(spec.seed)
        self.model = self._pretrained()
        self.model.config.use_cache = False
        _disable_dropout(self.model)
        if spec.lora is not None:
            self.model = _with_adapters(self.model, spec.lora)
        if spec.gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.reference = None  # the initial policy (moved toward the policy by ``ref_sync_every``), for a KL term
        if spec.loss.kl_coef > 0:
            self.reference = self._pretrained()
            self.reference.eval().requires_grad_(False)
        tok = AutoTokenizer.from_pretrained(spec.model, **spec.load_kwargs)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self.optimizer = self._make_optimizer()
        self.sharded = False  # FSDP2 over the data-parallel ranks (``shard``)
        self.version = 0
        self.loss_hooks = loss_hooks()
        self.entropy_control = (  # None: the entropy bonus's coefficient is spec.loss.entropy_coef throughout
            EntropyControl(spec.loss.entropy_coef, spec.entropy_target, spec.entropy_coef_delta, spec.entropy_coef_max)
            if spec.entropy_target is not None
            else None
        )
        self._waited = 0.0  # this step's seconds waiting for other ranks (``dp_wait_s``)
        self._reset_accumulation()
        # before sharding: a local forward on every rank, the same inputs, so every rank decides alike
        self.shares_prompts = spec.share_prompts and self._packing_agrees()
        self.forward_cost = ForwardCost.of(self.model)  # what packing a group saves or costs

    def _pretrained(self) -> torch.nn.Module:
        """The model ``spec.model`` names, in float32 on this rank's device."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(self.spec.model, dtype=torch.float32, **self.spec.load_kwargs)
        return model.to(self.device)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        trainable = [p for p in self.model.parameters() if p.requires_grad]  # with LoRA: the adapters only
        return torch.optim.AdamW(trainable, lr=self.spec.lr, weight_decay=self.spec.weight_decay)

    def shard(self) -> None:
        """FSDP2 over the (initialized) process group: each decoder layer (HF's ``_no_split_modules``), then the
        root, shards its parameters; gradients are summed across ranks; the optimizer is rebuilt on the shards."""
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

        on_gpu = self.device.type == "cuda"
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if on_gpu else None
        options = {"mp_policy": policy} if policy else {}
        blocks = set(getattr(self.model, "_no_split_modules", None) or [])
        for module in [m for m in self.model.modules() if type(m).__name__ in blocks]:
            fully_shard(module, **options)
        fully_shard(self.model, **options)
        self.fsdp_modules = [m for m in self.model.modules() if isinstance(m, FSDPModule)]
        for module in self.fsdp_modules:
            module.set_force_sum_reduction_for_comms(True)  # sum, as the global-units normalisation expects
            if self.spec.keep_gathered:  # gathered at an update's first forward, resharded before its step
                module.set_reshard_after_forward(False, recurse=False)
                module.set_reshard_after_backward(False, recurse=False)
        self.optimizer = self._make_optimizer()
        self.sharded = True

    @property
    def keeps_gathered(self) -> bool:
        """Sharded with ``keep_gathered``: a step's micro-batches run on local gathered parameters and gradients,
        with collectives only at an update's first forward and its last backward."""
        return self.sharded and self.spec.keep_gathered

    def _idle_count(self, real: int) -> int:
        """Idle micro-batches this rank runs so the ranks' collectives meet: up to the most micro-batches of any
        rank (agreed before any gather), or, keeping parameters gathered, one when it has none."""
        if self.keeps_gathered:
            return 0 if real else 1
        return self._agreed(real) - real

    def _before_backward(self, last: bool) -> None:
        """Keeping parameters gathered: gradients stay local until the update's last backward, which waits for
        every rank at a barrier (the wait is counted) and then reduce-scatters the summed gradients."""
        if not self.keeps_gathered:
            return
        self.model.set_requires_gradient_sync(last)
        if last:
            t0 = time.monotonic()
            torch.distributed.barrier()
            self._waited += time.monotonic() - t0

    def _reshard(self) -> None:
        """Keeping parameters gathered: free the gathered copies (before an optimizer step or a state change, so
        the next forward gathers the new values)."""
        if self.keeps_gathered:
            for module in self.fsdp_modules:
                module.reshard()

    def _agreed(self, count: int) -> int:
        """The largest ``count`` over the ranks (every rank runs that many micro-batches)."""
        if not self.sharded:
            return count
        value = torch.tensor([count], dtype=torch.int64)
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
        return int(value.item())

    def _idle_passes(self, count: int, backward: bool) -> None:
        """``count`` micro-batches' collectives without data: 2-token forwards (and backwards of zero gradient).

        A rank with fewer micro-batches than another waits in these for the other's gathers; their time counts in
        the step's ``dp_wait_s`` (the straggler wait that length balancing removes), once: a barrier inside them
        is part of that time, not added to it."""
        t0, waited = time.monotonic(), self._waited
        ids = torch.full((1, 2), self.pad_id, dtype=torch.long, device=self.device)
        for _ in range(count):
            with self._autocast():
                logits = self.model(input_ids=ids, logits_to_keep=1).logits
            if backward:
                self._before_backward(last=True)
                (logits.float().sum() * 0.0).backward()
        self._waited = waited + time.monotonic() - t0

    def _autocast(self, precise: bool = False):
        """bf16 autocast on CUDA; float32 throughout with ``precise`` (or on CPU)."""
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device.type == "cuda" and not precise)

    def _forward(
        self, model, batch: TokenBatch, entropy: Literal["bonus", "metric"] | None = None, precise: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Token log-probs ``[B, T-1]`` of the batch under ``model`` at the rollouts' temperature (logits divided by
        it, as the engine samples), and the per-position entropy if asked: differentiable for the ``bonus``, without
        gradient for the ``metric`` alone.

        The LM head runs only from the first position that predicts a response token (HF ``logits_to_keep``):
        prompt positions need hidden states, not a vocabulary projection. Earlier positions read 0; every loss
        term is masked to response tokens, so they never count.
        """
        if batch.packed is not None:
            return self._packed_forward(model, batch, entropy, precise)
        ids = batch.input_ids.to(self.device)
        first = batch.first_target
        with self._autocast(precise):
            out = model(
                input_ids=ids,
                attention_mask=batch.attention_mask.to(self.device),
                logits_to_keep=ids.shape[1] - first,
            )
        logits = self._tempered(out.logits[:, :-1])
        logprobs = token_logprobs(logits, ids[:, first + 1 :])
        per_position = _entropy_of(entropy)
        return _left_pad(logprobs, first), None if per_position is None else _left_pad(per_position(logits), first)

    def _packed_forward(
        self, model, batch: TokenBatch, entropy: Literal["bonus", "metric"] | None, precise: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``_forward`` of a batch whose prompts are packed once per group (``shared_prompt``)."""
        packed = batch.packed
        ids = packed.input_ids.to(self.device)
        with self._autocast(precise):
            out = model(
                input_ids=ids,
                position_ids=packed.position_ids.to(self.device),
                attention_mask=packed.attention_mask.to(self.device),
                logits_to_keep=ids.shape[1] - packed.first,
            )
        return unpack(self._tempered(out.logits), packed, batch.response_mask.shape, _entropy_of(entropy))

    def _tempered(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits at the rollouts' sampling temperature."""
        return logits if self.spec.temperature == 1.0 else logits / self.spec.temperature

    @torch.no_grad()
    def _packing_agrees(self) -> bool:
        """Whether this model reads a packed row (4-D mask, restarted positions) as it reads padded rows: the
        log-probs of a two-sample group both ways in float32, equal within 1e-3 (a model that ignores either input
        is far off). If not, the trainer keeps padded rows and says so once."""
        vocab = self.model.get_input_embeddings().num_embeddings
        prompt = [(7 * i + 3) % vocab for i in range(6)]
        rows = [(prompt, [(5 * i + 1) % vocab for i in range(n)], [0.0] * n, 0.0, None) for n in (3, 5)]
        batch = collate(rows, self.pad_id)
        padded = self._forward(self.model, batch, precise=True)[0]
        packed = self._forward(self.model, collate_packed([rows], self.pad_id), precise=True)[0]
        gap = float(((padded - packed).abs() * batch.response_mask.to(self.device)).max())
        if gap > 1e-3:
            log.warning(
                "this model does not read packed prompts as padded rows (gap %.3g): one padded row a sample", gap
            )
        return gap <= 1e-3

    def _logprobs(self, batch: TokenBatch) -> torch.Tensor:
        return self._forward(self.model, batch)[0]

    def _reset_accumulation(self) -> None:
        self._stats = empty_stats()
        self._units = 0.0
        self._loss_sum = 0.0
        self._busy = 0.0
        self._positions = 0  # token positions computed, padding included
        self._real = 0  # of which real (prompt or response) tokens

    def accumulate(self, groups: list[Group]) -> float:
        """Forward/backward on ``groups`` into the gradient buffers; no optimizer step. Returns the seconds spent.

        The loss is summed, not averaged: ``finish_step`` divides the summed gradient by the global number of
        loss units once every group of the step (on every rank) has been accumulated, so accumulating a batch
        in any split gives the same update as one call with the whole batch.
        """
        return self._accumulate(self._micro_batches(rows_of(groups, self.spec.mask_truncated)))

    def _micro_batches(self, rows: list[Row]) -> list[TokenBatch]:
        if self.shares_prompts:
            spec = self.spec
            packed = cut_packed_micro_batches(rows, self.forward_cost, spec.micro_batch_size, spec.micro_batch_tokens)
            return [collate_packed(cut, self.pad_id) for cut in packed]
        cuts = cut_micro_batches(rows, self.spec.micro_batch_size, self.spec.micro_batch_tokens)
        return [collate(cut, self.pad_id) for cut in cuts]

    def _accumulate(self, batches: list[TokenBatch], proximal: list[torch.Tensor] | None = None) -> float:
        """``accumulate`` on micro-batches; ``proximal`` (one tensor per micro-batch) pins the decoupled clip's anchor
        to the policy before the step's first update, otherwise the current parameters are the proximal policy."""
        t0 = time.monotonic()
        self.model.train()
        spec = self.spec.loss
        if self.entropy_control is not None:  # this update's coefficient, the same on every micro-batch and rank
            spec = dataclasses.replace(spec, entropy_coef=self.entropy_control.applied())
        wants_entropy = spec.entropy_coef > 0 or self.entropy_control is not None
        idle = self._idle_count(len(batches))  # before any gather, so the collectives line up
        for i, batch in enumerate(batches):
            logprobs, entropy = self._forward(self.model, batch, entropy="bonus" if wants_entropy else "metric")
            reference = None
            if self.reference is not None:
                with torch.no_grad():
                    reference = self._forward(self.reference, batch)[0]
            out = policy_loss(
                logprobs,
                batch.old_logprobs.to(self.device),
                batch.advantages.to(self.device),
                batch.response_mask.to(self.device),
                spec,
                proximal_logprobs=logprobs.detach() if proximal is None else proximal[i],
                ref_logprobs=reference,
                entropy=entropy,
            )
            loss = out.loss
            for hook in self.loss_hooks:  # none unless TAILOR_TRAINER_HOOKS names some (the fault soak does)
                loss = hook(loss, self.version + 1)
            self._before_backward(last=i == len(batches) - 1)
            loss.backward()
            self._positions += batch.positions
            self._real += batch.real_tokens
            self._units += out.units
            self._loss_sum += loss.item()
            self._stats = merge_stats(self._stats, out.stats)
        self._idle_passes(idle, backward=True)
        seconds = time.monotonic() - t0
        self._busy += seconds
        return seconds

    def finish_step(self) -> dict[str, float]:
        """Average the accumulated gradients over the global loss units, clip, step; returns the step's metrics."""
        t0 = time.monotonic()
        update = self._update()
        self._advance()
        seconds = self._busy + time.monotonic() - t0
        self._reset_accumulation()
        metrics = self._metrics([update], seconds, epochs=1)
        self._waited = 0.0
        return metrics

    def train_step(self, groups: list[Group]) -> dict[str, float]:
        """One training step on this rank's shard of the batch (every rank calls it together).

        The shard's samples are cut into ``mini_batches`` contiguous chunks and each epoch makes one optimizer
        update per chunk (PPO mini-batch epochs), so every rank makes the same number of updates; the weight
        version advances once. With several updates the decoupled clip is anchored to the log-probs of the
        policy before the first one (the proximal policy), computed once up front.
        """
        t0 = time.monotonic()
        self.optimizer.zero_grad(set_to_none=False)
        self._reset_accumulation()
        self._waited = 0.0
        # collated once: every epoch (and the proximal pass) sees the same micro-batches
        rows = rows_of(groups, self.spec.mask_truncated)
        chunks = [self._micro_batches(chunk) for chunk in even_chunks(rows, self.spec.mini_batches)]
        several = self.spec.mini_batches * self.spec.epochs > 1
        proximal = [self._proximal(batches) for batches in chunks] if several and self.spec.loss.decoupled else None
        updates = []
        for _ in range(self.spec.epochs):
            for c, batches in enumerate(chunks):
                self._accumulate(batches, proximal[c] if proximal else None)
                updates.append(self._update())
                self._reset_accumulation()
        self._advance()
        return self._metrics(updates, time.monotonic() - t0, epochs=self.spec.epochs)

    def _advance(self) -> None:
        """The step is done: the next weight version; every ``ref_sync_every`` versions the KL reference becomes
        ``(1 - ref_sync_mix) * reference + ref_sync_mix * policy`` (TR-DPO's soft update; mix 1: a reset)."""
        self.version += 1
        if not self.syncs_reference or self.version % self.spec.ref_sync_every:
            return
        policy, mix = self._policy_weights_on_every_rank(), self.spec.ref_sync_mix
        with torch.no_grad():
            for name, p in self.reference.named_parameters():
                p.mul_(1.0 - mix).add_(policy[name].to(p.device, p.dtype), alpha=mix)

    def _entropy_state(self) -> tuple[float, float] | None:
        """The adaptive entropy controller's state (coefficient, last entropy), part of what a checkpoint holds."""
        c = self.entropy_control
        return None if c is None else (c.coef, c.last_entropy)

    @property
    def syncs_reference(self) -> bool:
        """The KL reference moves (``ref_sync_every``): it is then state, saved, loaded and digested."""
        return self.reference is not None and self.spec.ref_sync_every is not None

    def _policy_weights_on_every_rank(self) -> dict[str, torch.Tensor]:
        """The policy's whole weights by HF name on every rank (``full_weights`` gives rank 0 alone); with LoRA
        merged."""
        if self.spec.lora is not None or not self.sharded:
            return self.full_weights()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True))

    @torch.no_grad()
    def _proximal(self, batches: list[TokenBatch]) -> list[torch.Tensor]:
        """The current policy's log-probs of each micro-batch (the step's proximal policy)."""
        self.model.eval()
        idle = self._idle_count(len(batches))
        out = [self._logprobs(batch).float() for batch in batches]
        self._idle_passes(idle, backward=False)
        return out

    def _update(self) -> Update:
        """One optimizer update from the accumulated gradients, divided by the global loss units."""
        self._reshard()
        totals = self._global_totals()
        units = totals.pop("units")
        loss = totals.pop("loss_sum") / max(units, 1.0)
        policy = loss - totals["entropy_bonus_sum"] / max(units, 1.0)
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.div_(max(units, 1.0))
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.spec.grad_clip)
        grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        stats = finalize_stats(totals)
        scale = ess_lr_scale(stats["ess_ratio"]) if self.spec.ess_lr_scaling else 1.0
        spec = self.spec
        scale *= lr_factor(self.version + 1, spec.lr_schedule, spec.lr_warmup_steps, spec.total_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = spec.lr * scale
        nonfinite = not (math.isfinite(grad_norm) and math.isfinite(loss))
        if not nonfinite and units > 0:  # no loss term at all (every sample masked): nothing to step on
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=False)
        if self.entropy_control is not None and not nonfinite and units > 0:
            self.entropy_control.update(stats["entropy"])
        return Update(loss, policy, grad_norm, nonfinite, totals, self._positions, self._real)

    def _metrics(self, updates: list[Update], seconds: float, epochs: int) -> dict[str, float]:
        """A step's metrics: loss and grad norm averaged over its updates, loss stats over all of their tokens."""
        totals = empty_stats()
        for u in updates:
            totals = merge_stats(totals, u.totals)
        return {
            "loss": sum(u.loss for u in updates) / len(updates),
            "policy_loss": sum(u.policy_loss for u in updates) / len(updates),
            "grad_norm": sum(u.grad_norm for u in updates) / len(updates),
            "skipped_nonfinite": float(sum(u.nonfinite for u in updates)),
            **{k: v for k, v in finalize_stats(totals).items() if k != "kl_ref" or self.reference is not None},
            **kind_metrics(self.spec.loss.kind, totals),
            "tokens": totals["tokens"] / epochs,
            "seconds": seconds,
            "lr": self.optimizer.param_groups[0]["lr"],
            "updates": float(len(updates)),
            "pad_fraction": 1.0 - sum(u.real for u in updates) / max(sum(u.positions for u in updates), 1),
            "dp_wait_s": self._waited,
            "entropy_coef": self.entropy_control.coef
            if self.entropy_control is not None
            else self.spec.loss.entropy_coef,
            **self._gpu_peak(),
        }

    def _gpu_peak(self) -> dict[str, float]:
        """On a GPU, ``gpu_peak_gib``: the most this rank's torch has held allocated since it started (what the memory
        plan's trainer figure estimates, rl/inputs/memory_plan.py); nothing on CPU."""
        if self.device.type != "cuda":
            return {}
        return {"gpu_peak_gib": torch.cuda.max_memory_allocated(self.device) / 2**30}

    def _global_totals(self) -> dict[str, float]:
        """This step's loss units, loss sum and stats, combined over all ranks as ``combined_by`` says (sums, max,
        min)."""
        totals = {**self._stats, "units": self._units, "loss_sum": self._loss_sum}
        if self.world_size == 1:
            return totals
        keys = sorted(totals)
        op = torch.distributed.ReduceOp
        ops = {"sum": (0.0, op.SUM), "max": (-math.inf, op.MAX), "min": (math.inf, op.MIN)}
        reduced = {}
        for kind, (neutral, reduce_op) in ops.items():  # one vector a kind, other kinds' places at its neutral value
            values = torch.tensor([totals[k] if combined_by(k) == kind else neutral for k in keys], dtype=torch.float64)
            torch.distributed.all_reduce(values, op=reduce_op)
            reduced[kind] = values
        return {k: float(reduced[combined_by(k)][i]) for i, k in enumerate(keys)}

    @torch.no_grad()
    def sequence_logprobs(self, prompt_tokens: list[int], response_tokens: list[int]) -> list[float]:
        """The policy's log-probs of ``response_tokens`` after ``prompt_tokens`` (for checks and evals; with several
        ranks every rank calls it with the same tokens)."""
        self.model.eval()
        batch = collate([(prompt_tokens, response_tokens, [0.0] * len(response_tokens), 0.0, None)], self.pad_id)
        lp = self._logprobs(batch)[0]
        self._reshard()
        start = len(prompt_tokens) - 1
        return lp[start : start + len(response_tokens)].float().cpu().tolist()

    def full_weights(self) -> dict[str, torch.Tensor]:
        """Every parameter, whole, in fp32 on the CPU, by HF name (tied weights appear once); rank 0 gets them,
        other ranks an empty dict. Sharded, it gathers: every rank calls it."""
        if self.spec.lora is not None:
            return _merged_weights(self.model)
        if not self.sharded:
            return _cpu_weights(self.model)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        names = [n for n, _ in self.model.named_parameters()]

        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {n: full[n].to(torch.float32).contiguous() for n in names if n in full}

    def sync_weights(self) -> dict[str, torch.Tensor]:
        """What the rollout engines load: ``full_weights``, or with LoRA served as an adapter (``lora.sync``) only the
        adapter's tensors, fp32 on the CPU, by the names PEFT saves them under."""
        if self.spec.lora is None or self.spec.lora.sync != "adapter":  # "auto" is resolved before the spec is built
            return self.full_weights()
        return {n: t.to(torch.float32) for n, t in self._adapter_tensors().items()}

    def _adapter_tensors(self) -> dict[str, torch.Tensor]:
        """The LoRA adapter's tensors, in their dtype on the CPU, by the names PEFT saves them under."""
        from peft import get_peft_model_state_dict

        return {n: t.detach().cpu().contiguous() for n, t in get_peft_model_state_dict(self.model).items()}

    def _full_optimizer_state(self) -> dict:
        """AdamW's state keyed by parameter name, whole (rank 0; gathers when sharded): one checkpoint format for
        any number of ranks."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=self.sharded)
        return get_optimizer_state_dict(self.model, self.optimizer, options=options)

    def save(self, path: str) -> str:
        """Write an HF checkpoint (model + tokenizer) loadable by vLLM and transformers, plus what ``load`` needs
        to continue exactly: optimizer state by parameter name, version and torch's RNG states
        (``trainer_state.pt``). Sharded, every rank calls it and rank 0 writes: one format for any world size."""
        from safetensors.torch import save_file
        from transformers import AutoTokenizer

        weights, optimizer = self.full_weights(), self._full_optimizer_state()
        if self.rank > 0:
            return path
        os.makedirs(path, exist_ok=True)
        _save_model_code(self.model, path)
        self.model.config.save_pretrained(path)
        save_file(weights, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
        if self.spec.lora is not None:  # the merged model above is what rl eval serves; training resumes from these
            self._save_adapter(os.path.join(path, ADAPTER_DIR))
        if self.syncs_reference:
            os.makedirs(os.path.dirname(os.path.join(path, REFERENCE_WEIGHTS)), exist_ok=True)
            save_file(_cpu_weights(self.reference), os.path.join(path, REFERENCE_WEIGHTS), metadata={"format": "pt"})
        AutoTokenizer.from_pretrained(self.spec.model, **self.spec.load_kwargs).save_pretrained(path)
        rng = {
            "cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }
        torch.save(
            {"optimizer": optimizer, "version": self.version, "rng": rng, "entropy_control": self._entropy_state()},
            os.path.join(path, "trainer_state.pt"),
        )
        return path

    def load(self, path: str) -> int:
        """Resume model, optimizer, version and RNG states from ``save``'s directory (every rank calls it, each
        keeping its shard; with LoRA the adapters, the base weights being the spec's model); returns the version."""
        from safetensors.torch import load_file
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, strict=False)
        if self.spec.lora is not None:
            self._load_adapter(os.path.join(path, ADAPTER_DIR))
        else:
            set_model_state_dict(self.model, load_file(os.path.join(path, "model.safetensors")), options=options)
        if self.syncs_reference:  # every rank holds the whole reference
            self.reference.load_state_dict(load_file(os.path.join(path, REFERENCE_WEIGHTS)), strict=False)
        extra = torch.load(os.path.join(path, "trainer_state.pt"), weights_only=False)
        set_optimizer_state_dict(self.model, self.optimizer, optim_state_dict=extra["optimizer"], options=options)
        self.version = extra["version"]
        if self.entropy_control is not None and extra.get("entropy_control"):
            self.entropy_control.coef, self.entropy_control.last_entropy = extra["entropy_control"]
        torch.set_rng_state(extra["rng"]["cpu"])
        if extra["rng"]["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(extra["rng"]["cuda"])
        return self.version

    def _save_adapter(self, folder: str) -> None:
        """The LoRA adapter as PEFT saves one: ``adapter_config.json`` and its tensors by PEFT's names."""
        from safetensors.torch import save_file

        self.model.peft_config["default"].save_pretrained(folder)
        save_file(self._adapter_tensors(), os.path.join(folder, ADAPTER_WEIGHTS), metadata={"format": "pt"})

    def _load_adapter(self, folder: str) -> None:
        """Set the LoRA adapter from ``_save_adapter``'s folder; a ``ValueError`` naming what it lacks."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        loaded = set_peft_model_state_dict(self.model, load_file(os.path.join(folder, ADAPTER_WEIGHTS)))
        missing = [k for k in loaded.missing_keys if "lora_" in k]
        if missing:
            raise ValueError(f"{folder}: the checkpoint lacks {sorted(missing)[:3]}")

    def state_digest(self) -> str:
        """SHA-256 over every parameter and AdamW state tensor, whole, by name: equal digests mean equal states
        (rank 0; every rank calls it when sharded, others get "")."""
        weights, optimizer = self.full_weights(), self._full_optimizer_state()
        if self.rank > 0:
            return ""
        h = hashlib.sha256()
        for name in sorted(weights):
            h.update(name.encode())
            h.update(weights[name].numpy().tobytes())
        for name, state in sorted(optimizer["state"].items()):
            for key, value in sorted(state.items()):
                h.update(f"{name}.{key}".encode())
                h.update(torch.as_tensor(value).detach().float().cpu().numpy().tobytes())
        if self.entropy_control is not None:  # only then: digests of runs without it stay as they were
            h.update(repr(self._entropy_state()).encode())
        reference = _cpu_weights(self.reference) if self.syncs_reference else {}
        for name in sorted(reference):
            h.update(f"reference.{name}".encode())
            h.update(reference[name].numpy().tobytes())
        return h.hexdigest()
