"""``rl bench profile-decode``: per-token latency through Tailor's vLLM engine, by batch size and output mode."""

import asyncio
import json
import math

import pytest

from rl.bench.cost_model import DecodeProfile
from rl.bench.decode_profile import check_options, fit_line, output_modes, streaming_cost
from rl.cli.bench_decode import cmd_bench_profile_decode
from rl.cli.main import build_parser


def test_fit_line_recovers_an_exact_line():
    sizes = [1, 16, 64, 128, 256]
    a, c = 1.55e-3, 57e-6
    fit = fit_line(sizes, [a + c * b for b in sizes])
    assert fit["a_s"] == pytest.approx(a, rel=1e-9) and fit["c_s_per_seq"] == pytest.approx(c, rel=1e-9)
    assert [fit["a_s"] + fit["c_s_per_seq"] * b for b in sizes] == pytest.approx([a + c * b for b in sizes])
    assert fit_line([8], [0.004]) == {"a_s": 0.004, "c_s_per_seq": 0.0}


def test_streaming_cost_is_the_slope_above_final():
    fits = {
        "final": {"a_s": 1e-3, "c_s_per_seq": 50e-6},
        "delta": {"a_s": 2e-3, "c_s_per_seq": 70e-6},
        "interval16": {"a_s": 1e-3, "c_s_per_seq": 51e-6},
    }
    per_step, per_output = streaming_cost(fits, output_modes(16))
    assert per_step == pytest.approx({"delta": 20e-6, "interval16": 1e-6})
    assert per_output == pytest.approx({"delta": 20e-6, "interval16": 16e-6})  # one output every 16 steps


def test_bad_options_fail_before_an_engine_starts(tiny_model_dir, capsys):
    def run(*extra: str) -> int:
        return cmd_bench_profile_decode(build_parser().parse_args(["bench", "profile-decode", *extra]))

    assert run("--batch-sizes", "1,x") == 2
    assert run("--batch-sizes", "8,4") == 2
    assert run("--stream-interval", "1") == 2
    assert run("--steps", "1") == 2
    assert run("--steps", "300") == 2  # arith-tiny has 256 positions
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5 and all(line.startswith("invalid profile options: ") for line in err)
    assert check_options(tiny_model_dir, [1, 4], steps=48, prompt_len=16, stream_interval=16, repeats=1) == 64
    with pytest.raises(ValueError, match="positions"):
        check_options(tiny_model_dir, [1], steps=250, prompt_len=16, stream_interval=16, repeats=1)
    with pytest.raises(SystemExit):  # argparse: the two graph flags exclude each other
        build_parser().parse_args(["bench", "profile-decode", "--enforce-eager", "--cuda-graph"])


@pytest.mark.integration
def test_profile_through_the_engine(tmp_path, capsys):
    out = tmp_path / "profile.json"
    argv = ["bench", "profile-decode", "--batch-sizes", "1,4,8", "--steps", "16", "--repeats", "1"]
    args = build_parser().parse_args([*argv, "--stream-interval", "4", "--dummy-weights", "--out", str(out)])
    assert cmd_bench_profile_decode(args) == 0
    profile = json.loads(out.read_text())
    columns = profile["per_token_latency_by_output"]
    assert list(columns) == ["final", "delta", "interval4"]
    for name, column in columns.items():
        # a difference of two timings: one step's stall under a loaded machine can make a small batch's negative
        assert len(column) == 3 and all(math.isfinite(t) for t in column) and max(column) > 0, name
        assert set(profile["fit_by_output"][name]) == {"a_s", "c_s_per_seq"}
    assert profile["per_token_latency_s"] == columns["final"]
    assert profile["engine"].startswith("vllm ") and profile["max_num_seqs"] == 8 and profile["enforce_eager"]
    assert profile["weights"].startswith("dummy")
    per_step, per_output = profile["host_s_per_seq_step"], profile["host_s_per_streamed_output"]
    assert set(per_step) == set(per_output) == {"delta", "interval4"}
    assert per_output["delta"] == per_step["delta"]
    assert per_output["interval4"] == pytest.approx(4 * per_step["interval4"])
    fits = profile["fit_by_output"]
    assert per_step["delta"] == pytest.approx(fits["delta"]["c_s_per_seq"] - fits["final"]["c_s_per_seq"])
    host_cpu = profile["host_cpu_s_per_step_by_output"]
    assert set(host_cpu) == set(columns) and all(len(column) == 3 for column in host_cpu.values())
    assert set(profile["host_cpu_s_per_streamed_output"]) == {"delta", "interval4"}
    assert DecodeProfile.from_dict(profile).batch_sizes == (1, 4, 8)  # the cost model reads it as before
    err = capsys.readouterr().err  # progress as it goes: 3 warm-ups, then 3 sizes x 3 modes
    assert "profile: batch 1/12" in err and "profile: batch 12/12" in err and "b=8 interval4:" in err


@pytest.fixture(scope="module")
def small_engine(tiny_model_dir):
    """A vLLM engine on the tiny model, on an event loop of its own (AsyncLLM is bound to one loop)."""
    from rl.rollout.engine import EngineSpec, start_engine

    loop = asyncio.new_event_loop()
    engine = start_engine(EngineSpec(model=tiny_model_dir, max_model_len=64, max_num_seqs=4))
    loop.run_until_complete(engine.start())
    yield loop, engine
    loop.run_until_complete(_shutdown(engine))
    loop.close()


async def _shutdown(engine) -> None:
    """Stop the engine on its loop: vLLM closes its ZMQ sockets there at once. Called off the loop it only schedules
    that on it, the sockets stay open, and the context's garbage collection later blocks the process for good."""
    engine.shutdown()


def _streamed_counts(loop, engine, request_id: str) -> tuple[list[int], int]:
    """Tokens in the trace at each streamed output of one 16-token request, and its final length."""
    from rl.rollout.engine import RequestTrace, SamplingSpec

    counts: list[int] = []
    trace = RequestTrace(request_id)
    sampling = SamplingSpec(max_tokens=16, ignore_eos=True)
    on_output = lambda t: counts.append(len(t.tokens))  # noqa: E731
    loop.run_until_complete(engine.generate(trace, [1, 5, 7, 4], sampling, on_output=on_output))
    return counts, len(trace.tokens)


@pytest.mark.integration
def test_set_stream_interval_spaces_the_outputs(small_engine):
    loop, engine = small_engine
    engine.set_stream_interval(4)
    counts, total = _streamed_counts(loop, engine, "interval-4")
    # the first token alone, then every 4 (the last output, at 16, ends the request and is not an on_output);
    # outputs the consumer has not yet taken are merged, so some of these may be skipped, never others added
    assert total == 16 and 2 <= len(counts) <= 4 and set(counts) <= {1, 5, 9, 13}, counts
    engine.set_stream_interval(1)
    counts, total = _streamed_counts(loop, engine, "interval-1")
    assert total == 16 and len(counts) > 4 and counts == sorted(counts), counts
