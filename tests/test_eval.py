"""rl eval: the pass@k estimator, the summary, model resolution, and k samples per problem on the warm engine."""

import asyncio
import gc
import json
import math
import warnings

import numpy as np
import pytest

from rl.cli.common import recipe_path
from rl.config import load_config
from rl.data.arith import make_split
from rl.evaluation.held_out import EvaluationFailed, ProblemRecord, k_values, pass_at_k, summarize
from rl.evaluation.offline import (
    EvalSettings,
    engine_context,
    eval_inputs,
    recipe_for_dataset,
    resolve_eval_model,
    run_config_of,
    run_eval,
)
from rl.inputs.preflight import BadInput
from rl.output.console import eval_line, last_raised
from rl.rewards.math import arith_exact, arith_steps


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 1, 0.25),
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (4, 2, 2, 5 / 6),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
        (10, 3, 5, 11 / 12),  # 1 - C(7,5)/C(10,5) = 1 - 21/252
        (5, 0, 3, 0.0),
        (5, 3, 3, 1.0),  # fewer than k wrong samples: some k-subset always holds a correct one
        (8, 8, 1, 1.0),
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert math.isclose(pass_at_k(n, c, k), expected, rel_tol=1e-12)


def test_pass_at_1_is_the_fraction_correct_and_bad_arguments_raise():
    for n in range(1, 9):
        for c in range(n + 1):
            assert math.isclose(pass_at_k(n, c, 1), c / n)
    for n, c, k in [(4, 5, 1), (4, 1, 0), (4, 1, 5), (4, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_k_values():
    assert k_values(1) == [1]
    assert k_values(4) == [1, 2, 4]
    assert k_values(6) == [1, 2, 4, 6]
    assert k_values(16) == [1, 2, 4, 8, 16]


def _record(pid: str, correct: list[bool], lengths: list[int], reasons: list[str]) -> ProblemRecord:
    return ProblemRecord(pid, "1", [float(c) + 0.1 for c in correct], correct, lengths, reasons, "")


def test_summarize_by_hand():
    records = [
        _record("a", [True, False, False, False], [10, 20, 30, 40], ["stop", "stop", "stop", "length"]),
        _record("b", [False] * 4, [5, 5, 5, 5], ["stop"] * 4),
        _record("c", [True, True, False, True], [1, 2, 3, 4], ["stop"] * 4),
    ]
    m = summarize(records)
    assert set(k for k in m if k.startswith("pass@")) == {"pass@1", "pass@2", "pass@4"}
    assert math.isclose(m["accuracy"], (0.25 + 0 + 0.75) / 3)
    assert math.isclose(m["pass@1"], m["accuracy"])
    assert math.isclose(m["pass@2"], (0.5 + 0 + 1.0) / 3)  # c: 1 - C(1,2)/C(4,2) = 1
    assert math.isclose(m["pass@4"], 2 / 3)
    assert math.isclose(m["reward_mean"], 4 / 12 + 0.1)
    assert math.isclose(m["truncated_frac"], 1 / 12)
    assert m["response_len_mean"] == pytest.approx(130 / 12)
    assert m["response_len_max"] == 40 and m["num_problems"] == 3 and m["samples_per_problem"] == 4
    assert m["unscored_frac"] == 0.0 and "no value" not in eval_line("after", 3, m)
    records[1].unscored = 3  # the accuracy reward failed, or gave None, for 3 of b's 4 samples
    m = summarize(records)
    assert m["unscored_frac"] == 0.25
    assert eval_line("after", 3, m) == (
        "[eval after] step 3: held-out accuracy 0.333, pass@4 0.667 (3 problems x 4 samples; the accuracy reward "
        "gave no value for 25% of samples)"
    )


def test_problems_that_could_not_be_sampled_are_left_out_and_counted():
    records = [
        _record("a", [True, False], [10, 20], ["stop", "stop"]),
        ProblemRecord("b", "1", [], [], [], [], "", error="WorkflowError: it raised"),
        _record("c", [False, False], [1, 2], ["stop", "length"]),
    ]
    m = summarize(records)
    assert (m["accuracy"], m["num_problems"], m["failed_problems"]) == (0.25, 2, 1)  # over a and c alone
    assert m["truncated_frac"] == 0.25 and m["response_len_max"] == 20
    assert eval_line("before", 0, m) == (
        "[eval before] step 0: held-out accuracy 0.250, pass@2 0.500 (2 problems x 2 samples; 1 more could not be "
        "sampled (left out))"
    )
    with pytest.raises(EvaluationFailed, match="none of the 1 held-out problems could be sampled: WorkflowError: it"):
        summarize([records[1]])


def test_a_remote_error_is_its_last_raised_line_without_its_module():
    text = "ray::RolloutWorker.generate_episodes() (pid=1)\n  File x.py\nrl.rollout.user_workflow.WorkflowError: a: b"
    assert last_raised(text) == "WorkflowError: a: b"
    assert last_raised("ValueError: bad\n") == "ValueError: bad" and last_raised("no error here") == "no error here"


def test_resolve_eval_model(tmp_path, tiny_model_dir):
    assert resolve_eval_model("builtin:arith-tiny") == tiny_model_dir
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")  # a safetensors file of no tensors
    assert resolve_eval_model(str(hf)) == str(hf)
    run = tmp_path / "runs" / "demo"
    for step in ("step_000010", "step_000020", "step_000030.tmp"):
        (run / "checkpoints" / step).mkdir(parents=True)
    assert resolve_eval_model(str(run)) == str(run / "checkpoints" / "step_000020")  # its latest complete one
    with pytest.raises(ValueError, match="neither"):
        resolve_eval_model(str(tmp_path))
    assert resolve_eval_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # hub names pass


def test_a_checkpoint_of_a_run_is_evaluated_with_the_runs_config_and_held_out_rows(tmp_path, monkeypatch):
    """``rl eval RUN/checkpoints/step_N`` (an HF directory) frames, scores and splits as the run does, as ``rl eval
    RUN`` does; it asked for --dataset before. An HF directory outside a run's checkpoints has no run config."""
    import shutil

    import rl.evaluation.offline as offline
    from rl.cli.main import main
    from rl.config import RunConfig
    from rl.loop.checkpoint import save_config

    run = tmp_path / "runs" / "r"
    cfg = load_config(recipe_path("arith_tiny"), [f"output_dir={run.parent}", "name=r", "data.system_prompt=Add."])
    save_config(cfg)
    checkpoint = run / "checkpoints" / "step_000020"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    assert run_config_of(str(checkpoint)) == run_config_of(str(run)) == run / "config.yaml"
    shutil.copytree(checkpoint, tmp_path / "hf")
    assert run_config_of(str(tmp_path / "hf")) is None and run_config_of(str(run / "checkpoints")) is None
    seen: list[tuple[RunConfig, EvalSettings]] = []

    def inputs(cfg, settings):
        seen.append((cfg, settings))
        raise BadInput("stop here")

    monkeypatch.setattr(offline, "eval_inputs", inputs)
    assert main(["eval", str(checkpoint)]) == 2
    ((used, settings),) = seen
    assert used.data.system_prompt == "Add." and settings.as_trained and settings.model == str(checkpoint)


def test_an_engine_holds_what_the_evaluation_needs():
    """Without tools, the longest prompt and the response cap (a recipe's larger rollout.max_model_len would only
    take KV cache); with tools, whose episodes grow, the recipe's, cut to the model's positions, never below that."""
    cfg = load_config(recipe_path("math_qwen2.5-1.5b"))
    assert cfg.rollout.max_model_len > 256
    assert engine_context(cfg, 40, positions=256) == engine_context(cfg, 40) == 40
    tools = load_config(recipe_path("calc_tiny"), ["rollout.max_model_len=512"])
    assert engine_context(tools, 40, positions=256) == 256
    assert engine_context(tools, 40, positions=None) == 512
    assert engine_context(tools, 600) == 600


def test_a_short_evaluation_needs_no_kv_cache_for_the_recipes_longest_sequence():
    """--max-tokens 32 on a recipe of 4096-token sequences and a 1 MiB CPU KV cache (about 680 tokens of the tiny
    model): the engine holds the prompt and 32 tokens, not 4096 (refused in one line before, the cache being too small
    for a sequence nobody asked for)."""
    cfg = load_config(recipe_path("arith_tiny"), ["rollout.max_model_len=4096", f"rollout.kv_cache_bytes={1 << 20}"])
    settings = EvalSettings(model="builtin:arith-tiny", dataset="arith", recipe="arith_tiny", limit=4, max_tokens=32)
    inputs = eval_inputs(cfg, settings)
    assert inputs.context == max(len(inputs.encoder.encode(r.prompt)) for r in inputs.rows) + 32


def test_an_engine_vllm_refuses_stops_rl_eval_in_one_line(tiny_model_dir, tmp_path, capsys):
    """A model whose architecture vLLM does not serve: one line with vLLM's reason (a 52-line traceback before);
    the traceback is kept (on stderr here: pytest's capture leaves nothing routed into a log file)."""
    import shutil

    from rl.cli.main import main

    model = tmp_path / "foo"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["FooForCausalLM"]}))
    assert main(["eval", str(model), "--dataset", "arith", "--limit", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        "the engine did not start: ValidationError: Model architectures ['FooForCausalLM'] are not supported"
    )
    assert err[-1].endswith(" ... (its traceback: above)") and err[0] == "Traceback (most recent call last):"


def test_every_default_recipe_exists():
    for dataset in ("arith", "gsm8k", "math500", "some/local.jsonl"):
        assert recipe_path(recipe_for_dataset(dataset)).exists()


@pytest.mark.integration
def test_eval_arith_tiny_four_samples_on_the_warm_engine(rollout_worker, tiny_model_dir):
    """``rl eval builtin:arith-tiny --dataset arith --samples 4 --limit 32``, on the session's engine."""
    cfg = load_config(recipe_path(recipe_for_dataset("arith")))
    settings = EvalSettings(model="builtin:arith-tiny", dataset="arith", recipe="arith_tiny", samples=4, limit=32)
    report = run_eval(cfg, settings, workers=[rollout_worker])
    m, problems = report.metrics, report.problems
    solution_of = {row.prompt_id: row.columns["solution"] for row in make_split(cfg.data.arith, "test")}

    assert report.settings["model_dir"] == tiny_model_dir
    assert report.settings["temperature"] == cfg.rollout.temperature  # several samples: the rollout temperature
    assert len(problems) == 32 and all(len(p.rewards) == 4 for p in problems)
    assert len({p.prompt_id for p in problems}) == 32

    passes = [m[f"pass@{k}"] for k in (1, 2, 4)]
    assert all(0.0 <= p <= 1.0 for p in passes)
    assert passes == sorted(passes), f"pass@k must not fall with k: {passes}"
    rewards, correct = np.array([p.rewards for p in problems]), np.array([p.correct for p in problems])
    assert m["pass@1"] == pytest.approx(correct.mean())
    assert m["pass@4"] == pytest.approx(correct.any(axis=1).mean())  # pass@n: any sample correct
    assert m["reward_mean"] == pytest.approx(rewards.mean())
    # the texts were scored against their own problem: correct = the first reward (arith_exact) > 0, and the
    # combined reward adds the recipe's partial credit for the worked steps (both weight 1)
    texts, solutions = [p.first_text for p in problems], [solution_of[p.prompt_id] for p in problems]
    exact = arith_exact(None, texts, [p.answer for p in problems])
    assert exact == [float(c) for c in correct[:, 0]]
    steps = arith_steps(None, texts, solutions)
    assert list(rewards[:, 0]) == pytest.approx([e + s for e, s in zip(exact, steps, strict=True)])

    lengths = [n for p in problems for n in p.lengths]
    assert min(lengths) > 0 and max(lengths) <= cfg.rollout.max_tokens
    assert m["response_len_p50"] <= m["response_len_p90"] <= m["response_len_p99"] <= m["response_len_max"]
    assert m["truncated_frac"] == pytest.approx(np.mean([r == "length" for p in problems for r in p.finish_reasons]))

    saved = json.loads(report.to_json())
    assert saved["metrics"] == m and len(saved["problems"]) == 32
    assert "pass@4" in report.table() and "32 problems x 4 samples," in report.table()


def test_the_table_counts_one_sample_in_the_singular():
    from rl.evaluation.offline import EvalReport

    settings = {"model": "m", "dataset": "arith", "split": "test", "recipe": "r", "temperature": 0.0, "max_tokens": 8}
    one = EvalReport({**settings, "samples": 1}, {"num_problems": 3.0}).table()
    assert one.startswith("m on arith[test] (recipe r): 3 problems x 1 sample, temperature 0.0, max_tokens 8")
    assert "3 problems x 4 samples," in EvalReport({**settings, "samples": 4}, {"num_problems": 3.0}).table()


@pytest.mark.integration
def test_several_samples_are_drawn_as_the_recipes_rollouts_are(rollout_worker):
    """pass@k's samples take the recipe's rollout sampling (its top_k here), not temperature alone: with
    rollout.top_k=1 every sample of a problem is the likeliest continuation, the same one."""
    settings = EvalSettings(model="builtin:arith-tiny", dataset="arith", recipe="arith_tiny", samples=4, limit=16)
    runs = {}
    for top_k in (0, 1):
        cfg = load_config(recipe_path("arith_tiny"), [f"rollout.top_k={top_k}"])
        runs[top_k] = run_eval(cfg, settings, workers=[rollout_worker])
        assert runs[top_k].settings["sampling"]["top_k"] == top_k
    assert all(len(set(p.lengths)) == 1 and len(set(p.rewards)) == 1 for p in runs[1].problems)
    assert any(len(set(p.lengths)) > 1 for p in runs[0].problems)  # at temperature 1 the samples differ


class InProcessWorker:
    """An in-process rollout worker (as ``rl eval``'s own engine is): ``generate_group`` returns a coroutine."""

    def __init__(self) -> None:
        self.started = 0

    async def generate_group(self, *args: object) -> None:
        self.started += 1
        await asyncio.sleep(60)


def test_a_stop_before_the_groups_start_leaves_no_call_unawaited(tiny_model_dir) -> None:
    """Ctrl-C as an evaluation begins: no coroutine of the engine's is left unawaited (Python printed a
    RuntimeWarning for each on the console, after `interrupted`)."""
    from rl.rollout.engine import SamplingSpec

    from rl.evaluation.held_out import sample_and_score
    from rl.inputs.prompting import PromptEncoder
    from rl.rewards.pool import RewardPool
    from rl.types import PromptRow

    worker, rows = InProcessWorker(), [PromptRow(f"p{i}", f"{i}+1=", str(i + 1)) for i in range(4)]
    rewards = RewardPool([("rl.rewards.math:arith_exact", 1.0)], 0)

    async def stopped_at_once() -> None:
        task = asyncio.create_task(
            sample_and_score(rows, [worker], PromptEncoder(tiny_model_dir), rewards, SamplingSpec(max_tokens=4), "t")
        )
        await asyncio.sleep(0)  # it runs up to its gather of the groups, none started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(stopped_at_once())
        gc.collect()
    rewards.close()
    assert worker.started == 0
    assert not [w for w in caught if "never awaited" in str(w.message)]
