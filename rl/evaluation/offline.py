"""``rl eval``: a model or a training checkpoint on a dataset split, k samples per problem, one in-process engine.

The dataset's framing (template, chat, system prompt), rewards and engine sizes come from a recipe: the one
named, else the one ``recipe_for_dataset`` picks for the dataset.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rl.config import DataConfig, RunConfig
from rl.data.source import dataset_rows, train_and_held_out
from rl.evaluation.held_out import ProblemRecord, held_out_sampling, sample_and_score, summarize
from rl.inputs.memory_plan import check_cpu_kv_cache
from rl.inputs.preflight import (
    BadInput,
    check_chat_template,
    check_local_cores,
    check_model_path,
    check_rewards,
    check_tools,
    load_rewards,
    model_positions,
    prompt_encoder,
)
from rl.inputs.prompting import PromptEncoder
from rl.loop.checkpoint import CONFIG_FILE, complete_checkpoints, is_complete_checkpoint
from rl.models import BUILTIN_PREFIX
from rl.rewards.hooks import RewardState
from rl.rewards.pool import RewardPool
from rl.rollout.engine import EngineSpec
from rl.rollout.episode_settings import episode_settings
from rl.rollout.tool_workflow import ToolSettings
from rl.types import PromptRow

log = logging.getLogger("rl.eval")
DATASET_RECIPES = {"arith": "arith_tiny", "gsm8k": "gsm8k_qwen2.5-0.5b"}
DEFAULT_RECIPE = "math_qwen2.5-1.5b"  # chat prompt asking for \boxed{}, math-verify accuracy


def recipe_for_dataset(dataset: str) -> str:
    """The bundled recipe whose data framing and rewards suit ``dataset`` (math ones for anything unknown)."""
    return DATASET_RECIPES.get(dataset, DEFAULT_RECIPE)


def resolve_eval_model(name: str) -> str:
    """A local model directory for ``builtin:NAME``, an HF directory (checked as ``rl train`` checks
    ``model.path``), or a run directory (its latest complete checkpoint). A hub name is returned as it is (for
    users with hub access); anything else is a ``BadInput``.
    """
    path = Path(name).expanduser()
    if not name.startswith(BUILTIN_PREFIX) and path.is_dir() and not (path / "config.json").exists():
        saved = complete_checkpoints(path)
        if not saved:
            raise BadInput(
                f"model {name!r} is neither an HF model directory (no config.json) nor a run directory with a "
                f"complete checkpoint; give one of those, builtin:NAME or a hub name"
            )
        return str(saved[-1])
    return check_model_path(name, "model")


def run_config_of(model: str) -> Path | None:
    """The saved config of the run ``model`` belongs to: a run directory, or one of its checkpoints
    (``RUN/checkpoints/step_N``, so any step of a run is evaluated as the run itself is); None for anything else."""
    path = Path(model).expanduser()
    if not (path / "config.json").exists():
        run = path
    elif is_complete_checkpoint(path):
        run = path.parent.parent
    else:
        return None
    return run / CONFIG_FILE if (run / CONFIG_FILE).is_file() else None


@dataclass
class EvalInputs:
    """What ``eval_inputs`` checked and loaded: the model directory, its prompt encoder, the split's rows and the
    engine's context in tokens (``engine_context``)."""

    model_dir: str
    encoder: PromptEncoder
    rows: list[PromptRow]
    context: int


def eval_inputs(cfg: RunConfig, settings: EvalSettings) -> EvalInputs:
    """The model directory, its prompt encoder and the split's rows, with the reward functions loaded once: each
    problem a one-line ``BadInput`` before any engine starts."""
    if settings.cpu_threads_bind:
        check_local_cores(settings.cpu_threads_bind, "--cpu-bind")
    if settings.samples > 1 and settings.temperature == 0:
        raise BadInput(
            f"--samples {settings.samples} at --temperature 0 (greedy) is one response {settings.samples} times, "
            "and its pass@k is pass@1; give a --temperature above 0 (without one: the recipe's rollout.temperature) "
            "or --samples 1"
        )
    model_dir = resolve_eval_model(settings.model)
    data = cfg.data.model_copy(update={"limit": settings.limit}) if settings.limit else cfg.data
    try:
        rows = split_of(data, settings.split) if settings.as_trained else dataset_rows(data, settings.split)
    except FileNotFoundError as e:
        raise BadInput(f"--dataset: {e}; give an existing file, folder, preset or hub dataset") from None
    except Exception as e:
        text = " ".join(str(e).split()) or type(e).__name__
        raise BadInput(f"--dataset {data.source!r} (split {settings.split!r}): {text}") from None
    if not rows:
        raise BadInput(f"--dataset {data.source!r} split {settings.split!r} has no rows; check --split")
    functions = load_rewards(cfg)
    encoder = prompt_encoder(cfg, model_dir, settings.model, "model")
    check_chat_template(encoder, cfg, rows, f"model {settings.model!r}")
    check_rewards(cfg, functions, rows, encoder, check_tools(cfg, encoder, rows))  # a column the rows lack: here
    longest = max(len(prompt_ids(cfg, encoder)(r)) for r in rows)
    max_tokens = settings.max_tokens or cfg.rollout.max_tokens
    positions = model_positions(model_dir, cfg.model.load_kwargs(model_dir), f"model {settings.model!r}")
    check_response_room(positions, longest, max_tokens, settings.max_tokens is not None)
    context = engine_context(cfg, longest + max_tokens, positions)
    import torch  # the engine's own import, after the checks that need none

    if not torch.cuda.is_available():  # the engine runs on this machine's CPU, its KV cache rollout.kv_cache_bytes
        check_cpu_kv_cache(
            cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"max_model_len": context})}), model_dir
        )
    return EvalInputs(model_dir, encoder, rows, context)


def prompt_ids(cfg: RunConfig, encoder: PromptEncoder) -> Callable[[PromptRow], list[int]]:
    """A row's prompt tokens as the engine gets them: with tools, the episode's first prompt (their schemas in);
    otherwise, a user workflow's too, the prompt as a single-turn run renders it (the workflow is not made here)."""
    tools = episode_settings(cfg)
    return (
        tools.build(encoder.tokenizer).prompt if isinstance(tools, ToolSettings) else lambda r: encoder.encode(r.prompt)
    )


def same_source(a: str, b: str) -> bool:
    """Whether two data sources name the same data (equal names, or one local path)."""
    return a == b or (Path(a).exists() and Path(b).exists() and Path(a).resolve() == Path(b).resolve())


def split_of(data: DataConfig, split: str) -> list[PromptRow]:
    """The rows of ``split`` as ``rl train`` splits them (``train_and_held_out``) for ``data.train_split`` and
    ``data.test_split``, else the source's own split; ``data.limit``: the first N of them."""
    if split not in (data.test_split, data.train_split):
        return dataset_rows(data, split)
    train, test = train_and_held_out(data.model_copy(update={"limit": None}))
    rows = test if split == data.test_split else train
    return rows[: data.limit] if data.limit else rows


@dataclass
class EvalSettings:
    """What ``rl eval`` was asked for, beside the recipe."""

    model: str
    dataset: str
    recipe: str
    split: str = "test"
    samples: int = 1
    limit: int | None = None  # the first N problems of the split
    max_tokens: int | None = None  # None: the recipe's rollout.max_tokens
    temperature: float | None = None  # None: eval.temperature for one sample, rollout.temperature for more
    cpu_threads_bind: str | None = None
    as_trained: bool = False  # a run on its own data: the splits as its training made them (``split_of``)


@dataclass
class EvalReport:
    settings: dict[str, Any]
    metrics: dict[str, float]
    problems: list[ProblemRecord] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(
            {"settings": self.settings, "metrics": self.metrics, "problems": [asdict(p) for p in self.problems]},
            indent=1,
        )

    def table(self) -> str:
        """The settings line and one metric per row."""
        s = self.settings
        head = (
            f"{s['model']} on {s['dataset']}[{s['split']}] (recipe {s['recipe']}): {int(self.metrics['num_problems'])} "
            f"problems x {s['samples']} sample{'s'[: s['samples'] > 1]}, temperature {s['temperature']}, max_tokens "
            f"{s['max_tokens']}"
        )
        width = max(map(len, self.metrics))
        rows = [f"  {k:<{width}}  {v:.4g}" for k, v in self.metrics.items()]
        return "\n".join([head, *rows])


def run_eval(
    cfg: RunConfig, settings: EvalSettings, workers: list[Any] | None = None, inputs: EvalInputs | None = None
) -> EvalReport:
    """Evaluate ``settings.model`` on ``cfg.data`` (split ``settings.split``).

    With ``workers`` (rollout-worker handles already serving that model) no engine is started; otherwise
    one in-process vLLM engine is built for the run and shut down after it. ``inputs``: ``eval_inputs``'s result,
    when the caller checked them already.
    """
    return asyncio.run(eval_report(cfg, settings, workers, inputs))


async def eval_report(
    cfg: RunConfig, settings: EvalSettings, workers: list[Any] | None, inputs: EvalInputs | None = None
) -> EvalReport:
    """``run_eval`` inside a running event loop (where an engine already serving ``workers`` lives)."""
    checked = inputs or eval_inputs(cfg, settings)
    model_dir, encoder, rows = checked.model_dir, checked.encoder, checked.rows
    max_tokens = settings.max_tokens or cfg.rollout.max_tokens
    temperature = settings.temperature
    if temperature is None:
        temperature = cfg.eval.temperature if settings.samples == 1 else cfg.rollout.temperature
    sampling = held_out_sampling(cfg.rollout, settings.samples, temperature, max_tokens)
    tools = episode_settings(cfg)  # with tools or a workflow, every sample is an episode
    t0 = time.monotonic()
    own = None
    if workers is None:
        from rl.rollout.local_worker import LocalRolloutWorker

        spec = engine_spec(cfg, model_dir, checked.context)
        log.info("starting the engine on %s", model_dir)
        own = await LocalRolloutWorker.start(spec, settings.cpu_threads_bind)
        workers = [own]
    startup_s = time.monotonic() - t0
    if own is not None:
        log.info("engine up in %.1f s", startup_s)
    rewards = RewardPool(
        [(f.spec, f.weight) for f in cfg.reward.functions],
        cfg.reward.num_workers,
        cfg.reward.timeout_s,
        cfg.reward.on_failure,
    )
    try:
        t1 = time.monotonic()
        records = await sample_and_score(
            rows,
            workers,
            encoder,
            rewards,
            sampling,
            "cli",
            settings.samples,
            progress="eval",
            state=RewardState.at(0, cfg.train.max_steps, cfg.train.batch_groups, len(rows)),  # as preflight's
            tools=tools,
        )
        seconds = time.monotonic() - t1
    finally:
        rewards.close()
        if own is not None:
            await own.shutdown()
    resolved = {
        **asdict(settings),
        "model_dir": model_dir,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "sampling": asdict(sampling),
        "rewards": [f"{f.spec}*{f.weight:g}" for f in cfg.reward.functions],
        "engine_startup_s": startup_s,
        "eval_seconds": seconds,
    }
    return EvalReport(resolved, summarize(records), records)


def engine_context(cfg: RunConfig, needed_len: int, positions: int | None = None) -> int:
    """The evaluation engine's context in tokens: ``needed_len`` (the longest prompt and the response cap), or with
    episodes (tools, a workflow), which grow past their first prompt, the recipe's ``rollout.max_model_len`` where
    that is more, cut to the model's ``positions`` where known (a recipe made for a larger model)."""
    r = cfg.rollout
    if not episode_settings(cfg) or r.max_model_len is None:
        return needed_len
    return max(min(r.max_model_len, positions or r.max_model_len), needed_len)


def engine_spec(cfg: RunConfig, model_dir: str, max_model_len: int) -> EngineSpec:
    """The recipe's rollout engine for ``model_dir`` with a context of ``max_model_len`` tokens."""
    r = cfg.rollout
    return EngineSpec(
        model=model_dir,
        load_kwargs=cfg.model.load_kwargs(model_dir),
        dtype=cfg.model.dtype,
        max_model_len=max_model_len,
        kv_cache_bytes=r.kv_cache_bytes,
        gpu_memory_utilization=r.gpu_memory_utilization,
        enforce_eager=r.enforce_eager,
        seed=r.seed,
        max_num_seqs=r.max_num_seqs,
    )


def check_response_room(positions: int | None, longest_prompt: int, max_tokens: int, asked: bool) -> None:
    """The longest prompt and ``max_tokens`` within the model's ``positions`` (``model_positions``; None: unknown); a
    ``BadInput`` naming ``--max-tokens`` (``asked``) or the recipe's ``rollout.max_tokens`` where they do not fit."""
    if positions is not None and longest_prompt + max_tokens > positions:
        name = "--max-tokens" if asked else "the recipe's rollout.max_tokens"
        raise BadInput(
            f"{name} ({max_tokens}) and the longest prompt ({longest_prompt} tokens) need "
            f"{longest_prompt + max_tokens} positions, more than the model's {positions} (its config.json); give "
            f"--max-tokens {positions - longest_prompt} or less"
        )
