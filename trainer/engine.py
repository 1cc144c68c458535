"""The train-engine seam: what the trainer actor asks of a training backend, and the spec it is built from.

``TrainEngine`` is the protocol ``TrainerWorker`` (the Ray actor, ``trainer/worker.py``) delegates to;
``trainer/fsdp_engine.py`` implements it with PyTorch FSDP2. Another backend (Megatron, say) is one more file
implementing it, chosen in ``make_train_engine``. ``TrainerSpec`` is plain data built from the run's config
(``TrainerSpec.from_config``); its defaults are the config's, read from the config's fields (one source).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from rl.algorithm.losses import LossSpec
from rl.config import AlgorithmConfig, LoraConfig, RolloutConfig, RunConfig, TrainConfig
from rl.types import Group

if TYPE_CHECKING:
    import torch


def _default(section: type[BaseModel], name: str) -> Any:
    return section.model_fields[name].default


@dataclass(frozen=True)
class TrainerSpec:
    """What a train engine is built from (plain data, so it can be sent to a Ray actor)."""

    model: str
    load_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)  # from_pretrained's (ModelConfig.load_kwargs)
    lr: float = _default(TrainConfig, "lr")
    lr_schedule: str = _default(TrainConfig, "lr_schedule")
    lr_warmup_steps: int = _default(TrainConfig, "lr_warmup_steps")
    total_steps: int = _default(TrainConfig, "max_steps")  # the step a decaying schedule ends at
    weight_decay: float = _default(TrainConfig, "weight_decay")
    grad_clip: float = _default(TrainConfig, "grad_clip")
    loss: LossSpec = field(default_factory=LossSpec)
    ess_lr_scaling: bool = _default(AlgorithmConfig, "ess_lr_scaling")
    mask_truncated: bool = _default(AlgorithmConfig, "mask_truncated")
    ref_sync_every: int | None = _default(AlgorithmConfig, "ref_sync_every")  # steps between reference syncs
    ref_sync_mix: float = _default(AlgorithmConfig, "ref_sync_mix")
    entropy_target: float | None = _default(AlgorithmConfig, "entropy_target")  # adaptive entropy control
    entropy_coef_delta: float = _default(AlgorithmConfig, "entropy_coef_delta")
    entropy_coef_max: float = _default(AlgorithmConfig, "entropy_coef_max")
    micro_batch_size: int = _default(TrainConfig, "micro_batch_size")
    micro_batch_tokens: int | None = _default(TrainConfig, "micro_batch_tokens")
    gradient_checkpointing: bool = _default(TrainConfig, "gradient_checkpointing")
    share_prompts: bool = _default(TrainConfig, "share_prompts")
    mini_batches: int = _default(TrainConfig, "mini_batches")  # optimizer updates per epoch over the batch
    epochs: int = _default(TrainConfig, "ppo_epochs")  # passes over the batch per train step
    threads: int = _default(TrainConfig, "threads")
    keep_gathered: bool = _default(TrainConfig, "fsdp_keep_gathered")
    lora: LoraConfig | None = _default(TrainConfig, "lora")
    seed: int = _default(RunConfig, "seed")
    # the rollouts' sampling temperature: log-probs and entropy are of logits / temperature, the distribution the
    # engine sampled from and reported the log-probs of
    temperature: float = _default(RolloutConfig, "temperature")

    @classmethod
    def from_config(cls, cfg: RunConfig, model_dir: str) -> TrainerSpec:
        """The spec of a run's trainer: its ``train`` section, and its ``algorithm`` section's loss."""
        t, a = cfg.train, cfg.algorithm
        loss = LossSpec(
            kind=a.loss,
            clip_low=a.clip_low,
            clip_high=a.clip_high,
            agg=a.agg,
            norm_len=a.norm_len or cfg.rollout.max_tokens,
            kl_coef=a.kl_coef,
            kl_estimator=a.kl_estimator,
            kl_correction=a.kl_correction,
            entropy_coef=a.entropy_coef,
            top_entropy_quantile=a.top_entropy_quantile,
            correction=a.correction,
            correction_cap=a.correction_cap,
            decoupled=a.decoupled,
            dual_clip=a.dual_clip,
            off_policy_mask=a.off_policy_mask,
            sapo_tau_pos=a.sapo_tau_pos,
            sapo_tau_neg=a.sapo_tau_neg,
            vespo_k_pos=a.vespo_k_pos,
            vespo_lambda_pos=a.vespo_lambda_pos,
            vespo_k_neg=a.vespo_k_neg,
            vespo_lambda_neg=a.vespo_lambda_neg,
        )
        return cls(
            model=model_dir,
            load_kwargs=cfg.model.load_kwargs(model_dir),
            lr=t.lr,
            lr_schedule=t.lr_schedule,
            lr_warmup_steps=t.lr_warmup_steps,
            total_steps=t.max_steps,
            weight_decay=t.weight_decay,
            grad_clip=t.grad_clip,
            loss=loss,
            ess_lr_scaling=a.ess_lr_scaling,
            mask_truncated=a.mask_truncated,
            ref_sync_every=a.ref_sync_every,
            ref_sync_mix=a.ref_sync_mix,
            entropy_target=a.entropy_target,
            entropy_coef_delta=a.entropy_coef_delta,
            entropy_coef_max=a.entropy_coef_max,
            micro_batch_size=t.micro_batch_size,
            micro_batch_tokens=t.micro_batch_tokens,
            gradient_checkpointing=t.gradient_checkpointing,
            share_prompts=t.share_prompts,
            mini_batches=t.mini_batches,
            epochs=t.ppo_epochs,
            threads=t.threads,
            keep_gathered=t.fsdp_keep_gathered,
            lora=t.lora,
            seed=cfg.seed,
            temperature=cfg.rollout.temperature,
        )


class TrainEngine(Protocol):
    """One rank of the policy's training: gradient steps on its share of each batch, the weights whole on demand.

    With several ranks every method is called on every rank in the same order (they may gather); rank 0's answer
    is the one that counts, other ranks return empty values where noted.
    """

    version: int  # optimizer steps taken (the policy version the weights are)
    model: torch.nn.Module  # the policy with HF parameter names (vLLM's native weight transfer reads it)

    def shard(self) -> None:
        """Spread over the data-parallel ranks of the (initialized) default process group."""

    def accumulate(self, groups: list[Group]) -> float:
        """Forward/backward into the gradient buffers, no update; the seconds spent."""

    def finish_step(self) -> dict[str, float]:
        """One update from everything accumulated since the last step; the step's metrics."""

    def train_step(self, groups: list[Group]) -> dict[str, float]:
        """A whole step on this rank's share of the batch; the step's metrics."""

    def sequence_logprobs(self, prompt_tokens: list[int], response_tokens: list[int]) -> list[float]:
        """The policy's log-probs of ``response_tokens`` after ``prompt_tokens``."""

    def full_weights(self) -> dict[str, torch.Tensor]:
        """Every parameter whole, fp32 on the CPU, by HF name (rank 0; others get {})."""

    def sync_weights(self) -> dict[str, torch.Tensor]:
        """What the rollout engines load: the full weights, or a served adapter's tensors (rank 0; others get {})."""

    def save(self, path: str) -> str:
        """An HF checkpoint plus the state an exact continuation needs (rank 0 writes)."""

    def load(self, path: str) -> int:
        """Resume from ``save``'s directory; the version."""

    def state_digest(self) -> str:
        """A hash of every parameter and optimizer state tensor (rank 0; others get "")."""


def make_train_engine(spec: TrainerSpec, rank: int = 0, world_size: int = 1) -> TrainEngine:
    """The engine for one rank (FSDP2: the one backend today)."""
    from rl.trainer.fsdp_engine import FSDPEngine

    return FSDPEngine(spec, rank, world_size)
