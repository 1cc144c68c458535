"""``rl bench rollout``: time one training step's worth of rollouts under each shaping mode.

One process, one vLLM engine (``AsyncLLM``, no Ray) reused by every mode. A mode's pass sends all B groups at
once, as a training step does, and measures the time until the whole batch (B groups x M kept) is in,
tokens/s, waste, shaping counts, lengths and the reward of the kept samples (scored after the clock
stops). Every mode but ``shadow`` first runs an untimed warm-up pass on the same prompts: it gives DARTS the length
history its budgets need (``warmup_steps=0``) and puts every mode in the same prefix-cache state.

Modes: ``raw`` is the engine ceiling (each prompt is one request with ``n=M``, no shaping); ``plain``,
``darts``, ``sart`` and ``darts+sart`` are the shaping policies as training runs them (``run_group``);
``darts+tie`` and ``darts+sart+tie`` add vLLM request priorities from the TIE score (longest predicted first);
``shadow`` launches as many samples per prompt as the widest mode and aborts none: the natural lengths
``rl bench simulate`` replays. Every sample a pass launches runs at once (``max_num_seqs``), and watched groups
stream every ``progress_every_tokens`` tokens.
A shaped mode may carry its own shaping knobs, ``MODE@key=value[@key=value...]`` (e.g.
``darts+sart@long_wait=1.5``), so one knob's effect is measured side by side with the mode without it.
With a recipe whose ``rollout.tools`` (or ``environment``) are set, every sample is a multi-turn episode
(``run_episodes``): its records and metrics add turns, tool calls, seconds in tools and decode tokens per episode, and
the shaping policies decide on the tokens each episode's model sampled; ``raw`` (one single-turn request) is refused.
Repeat ``r`` draws its prompts with seed ``seed + r`` and rotates the mode order by ``r``. vLLM requests
are not seeded (per-request seeds crash the CPU engine): the engine's random stream just continues.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from tqdm.contrib.logging import logging_redirect_tqdm

from rl.bench.cost_model import DecodeProfile, batch_rollout_time
from rl.bench.prompts import Source, bench_rows, default_reward, sample_rows
from rl.bench.records import SampleRecord, pass_metrics
from rl.bench.summary import build_summary, markdown
from rl.config import (
    ENGINE_SEED_MAX,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    ShapingConfig,
    apply_overrides,
    load_config,
    one_line,
)
from rl.data.source import dataset_rows
from rl.inputs.prompting import PromptEncoder
from rl.output.progress import Progress
from rl.output.provenance import describe_device, stack_versions
from rl.rewards.loading import RewardSpec, load_reward_fn
from rl.rewards.pool import RewardPool
from rl.rollout.cpu_cores import local_cores
from rl.rollout.engine import EngineSpec, InferenceEngine, SamplingSpec, start_engine
from rl.rollout.episode_settings import episode_settings
from rl.rollout.group_runner import GroupResult, run_group
from rl.rollout.vllm_adapter import configure_cpu_threads, is_cpu_platform
from rl.rollout.workflow import Episode, Workflow, run_episodes
from rl.shaping.factory import make_policy
from rl.shaping.plain import PlainPolicy
from rl.shaping.policy import GroupController, GroupPlan, ShapingPolicy
from rl.types import PromptRow, Sample

log = logging.getLogger("rl.bench")

Completion = str | list[dict[str, Any]]  # what a reward reads: a text, or chat messages (an episode's)
Mode = Literal["raw", "plain", "darts", "sart", "darts+sart", "darts+tie", "darts+sart+tie", "shadow"]
ALL_MODES: tuple[Mode, ...] = ("raw", "plain", "darts", "sart", "darts+sart", "darts+tie", "darts+sart+tie")
SHADOW: Mode = "shadow"  # launches as many samples per prompt as the widest mode, aborts none: natural lengths
TIE = "+tie"  # mode suffix: the same policy with TIE-score vLLM priorities (longest predicted first)
KNOB = "@"  # mode separator before each of its own shaping knobs: darts+sart@long_wait=1.5
SET_BY_MODE = ("policy", "m_keep", "warmup_steps", "priority")  # shaping fields a mode's name decides
PASSES_FILE = "bench_passes.jsonl"  # one timed pass's run dict per line, written as the bench goes
CONFIG_FILE = "bench_config.json"  # the run's config and engine, written before its first pass
KV_CACHE_CAP = 4 << 30  # CPU: never reserve more host RAM than this for the KV cache


class RolloutBenchConfig(BaseModel):
    """What to benchmark. ``shaping`` holds the DARTS/SART knobs (its ``policy`` and ``m_keep`` are ignored)."""

    model_config = ConfigDict(extra="forbid")

    model: str = "builtin:arith-tiny"
    prompts: int = Field(16, ge=1)  # B groups per batch
    m_keep: int = Field(8, ge=2)  # M kept samples per group
    max_tokens: int = Field(48, ge=1)
    temperature: float = Field(1.0, gt=0)
    modes: list[str] = Field(default_factory=lambda: list(ALL_MODES), min_length=1)  # Mode[@key=value...]
    repeats: int = Field(1, ge=1)
    seed: int = Field(0, ge=0, le=ENGINE_SEED_MAX)  # the engine's seed, and repeat r's prompt draw's (seed + r)
    out_dir: Path = Path("runs/bench-rollout")
    dataset: Source | None = None  # built-in prompt set (default arith); exclusive with recipe
    recipe: Path | None = None  # prompts (framed as the recipe frames them) and rewards from this recipe's train split
    recipe_overrides: list[str] = Field(default_factory=list)  # key.path=value applied to the recipe
    reward: str | None = None  # reward spec for kept samples; None: the dataset's/recipe's; "none": skip
    shaping: ShapingConfig = Field(default_factory=ShapingConfig)
    cost_model: str | None = None  # decode profile JSON (path or shipped name) for the cost-model columns
    kv_cache_bytes: int | None = None  # CPU KV cache; None: enough for every launched sample
    cpu_threads_bind: str | None = None  # CPU only: the cores this process (and its engine) runs on; None: any
    lengths: str | None = None  # dummy: models only: a length-model preset or a bench_rollout.json to fit
    steady_batches: int = Field(0, ge=0)  # also run this many batches back to back per mode: kept groups per second
    enforce_eager: bool | None = None  # GPU: False captures CUDA graphs; None: the recipe's, else the engine default
    plots: bool = True

    @field_validator("cpu_threads_bind")
    @classmethod
    def _core_list(cls, bind: str | None) -> str | None:
        if bind is not None:
            local_cores(bind)
        return bind

    @field_validator("modes")
    @classmethod
    def _known_modes(cls, modes: list[str]) -> list[str]:
        if len(set(modes)) != len(modes):
            raise ValueError(f"modes repeat: {modes}")
        for mode in modes:
            base, knobs = split_mode(mode)
            if base not in (*ALL_MODES, SHADOW):
                raise ValueError(f"mode {mode!r}: {base!r} is none of {', '.join((*ALL_MODES, SHADOW))}")
            if knobs and base in ("raw", "plain", SHADOW):
                raise ValueError(f"mode {mode!r}: {base} takes no shaping knobs")
            if fixed := [k for k in knobs if k.split("=", 1)[0] in SET_BY_MODE]:
                raise ValueError(f"mode {mode!r}: {', '.join(fixed)} is set by the mode's name, not a knob")
        return modes

    @model_validator(mode="after")
    def _one_prompt_source(self) -> RolloutBenchConfig:
        if self.recipe is not None and self.dataset is not None:
            raise ValueError("dataset and recipe are exclusive: the recipe brings its own dataset")
        return self

    @model_validator(mode="after")
    def _no_raw_episodes(self) -> RolloutBenchConfig:
        if "raw" in self.modes and self.recipe is not None:
            if episode_settings(load_config(self.recipe, self.recipe_overrides)) is not None:
                raise ValueError(
                    "mode raw is single-turn; the recipe's tools or workflow make episodes: run the other modes"
                )
        return self

    @model_validator(mode="after")
    def _mode_knobs(self) -> RolloutBenchConfig:
        for mode in self.modes:
            try:
                in_process_scorer(mode_shaping(self, mode))
            except ValueError as e:  # pydantic's ValidationError included: one line per field
                raise ValueError(f"mode {mode!r}: {one_line(e)}") from None
        return self

    @model_validator(mode="after")
    def _synthetic_lengths(self) -> RolloutBenchConfig:
        from rl.bench.synthetic_bench import check_synthetic

        check_synthetic(self)
        return self

    @field_validator("shaping")
    @classmethod
    def _in_process_scorer(cls, shaping: ShapingConfig) -> ShapingConfig:
        return in_process_scorer(shaping)

    @field_validator("reward")
    @classmethod
    def _loadable_reward(cls, reward: str | None) -> str | None:
        if reward not in (None, "none"):
            load_reward_fn(reward)  # a ValueError naming the spec and what is wrong
        return reward

    @field_validator("cost_model")
    @classmethod
    def _readable_profile(cls, cost_model: str | None) -> str | None:
        if cost_model is not None:
            DecodeProfile.load(cost_model)
        return cost_model


def in_process_scorer(shaping: ShapingConfig) -> ShapingConfig:
    """``shaping`` itself; a scorer that needs a scorer worker is refused (this bench does not start one)."""
    if shaping.scorer_worker:
        raise ValueError(f"scorer {shaping.scorer!r} needs a scorer worker, which this bench does not start")
    return shaping


@dataclass(frozen=True)
class Batch:
    """One repeat's prompts and their token ids (prompt ids repeat across repeats; tokens go by position)."""

    rows: list[PromptRow]
    tokens: list[list[int]]


@dataclass
class PassResult:
    """One pass over the batch: a record per launched sample, the clock, counters and kept samples."""

    records: list[SampleRecord]
    seconds: float
    counts: dict[str, int]
    kept: list[tuple[PromptRow, list[Sample], list[Completion]]]  # kept samples, with what rewards read of them


def split_mode(mode: str) -> tuple[str, list[str]]:
    """``"darts+sart@long_wait=1.5"`` -> ``("darts+sart", ["long_wait=1.5"])``."""
    base, *knobs = mode.split(KNOB)
    return base, knobs


def uses_tie(mode: str) -> bool:
    """Whether ``mode`` sends TIE-score vLLM priorities."""
    return split_mode(mode)[0].endswith(TIE)


def policy_name(mode: str) -> str:
    """The shaping policy a mode runs (``darts+tie`` and ``darts+tie@...`` run ``darts``)."""
    return split_mode(mode)[0].removesuffix(TIE)


def mode_shaping(cfg: RolloutBenchConfig, mode: str) -> ShapingConfig:
    """The validated shaping config ``mode`` runs: the bench's knobs, the mode's own, its policy and priority."""
    base, knobs = split_mode(mode)
    fields = apply_overrides(cfg.shaping.model_dump(), knobs)
    fields.update(
        policy=policy_name(mode) if base not in ("raw", SHADOW) else "plain",
        m_keep=cfg.m_keep,
        warmup_steps=0,
        priority="longest_first" if uses_tie(mode) else "none",
    )
    return ShapingConfig.model_validate(fields)


def policy_options(cfg: RolloutBenchConfig, mode: str) -> dict[str, Any]:
    """``make_policy`` keyword arguments for ``mode``, exactly as training derives them from a recipe."""
    from rl.shaping.factory import shaping_options

    rollout = RolloutConfig(max_tokens=cfg.max_tokens, max_model_len=cfg.max_tokens + 16)  # policies read max_tokens
    run = RunConfig(shaping=mode_shaping(cfg, mode), rollout=rollout)
    return shaping_options(run)


def widest_launch(cfg: RolloutBenchConfig) -> int:
    """The most samples any of the bench's modes launches for one prompt (``max_redundancy`` x M)."""
    redundancy = max(mode_shaping(cfg, m).max_redundancy for m in cfg.modes)
    return max(cfg.m_keep, round(redundancy * cfg.m_keep))


def kv_cache_size(model_dir: str, max_model_len: int, sequences: int) -> int:
    """float32 KV cache for ``sequences`` sequences of ``max_model_len`` tokens (64 MiB to 4 GiB)."""
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model_dir)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * 4
    return int(min(KV_CACHE_CAP, max(64 << 20, per_token * max_model_len * sequences)))


class RolloutBench:
    """Runs the configured modes on one engine and collects one run dict per timed pass; with a ``workflow`` (default:
    the recipe's tools, if it has any) each sample is an episode."""

    workflow: Workflow | None = None

    def __init__(self, cfg: RolloutBenchConfig, model_dir: str, workflow: Workflow | None = None) -> None:
        self.cfg = cfg
        self.model_dir = model_dir
        run = load_config(cfg.recipe, cfg.recipe_overrides) if cfg.recipe is not None else None
        model = run.model if run is not None and run.model.path == cfg.model else ModelConfig(path=cfg.model)
        self.load_kwargs = model.load_kwargs(model_dir)  # the recipe's model: its revision, its own code allowed
        self.encoder = PromptEncoder(
            model_dir, run.data.chat_template_kwargs if run is not None else None, self.load_kwargs
        )
        self.enforce_eager = EngineSpec.enforce_eager
        chat = self.encoder.tokenizer.chat_template is not None
        if run is not None:
            split = dataset_rows(run.data, run.data.train_split)
            draws = [sample_rows(split, cfg.prompts, cfg.seed + r) for r in range(cfg.repeats)]
            default_specs = [(f.spec, f.weight) for f in run.reward.functions]
            self.enforce_eager = run.rollout.enforce_eager  # GPU: CUDA graphs with rollout.enforce_eager=false
            tools = episode_settings(run)
            if workflow is None and tools is not None:
                workflow = tools.build(self.encoder.tokenizer)
        else:
            source = cfg.dataset or "arith"
            draws = [bench_rows(source, cfg.prompts, cfg.seed + r, chat) for r in range(cfg.repeats)]
            default_specs = [(default_reward(source, chat), 1.0)]
        self.workflow = workflow
        encode = workflow.prompt if workflow is not None else lambda row: self.encoder.encode(row.prompt)
        self.batches = [Batch(rows, [encode(row) for row in rows]) for rows in draws]
        self.reward_specs: list[tuple[RewardSpec, float]] = (
            [] if cfg.reward == "none" else [(cfg.reward, 1.0)] if cfg.reward else default_specs
        )
        self.sampling = SamplingSpec(cfg.max_tokens, cfg.temperature)
        self.profile = DecodeProfile.load(cfg.cost_model) if cfg.cost_model else None
        self._pass_ids = itertools.count()

    def max_model_len(self) -> int:
        """Longest prompt plus ``max_tokens``, rounded up to whole 32-token KV blocks."""
        need = max(len(t) for batch in self.batches for t in batch.tokens) + self.cfg.max_tokens
        return 32 * math.ceil(need / 32)

    def engine_spec(self) -> EngineSpec:
        """An engine sized for this benchmark (KV cache for every sample the widest mode launches)."""
        cfg = self.cfg
        max_len = self.max_model_len()
        n_max = widest_launch(cfg)
        kv = cfg.kv_cache_bytes or kv_cache_size(self.model_dir, max_len, cfg.prompts * n_max)
        priorities = any(uses_tie(m) for m in cfg.modes)
        clocks = [mode_shaping(cfg, m).progress_tokens for m in cfg.modes]
        return EngineSpec(
            model=self.model_dir,
            load_kwargs=self.load_kwargs,
            max_model_len=max_len,
            kv_cache_bytes=kv,
            seed=cfg.seed,
            priority_scheduling=priorities,
            enforce_eager=self.enforce_eager if cfg.enforce_eager is None else cfg.enforce_eager,
            max_num_seqs=cfg.prompts * n_max,  # every launched sample runs at once: none waits for admission
            stream_interval=min([k for k in clocks if k] or [1]),  # as often as the most watchful mode looks
        )

    def decode(self, tokens: list[int]) -> str:
        return self.encoder.tokenizer.decode(tokens, skip_special_tokens=True)

    async def run(self, engine: InferenceEngine) -> list[dict]:
        """Every mode of every repeat: warm-up pass, timed pass, reward; one run dict per timed pass."""
        if self.max_model_len() > engine.spec.max_model_len:
            raise ValueError(f"prompts + max_tokens need max_model_len {self.max_model_len()}, engine has less")
        if any(uses_tie(m) for m in self.cfg.modes) and not engine.spec.priority_scheduling:
            raise ValueError("TIE modes need an engine with priority_scheduling=True")
        pool = RewardPool(self.reward_specs, 0, on_failure="drop") if self.reward_specs else None
        runs = []
        self.cfg.out_dir.mkdir(parents=True, exist_ok=True)
        passes = (self.cfg.out_dir / PASSES_FILE).open("w")  # each pass as it ends: a cut-short run keeps what ran
        bar = Progress(len(self.batches) * len(self.cfg.modes), "bench", "pass")
        try:
            with logging_redirect_tqdm():
                for repeat, batch in enumerate(self.batches):
                    shift = repeat % len(self.cfg.modes)
                    for mode in self.cfg.modes[shift:] + self.cfg.modes[:shift]:
                        runs.append(await self.run_mode(engine, mode, batch, repeat, pool))
                        passes.write(json.dumps(runs[-1]) + "\n")
                        passes.flush()
                        m = runs[-1]["metrics"]
                        bar.advance(
                            f"{mode} repeat {repeat}: {m['time_to_batch_s']:.1f} s, {m['gen_tokens_per_s']:.0f} "
                            f"tok/s, waste {m['waste_ratio']:.2f}, reward {m['reward_mean']:.2f}"
                        )
        finally:
            bar.close()
            passes.close()
            if pool is not None:
                pool.close()
        return runs

    async def run_mode(
        self, engine: InferenceEngine, mode: str, batch: Batch, repeat: int, pool: RewardPool | None
    ) -> dict:
        """Warm-up pass, then the timed pass of ``mode``; its metrics and sample records."""
        if mode == "raw":
            timed = await self._passes(lambda tag: self.raw_pass(engine, batch, tag))
        else:
            policy = self.policy(mode)
            # shadow is timed against nothing and its lengths need no history: no warm-up pass
            timed = await self._passes(
                lambda tag: self.shaped_pass(engine, policy, mode, batch, tag), warm_up=mode != SHADOW
            )
        group_rewards = await self.score(pool, timed.kept)
        rewards = [v for g in group_rewards for v in g if v is not None]
        metrics = pass_metrics(timed.records, timed.seconds, timed.counts, rewards, self.workflow is not None)
        if self.profile is not None:
            metrics["model_time_to_batch_s"] = batch_rollout_time([r.length for r in timed.records], self.profile)
        if self.cfg.steady_batches:
            from rl.bench.steady import steady_metrics

            metrics.update(await steady_metrics(self, engine, mode, batch, f"s{next(self._pass_ids)}"))
        log.info(
            "%-10s repeat %d: %.2f s to batch, %d generated, %d kept tokens",
            mode,
            repeat,
            timed.seconds,
            metrics["generated_tokens"],
            metrics["kept_tokens"],
        )
        return {
            "mode": mode,
            "repeat": repeat,
            "seed": self.cfg.seed + repeat,
            "metrics": metrics,
            "samples": sample_dicts(timed, group_rewards),
            "group_rewards": [mean_or_none(g) for g in group_rewards],
        }

    def policy(self, mode: str) -> ShapingPolicy:
        """The policy a shaped ``mode`` runs (``shadow``: the widest launch, every sample kept)."""
        if mode == SHADOW:
            return PlainPolicy(widest_launch(self.cfg))
        return make_policy(policy_name(mode), **policy_options(self.cfg, mode))

    async def _passes(self, one_pass: Callable[[str], Awaitable[PassResult]], warm_up: bool = True) -> PassResult:
        """Run the untimed warm-up pass (unless ``warm_up`` is off), then return the timed one."""
        if warm_up:
            await one_pass(f"w{next(self._pass_ids)}")
        return await one_pass(f"t{next(self._pass_ids)}")

    async def shaped_pass(
        self, engine: InferenceEngine, policy: ShapingPolicy, mode: str, batch: Batch, tag: str
    ) -> PassResult:
        """All groups at once under ``policy`` (as ``RolloutWorker.generate_group`` runs them)."""
        rows = batch.rows
        plans = policy.plan([row.prompt_id for row in rows])
        shaping = mode_shaping(self.cfg, mode)
        progress = shaping.progress_tokens
        t0 = time.monotonic()

        async def group(g: int, plan: GroupPlan) -> tuple[float, GroupResult, list[Episode]]:
            offset = time.monotonic() - t0
            return offset, *await self.sample_group(engine, f"{tag}-{g}", batch, g, policy.controller(plan), progress)

        outs = await asyncio.gather(*(group(g, plan) for g, plan in enumerate(plans)))
        seconds = time.monotonic() - t0
        records, counts, kept = [], Counter(), []
        for g, (row, (offset, result, episodes)) in enumerate(zip(rows, outs, strict=True)):
            policy.observe(row.prompt_id, result.lengths(result.samples))
            counts.update(result.controller_stats)
            kept.append((row, result.samples, self.completions(row, result.samples, episodes)))
            for i, start, end, fate in result.timeline:
                record = SampleRecord(
                    g, i, result.all_lengths[i], offset + start, offset + end, fate, result.finish_reasons[i]
                )
                if episodes:
                    e = episodes[i]
                    record = replace(record, turns=e.turns, tool_calls=e.tools.calls, tool_s=e.tools.seconds)
                records.append(record)
        return PassResult(records, seconds, dict(counts), kept)

    async def sample_group(
        self, engine: InferenceEngine, group_id: str, batch: Batch, g: int, controller: GroupController, progress: int
    ) -> tuple[GroupResult, list[Episode]]:
        """Prompt ``g``'s group under ``controller``, as a rollout worker samples it: one request per sample, or with
        a ``workflow`` one episode each (every launched episode returned)."""
        episodes: list[Episode] = []
        if self.workflow is None:
            tokens = batch.tokens[g]
            result = await run_group(engine, group_id, tokens, self.sampling, controller, self.decode, progress)
        else:
            row, workflow = batch.rows[g], self.workflow
            _, result, episodes = await run_episodes(
                engine, group_id, workflow, row, self.sampling, controller, self.decode, progress
            )
        return result, episodes

    async def raw_pass(self, engine: InferenceEngine, batch: Batch, tag: str) -> PassResult:
        """All prompts at once, each one request with ``n=M``: the engine's ceiling, nothing shaped."""
        m = self.cfg.m_keep
        t0 = time.monotonic()
        outs = await asyncio.gather(
            *(engine.generate_n(f"{tag}-{g}", tokens, self.sampling, m) for g, tokens in enumerate(batch.tokens))
        )
        seconds = time.monotonic() - t0
        records, kept = [], []
        for g, (row, traces) in enumerate(zip(batch.rows, outs, strict=True)):
            for i, t in enumerate(traces):
                reason = str(t.finish_reason)
                end = (t.finished or t.started) - t0
                records.append(SampleRecord(g, i, len(t.tokens), t.started - t0, end, "kept", reason))
            samples = [
                Sample(i, t.tokens, t.logprobs, [], str(t.finish_reason), self.decode(t.tokens))
                for i, t in enumerate(traces)
            ]
            kept.append((row, samples, self.completions(row, samples, [])))
        return PassResult(records, seconds, {"launched": len(records), "kept": len(records)}, kept)

    def completions(self, row: PromptRow, samples: list[Sample], episodes: list[Episode]) -> list[Completion]:
        """What rewards read of ``samples``: their episodes' messages (``episodes``: all launched), else their texts."""
        if episodes:
            return [episodes[s.index].messages for s in samples]
        return self.encoder.completions(row.prompt, samples)

    async def score(
        self, pool: RewardPool | None, kept: list[tuple[PromptRow, list[Sample], list[Completion]]]
    ) -> list[list[float | None]]:
        """The rewards of the kept samples, group by group in their order (None: no function scored it)."""
        rows = [row for row, samples, _ in kept for _ in samples]
        samples = [s for _, group, _ in kept for s in group]
        if pool is None or not samples:
            return [[None] * len(group) for _, group, _ in kept]
        result = await pool.score(
            [r.prompt for r in rows],
            [c for _, _, completions in kept for c in completions],
            self.encoder.columns(rows, samples),
        )
        by_group, start = [], 0
        for _, group, _ in kept:
            by_group.append(list(result.rewards[start : start + len(group)]))
            start += len(group)
        return by_group


def sample_dicts(timed: PassResult, group_rewards: list[list[float | None]]) -> list[dict]:
    """The pass's sample records, each kept one with its ``reward`` (None: launched and not kept, or unscored): what
    a look at reward against length, or at what shaping dropped, reads."""
    reward_of = {
        (g, sample.index): value
        for g, ((_, samples, _), values) in enumerate(zip(timed.kept, group_rewards, strict=True))
        for sample, value in zip(samples, values, strict=True)
    }
    return [{**r.to_dict(), "reward": reward_of.get((r.group, r.index))} for r in timed.records]


def mean_or_none(values: list[float | None]) -> float | None:
    """The mean of the values that are not None; None when none is."""
    valid = [v for v in values if v is not None]
    return sum(valid) / len(valid) if valid else None


async def run_rollout_bench_async(cfg: RolloutBenchConfig, engine: InferenceEngine | None = None) -> dict:
    """Run the benchmark on ``engine`` (or on a fresh engine sized for it), write its files, return the result."""
    from rl.models import resolve_model

    bench = make_bench(cfg, engine.spec.model if engine else resolve_model(cfg.model))
    own = engine is None
    if own:
        t0 = time.monotonic()
        log.info("starting the engine on %s", bench.model_dir)
        engine = start_engine(bench.engine_spec())
        await engine.start()
        log.info("engine up in %.1f s", time.monotonic() - t0)
    about = {
        "config": cfg.model_dump(mode="json"),
        "model_dir": bench.model_dir,
        "device": describe_device(is_cpu_platform()),
        "versions": stack_versions(),
        "engine": {
            name: getattr(engine.spec, name)
            for name in ("max_model_len", "kv_cache_bytes", "max_num_seqs", "stream_interval", "enforce_eager")
        },
        "reward": " + ".join(f"{w:g}×{fn}" for fn, w in bench.reward_specs) or "none",
        "profile": None if bench.profile is None else {"device": bench.profile.device, "model": bench.profile.model},
    }
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    (cfg.out_dir / CONFIG_FILE).write_text(json.dumps(about, indent=1))  # with the passes, a cut-short run replays
    try:
        runs = await bench.run(engine)
    finally:
        if own:
            engine.shutdown()
    summary = build_summary(runs)
    result = {**about, "summary": summary, "table": markdown(summary), "runs": runs}
    write_outputs(result, cfg)
    return result


def make_bench(cfg: RolloutBenchConfig, model_dir: str) -> RolloutBench:
    """The bench for ``cfg``: on a config-only model (``dummy:NAME``), random prompts and drawn lengths."""
    from rl.bench.synthetic_bench import SyntheticRolloutBench, is_dummy

    return SyntheticRolloutBench(cfg, model_dir) if is_dummy(cfg.model) else RolloutBench(cfg, model_dir)


def run_rollout_bench(cfg: RolloutBenchConfig) -> dict:
    """Synchronous entry point (CLI): builds its own engine. Call it under ``if __name__ == "__main__":``."""
    configure_cpu_threads(cfg.cpu_threads_bind)
    return asyncio.run(run_rollout_bench_async(cfg))


def write_outputs(result: dict, cfg: RolloutBenchConfig) -> None:
    """``bench_rollout.json``, ``bench_rollout.md`` and (optionally) the PNG plots into ``cfg.out_dir``."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.plots:
        from rl.bench.plots import write_plots

        result["plots"] = [str(p) for p in write_plots(result["runs"], out)]
    (out / "bench_rollout.json").write_text(json.dumps(result, indent=1))
    c = cfg
    header = (
        f"# Rollout benchmark\n\nmodel `{c.model}`, prompts from {_prompt_source(c)}, B={c.prompts} prompts, "
        f"M={c.m_keep} kept, max_tokens={c.max_tokens}, temperature={c.temperature}, "
        f"device {result['device']}, reward `{result['reward']}`"
    )
    if result["profile"]:
        header += f"; cost model: profile of `{result['profile']['model']}` on {result['profile']['device']}"
    (out / "bench_rollout.md").write_text(f"{header}\n\n{result['table']}")


def _prompt_source(cfg: RolloutBenchConfig) -> str:
    if cfg.lengths is not None:
        return f"random token ids with lengths drawn from `{cfg.lengths}` (rl/bench/length_model.py)"
    if cfg.recipe is not None:
        overrides = f" with {' '.join(cfg.recipe_overrides)}" if cfg.recipe_overrides else ""
        return f"recipe `{cfg.recipe.stem}`{overrides}"
    return f"dataset `{cfg.dataset or 'arith'}`"
