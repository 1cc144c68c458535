"""One evaluator for weight snapshots: one in-process engine, each snapshot loaded into it and scored as ``rl eval``
scores a model.

The rows, prompt framing, sampling (``eval.temperature`` and ``eval.samples``, one greedy sample by default;
``rollout.max_tokens``) and correctness (the recipe's first reward > 0) are those of Tailor's own in-run evaluations:
the first ``eval.num_problems`` rows of the test split, through ``rl.evaluation.held_out``. The engine is the recipe's
rollout engine (``rollout.max_model_len``, as Tailor's workers have it; left unset, the evaluation's longest prompt and
response cap).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rl.config import RunConfig
from rl.evaluation.offline import EvalReport, EvalSettings, engine_spec, eval_inputs, eval_report


def heldout_settings(cfg: RunConfig, model_dir: str, recipe: str) -> EvalSettings:
    """``rl eval`` settings for the rows Tailor evaluates on during training."""
    limit = min(cfg.eval.num_problems, cfg.data.limit or cfg.eval.num_problems)
    return EvalSettings(
        model=model_dir,
        dataset=cfg.data.source,
        recipe=recipe,
        split=cfg.data.test_split,
        samples=cfg.eval.samples,
        limit=limit,
        temperature=cfg.eval.temperature,
    )


def evaluate_snapshots(
    cfg: RunConfig, model_dir: str, recipe: str, snapshots: list[Path]
) -> tuple[EvalReport, list[EvalReport]]:
    """The held-out report of ``model_dir`` as saved, then of each snapshot (safetensors of its parameters)."""
    return asyncio.run(_evaluate(cfg, heldout_settings(cfg, model_dir, recipe), snapshots))


async def _evaluate(
    cfg: RunConfig, settings: EvalSettings, snapshots: list[Path]
) -> tuple[EvalReport, list[EvalReport]]:
    from rl.rollout.local_worker import LocalRolloutWorker

    inputs = eval_inputs(cfg, settings)
    context = cfg.rollout.max_model_len or inputs.context  # unset in the recipe: what the evaluation needs
    worker = await LocalRolloutWorker.start(engine_spec(cfg, settings.model, context))
    try:
        base = await eval_report(cfg, settings, [worker], inputs)
        reports = []
        for version, path in enumerate(snapshots, start=1):
            await worker.load_weights(path.read_bytes(), version)
            reports.append(await eval_report(cfg, settings, [worker], inputs))
    finally:
        await worker.shutdown()
    return base, reports
