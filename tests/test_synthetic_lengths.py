"""Synthetic lengths for benchmarks on config-only models: the length model, the engine wrapper, one real run."""

from __future__ import annotations

import asyncio
import json

import pytest
from rl.rollout.engine import EngineSpec, RequestTrace, SamplingSpec

from rl.bench.length_model import PRESETS, LengthModel
from rl.bench.synthetic_lengths import SyntheticLengthEngine

TRUE = LengthModel(median=0.05, prompt_spread=0.7, sample_spread=0.5, runaway=0.05)


def generated_groups(model: LengthModel, prompts: int, samples: int, cap: int) -> list[list[tuple[int, str]]]:
    groups = []
    for p in range(prompts):
        lengths = [model.draw(cap, p, s) for s in range(samples)]
        groups.append([(n, "length" if n == cap else "stop") for n in lengths])
    return groups


def test_fit_recovers_the_parameters_it_generated_from():
    fit = LengthModel.fit(generated_groups(TRUE, 300, 16, 4096), 4096)
    assert fit.median == pytest.approx(TRUE.median, rel=0.15)
    assert fit.prompt_spread == pytest.approx(TRUE.prompt_spread, abs=0.1)
    assert fit.sample_spread == pytest.approx(TRUE.sample_spread, abs=0.05)
    assert fit.runaway == pytest.approx(TRUE.runaway, abs=0.02)


def test_fit_reads_the_natural_passes_of_a_bench_result(tmp_path):
    groups = generated_groups(TRUE, 200, 8, 1024)
    samples = [{"group": g, "length": n, "finish_reason": r} for g, group in enumerate(groups) for n, r in group]
    shaped = [{"group": 0, "length": 1, "finish_reason": "stop"}] * 50  # a shaped pass: censored, left out
    runs = [{"mode": "plain", "samples": samples}, {"mode": "darts", "samples": shaped}]
    (tmp_path / "bench_rollout.json").write_text(json.dumps({"config": {"max_tokens": 1024}, "runs": runs}))
    assert LengthModel.load(str(tmp_path)) == LengthModel.fit(groups, 1024)
    with pytest.raises(ValueError, match="neither a preset"):
        LengthModel.load(str(tmp_path / "missing.json"))


def test_lengths_scale_with_the_cap_and_repeat_with_the_seed():
    for p in range(20):
        for s in range(8):
            short, long = TRUE.draw(512, p, s), TRUE.draw(1024, p, s)
            assert 1 <= short <= 512 and abs(long - 2 * short) <= 2 or short == 1
            assert (short == 512) == (long == 1024)
            assert TRUE.draw(512, p, s) == short
    fake = FakeEngine()
    one, same, other = (SyntheticLengthEngine(fake, TRUE, seed) for seed in (1, 1, 2))
    ids = [f"t{k}-0-{i}" for k in (3, 9) for i in range(16)]
    drawn = [one.drawn_length(r, [5, 6, 7], 512) for r in ids]
    assert drawn == [same.drawn_length(r, [5, 6, 7], 512) for r in ids]
    assert drawn[:16] == drawn[16:]  # every timed pass (t3, t9) sees the same lengths
    assert drawn != [other.drawn_length(r, [5, 6, 7], 512) for r in ids]
    assert drawn[:16] != [one.drawn_length(f"w4-0-{i}", [5, 6, 7], 512) for i in range(16)]  # warm-up: other draws


class FakeEngine:
    """Generates exactly ``max_tokens`` tokens ("length"), or stops at once for an aborted id."""

    def __init__(self) -> None:
        self.spec = EngineSpec(model="fake")
        self.version = 3
        self.aborted: list[str] = []
        self.asked: dict[str, SamplingSpec] = {}

    async def generate(self, trace, prompt_tokens, sampling, priority=0, on_output=None):
        self.asked[trace.request_id] = sampling
        aborted = trace.request_id in self.aborted
        trace.tokens = [7] * (1 if aborted else sampling.max_tokens)
        trace.finish_reason = "abort" if aborted else "length"
        return trace

    async def abort(self, request_ids):
        self.aborted += request_ids


def test_wrapper_relabels_natural_ends_and_passes_aborts_through():
    fake = FakeEngine()
    runaway = LengthModel(median=0.1, prompt_spread=0.0, sample_spread=0.0, runaway=1.0)
    short = LengthModel(median=0.1, prompt_spread=0.0, sample_spread=0.0, runaway=0.0)
    cap = SamplingSpec(200, temperature=0.7)

    async def one(model: LengthModel, request_id: str) -> RequestTrace:
        return await SyntheticLengthEngine(fake, model).generate(RequestTrace(request_id), [1, 2], cap)

    stopped = asyncio.run(one(short, "t0-0-0"))
    assert (len(stopped.tokens), stopped.finish_reason) == (20, "stop")
    assert fake.asked["t0-0-0"] == SamplingSpec(20, temperature=0.7, ignore_eos=True)
    capped = asyncio.run(one(runaway, "t0-0-1"))
    assert (len(capped.tokens), capped.finish_reason) == (200, "length")
    wrapper = SyntheticLengthEngine(fake, short)
    asyncio.run(wrapper.abort(["t0-0-2"]))
    assert fake.aborted == ["t0-0-2"]
    assert asyncio.run(one(short, "t0-0-2")).finish_reason == "abort"
    assert (wrapper.spec, wrapper.version) == (fake.spec, 3)
    traces = asyncio.run(wrapper.generate_n("t1-4", [1, 2], cap, 3))  # raw mode: n single requests
    assert [t.request_id for t in traces] == ["t1-4-0", "t1-4-1", "t1-4-2"]
    assert [len(t.tokens) for t in traces] == [20] * 3 and {t.finish_reason for t in traces} == {"stop"}


def test_bench_options_for_dummy_models():
    from rl.bench.rollout import RolloutBenchConfig

    preset = next(iter(PRESETS))
    RolloutBenchConfig(model="dummy:qwen2.5-7b", lengths=preset, modes=["raw", "plain", "darts@long_wait=1.5"])
    refused = {
        "needs lengths": dict(model="dummy:qwen2.5-7b"),
        "real model has its own": dict(model="builtin:arith-tiny", lengths=preset),
        "SART scores response text": dict(model="dummy:tiny", lengths=preset, modes=["darts+sart"]),
        "nothing to reward": dict(model="dummy:tiny", lengths=preset, reward="arith_exact"),
        "neither a preset": dict(model="dummy:tiny", lengths="nope"),
    }
    for message, options in refused.items():
        with pytest.raises(ValueError, match=message):
            RolloutBenchConfig(**options)
    RolloutBenchConfig(model="dummy:tiny", lengths=preset, modes=["sart@scorer=none"])


def test_dummy_model_folder_holds_only_its_config(tmp_path, monkeypatch):
    from rl.models import resolve_model

    monkeypatch.setenv("TAILOR_CACHE", str(tmp_path))
    folder = resolve_model("dummy:qwen2.5-7b")
    config = json.loads((tmp_path / "models" / "dummy-qwen2.5-7b-v1" / "config.json").read_text())
    assert folder.endswith("dummy-qwen2.5-7b-v1") and len(list((tmp_path / "models").rglob("*"))) == 2
    assert (config["hidden_size"], config["num_key_value_heads"], config["vocab_size"]) == (3584, 4, 152064)
    with pytest.raises(ValueError, match="known: dummy:qwen2.5-7b"):
        resolve_model("dummy:llama-405b")


@pytest.mark.integration
def test_real_engine_ends_samples_at_their_drawn_lengths(tmp_path):
    from rl.bench.rollout import RolloutBenchConfig, run_rollout_bench_async
    from rl.bench.synthetic_bench import random_batch
    from rl.model_shapes import vocab_size
    from rl.models import resolve_model

    preset = next(iter(PRESETS))
    cfg = RolloutBenchConfig(
        model="dummy:tiny",
        lengths=preset,
        prompts=2,
        m_keep=2,
        max_tokens=32,
        modes=["plain"],
        steady_batches=2,
        out_dir=tmp_path,
    )
    cfg = cfg.model_copy(update={"plots": False})
    result = asyncio.run(run_rollout_bench_async(cfg))
    batch = random_batch(2, vocab_size(resolve_model("dummy:tiny")), cfg.seed)
    wrapper = SyntheticLengthEngine(FakeEngine(), LengthModel.load(preset), cfg.seed)
    samples = result["runs"][0]["samples"]
    assert len(samples) == 4 and result["reward"] == "none"
    assert result["runs"][0]["metrics"]["steady_kept_groups_per_s"] > 0
    for s in samples:
        drawn = wrapper.drawn_length(f"t-{s['group']}-{s['index']}", batch.tokens[s["group"]], 32)
        assert s["length"] == drawn
        assert s["finish_reason"] == ("length" if drawn == 32 else "stop")
