"""``rl bench rollout``: the cost model, profile interpolation, ratios and tables (pure), one real small run."""

import asyncio
import json
import math

import numpy as np
import pytest

from rl.bench.cost_model import PROFILES_DIR, DecodeProfile, batch_rollout_time
from rl.bench.records import SampleRecord, pass_metrics
from rl.bench.summary import build_summary, markdown, ratios, reward_difference, stat
from rl.cli.bench import cmd_bench_rollout
from rl.cli.bench_decode import cmd_bench_profile_decode
from rl.cli.main import build_parser

LINEAR = DecodeProfile("test", "test", (1, 3), (1.0, 3.0))  # PTL(b) = b seconds


def test_cost_model_on_hand_made_lengths():
    # exits at steps 1, 3, 6 with 3, 2, 1 running: 1*3 + 2*2 + 3*1
    assert batch_rollout_time([6, 1, 3], LINEAR) == pytest.approx(10.0)
    # two aborted at step 2 together, the last runs to 5 alone: 2*3 + 0*2 + 3*1
    assert batch_rollout_time([2, 2, 5], LINEAR) == pytest.approx(9.0)
    assert batch_rollout_time([], LINEAR) == 0.0


def test_profile_interpolation_and_loading(tmp_path):
    profile = DecodeProfile("cpu", "m", (1, 4, 8), (0.01, 0.02, 0.04))
    assert profile.ptl(1) == pytest.approx(0.01)
    assert profile.ptl(2.5) == pytest.approx(0.015)
    assert profile.ptl(6) == pytest.approx(0.03)
    assert profile.ptl(0.5) == pytest.approx(0.01)  # below the smallest: clamped
    assert profile.ptl(16) == pytest.approx(0.08)  # above the largest: last segment extended
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps({"device": "cpu", "model": "m", "batch_sizes": [1, 4, 8], "per_token_latency_s": [1, 2, 4], "x": 0})
    )
    assert DecodeProfile.load(path).ptl(2) == pytest.approx(4 / 3)
    with pytest.raises(ValueError):
        DecodeProfile("cpu", "m", (4, 1), (0.1, 0.2))
    with pytest.raises(ValueError):
        DecodeProfile("cpu", "m", (1, 2), (0.1,))


def test_shipped_profile_loads_by_name():
    shipped = sorted(PROFILES_DIR.glob("*.json"))
    assert shipped, "no shipped decode profile"
    profile = DecodeProfile.load(shipped[0].stem)
    assert profile.ptl(profile.batch_sizes[-1]) > 0


def test_pass_metrics_on_synthetic_records():
    records = [
        SampleRecord(0, 0, 10, 0.0, 1.0, "kept", "stop"),
        SampleRecord(0, 1, 20, 0.0, 2.0, "kept", "length"),
        SampleRecord(0, 2, 5, 0.0, 0.5, "aborted", "abort"),
        SampleRecord(0, 3, 15, 0.0, 1.5, "discarded", "stop"),
        SampleRecord(1, 0, 20, 0.0, 2.0, "kept", "length"),
        SampleRecord(1, 1, 20, 0.0, 2.0, "kept", "length"),
        SampleRecord(2, 0, 20, 0.0, 2.0, "discarded", "length"),
    ]
    m = pass_metrics(records[:4], 2.0, {"launched": 4, "kept": 2, "aborted": 1, "discarded": 1}, [1.0, 0.0])
    assert m["generated_tokens"] == 50 and m["kept_tokens"] == 30
    assert m["waste_ratio"] == pytest.approx(0.4)
    assert m["gen_tokens_per_s"] == pytest.approx(25.0) and m["kept_tokens_per_s"] == pytest.approx(15.0)
    assert m["longest_tokens_per_s"] == pytest.approx(10.0)  # 20 tokens in 2 s
    assert m["kept_len_max"] == 20 and m["len_max"] == 20 and m["truncated_kept"] == 1
    assert m["pruned"] == 0 and m["reward_mean"] == pytest.approx(0.5)
    assert m["groups_at_cap"] == 1
    # groups 0 and 1 kept truncated samples (group 1 two of them); group 2's truncated one was discarded
    assert pass_metrics(records, 2.0, {}, [])["groups_at_cap"] == 2


def _run(mode, repeat, seconds, tps, model=None):
    metrics = {"time_to_batch_s": seconds, "gen_tokens_per_s": tps, "waste_ratio": 0.0}
    if model is not None:
        metrics["model_time_to_batch_s"] = model
    return {"mode": mode, "repeat": repeat, "metrics": metrics}


def test_ratios_and_table_on_synthetic_runs():
    runs = [
        _run("raw", 0, 4.0, 200, 1.0),
        _run("plain", 0, 10.0, 100, 2.0),
        _run("darts", 0, 5.0, 150, 1.0),
        _run("plain", 1, 12.0, 90, 2.0),
        _run("darts", 1, 4.0, 180, 0.5),
        _run("raw", 1, 6.0, 210, 1.0),
    ]
    r = ratios(runs, "plain")
    assert r["darts"]["speedup"] == {"min": 2.0, "median": 2.5, "max": 3.0, "n": 2.0}  # 10/5, 12/4
    assert r["darts"]["throughput"]["median"] == pytest.approx((1.5 + 2.0) / 2)
    assert r["darts"]["model_speedup"]["max"] == pytest.approx(4.0)
    assert r["plain"]["speedup"]["median"] == 1.0
    assert ratios(runs, "raw")["plain"]["speedup"]["min"] == pytest.approx(0.4)
    summary = build_summary(runs)
    assert list(summary["modes"]) == ["raw", "plain", "darts"] and summary["repeats"] == 2
    assert summary["modes"]["plain"]["time_to_batch_s"]["median"] == 11.0
    table = markdown(summary)
    assert "speed-up vs plain" in table and "speed-up vs raw" in table and "model speed-up vs plain" in table
    assert "| darts | 4.50 (4.00–5.00) | 2.50 (2.00–3.00) |" in table
    assert "model time s" not in markdown(build_summary([_run("plain", 0, 1.0, 1.0)]))
    assert math.isnan(stat([float("nan")])["median"])


def test_token_ratios_and_paired_reward_difference():
    """Kept/generated token ratios against plain, and the kept reward compared prompt by prompt: the
    prompts' own difficulty (prompt 0 easy, prompt 2 hard) cancels in the paired differences."""

    def run(mode, repeat, generated, kept, group_rewards):
        metrics = {"time_to_batch_s": 1.0, "gen_tokens_per_s": 1.0, "generated_tokens": generated, "kept_tokens": kept}
        return {"mode": mode, "repeat": repeat, "metrics": metrics, "group_rewards": group_rewards}

    runs = [
        run("plain", 0, 1000, 1000, [1.0, 0.5, 0.0]),
        run("sart", 0, 800, 400, [1.0, 0.25, None]),  # a group with no scored sample is left out of the pairs
        run("plain", 1, 1200, 1200, [0.75, 0.5, 0.25]),
        run("sart", 1, 1500, 600, [0.5, 0.5, 0.0]),
    ]
    r = ratios(runs, "plain")["sart"]
    assert r["generated_fewer"]["min"] == pytest.approx(0.8) and r["generated_fewer"]["max"] == pytest.approx(1.25)
    assert r["kept_fewer"] == {"min": 2.0, "median": 2.25, "max": 2.5, "n": 2.0}
    diff = reward_difference(runs, "plain")
    pairs = np.array([0.0, -0.25, -0.25, 0.0, -0.25])
    assert diff["sart"]["n"] == 5 and diff["sart"]["mean"] == pytest.approx(pairs.mean())
    assert diff["sart"]["se"] == pytest.approx(pairs.std(ddof=1) / math.sqrt(5))
    assert diff["plain"] == {"mean": 0.0, "se": 0.0, "n": 6.0}
    assert reward_difference([run("plain", 0, 1, 1, [1.0]), run("sart", 0, 1, 1, [0.0])], "plain") == {}
    table = markdown(build_summary(runs))
    assert "kept, × fewer than plain" in table and "reward − plain per prompt ± SE" in table
    sart_row = [line for line in table.splitlines() if line.startswith("| sart |")][1]  # the second table's
    assert "2.25 (2.00–2.50)" in sart_row and "-0.150 ± 0.061" in sart_row


def test_cli_parses_bench_commands():
    args = build_parser().parse_args(["bench", "rollout", "--modes", "raw,plain", "--prompts", "4", "--m-keep", "4"])
    assert args.func is cmd_bench_rollout and args.modes == "raw,plain" and args.prompts == 4
    args = build_parser().parse_args(["bench", "profile-decode", "--batch-sizes", "1,2", "--out", "p.json"])
    assert args.func is cmd_bench_profile_decode and args.batch_sizes == "1,2"


def test_config_rejects_repeated_modes():
    from pydantic import ValidationError

    from rl.bench.rollout import RolloutBenchConfig

    with pytest.raises(ValidationError):
        RolloutBenchConfig(modes=["plain", "plain"])
    with pytest.raises(ValidationError):
        RolloutBenchConfig(modes=["fast"])
    with pytest.raises(ValidationError, match="exclusive"):
        RolloutBenchConfig(recipe="recipes/arith_tiny.yaml", dataset="arith")
    with pytest.raises(ValidationError, match="needs a scorer worker"):
        RolloutBenchConfig(shaping={"policy": "sart", "scorer": "lm-confidence", "alpha": -1.0})


def test_modes_carry_their_own_shaping_knobs():
    from pydantic import ValidationError

    from rl.bench.rollout import RolloutBenchConfig, mode_shaping, policy_options

    cfg = RolloutBenchConfig(
        modes=["plain", "darts+sart@long_wait=1.5@avg_redundancy=1.25", "darts+tie@long_wait=2"],
        shaping={"long_slots": 2},
    )
    both = mode_shaping(cfg, cfg.modes[1])
    assert (both.policy, both.long_wait, both.avg_redundancy, both.long_slots) == ("darts+sart", 1.5, 1.25, 2)
    tie = mode_shaping(cfg, cfg.modes[2])
    assert (tie.policy, tie.priority, tie.long_wait) == ("darts", "longest_first", 2.0)
    assert policy_options(cfg, cfg.modes[1])["long_wait"] == 1.5
    assert mode_shaping(cfg, "darts+sart").long_wait is None  # the bench's knobs, not another mode's
    for modes, message in (
        (["darts@long_wait=0.5"], "long_wait"),
        (["darts@bogus=1"], "bogus"),
        (["plain@long_wait=2"], "takes no shaping knobs"),
        (["sart@policy=darts"], "set by the mode's name"),
        (["fast@long_wait=2"], "is none of"),
        (["sart@scorer=lm-confidence@alpha=-1"], "needs a scorer worker"),
    ):
        with pytest.raises(ValidationError, match=message):
            RolloutBenchConfig(modes=modes)


def test_engine_kv_cache_covers_the_widest_mode(tiny_model_dir, monkeypatch):
    import rl.bench.rollout as bench_module

    sized = []
    monkeypatch.setattr(bench_module, "kv_cache_size", lambda model, max_len, sequences: sized.append(sequences))
    for modes in (["plain", "darts"], ["plain", "darts@max_redundancy=3.0"]):
        cfg = bench_module.RolloutBenchConfig(prompts=4, m_keep=8, modes=modes)
        bench_module.RolloutBench(cfg, tiny_model_dir).engine_spec()
    assert sized == [4 * 16, 4 * 24]  # max_redundancy 2.0 (the default) and 3.0 times M = 8


def test_a_recipe_brings_its_cuda_graph_setting_to_the_engine(tiny_model_dir):
    from rl.bench.rollout import RolloutBench, RolloutBenchConfig
    from rl.cli.common import recipe_path

    def eager(**kw) -> bool:
        return RolloutBench(RolloutBenchConfig(prompts=2, **kw), tiny_model_dir).engine_spec().enforce_eager

    recipe = recipe_path("arith_tiny")
    assert eager() and eager(recipe=recipe)  # the engine default, and the recipe's (rollout.enforce_eager: true)
    assert not eager(recipe=recipe, recipe_overrides=["rollout.enforce_eager=false"])


def test_each_repeat_sends_its_own_prompts(tiny_model_dir):
    from rl.bench.rollout import RolloutBench, RolloutBenchConfig

    bench = RolloutBench(RolloutBenchConfig(prompts=4, repeats=2), tiny_model_dir)
    first, second = bench.batches
    assert [r.prompt_id for r in first.rows] == [r.prompt_id for r in second.rows]  # ids repeat ...
    assert [r.prompt for r in first.rows] != [r.prompt for r in second.rows]  # ... the problems do not
    for batch in bench.batches:
        assert batch.tokens == [bench.encoder.encode(r.prompt) for r in batch.rows]
    assert bench.max_model_len() % 32 == 0 and bench.max_model_len() >= 48 + max(map(len, first.tokens))


def test_recipe_prompt_source(tiny_model_dir):
    from rl.bench.rollout import RolloutBench, RolloutBenchConfig
    from rl.cli.common import recipe_path
    from rl.config import load_config
    from rl.data.source import dataset_rows

    path = recipe_path("arith_tiny")
    run = load_config(path, ["data.arith.seed=3"])
    train = {r.prompt_id: r.prompt for r in dataset_rows(run.data, run.data.train_split)}
    cfg = RolloutBenchConfig(recipe=path, recipe_overrides=["data.arith.seed=3"], prompts=5, repeats=2)
    first, second = RolloutBench(cfg, tiny_model_dir).batches
    for batch in (first, second):
        assert len({r.prompt_id for r in batch.rows}) == 5
        assert all(train[r.prompt_id] == r.prompt for r in batch.rows)  # the recipe's own rows, as it frames them
    assert [r.prompt_id for r in first.rows] != [r.prompt_id for r in second.rows]
    bench = RolloutBench(cfg, tiny_model_dir)
    assert bench.reward_specs == [(f.fn, f.weight) for f in run.reward.functions]
    assert RolloutBench(cfg.model_copy(update={"reward": "none"}), tiny_model_dir).reward_specs == []
    with pytest.raises(ValueError, match="fewer than the"):
        RolloutBench(cfg.model_copy(update={"prompts": len(train) + 1}), tiny_model_dir)


def test_recipe_options_on_the_command_line(monkeypatch, capsys):
    import rl.bench.rollout
    from rl.cli.main import build_parser

    seen = {}
    monkeypatch.setattr(
        rl.bench.rollout, "run_rollout_bench", lambda cfg: seen.setdefault("cfg", cfg) and {"table": ""}
    )

    def run(*argv: str) -> int:
        args = build_parser().parse_args(["bench", "rollout", *argv])
        return args.func(args)

    assert run("--recipe", "arith_tiny", "--set", "rollout.max_tokens=20", "--prompts", "3") == 0
    cfg = seen.pop("cfg")
    assert cfg.recipe.stem == "arith_tiny" and cfg.recipe_overrides == ["rollout.max_tokens=20"]
    assert cfg.model == "builtin:arith-tiny" and cfg.max_tokens == 20 and cfg.prompts == 3
    # the recipe's shaping knobs are the shaped modes' defaults; --shaping overrides one of them
    knobs = ["shaping.long_wait=1.5", "shaping.avg_redundancy=1.75", "shaping.max_redundancy=2.5"]
    assert run("--recipe", "arith_tiny", "--set", knobs[0]) == 0
    assert seen.pop("cfg").shaping.long_wait == 1.5
    assert run("--recipe", "arith_tiny", *sum((["--set", k] for k in knobs), []), "--shaping", "long_wait=2") == 0
    shaping = seen.pop("cfg").shaping
    assert (shaping.long_wait, shaping.avg_redundancy, shaping.max_redundancy) == (2.0, 1.75, 2.5)
    assert run("--set", "rollout.max_tokens=20") == 2
    assert "needs --recipe" in capsys.readouterr().err
    assert run("--recipe", "no_such_recipe") == 2
    assert run("--recipe", "arith_tiny", "--set", "train.lr=-1") == 2
    assert "train.lr" in capsys.readouterr().err
    assert run("--recipe", "arith_tiny", "--dataset", "longtail") == 2
    assert "exclusive" in capsys.readouterr().err


@pytest.fixture(scope="module")
def bench_engine(tiny_model_dir):
    """One vLLM engine on the tiny model, on an event loop of its own (AsyncLLM is bound to one loop)."""
    from rl.rollout.engine import EngineSpec
    from rl.rollout.vllm_adapter import VllmEngine

    loop = asyncio.new_event_loop()

    async def start() -> VllmEngine:
        spec = EngineSpec(model=tiny_model_dir, max_model_len=128, priority_scheduling=True, max_num_seqs=8)
        engine = VllmEngine(spec)
        await engine.start()
        return engine

    engine = loop.run_until_complete(start())
    yield loop, engine
    engine.shutdown()
    loop.close()


@pytest.mark.integration
def test_real_small_bench_run(bench_engine, tmp_path):
    from rl.bench.rollout import RolloutBenchConfig, run_rollout_bench_async

    loop, engine = bench_engine
    b, m = 4, 4
    cfg = RolloutBenchConfig(
        prompts=b,
        m_keep=m,
        max_tokens=32,
        modes=["raw", "plain", "darts", "darts+tie", "darts@long_wait=1.0", "shadow"],
        out_dir=tmp_path,
        cost_model="cpu_2core_arith_tiny",
    )
    result = loop.run_until_complete(run_rollout_bench_async(cfg, engine))
    runs = {r["mode"]: r for r in result["runs"]}
    assert set(runs) == {"raw", "plain", "darts", "darts+tie", "darts@long_wait=1.0", "shadow"}
    # shadow: every prompt gets the widest mode's launch (max_redundancy 2 x M), each sample runs to its own end
    shadow = runs.pop("shadow")["samples"]
    assert len(shadow) == b * 2 * m and {s["fate"] for s in shadow} == {"kept"}
    assert {s["finish_reason"] for s in shadow} <= {"stop", "length"}
    for mode, run in runs.items():
        kept = [s for s in run["samples"] if s["fate"] == "kept"]
        assert len(kept) == b * m and run["metrics"]["kept"] == b * m, mode
        assert run["metrics"]["rewarded"] == b * m, mode
        # the batch's mean reward is its groups' (each of M samples), the tokens those of its samples' records
        assert run["metrics"]["reward_mean"] == pytest.approx(sum(run["group_rewards"]) / b), mode
        # each kept sample carries its reward, the rest none; a group's mean is its kept samples'
        assert all((s["reward"] is None) == (s["fate"] != "kept") for s in run["samples"]), mode
        for g, mean in enumerate(run["group_rewards"]):
            assert mean == pytest.approx(sum(s["reward"] for s in kept if s["group"] == g) / m), (mode, g)
        generated = sum(s["length"] for s in run["samples"])
        assert run["metrics"]["generated_tokens"] == generated, mode
        assert run["metrics"]["waste_ratio"] == pytest.approx(1 - sum(s["length"] for s in kept) / generated), mode
    assert len(runs["raw"]["samples"]) == b * m  # one n=M request per prompt, nothing else
    assert runs["plain"]["metrics"]["waste_ratio"] == 0.0
    assert runs["darts"]["metrics"]["launched"] >= b * m
    for base in ("plain", "raw"):
        for mode, values in result["summary"]["ratios"][base].items():
            for name in ("speedup", "throughput", "model_speedup"):
                assert math.isfinite(values[name]["median"]), (base, mode, name)
    for name in ("bench_rollout.json", "bench_rollout.md", "bench_timeline.png", "bench_lengths.png"):
        assert (tmp_path / name).exists(), name
    assert json.loads((tmp_path / "bench_rollout.json").read_text())["summary"]["repeats"] == 1
    passes = [json.loads(line) for line in (tmp_path / "bench_passes.jsonl").read_text().splitlines()]
    assert passes == result["runs"]  # every timed pass, written as it ended
    about = json.loads((tmp_path / "bench_config.json").read_text())  # written before the first pass
    assert about == {k: result[k] for k in about} and about["engine"]["max_num_seqs"] > 0
    for mode in runs:
        assert len(runs[mode]["group_rewards"]) == b, mode
        diff = result["summary"]["reward_vs"]["plain"][mode]  # b prompts paired with plain's
        assert diff["n"] == b and -1.0 <= diff["mean"] <= 1.0 and diff["se"] >= 0.0, mode
    table = (tmp_path / "bench_rollout.md").read_text()
    assert "speed-up vs plain" in table and "| darts@long_wait=1.0 |" in table


def _listen(trace) -> None:
    """An ``on_output`` listener that only asks for streaming."""


@pytest.mark.integration
def test_engine_runs_higher_priority_first(bench_engine, encode):
    """vLLM priority scheduling through the adapter (what TIE modes rely on): with 8 running slots full,
    a later request of priority 0 goes ahead of 8 earlier queued requests of priority 5. First come, first
    served would run it in the third wave, after every queued request; by priority it runs in the second."""
    from rl.rollout.engine import RequestTrace, SamplingSpec

    loop, engine = bench_engine
    sampling = SamplingSpec(max_tokens=40, ignore_eos=True)
    prompt = encode("1+2=")

    async def scenario() -> dict[str, float]:
        live: dict[str, RequestTrace] = {}

        def run(name: str, priority: int):
            live[name] = RequestTrace(f"prio-{name}")
            # streamed (a listener is given), so the first wave's tokens show while it runs
            return asyncio.ensure_future(engine.generate(live[name], prompt, sampling, priority, _listen))

        running = [run(f"run{i}", 5) for i in range(8)]
        # the first wave holds the 8 slots once each of its requests has a token (fixed sleeps raced the engine's
        # pace on a busy machine); the queued requests and then the urgent one arrive while it has ~39 tokens to go
        while not all(live[f"run{i}"].tokens for i in range(8)):
            await asyncio.sleep(0.002)
        queued = [run(f"queued{i}", 5) for i in range(8)]
        urgent = run("urgent", 0)
        traces = await asyncio.gather(*running, *queued, urgent)
        return {t.request_id: t.finished for t in traces}

    finished = loop.run_until_complete(scenario())
    assert finished["prio-urgent"] < max(finished[f"prio-queued{i}"] for i in range(8))


def test_cli_shaping_knobs_are_validated_before_any_engine(capsys):
    args = build_parser().parse_args(["bench", "rollout", "--shaping", "avg_redundancy=0.5"])
    assert args.shaping == ["avg_redundancy=0.5"]
    assert cmd_bench_rollout(args) == 2
    assert "shaping.avg_redundancy" in capsys.readouterr().err


@pytest.mark.integration
def test_real_bench_run_on_a_recipe(bench_engine, tmp_path):
    from rl.bench.rollout import RolloutBenchConfig, run_rollout_bench_async
    from rl.cli.common import recipe_path

    loop, engine = bench_engine
    cfg = RolloutBenchConfig(
        recipe=recipe_path("arith_tiny"),
        prompts=3,
        m_keep=2,
        max_tokens=24,
        modes=["plain"],
        out_dir=tmp_path,
        plots=False,
    )
    result = loop.run_until_complete(run_rollout_bench_async(cfg, engine))
    (run,) = result["runs"]
    assert run["metrics"]["kept"] == 6 and run["metrics"]["rewarded"] == 6  # the recipe's rewards scored them
    assert result["reward"] == "1×arith_exact + 1×arith_steps"
    assert "recipe `arith_tiny`" in (tmp_path / "bench_rollout.md").read_text()


def turn_length(text: str) -> str:
    """The turn's length.

    Args:
        text: the turn
    """
    return str(len(text))


@pytest.mark.integration
def test_bench_reports_episodes_with_and_without_shaping(bench_engine, tiny_model_dir, tmp_path):
    """Episodes with a tool (the tiny model's test format), plain beside darts+sart: every record carries its turns,
    tool calls and seconds in tools; the metrics and the table give them per episode."""
    from rl.rollout.tool_workflow import ToolWorkflow
    from tool_chat import EveryTurnCalls
    from transformers import AutoTokenizer

    from rl.bench.rollout import RolloutBench, RolloutBenchConfig

    loop, engine = bench_engine
    calls = EveryTurnCalls(AutoTokenizer.from_pretrained(tiny_model_dir), ["turn_length"])
    workflow = ToolWorkflow(calls, [turn_length], None, max_tool_calls=2, timeout_s=5.0)
    cfg = RolloutBenchConfig(prompts=2, m_keep=2, max_tokens=40, modes=["plain", "darts+sart"], out_dir=tmp_path)
    runs = loop.run_until_complete(RolloutBench(cfg, tiny_model_dir, workflow).run(engine))
    for run in runs:
        samples, m = run["samples"], run["metrics"]
        assert m["kept"] == 4 and m["launched"] == len(samples) >= 4, run["mode"]
        assert any(s["turns"] >= 2 and s["tool_calls"] >= 1 and s["tool_s"] > 0 for s in samples), run["mode"]
        # one call after each turn but the last; or after the last as well, where the episode ended on a tool: stopped
        # while it ran (darts+sart aborts), or its result left no room for a reply
        assert all(s["turns"] - 1 <= s["tool_calls"] <= min(s["turns"], 2) for s in samples), run["mode"]
        assert m["turns_per_episode"] == pytest.approx(np.mean([s["turns"] for s in samples]))
        assert m["decode_tokens_per_episode"] == pytest.approx(np.mean([s["length"] for s in samples]))
        assert m["tool_s_per_episode"] > 0 and m["tool_calls_per_episode"] > 0
    table = markdown(build_summary(runs))
    assert "Per launched episode" in table and "| darts+sart |" in table.split("Per launched episode")[1]


def test_a_tool_recipe_refuses_the_single_turn_raw_mode():
    from rl.bench.rollout import RolloutBenchConfig
    from rl.cli.main import recipe_path

    recipe = recipe_path("calculator_qwen2.5-0.5b")
    with pytest.raises(ValueError, match="mode raw is single-turn; the recipe's tools or workflow make episodes"):
        RolloutBenchConfig(recipe=recipe, modes=["raw", "plain"])
    assert RolloutBenchConfig(recipe=recipe, modes=["plain", "darts+sart"]).modes == ["plain", "darts+sart"]
    assert RolloutBenchConfig(recipe=recipe, modes=["raw"], recipe_overrides=["rollout.tools=[]"]).modes == ["raw"]
