"""Typed run configuration. Unknown keys and bad values fail here, before any actor starts."""

from __future__ import annotations

import copy
import difflib
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rl.algorithm.advantages import is_group_local
from rl.algorithm.loss_names import Aggregation, Correction, KlEstimator, LossKind
from rl.data.arith import ArithConfig
from rl.models import built_here
from rl.rewards.model import RewardModelSpec
from rl.rollout.cpu_cores import parse_cores
from rl.shaping import defaults as shaping_defaults

log = logging.getLogger("rl.config")


ENGINE_SEED_MAX = 2**32 - 1  # the largest seed vLLM takes for an engine


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Strict):
    path: str = Field(default="builtin:arith-tiny", description="builtin:NAME, a local HF directory, or a hub name")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="auto: float32 on CPU, bfloat16 on GPU",
    )
    revision: str | None = Field(
        default=None,
        description="a hub model's branch, tag or commit (TRL's model_init_kwargs revision): the trainer, the engines "
        "and the tokenizer all load that version; None: the default branch. Hub names only",
    )
    trust_remote_code: bool = Field(
        default=False,
        description="let transformers and vLLM run the Python code a model's repository ships, for an architecture "
        "or tokenizer they do not include (TRL's model_init_kwargs trust_remote_code); only for code you trust",
    )

    @model_validator(mode="after")
    def _revision_of_a_hub_model(self) -> ModelConfig:
        if self.revision is not None and built_here(self.path):
            raise ValueError(f"revision picks a version of a hub model, and {self.path} is built here; remove revision")
        return self

    def load_kwargs(self, model_dir: str) -> dict[str, Any]:
        """``from_pretrained``'s keyword arguments for ``model_dir`` (this model, resolved; or a checkpoint of it):
        ``trust_remote_code`` always (left unset, transformers asks y/N on a terminal, and waits), the revision
        where it is a hub name."""
        kwargs: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}
        if self.revision is not None and not Path(model_dir).expanduser().exists():
            kwargs["revision"] = self.revision
        return kwargs


class DataConfig(Strict):
    source: str = Field(
        default="arith",
        description='"arith" (procedural), a preset name, a hub dataset, or a local file/dir',
    )
    arith: ArithConfig = Field(default_factory=ArithConfig)
    subset: str | None = Field(
        default=None,
        description="a hub dataset's configuration (load_dataset's second argument, TRL's dataset_config), e.g. main "
        "for openai/gsm8k; test_source's too; None: the dataset's default, or a preset's",
    )
    train_split: str = Field(default="train", description="split trained on")
    test_split: str = Field(default="test", description="split evaluated on (held out)")
    prompt_field: str | None = Field(
        default=None,
        description="column holding the prompt (text or chat messages); None: the first of prompt, question, "
        "problem, query, instruction the rows have (TRL's datasets hold prompt)",
    )
    answer_field: str | None = Field(
        default="answer",
        description="column holding the reference answer (given to rewards as answer); rows without an answer "
        "column use the first of solution, ground_truth, target, reference they have; None: the data has none "
        "(a prompt-only dataset, for rewards that need no answer: length, format, a reward model)",
    )
    template: str = Field(
        default="{prompt}",
        description="prompt text built from a row: {prompt} is the question, other {column} names are filled too",
    )
    chat: bool = Field(default=False, description="wrap the prompt in the model's chat template")
    system_prompt: str | None = Field(
        default=None,
        description="chat only: a system message before the question (in place of a chat-message row's own)",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword arguments for the model's chat template wherever it renders (chat prompts, tool "
        "episodes, evaluation), e.g. {enable_thinking: false} for Qwen3 (TRL's chat_template_kwargs)",
    )
    limit: int | None = Field(default=None, ge=1, description="use only the first N training rows; None: all")
    test_fraction: float = Field(
        default=0.1,
        ge=0,
        lt=1,
        description="held-out rows when the source has no separate test split (a single local file, a folder "
        "without split files): this fraction of rows, picked by a hash of the prompt, is kept out of "
        "training; 0 evaluates on training rows (said at start)",
    )
    test_source: str | None = Field(
        default=None,
        description="a separate source for held-out rows (its test_split); None: from source",
    )


class RewardFn(Strict):
    fn: str | None = Field(
        default=None,
        description="builtin name, path/to/file.py:function or package.module:function, or either called with "
        "Python literals to make the reward, as TRL's factories: trl.rewards:get_soft_overlong_punishment(512, 128)",
    )
    model: str | None = Field(
        default=None,
        description="instead of fn: a reward model (sequence classification, num_labels=1), a local directory or "
        "a hub name; loaded in every reward worker, it scores prompt + completion",
    )
    processing_class: str | None = Field(
        default=None,
        description="model only: the tokenizer it reads with (TRL's reward_processing_classes); None: its own",
    )
    batch_size: int = Field(default=16, ge=1, description="model only: completions per forward pass")
    weight: float = Field(default=1.0, description="the function's weight in the summed reward")

    @model_validator(mode="before")
    @classmethod
    def _from_a_name(cls, data: Any) -> Any:
        """A bare spec is the function it names, as in TRL's list of reward functions."""
        return {"fn": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _one_kind(self) -> RewardFn:
        if (self.fn is None) == (self.model is None):
            raise ValueError(
                "a reward names exactly one of fn (a function) and model (a reward model); set the whole item, as "
                "in 'reward.functions=[{model: PATH}]'"
            )
        default_batch = type(self).model_fields["batch_size"].default
        if self.fn is not None and (self.processing_class is not None or self.batch_size != default_batch):
            raise ValueError("processing_class and batch_size belong to a reward model (model), not to fn")
        return self

    @property
    def spec(self) -> str | RewardModelSpec:
        """What the reward pool loads: the function's spec, or the reward model's."""
        if self.fn is not None:
            return self.fn
        return RewardModelSpec(self.model, self.processing_class, self.batch_size)


class RewardConfig(Strict):
    functions: list[RewardFn] = Field(
        default_factory=lambda: [RewardFn(fn="arith_exact")],
        min_length=1,
        description="reward functions and reward models with their weights (a bare spec, as in [arith_exact, "
        "my.py:r], is a function of weight 1); the first one's > 0 marks a correct answer in evals",
    )
    num_workers: int = Field(
        default=1,
        ge=0,
        description="reward processes (a reward that hangs or crashes cannot stop training); 0: in the driver, "
        "without timeout_s",
    )
    timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="seconds a reward call may take before its process is killed and the call counted",
    )
    on_failure: Literal["zero", "drop"] = Field(
        default="zero",
        description="a reward that raises, hangs or returns NaN: zero scores the sample 0, drop leaves the sample "
        "out of its group (a group left with fewer than two is dropped)",
    )


class RolloutConfig(Strict):
    num_workers: int = Field(default=1, ge=1, description="rollout workers, one vLLM engine each")
    max_tokens: int = Field(default=256, ge=1, description="response cap in tokens (TRL's max_completion_length)")
    temperature: float = Field(default=1.0, gt=0, description="sampling temperature")
    top_p: float = Field(default=1.0, gt=0, le=1, description="nucleus sampling mass")
    top_k: int = Field(default=0, ge=0, description="sample among the k likeliest tokens (TRL's top_k); 0: all of them")
    min_p: float = Field(
        default=0.0, ge=0, le=1, description="drop tokens below this share of the likeliest one's probability; 0: none"
    )
    repetition_penalty: float = Field(
        default=1.0, gt=0, description="above 1 discourages tokens already in the prompt or response (TRL's); 1: none"
    )
    stop: list[str] = Field(
        default_factory=list,
        description="stop strings (TRL's generation_kwargs stop): a sample ends once its text holds one, the tokens "
        "that wrote it kept (they are trained on and rewards see them); held-out samples stop on them too",
    )
    max_model_len: int | None = Field(
        default=None,
        ge=16,
        description="prompt + response tokens (the engines' context); None: the data's longest prompt + max_tokens, "
        "within the model's positions (set before the run starts); longer prompts are skipped",
    )
    kv_cache_bytes: int = Field(default=64 << 20, ge=1 << 20, description="CPU only; GPUs use gpu_memory_utilization")
    gpu_memory_utilization: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="GPU only: the share of the engine's GPU vLLM may take; on a GPU shared with the trainer the "
        "memory plan sets it (memory.gpu_gib)",
    )
    enforce_eager: bool = Field(
        default=True,
        description="no CUDA graphs on a GPU, no torch.compile on the CPU (faster start, slower decode)",
    )
    cpu_threads_bind: list[str] | None = Field(
        default=None,
        description='CPU only: per worker, the cores its process runs on, e.g. ["0"] or ["0-1", "2-3"]; None: any',
    )
    partial_rollouts: Literal["keep", "resubmit"] = Field(
        default="keep",
        description='samples in flight across a weight sync: "keep" running (vLLM pause keep; per-token '
        'versions) or "resubmit" (abort, then continue prompt + partial response with the new '
        "weights, AReaL/slime style)",
    )
    max_num_seqs: int | None = Field(
        default=None,
        ge=1,
        description="vLLM's cap on running sequences; None: its default",
    )
    sleep_while_training: bool = Field(
        default=False,
        description="GPU, synchronous runs (train.max_staleness=0): each engine gives its GPU memory back while the "
        "trainers step (vLLM sleep mode: KV cache and weights discarded; with a LoRA adapter sync the weights wait in "
        "host memory) and wakes to take the new weights, as TRL's vllm_enable_sleep_mode; the memory plan counts the "
        "trainer's peak and the engines' need as apart in time. Asynchronous runs sample while they train",
    )
    max_restarts: int = Field(
        default=1,
        ge=0,
        description="dead rollout workers replaced per run (a new actor and engine, loaded with the current "
        "weights); cpu weight transport only (a native NCCL group cannot take a new member mid-run)",
    )
    seed: int = Field(default=0, ge=0, le=ENGINE_SEED_MAX, description="the engines' sampling seed")
    tools: list[str] = Field(
        default_factory=list,
        description="tool functions the model may call, TRL style ('file.py:fn' or 'module:fn', plain or async, "
        "documented); episodes become multi-turn, max_tokens is each episode's budget",
    )
    environment: str | dict[str, str] | None = Field(
        default=None,
        description="TRL-style environment class or factory ('file.py:Cls'): one instance per episode, "
        "reset(**row) first, its public methods are tools; rewards get their attributes as `environments`. Or "
        "several by name ({name: 'file.py:Cls'}), each row picking one by its `environment` column (TRL's dict of "
        "factories)",
    )
    max_tool_calls: int = Field(default=8, ge=0, description="tool calls per episode; a turn past it ends the episode")
    tool_timeout_s: float = Field(
        default=30.0, gt=0, description="per tool call; a call past it returns an error message to the model"
    )
    tool_parser: str | None = Field(
        default=None,
        description="read the model's tool calls with vLLM's tool parser of this name (vllm serve's "
        "--tool-call-parser: kimi_k2, minimax_m2, granite4, ...), for a syntax Tailor's own readers do not read; "
        "None: the reader the chat template's rendering of a call picks",
    )
    workflow: str | None = Field(
        default=None,
        description="your own episode logic ('file.py:fn' or 'module:Cls'): an async run(episode, row) that samples "
        "turns with `await episode.generate()` and adds untrained tokens with `episode.append(text)` (docs: "
        "Your own episodes); None: one completion per sample, or the tool loop with tools",
    )

    @field_validator("cpu_threads_bind")
    @classmethod
    def _core_lists(cls, binds: list[str] | None) -> list[str] | None:
        for bind in binds or []:
            parse_cores(bind)
        return binds

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, stop: list[str]) -> list[str]:
        if "" in stop:
            raise ValueError("an empty stop string would end every sample at once; drop it")
        return stop

    @model_validator(mode="after")
    def _one_episode_kind(self) -> RolloutConfig:
        if self.workflow is not None and (self.tools or self.environment is not None):
            raise ValueError("workflow runs episodes of its own: drop tools and environment, or the workflow")
        return self

    @model_validator(mode="after")
    def _room_for_a_prompt(self) -> RolloutConfig:
        if self.max_model_len is not None and self.max_tokens >= self.max_model_len:
            raise ValueError(
                f"max_tokens ({self.max_tokens}) leaves no room for a prompt within max_model_len "
                f"({self.max_model_len}); raise max_model_len or lower max_tokens"
            )
        return self


MODEL_SCORERS = ("lm-confidence", "reward-model")  # served by a separate scorer worker (rl.rollout.scorer_worker)


class ShapingConfig(Strict):
    policy: Literal["plain", "darts", "sart", "darts+sart"] = Field(
        default="plain",
        description="trajectory shaping: plain (M samples per prompt), darts, sart or darts+sart",
    )
    m_keep: int = Field(default=8, ge=2, description="samples kept per prompt (the GRPO group size M)")
    avg_redundancy: float = Field(
        default=shaping_defaults.AVG_REDUNDANCY,
        ge=1.0,
        description="samples launched per sample kept, on average over prompts (DARTS) or per prompt (SART)",
    )
    max_redundancy: float = Field(
        default=shaping_defaults.MAX_REDUNDANCY, ge=1.0, description="DARTS's per-prompt ceiling, x M"
    )
    min_redundancy: float = Field(
        default=shaping_defaults.MIN_REDUNDANCY,
        ge=1.0,
        description="DARTS's per-prompt floor, x M: 1.0 is the paper's M_low = M (a low-variance prompt may get "
        "no spare sample, so it cannot stop early); DARTS's released streaming trainer uses 10 of M ="
        " 8, i.e. 1.25",
    )
    long_slots: int = Field(
        default=shaping_defaults.LONG_SLOTS,
        ge=0,
        description="DARTS: kept slots reserved for long samples",
    )
    long_wait: float | None = Field(
        default=None,
        ge=1.0,
        description="DARTS policies: a group closes once a running sample passes long_wait x the K-th short "
        "sample's length: its long slots keep the longest finished by then, or else the longest running sample, cut "
        "there and kept as truncated; None waits for the group's last sample, as DARTS does",
    )
    spare_gate: bool = Field(
        default=shaping_defaults.SPARE_GATE,
        description="DARTS policies: lower a prompt's budget (not below min_redundancy) to the launch its observed "
        "lengths say pays: spares that would shorten the group less than they add to its tokens are not launched "
        "(no spares where the lengths show no tail)",
    )
    idle_target: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="DARTS policies: steer avg_redundancy within [min_redundancy, max_redundancy] after every "
        "step so that the rollout side idles about this fraction of a step (spares where the trainer "
        "is the bottleneck, none where the rollout side is); None keeps avg_redundancy fixed",
    )
    warmup_steps: int = Field(
        default=shaping_defaults.WARMUP_STEPS,
        ge=0,
        description="DARTS: steps with uniform budgets before the length statistics are used",
    )
    alpha: float = Field(
        default=shaping_defaults.PRUNE_ALPHA,
        description="SART: phase 1 prunes running samples scoring below alpha (the scorer's scale); with the "
        "repetition scorer (a loop test, not a rating) phase 2 does too",
    )
    beta: int = Field(default=shaping_defaults.PRUNE_BETA, ge=0, description="SART: at most beta prunes in phase 1")
    progress_every_tokens: int = Field(
        default=shaping_defaults.PROGRESS_EVERY_TOKENS,
        ge=1,
        description="SART pruning and the long_wait deadline look at a group's running samples each time its "
        "longest passes a multiple of this many tokens (the token clock: the same decisions on any device); "
        "such groups are streamed this many tokens at a time",
    )
    priority: Literal["none", "longest_first", "shortest_first"] = Field(
        default="none",
        description="vLLM request priority from the TIE score of the prompt's length model (DARTS policies only):"
        " longest_first shortens the batch's makespan, shortest_first its mean latency",
    )
    tie_beta: float = Field(default=shaping_defaults.TIE_BETA, ge=0, le=1, description="TIE's tail weight")
    scorer: Literal["repetition", "lm-confidence", "reward-model", "none"] = Field(
        default="repetition",
        description="SART's scorer: the built-in repetition heuristic, a model in a scorer worker (lm-confidence:"
        " mean token log-prob of the partial response; reward-model: a one-label sequence-"
        "classification reward model), or none (early stop only). alpha is on the scorer's scale: "
        "repetition in [0, 1], lm-confidence <= 0, a RM's logit",
    )
    scorer_model: str | None = Field(
        default=None,
        description="lm-confidence: None = the policy's initial weights; reward-model: required",
    )
    scorer_gpus: float = Field(
        default=0.0,
        ge=0,
        description="GPUs for the scorer worker (a fraction shares one); 0 = CPU",
    )

    @model_validator(mode="after")
    def _bounds(self) -> ShapingConfig:
        if not self.min_redundancy <= self.avg_redundancy <= self.max_redundancy:
            raise ValueError(
                f"need min_redundancy ({self.min_redundancy}) <= avg_redundancy ({self.avg_redundancy}) "
                f"<= max_redundancy ({self.max_redundancy})"
            )
        if self.long_slots >= self.m_keep:
            raise ValueError(f"long_slots ({self.long_slots}) must be < m_keep ({self.m_keep})")
        self._check_scorer()
        return self

    def _check_scorer(self) -> None:
        if self.scorer in MODEL_SCORERS and "sart" not in self.policy:
            raise ValueError(f"scorer {self.scorer!r} needs a SART policy (it scores for pruning), not {self.policy!r}")
        if self.policy == "darts+sart" and self.scorer == "none":
            raise ValueError("darts+sart needs a scorer; use policy 'darts' for no pruning")
        if self.scorer_model is not None and self.scorer not in MODEL_SCORERS:
            raise ValueError(f"scorer_model is for the model scorers {MODEL_SCORERS}, not scorer {self.scorer!r}")
        if self.scorer == "reward-model" and self.scorer_model is None:
            raise ValueError("scorer 'reward-model' needs scorer_model (a local directory or a hub name)")
        if self.scorer == "lm-confidence" and self.alpha > 0:
            raise ValueError(
                f"scorer 'lm-confidence' scores are mean log-probs (<= 0), so alpha ({self.alpha}) > 0 would prune "
                f"every sample beta allows; set alpha <= 0 (e.g. -2.0)"
            )

    @property
    def watches_running(self) -> bool:
        """Whether the policy's controllers look at running samples (SART pruning, a DARTS long-slot deadline)."""
        return "sart" in self.policy or ("darts" in self.policy and self.long_wait is not None)

    @property
    def progress_tokens(self) -> int:
        """The token clock's period where the controllers watch running samples, else 0 (nothing streamed)."""
        return self.progress_every_tokens if self.watches_running else 0

    @property
    def steered_idle(self) -> float | None:
        """The idle fraction a DARTS policy's redundancy is steered to; None without one (the setting is inert)."""
        return self.idle_target if "darts" in self.policy else None

    @property
    def prioritized(self) -> bool:
        """Whether requests carry TIE priorities: a DARTS policy (its length model) and a priority other than none."""
        return self.priority != "none" and "darts" in self.policy

    @property
    def scorer_worker(self) -> bool:
        """Whether SART's scores come from a separate scorer worker (a model scorer; validation ties it to SART)."""
        return self.scorer in MODEL_SCORERS


class LoraConfig(Strict):
    """Low-rank adapters (PEFT LoRA) on the policy: only the adapters train; the engines serve them (vLLM's LoRA
    support, adapter tensors synced) or get merged weights."""

    rank: int = Field(default=16, ge=1, description="adapter rank r")
    alpha: float = Field(default=32.0, gt=0, description="adapter scale numerator: the update is (alpha / r) B A")
    target_modules: list[str] = Field(
        default=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="names of the linear layers that get adapters",
    )
    sync: Literal["auto", "adapter", "merged"] = Field(
        default="auto",
        description="adapter: the engines serve the base model plus the adapter (vLLM's LoRA support) and a sync "
        "sends only the adapter tensors; merged: a sync sends whole merged weights; auto: adapter where the "
        "engines have GPUs, merged on CPU (vLLM's CPU LoRA kernels halve decoding speed, which costs more than the "
        "smaller sync saves: docs/benchmarks.md, LoRA)",
    )


class TrainConfig(Strict):
    max_steps: int = Field(default=40, ge=1, description="optimizer steps of the run")
    batch_groups: int = Field(default=16, ge=1, description="groups (prompts) per optimizer step")
    max_staleness: int = Field(default=0, ge=0, description="0 = synchronous on-policy")
    sync_every: int = Field(default=1, ge=1, description="steps between weight syncs (with max_staleness > 0)")
    num_workers: int = Field(default=1, ge=1, description="data-parallel trainer workers")
    dp_balance: Literal["tokens", "groups"] = Field(
        default="tokens",
        description="how a step's batch is split over data-parallel ranks: tokens: samples balanced by token count "
        "(Karmarkar-Karp, rl/algorithm/balance.py); groups: whole groups round robin",
    )
    lora: LoraConfig | None = Field(
        default=None,
        description="train low-rank adapters instead of every weight (train.lora.rank=16 turns it on); None: "
        "full fine-tuning",
    )
    fsdp_keep_gathered: bool = Field(
        default=False,
        description="data-parallel ranks keep parameters gathered and gradients local across an update's "
        "micro-batches: one gather and one reduce-scatter per update instead of per micro-batch, so ranks wait "
        "for each other once (at the update's end) rather than at every micro-batch; costs full parameters and "
        "gradients on every rank during the step (ZeRO-2-like); false: ZeRO-3, gathered per micro-batch",
    )
    lr: float = Field(default=1e-3, gt=0, description="AdamW learning rate (after the warmup, before any decay)")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        default="constant",
        description="the rate after lr_warmup_steps: constant, or decaying to near 0 at max_steps, linearly or as "
        "a half cosine (TRL's lr_scheduler_type; one rate per step, a function of the step, so a resume continues "
        "on it)",
    )
    lr_warmup_steps: int = Field(
        default=0, ge=0, description="steps of linear warmup from lr/lr_warmup_steps up to lr (TRL's warmup_steps)"
    )
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay")
    grad_clip: float = Field(default=1.0, gt=0, description="gradient norm clip")
    micro_batch_size: int = Field(
        default=64,
        ge=1,
        description="rows per forward/backward (gradients accumulate over a step)",
    )
    micro_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        description="padded-token budget per micro-batch: rows are sorted by length and cut so that rows x "
        "longest row stays within it, so a long tail pads only its own micro-batch; None: "
        "micro_batch_size rows in batch order",
    )
    share_prompts: bool = Field(
        default=True,
        description="compute each group's prompt once: its samples packed into one row behind the prompt, a 4-D "
        "attention mask keeping each response to the prompt and itself (the same log-probs as padded rows, checked "
        "when the trainer starts; padded rows if a model reads them otherwise); a sample joins the row only while "
        "that computes fewer FLOPs, so long responses keep rows of their own; false: one padded row per sample",
    )
    gradient_checkpointing: bool = Field(
        default=False,
        description="recompute each layer's activations in backward instead of keeping them (HF gradient "
        "checkpointing): less memory per micro-batch for about one more forward pass of compute",
    )
    mini_batches: int = Field(
        default=1,
        ge=1,
        description="PPO mini-batch epochs: each train step makes ppo_epochs x mini_batches optimizer updates on "
        "its batch (verl's ppo_epochs / ppo_mini_batch_size); 1 x 1 = one update per batch",
    )
    ppo_epochs: int = Field(default=1, ge=1, description="passes over each batch per step")
    threads: int = Field(default=1, ge=1, description="torch threads per trainer worker on CPU")
    save_checkpoint: bool = Field(
        default=True,
        description="write checkpoints (every checkpoint_every steps and at the end) that `rl train --resume` "
        "continues from and `rl eval RUN_DIR` reads; false: none",
    )
    checkpoint_every: int | None = Field(
        default=50, ge=1, description="steps between checkpoints; None: only at the end"
    )
    keep_checkpoints: int = Field(default=2, ge=1, description="the newest checkpoints kept; older ones are removed")
    periodic_async: bool = Field(
        default=False,
        description="periodic asynchrony (arXiv 2511.18871): with max_staleness=0 the trainer runs "
        "forward/backward on each group as it arrives and steps once the batch is complete; the same "
        "update as synchronous training",
    )

    @model_validator(mode="after")
    def _sync(self) -> TrainConfig:
        if self.max_staleness == 0 and self.sync_every != 1:
            raise ValueError("max_staleness=0 (on-policy) needs sync_every=1")
        if self.mini_batches > self.batch_groups:
            raise ValueError(f"mini_batches ({self.mini_batches}) must be <= batch_groups ({self.batch_groups})")
        if self.periodic_async and self.mini_batches * self.ppo_epochs > 1:
            raise ValueError("periodic_async makes one update per batch: it needs mini_batches=1 and ppo_epochs=1")
        return self


class AlgorithmConfig(Strict):
    """Advantage estimator, policy loss, off-policy correction, regularizers and batch filtering."""

    advantage: Literal["grpo", "drgrpo", "rloo", "reinforce++", "reinforce++-baseline", "grpo-batch", "gdpo"] = Field(
        default="grpo",
        description="advantage estimator; gdpo normalizes each reward function within its group before the "
        "weighted sum (TRL's multi_objective_aggregation=normalize_then_sum); docs/algorithms.md",
    )
    loss: LossKind = Field(
        default="ppo",
        description="ppo: token-level clipped ratio; gspo: sequence-level ratio; cispo: the token ratio, capped at 1"
        " + clip_high, as a detached weight on A * log pi (MiniMax-M1), so capped tokens still learn; sapo: no clip,"
        " a soft gate on the token ratio (Qwen's SAPO; its temperatures sapo_tau_pos / sapo_tau_neg); vespo: no clip,"
        " a gamma-shaped weight of the whole sequence's ratio on A * log pi (VESPO; vespo_k_* / vespo_lambda_*)",
    )
    clip_low: float = Field(
        default=0.2,
        ge=0,
        lt=1,
        description="clip range [1 - clip_low, 1 + clip_high] (DAPO clip-higher)",
    )
    clip_high: float = Field(default=0.28, ge=0, description="upper clip: ratios above 1 + clip_high are clipped")
    dual_clip: float | None = Field(
        default=None,
        gt=1,
        description="dual-clip PPO (ppo, gspo): a token with a negative advantage loses at most dual_clip x |A|, "
        "however far its ratio rose (verl's clip_ratio_c, e.g. 3; TRL's delta); None: no such bound",
    )
    off_policy_mask: float | None = Field(
        default=None,
        gt=0,
        description="off-policy sequence masking (DeepSeek-V3.2; TRL's off_policy_mask_threshold, e.g. 0.5): a "
        "sample with a negative advantage whose mean log pi_vLLM - log pi over its tokens exceeds this is no loss "
        "term; None: none dropped",
    )
    sapo_tau_pos: float = Field(
        default=1.0,
        gt=0,
        description="SAPO: the gate's temperature for positive advantages (TRL's sapo_temperature_pos); higher fades"
        " off-policy tokens sooner",
    )
    sapo_tau_neg: float = Field(
        default=1.05,
        gt=0,
        description="SAPO: the gate's temperature for other advantages (TRL's sapo_temperature_neg)",
    )
    vespo_k_pos: float = Field(
        default=2.0,
        gt=0,
        description="VESPO, advantages of at least 0: the power of the sequence ratio w in the weight "
        "e^lam w^k e^(-lam w); higher fades sequences with w < 1 sooner (TRL's vespo_k_pos)",
    )
    vespo_lambda_pos: float = Field(
        default=3.0,
        gt=0,
        description="VESPO, advantages of at least 0: the weight's decay; higher fades w > 1 sooner (TRL's "
        "vespo_lambda_pos)",
    )
    vespo_k_neg: float = Field(default=3.0, gt=0, description="VESPO, negative advantages: as vespo_k_pos")
    vespo_lambda_neg: float = Field(default=2.0, gt=0, description="VESPO, negative advantages: as vespo_lambda_pos")
    agg: Aggregation = Field(
        default="token-mean",
        description="how token losses are averaged: over all tokens; per sequence, then over sequences; summed per "
        "sequence, then averaged over sequences (with loss=gspo: LUSPO, TRL's luspo); or summed per sequence over "
        "norm_len",
    )
    norm_len: int | None = Field(
        default=None,
        ge=1,
        description="seq-mean-token-sum-norm divisor; None: rollout.max_tokens",
    )
    decoupled: bool = Field(
        default=False,
        description="coupled PPO (default): clip pi / pi_behaviour (vLLM's log-probs), a trust region around the "
        "policy that sampled. Decoupled PPO: clip against the trainer's own log-probs at the start of"
        " the step and weight by w = pi_prox / pi_behaviour (truncated: tis, masked: mis). With one "
        "optimizer update per batch the decoupled clip is inactive (r = 1; train.mini_batches / "
        "ppo_epochs give several); on arith_tiny at max_staleness=4 with one update coupled learned "
        "best (see the issue-6 note).",
    )
    correction: Correction = Field(
        default="none",
        description="off-policy importance weights on tokens or sequences: truncated (tis) or masked (mis); needs"
        " decoupled",
    )
    correction_cap: float = Field(default=2.0, ge=1, description="the importance-weight cap of the correction")
    ess_lr_scaling: bool = Field(default=False, description="VCPO: lr * sqrt(ESS / B) each step")
    mask_truncated: bool = Field(
        default=False,
        description="DAPO overlong filtering: truncated samples (cut at rollout.max_tokens, or by shaping's "
        "long_wait) are no loss term; they still count in their group's advantages. TRL's "
        "mask_truncated_completions",
    )
    kl_coef: float = Field(default=0.0, ge=0, description="KL to the frozen initial policy")
    kl_estimator: KlEstimator = Field(
        default="k3",
        description="estimator of the KL term (k1, k2, k3 of Schulman's note)",
    )
    kl_correction: bool = Field(
        default=False,
        description="weight each token's KL term by pi / pi_vLLM, the importance ratio of the policy that sampled "
        "it, so that the estimate is of the current policy's KL however stale the sample (DeepSeek-V3.2's unbiased "
        "KL; TRL's use_bias_correction_kl)",
    )
    ref_sync_every: int | None = Field(
        default=None,
        ge=1,
        description="every this many steps the KL reference moves toward the policy: reference = (1 - ref_sync_mix) "
        "* reference + ref_sync_mix * policy (TR-DPO; TRL's sync_ref_model, ref_model_sync_steps); None: the "
        "reference stays the initial policy",
    )
    ref_sync_mix: float = Field(
        default=0.6,
        gt=0,
        le=1,
        description="the policy's share at each reference sync (TRL's ref_model_mixup_alpha); 1: the reference "
        "becomes the policy (ProRL's reference reset)",
    )
    entropy_coef: float = Field(
        default=0.0, ge=0, description="entropy bonus weight (with entropy_target: its starting value)"
    )
    entropy_target: float | None = Field(
        default=None,
        gt=0,
        description="adaptive entropy control (Skywork-OR1; TRL's use_adaptive_entropy, entropy_target): the bonus "
        "applies only after a step whose mean token entropy (nats) was at most this, and after each step its weight "
        "rises by entropy_coef_delta when the entropy was at most this, falls by it otherwise; None: a fixed weight",
    )
    entropy_coef_delta: float = Field(
        default=0.005, gt=0, description="adaptive entropy control: the weight's change per step"
    )
    entropy_coef_max: float = Field(
        default=1.0, gt=0, description="adaptive entropy control: the most the weight reaches (the least is 0)"
    )
    top_entropy_quantile: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="only the top share of response tokens by the policy's entropy, over each micro-batch, carry the "
        "policy-gradient term and the entropy bonus (Wang et al. 2025, arXiv 2506.01939, which trains on 0.2; TRL's "
        "top_entropy_quantile); 1: every token",
    )
    dynamic_sampling: bool = Field(
        default=False,
        description="DAPO dynamic sampling: drop groups whose rewards are all equal and sample more prompts instead",
    )
    dynamic_sampling_max_factor: float = Field(
        default=4.0,
        ge=0,
        description="at most this many times batch_groups groups are dropped per step; beyond it they are trained"
        " on (counted)",
    )
    dynamic_sampling_min_std: float = Field(
        default=0.0,
        ge=0,
        description="dynamic sampling drops a group whose rewards' standard deviation is at most this; 0: only a "
        "group whose rewards are all equal (continuous rewards, a judge's score or a length penalty, seldom tie)",
    )
    dynamic_sampling_pass_rate: tuple[float, float] | None = Field(
        default=None,
        description="dynamic sampling also drops a group whose share of correct samples (its first reward function "
        "above 0, as held-out accuracy counts) lies outside [low, high], e.g. [0.1, 0.9]: prompts the policy nearly "
        "always or nearly never solves; None: no band",
    )

    @field_validator("dynamic_sampling_pass_rate")
    @classmethod
    def _a_band_of_shares(cls, band: tuple[float, float] | None) -> tuple[float, float] | None:
        if band is not None and not 0.0 <= band[0] <= band[1] <= 1.0:
            raise ValueError(f"{list(band)} is not a band [low, high] with 0 <= low <= high <= 1")
        return band

    @model_validator(mode="after")
    def _correction_needs_decoupled(self) -> AlgorithmConfig:
        if self.correction != "none" and not self.decoupled:
            raise ValueError(f"correction {self.correction!r} needs decoupled: true (it weights by pi_prox / pi_behav)")
        return self


class WeightSyncConfig(Strict):
    transport: Literal["cpu", "nccl", "ipc"] = Field(
        default="cpu",
        description="cpu: safetensors bytes through Ray's object store (any device); nccl: vLLM's native GPU "
        "broadcast (the trainer and the engines on separate GPUs); ipc: CUDA IPC handles of packed buffers, for a "
        "trainer and engines sharing one machine's one GPU",
    )


class MemoryConfig(Strict):
    gpu_gib: float | None = Field(
        default=None,
        gt=0,
        description="GiB of the one GPU the trainer and the rollout engines share, for the memory plan "
        "(rl/inputs/memory_plan.py) that sets rollout.gpu_memory_utilization and refuses a run that cannot fit; None: "
        "the GPU's free memory where a local run puts every actor on one GPU, else no plan. Set, it plans on "
        "any machine (a CPU one included: a dry check of a GPU run)",
    )


class EvalConfig(Strict):
    every: int = Field(default=10, ge=0, description="optimizer steps between evaluations; 0 = only before/after")
    num_problems: int = Field(
        default=256, ge=1, description="held-out problems per evaluation (all of them where the split has fewer)"
    )
    temperature: float = Field(default=0.0, ge=0, description="evaluation sampling temperature (0: greedy)")
    samples: int = Field(
        default=1,
        ge=1,
        description="samples per held-out problem: with more than 1, each evaluation logs pass@k for k = 1, 2, 4, "
        "... up to it (accuracy is then the mean over samples, avg@k), sampled as the rollouts are (top_p, top_k, "
        "min_p, repetition_penalty) at eval.temperature, which must be above 0",
    )

    @model_validator(mode="after")
    def _samples_differ(self) -> EvalConfig:
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(
                f"samples={self.samples} at temperature 0 (greedy) is one response {self.samples} times, and its "
                "pass@k is pass@1; set eval.temperature above 0 (e.g. 1.0) or eval.samples=1"
            )
        return self


class RayConfig(Strict):
    address: str | None = Field(
        default=None,
        description='None: RAY_ADDRESS where it is set, else start a local instance; "auto": join a running cluster',
    )
    num_cpus: int | None = Field(default=None, description="CPUs of a local Ray instance; None: the machine's")


class PlacementConfig(Strict):
    trainer_nodes: list[str] = Field(
        default_factory=list,
        description="Ray nodes for the trainer ranks, rank i on entry i mod n: a node address (10.0.0.5) or a custom "
        "resource a node was started with (ray start --resources); empty: wherever Ray has room",
    )
    rollout_nodes: list[str] = Field(
        default_factory=list,
        description="Ray nodes for the rollout engines, engine i on entry i mod n (node addresses or custom "
        "resources, as trainer_nodes); empty: wherever Ray has room",
    )

    @model_validator(mode="after")
    def _named(self) -> PlacementConfig:
        for key in ("trainer_nodes", "rollout_nodes"):
            if any(not entry.strip() for entry in getattr(self, key)):
                raise ValueError(f"{key} holds an empty entry: name a node address or a Ray resource")
        return self


class WandbConfig(Strict):
    project: str = Field(description="Weights & Biases project the run is logged to")
    entity: str | None = Field(default=None, description="W&B user or team; None: the account's default")
    mode: Literal["online", "offline"] = Field(
        default="online",
        description="offline: no network; the run is written under RUN_DIR/wandb/ (`wandb sync` uploads it later)",
    )


class LoggingConfig(Strict):
    wandb: WandbConfig | None = Field(
        default=None,
        description="also log every step's metrics and the run config to W&B (beside metrics.jsonl and TensorBoard)",
    )
    completions_per_step: int = Field(
        default=32,
        ge=0,
        description="completions of each step (whole groups first, in training order) written with their prompt, "
        "rewards, advantage and log_extra columns to RUN_DIR/completions.jsonl (and a W&B table); 0: none",
    )


class RunConfig(Strict):
    name: str = Field(
        default="run",
        description="run name: the run directory is output_dir/name; a recipe file that gives none names its run "
        "after itself (my_recipe.yaml: runs/my_recipe)",
    )
    output_dir: str = Field(default="runs", description="folder that holds run directories")
    seed: int = Field(
        default=0,
        description="seed of the prompt order, the trainer's initialization and the driver's choices",
    )
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    shaping: ShapingConfig = Field(default_factory=ShapingConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    weight_sync: WeightSyncConfig = Field(default_factory=WeightSyncConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    @field_validator("name")
    @classmethod
    def _below_output_dir(cls, name: str) -> str:
        path = Path(name)
        if path.is_absolute() or not path.parts or ".." in path.parts:
            raise ValueError(
                f"the run directory is a folder below output_dir, such as 'exp1' or 'exp1/seed0'; got {name!r}"
            )
        return name

    @model_validator(mode="after")
    def _periodic(self) -> RunConfig:
        if self.train.num_workers > 1 and self.train.periodic_async:
            raise ValueError(
                "train.periodic_async accumulates each group on one rank as it arrives, but FSDP2 ranks compute "
                "together: it needs train.num_workers=1"
            )
        if self.train.num_workers > 1 and self.weight_sync.transport != "cpu":
            raise ValueError(
                f"weight_sync.transport={self.weight_sync.transport} sends whole parameters from one rank; with "
                "train.num_workers > 1 (sharded weights) use transport=cpu"
            )
        if self.train.lora is not None and (self.train.num_workers > 1 or self.weight_sync.transport != "cpu"):
            raise ValueError(
                "train.lora trains on one rank and syncs through the cpu channel: it needs train.num_workers=1 and "
                "weight_sync.transport=cpu"
            )
        if self.train.lora is not None and self.train.lora.sync != "merged" and self.train.lora.rank > 512:
            raise ValueError(
                f"train.lora.rank={self.train.lora.rank}: vLLM serves adapters up to rank 512; lower the rank or "
                "set train.lora.sync=merged"
            )
        if self.train.periodic_async and self.train.max_staleness != 0:
            raise ValueError("train.periodic_async needs train.max_staleness=0 (it is an on-policy mode)")
        if self.rollout.sleep_while_training and (self.train.max_staleness != 0 or self.train.periodic_async):
            raise ValueError(
                "rollout.sleep_while_training puts the engines to sleep while the trainers step, but this run samples "
                "while it trains: set train.max_staleness=0 and train.periodic_async=false, or leave it off"
            )
        if self.train.periodic_async and not is_group_local(self.algorithm.advantage):
            raise ValueError(
                f"train.periodic_async trains each group as it arrives, so algorithm.advantage must be "
                f"group-local; {self.algorithm.advantage!r} normalizes over the whole batch"
            )
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], yaml-parsed value)."""
    if "=" not in item:
        raise ValueError(f"override {item!r} must look like key.path=value")
    key, raw = item.split("=", 1)
    if not key:
        raise ValueError(f"override {item!r} has an empty key")
    try:
        return key.split("."), yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or type(e).__name__
        raise ValueError(
            f"override {item!r}: the value is not valid YAML ({problem}); quote it for the shell, as in "
            f"'reward.functions=[{{fn: format}}]'"
        ) from None


def apply_overrides(
    raw: dict[str, Any], overrides: list[str], defaults: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Set each ``key.path=value`` in a nested dict (creating levels as needed); a number indexes a list.

    A list the recipe does not set is taken from ``defaults`` (a dumped config) before one of its items is set.
    """
    for item in overrides:
        path, value = parse_override(item)
        node: Any = raw
        default: Any = defaults or {}
        for part in path[:-1]:
            node, default = _child(node, default, part, item)
        if isinstance(node, list):
            node[_index(node, path[-1], item)] = value
        else:
            node[path[-1]] = value
    return raw


def _child(node: Any, default: Any, part: str, item: str) -> tuple[Any, Any]:
    """The section or list item ``part`` of ``node`` (a missing one is created), and its default's."""
    if isinstance(node, list):
        index = _index(node, part, item)
        return node[index], default[index] if isinstance(default, list) and index < len(default) else {}
    default = default.get(part, {}) if isinstance(default, dict) else {}
    if part not in node:
        node[part] = copy.deepcopy(default) if isinstance(default, list) else {}
    if not isinstance(node[part], (dict, list)):
        if isinstance(default, dict) and default:  # a section, which the recipe gave a value
            raise ValueError(f"override {item!r}: the recipe gives section {part!r} the value {node[part]!r}")
        raise ValueError(f"override {item!r}: {part!r} is not a section")
    return node[part], default


def _index(items: list, part: str, item: str) -> int:
    """``part`` as an index into ``items``; raises ``ValueError`` naming the override otherwise."""
    if not part.isdigit() or int(part) >= len(items):
        raise ValueError(f"override {item!r}: {part!r} is not an item of a list of {len(items)}")
    return int(part)


def load_config(path: str | Path | None, overrides: list[str] = (), local_paths: bool = True) -> RunConfig:
    """Read a YAML recipe, apply command-line overrides, validate. A recipe that gives no ``name`` is named after its
    file. With ``local_paths`` every local path the config names (``LOCAL_PATHS``) becomes absolute: the recipe's own
    read against its folder, or else, as an override's, against the working directory; so a run resumes from any
    directory.

    Raises ``ValueError`` naming the file for a recipe that is not UTF-8, not YAML or not a mapping.
    """
    raw = read_recipe(path, local_paths) if path is not None else {}
    if path is not None:
        raw.setdefault("name", Path(path).stem)  # two recipes without a name do not share (and restart) one run
    return _validated(raw, overrides, local_paths)


def load_run_config(path: str | Path, overrides: list[str] = ()) -> RunConfig:
    """A run's saved ``config.yaml`` (written by this version of Tailor or an earlier one) with ``overrides``: its
    paths as written; a setting this version no longer has is left out, with a warning, so an earlier version's
    run still resumes and evaluates."""
    raw = read_recipe(path, local_paths=False)
    if gone := drop_unknown_keys(raw, RunConfig):
        log.warning("%s: settings this version of Tailor no longer has are ignored: %s", path, ", ".join(gone))
    return _validated(raw, overrides, local_paths=False)


class _KeyGivenTwice(ValueError):
    pass


class _RecipeLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last one without a word: an
    edit to the first copy of ``lr`` would change nothing)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base``: keys given beside it override its own
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in lines:
                raise _KeyGivenTwice(f"{key!r} is given twice in one mapping (lines {lines[key]} and {line}); keep one")
            lines[key] = line
        return super().construct_mapping(node, deep)


def read_recipe(path: str | Path, local_paths: bool) -> dict[str, Any]:
    """A recipe file as a nested dict (its local paths made absolute against its folder with ``local_paths``)."""
    try:
        raw = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_RecipeLoader) or {}
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({' '.join(str(e).split())})") from None
    except _KeyGivenTwice as e:
        raise ValueError(f"{path}: {e}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a recipe must be a mapping at the top level, not a {type(raw).__name__}")
    if local_paths:
        absolute_paths(raw, Path(path).resolve().parent)
    return raw


def drop_unknown_keys(raw: dict[str, Any], model: type[BaseModel], prefix: str = "") -> list[str]:
    """Remove from ``raw``, in place, every key no field of ``model`` (or of its sections) has; returns them
    dotted."""
    gone = []
    for key, value in list(raw.items()):
        field = model.model_fields.get(key)
        if field is None:
            gone.append(prefix + key)
            del raw[key]
        elif isinstance(value, dict) and (section := _section_model(field.annotation)) is not None:
            gone += drop_unknown_keys(value, section, f"{prefix}{key}.")
    return gone


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The config section a field holds (``X`` or ``X | None``), or None for a value."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _validated(raw: dict[str, Any], overrides: list[str], local_paths: bool) -> RunConfig:
    merged = apply_overrides(raw, list(overrides), RunConfig().model_dump())
    if local_paths:
        absolute_paths(merged, Path.cwd())
    _ray_address_from_environment(merged)
    return RunConfig.model_validate(merged)


RAY_ADDRESS_ENV = "RAY_ADDRESS"  # the cluster Ray's own ray.init() joins; `ray job submit` sets it for its entrypoint


def _ray_address_from_environment(merged: dict[str, Any]) -> None:
    """A ``ray.address`` the recipe and its overrides leave unset is ``RAY_ADDRESS``'s, where that is set (a run
    started by ``ray job submit`` joins the job's cluster, as a Ray program does); ``ray_address_named`` says so."""
    section = merged.setdefault("ray", {})
    address = _environment_ray_address()
    if isinstance(section, dict) and section.get("address") is None and address:
        section["address"] = address


def _environment_ray_address() -> str:
    return os.environ.get(RAY_ADDRESS_ENV, "").strip()


def ray_address_named(address: str) -> str:
    """``ray.address`` as messages name it: with its source where it is ``RAY_ADDRESS``'s."""
    if address == _environment_ray_address():
        return f"ray.address {address!r} (from {RAY_ADDRESS_ENV}; unset it for a Ray instance of the run's own)"
    return f"ray.address {address!r}"


# the keys that may name a local file or folder: (section, key) and, for reward.functions, each item's
LOCAL_PATHS = (("model", "path"), ("data", "source"), ("data", "test_source"), ("shaping", "scorer_model"))
REWARD_PATHS = ("fn", "model")


def absolute_paths(raw: dict[str, Any], base: Path) -> None:
    """Make each ``LOCAL_PATHS`` value of ``raw`` (and each reward's file or model folder) that names an existing
    file or folder under ``base`` absolute, in place; the rest (hub names, presets, builtins) stay as they are."""
    for section, key in LOCAL_PATHS:
        node = raw.get(section)
        if isinstance(node, dict) and isinstance(node.get(key), str):
            node[key] = _absolute(node[key], base)
    functions = (raw.get("reward") or {}).get("functions") if isinstance(raw.get("reward"), dict) else None
    for index, item in enumerate(functions if isinstance(functions, list) else []):
        if isinstance(item, str):  # a bare function spec
            functions[index] = _absolute(item, base, spec=True)
        for key in REWARD_PATHS if isinstance(item, dict) else ():
            if isinstance(item.get(key), str):
                item[key] = _absolute(item[key], base, spec=key == "fn")


def _absolute(value: str, base: Path, spec: bool = False) -> str:
    """``value`` with its path made absolute against ``base`` where that path exists; for a reward ``spec``
    (``file.py:function``) the file part."""
    path, sep, function = value.rpartition(":") if spec else (value, "", "")
    if not path.strip() or (spec and not path.endswith(".py")):
        return value
    local = Path(path).expanduser()
    if local.is_absolute() or not (base / local).exists():
        return value
    return f"{(base / local).resolve()}{sep}{function}"


def _type_name(annotation: Any) -> str:
    """``a | b`` for a Literal's choices, the class name for a plain type, the annotation's text otherwise."""
    if get_origin(annotation) is Literal:
        return " | ".join(str(choice) for choice in get_args(annotation))
    name = getattr(annotation, "__name__", None) if get_origin(annotation) is None else None
    return name or str(annotation).replace("typing.", "").replace(f"{__name__}.", "")


def _section(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The config class a field holds (``Section``, ``Section | None`` or ``list[Section]``) and the separator
    of its keys (``.``, ``.``, ``[].``); ``(None, "")`` for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, "."
    args = [arg for arg in get_args(annotation) if arg is not type(None)]
    if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0], "[]." if get_origin(annotation) is list else "."
    return None, ""


class ConfigKey(NamedTuple):
    """One documented config key: ``default`` is ``required`` or ``default <repr>``."""

    key: str
    type: str
    default: str
    description: str


def config_keys(model: type[BaseModel] | None = None, prefix: str = "") -> list[ConfigKey]:
    """Every config key in declaration order, nested sections expanded: an optional section (``train.lora``) or a
    list of them (``reward.functions``) is a key of its own, then its keys. The one source of ``--help-config``
    and the generated reference page (``rl/cli/config_reference.py``)."""
    keys = []
    for name, info in (model or RunConfig).model_fields.items():
        key = f"{prefix}{name}"
        section, sep = _section(info.annotation)
        if info.annotation is not section:  # a value, or an optional section or list of them: a key of its own
            default = "required" if info.is_required() else f"default {info.get_default(call_default_factory=True)!r}"
            keys.append(ConfigKey(key, _type_name(info.annotation), default, info.description or ""))
        if section is not None:
            keys += config_keys(section, f"{key}{sep}")
    return keys


def describe_config() -> list[str]:
    """One line per config key, ``section.key (type, default): description``."""
    lines = []
    for item in config_keys():
        text = f"{item.key} ({item.type}, {item.default})"
        lines.append(f"{text}: {item.description}" if item.description else text)
    return lines


def error_lines(error: ValidationError, name: Callable[[tuple], str] | None = None) -> list[str]:
    """A pydantic error as one line per field, ``train.lr: Input should be a valid number ... (got 'abc')``, without
    pydantic's URL; ``name`` turns an error's location into the option a person typed (default: dotted keys)."""
    lines = []
    for item in error.errors():
        loc = tuple(item["loc"])
        where = name(loc) if name else ".".join(str(part) for part in loc)
        cause = (item.get("ctx") or {}).get("error")
        if item["type"] == "extra_forbidden":
            text = "not a known key" + _close_key(where, error.title)
        elif isinstance(cause, ValidationError):  # a validator that validated another model
            text = "; ".join(error_lines(cause))
        elif isinstance(cause, BaseException):
            text = one_line(cause)
        else:
            text = item["msg"]
            value = item.get("input")
            if isinstance(value, (str, int, float, bool)) and len(repr(value)) <= 60:
                text += f" (got {value!r})"
            if item["type"] == "model_type" and where in SECTION_VALUES and isinstance(value, str):
                text += f"; did you mean {SECTION_VALUES[where]}={value}?"
        lines.append(f"{where}: {text}" if where else text)
    return lines


def one_line(error: BaseException) -> str:
    """An error's message on one line (a ``ValidationError``'s fields joined by ``; ``)."""
    if isinstance(error, ValidationError):
        return "; ".join(error_lines(error))
    return " ".join(str(error).split())


# a section given one value (model=NAME) most likely meant its main key
SECTION_VALUES = {"model": "model.path", "data": "data.source"}

# TRL's GRPOConfig names (and its scripts' model and dataset arguments), which TRL users type, and the key that sets
# the same thing here
TRL_NAMES = {
    "model_name_or_path": "model.path",
    "dataset_name": "data.source",
    "dataset_config": "data.subset",
    "dataset_train_split": "data.train_split",
    "dataset_test_split": "data.test_split",
    "use_peft": "train.lora (its keys set the adapters)",
    "lora_r": "train.lora.rank",
    "lora_alpha": "train.lora.alpha",
    "lora_target_modules": "train.lora.target_modules",
    "dtype": "model.dtype",
    "learning_rate": "train.lr",
    "lr_scheduler_type": "train.lr_schedule (constant, linear or cosine)",
    "warmup_steps": "train.lr_warmup_steps",
    "warmup_ratio": "train.lr_warmup_steps (in steps: ratio x train.max_steps)",
    "weight_decay": "train.weight_decay",
    "max_grad_norm": "train.grad_clip",
    "num_generations": "shaping.m_keep",
    "max_completion_length": "rollout.max_tokens",
    "max_prompt_length": "rollout.max_model_len (prompt + response)",
    "max_steps": "train.max_steps",
    "num_iterations": "train.ppo_epochs",
    "beta": "algorithm.kl_coef",
    "use_bias_correction_kl": "algorithm.kl_correction",
    "sync_ref_model": "algorithm.ref_sync_every (the steps between syncs)",
    "ref_model_sync_steps": "algorithm.ref_sync_every",
    "ref_model_mixup_alpha": "algorithm.ref_sync_mix",
    "entropy_coef": "algorithm.entropy_coef",
    "use_adaptive_entropy": "algorithm.entropy_target (the adaptive control's target entropy)",
    "entropy_target": "algorithm.entropy_target",
    "entropy_coef_delta": "algorithm.entropy_coef_delta",
    "entropy_coef_max": "algorithm.entropy_coef_max",
    "top_entropy_quantile": "algorithm.top_entropy_quantile",
    "epsilon": "algorithm.clip_low",
    "epsilon_high": "algorithm.clip_high",
    "delta": "algorithm.dual_clip",
    "off_policy_mask_threshold": "algorithm.off_policy_mask",
    "vllm_importance_sampling_correction": "algorithm.correction (with algorithm.decoupled=true; TRL's default "
    "sequence_mask is mis-seq)",
    "vllm_importance_sampling_mode": "algorithm.correction (token_truncate: tis-token, sequence_mask: mis-seq, ...)",
    "vllm_importance_sampling_cap": "algorithm.correction_cap",
    "vllm_importance_sampling_clip_max": "algorithm.correction_cap",
    "loss_type": "algorithm.agg (and algorithm.advantage=drgrpo for dr_grpo; cispo and sapo: algorithm.loss, "
    "cispo's cap epsilon_high being 1 + algorithm.clip_high; vespo: algorithm.loss; luspo: algorithm.loss=gspo "
    "algorithm.agg=seq-mean-token-sum)",
    "importance_sampling_level": "algorithm.loss (gspo: sequence level)",
    "mask_truncated_completions": "algorithm.mask_truncated",
    "sapo_temperature_pos": "algorithm.sapo_tau_pos",
    "sapo_temperature_neg": "algorithm.sapo_tau_neg",
    "vespo_k_pos": "algorithm.vespo_k_pos",
    "vespo_lambda_pos": "algorithm.vespo_lambda_pos",
    "vespo_k_neg": "algorithm.vespo_k_neg",
    "vespo_lambda_neg": "algorithm.vespo_lambda_neg",
    "scale_rewards": "algorithm.advantage (group: grpo, batch: grpo-batch, none: drgrpo)",
    "multi_objective_aggregation": "algorithm.advantage (normalize_then_sum: gdpo)",
    "reward_weights": "reward.functions.N.weight",
    "per_device_train_batch_size": "train.batch_groups (prompts per step; each gets shaping.m_keep samples)",
    "generation_batch_size": "train.batch_groups x shaping.m_keep (the samples of one step)",
    "steps_per_generation": "train.mini_batches (optimizer updates per generated batch)",
    "model_init_kwargs": "model.dtype, model.revision and model.trust_remote_code for those keys",
    "trust_remote_code": "model.trust_remote_code",
    "model_revision": "model.revision",
    "save_steps": "train.checkpoint_every",
    "save_total_limit": "train.keep_checkpoints",
    "eval_steps": "eval.every",
    "eval_strategy": "eval.every (steps between evaluations; 0: before and after training only)",
    "report_to": "logging.wandb for W&B (the metrics file and TensorBoard are always written)",
    "gradient_accumulation_steps": "train.micro_batch_size or train.micro_batch_tokens (a step's rows accumulate "
    "over micro-batches of that size)",
    "bf16": "model.dtype",
    "num_train_epochs": "train.max_steps (training is counted in steps)",
    "num_completions_to_print": "logging.completions_per_step",
    "log_completions": "logging.completions_per_step (completions logged each step)",
    "num_generations_eval": "eval.samples",
    "temperature": "rollout.temperature",
    "top_p": "rollout.top_p",
    "top_k": "rollout.top_k",
    "min_p": "rollout.min_p",
    "repetition_penalty": "rollout.repetition_penalty",
    "gradient_checkpointing": "train.gradient_checkpointing",
    "vllm_enable_sleep_mode": "rollout.sleep_while_training",
    "vllm_gpu_memory_utilization": "rollout.gpu_memory_utilization",
    "vllm_max_model_length": "rollout.max_model_len",
    "chat_template_kwargs": "data.chat_template_kwargs",
    "max_tool_calling_iterations": "rollout.max_tool_calls",
    "generation_kwargs": "rollout.stop for its stop strings; its sampling keys are rollout's (temperature, top_p, "
    "top_k, min_p, repetition_penalty, seed)",
    "rollout_func": "rollout.workflow (an async run(episode, row) that samples the turns itself)",
}


def _close_key(key: str, title: str) -> str:
    """For an unknown key of a run config: TRL's name for a key here, or the nearest known key, and where every
    key is listed."""
    if title != RunConfig.__name__:
        return ""
    section, _, leaf = re.sub(r"\.\d+(?=\.)", "[]", key).rpartition(".")
    if leaf in TRL_NAMES:
        return f" (TRL's {leaf} is {TRL_NAMES[leaf]} here; rl train --help-config lists every key)"
    siblings = [item.key.rpartition(".") for item in config_keys()]
    near = difflib.get_close_matches(leaf, [name for head, _, name in siblings if head == section], n=1, cutoff=0.7)
    hint = f"did you mean {key[: len(key) - len(leaf)]}{near[0]}? " if near else ""
    return f" ({hint}rl train --help-config lists every key)"
