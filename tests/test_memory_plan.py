"""The GPU memory plan (rl/inputs/memory_plan.py): its arithmetic against hand-computed figures for the SmolLM2-135M,
Qwen2.5-1.5B and Qwen2.5-7B shapes (full fine-tuning, LoRA, gradient checkpointing), against the train-step peaks
recorded on an H100 (benchmarks/gpu/), and ``rl train`` printing it or refusing a run in one line before any actor."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import rl.cli.main
from rl.cli.common import recipe_path
from rl.cli.main import main
from rl.config import load_config
from rl.inputs import memory_plan
from rl.inputs.memory_plan import (
    CUDA_CONTEXT_BYTES,
    GIB,
    VLLM_CUDA_GRAPH_BYTES,
    VLLM_OVERHEAD_BYTES,
    ModelShape,
    engine_need,
    make_plan,
    refusal,
    trainer_need,
)
from rl.inputs.preflight import BadInput
from rl.loop import driver
from rl.model_shapes import SHAPES

ROOT = Path(__file__).resolve().parent.parent
SMOL, QWEN15, QWEN7 = (ModelShape.from_config(SHAPES[k]) for k in ("smollm2-135m", "qwen2.5-1.5b", "qwen2.5-7b"))
# SmolLM2-135M by hand: embeddings 49152 x 576 (tied) + 30 layers x (q 576x576 + k, v 576x192 + o 576x576 + MLP
# 3 x 576x1536 + two norms 576) + the final norm
SMOL_PARAMS = 49152 * 576 + 30 * (576 * 576 * 2 + 2 * 576 * 192 + 3 * 576 * 1536 + 2 * 576) + 576


def _cfg(*overrides: str):
    """The defaults with ``overrides``, and a context of 128 tokens where they give none (as preflight sets it)."""
    return load_config(None, ["rollout.max_model_len=128", "rollout.max_tokens=48", *overrides])


def test_parameter_counts_are_the_published_sizes():
    assert SMOL.params == SMOL_PARAMS == 134_515_008
    # the model cards' sizes, to the digits they give: 134.5M, 1.54B, 7.62B
    assert round(SMOL.params / 1e6, 1) == 134.5
    assert round(QWEN15.params / 1e9, 2) == 1.54
    assert round(QWEN7.params / 1e9, 2) == 7.62


def test_kv_bytes_per_token_are_two_x_layers_x_kv_heads_x_head_dim_x_dtype():
    for shape, (layers, kv_heads, head_dim) in [(SMOL, (30, 3, 64)), (QWEN15, (28, 2, 128)), (QWEN7, (28, 4, 128))]:
        assert shape.kv_bytes_per_token(2) == 2 * layers * kv_heads * head_dim * 2
    assert (SMOL.kv_bytes_per_token(2), QWEN15.kv_bytes_per_token(2), QWEN7.kv_bytes_per_token(4)) == (
        23_040,
        28_672,
        114_688,
    )


def test_full_fine_tuning_keeps_sixteen_bytes_a_parameter_and_activations_per_token_and_layer():
    t = trainer_need(SMOL, _cfg("train.micro_batch_tokens=512", "rollout.max_model_len=256", "rollout.max_tokens=127"))
    p = SMOL_PARAMS
    assert (t.weights, t.gradients, t.optimizer, t.bf16_copies, t.step) == (4 * p, 4 * p, 8 * p, 2 * p, 4 * p)
    per_token_layer = 36 * 576 + 8 * 1536  # 33,024 bytes
    assert t.tokens == 512 and t.activations == 512 * 30 * per_token_layer == 507_248_640 and t.recompute == 0
    scored = 512 * 128 // 256  # positions from the first response token: max_tokens + 1 of each 256-token row
    assert t.logit_grads == 2 * scored * 49152
    assert t.logits == 2 * scored * 49152 + 8 * scored * 49152  # bf16 logits + two float32 blocks (under 2**26)
    assert t.peak == 16 * p + 2 * p + t.activations + t.logits + t.logit_grads


def test_an_ipc_sync_adds_vllms_packed_buffer_between_steps():
    """CUDA IPC packs the weights into one 1 GiB buffer on the trainer's GPU while no step runs: where a step's
    backward pass needs less (SmolLM2 at a small micro-batch), the sync sets the peak."""
    small = ("train.micro_batch_tokens=256", "rollout.max_model_len=256", "rollout.max_tokens=127")
    cpu, ipc = trainer_need(SMOL, _cfg(*small)), trainer_need(SMOL, _cfg(*small, "weight_sync.transport=ipc"))
    assert (cpu.sync, ipc.sync) == (0, GIB)
    assert cpu.peak < ipc.peak == ipc.state + GIB  # the step's own peak is below the buffer
    big = trainer_need(QWEN15, _cfg("train.micro_batch_size=8", "weight_sync.transport=ipc"))
    assert big.peak == trainer_need(QWEN15, _cfg("train.micro_batch_size=8")).peak  # a step needs more than 1 GiB


def test_checkpointing_keeps_each_layers_input_and_recomputes_one_layer():
    full = trainer_need(
        QWEN15, _cfg("train.micro_batch_size=8", "rollout.max_model_len=2112", "rollout.max_tokens=2048")
    )
    ckpt = trainer_need(
        QWEN15,
        _cfg(
            "train.micro_batch_size=8",
            "rollout.max_model_len=2112",
            "rollout.max_tokens=2048",
            "train.gradient_checkpointing=true",
        ),
    )
    n = 8 * 2112
    assert full.activations == n * 28 * (36 * 1536 + 8 * 8960)
    assert ckpt.activations == n * 28 * 4 * 1536 and ckpt.recompute == n * (36 * 1536 + 8 * 8960)
    assert ckpt.state == full.state == 16 * QWEN15.params
    # the backward pass holds the recomputed layer and the logits' gradient, not the bf16 copies (freed by then)
    assert ckpt.peak == ckpt.state + ckpt.activations + ckpt.logits + ckpt.recompute + ckpt.logit_grads
    assert full.peak - ckpt.peak == full.activations + full.bf16_copies - ckpt.activations - ckpt.recompute


def test_lora_trains_only_the_adapters():
    t = trainer_need(QWEN7, _cfg("train.lora.rank=16", "train.micro_batch_tokens=1024"))
    # r x (in + out) for q, k, v, o, gate, up, down of each of the 28 layers (h 3584, kv 4 x 128, i 18944)
    per_layer = 16 * ((3584 + 3584) + 2 * (3584 + 512) + (3584 + 3584) + 2 * (3584 + 18944) + (18944 + 3584))
    adapters = 28 * per_layer
    assert adapters == 40_370_176
    assert (t.weights, t.gradients, t.optimizer, t.step) == (
        4 * QWEN7.params + 4 * adapters,
        4 * adapters,
        8 * adapters,
        4 * adapters,
    )
    assert t.bf16_copies == 2 * QWEN7.params  # the frozen layers' bf16 casts are still saved for the backward pass


def test_engine_holds_weights_kv_cache_for_every_sequence_and_vllms_overhead():
    e = engine_need(QWEN7, _cfg("rollout.max_num_seqs=64", "rollout.max_model_len=1000", "rollout.max_tokens=900"))
    assert e.weights == 2 * QWEN7.params  # bfloat16
    assert e.kv_cache == 64 * 1008 * 57_344  # 1000 tokens take 63 blocks of 16
    assert e.overhead == VLLM_OVERHEAD_BYTES  # enforce_eager: no CUDA graphs
    graphs = engine_need(QWEN7, _cfg("rollout.enforce_eager=false"))
    assert graphs.seqs == 128 and graphs.overhead == VLLM_OVERHEAD_BYTES + VLLM_CUDA_GRAPH_BYTES
    assert engine_need(SMOL, _cfg("model.dtype=float32")).weights == 4 * SMOL_PARAMS


def test_a_plan_that_fits_gives_the_engine_its_need_and_half_the_spare():
    cfg = load_config(recipe_path("arith_smollm2"))
    plan = make_plan(SMOL, cfg, budget=70 * GIB, total=80 * GIB)
    assert plan.fits
    assert plan.need == plan.trainer.peak + plan.engine.total + 2 * CUDA_CONTEXT_BYTES
    granted = plan.engine_share * 80 * GIB
    assert plan.engine.total + plan.spare / 2 <= granted < plan.engine.total + plan.spare / 2 + 80 * GIB * 1e-4
    assert plan.budget - granted - plan.trainer.peak - plan.contexts >= plan.spare / 2 - 80 * GIB * 1e-4


def test_a_refusal_names_the_single_changes_that_fit():
    sizes = ["rollout.max_num_seqs=32", "rollout.max_model_len=1024", "rollout.max_tokens=768"]
    cfg = _cfg(*sizes, "train.micro_batch_tokens=1024")
    plan = make_plan(QWEN7, cfg, budget=80 * GIB)
    assert not plan.fits  # full fine-tuning of 7.6B parameters: 16 bytes each, 113 GiB
    line = refusal(plan, QWEN7, cfg)
    assert "\n" not in line and f"short by {-plan.spare / GIB:.2f} GiB" in line
    assert line.endswith("fits with any one of: train.lora.rank=16")
    assert make_plan(QWEN7, _cfg(*sizes, "train.micro_batch_tokens=1024", "train.lora.rank=16"), 80 * GIB).fits


def test_the_suggested_sequence_count_is_the_most_that_fits():
    cfg = _cfg(
        "rollout.max_num_seqs=1024",
        "rollout.max_model_len=4096",
        "rollout.max_tokens=3072",
        "train.micro_batch_tokens=4096",
    )
    plan = make_plan(QWEN15, cfg, budget=60 * GIB)
    line = refusal(plan, QWEN15, cfg)
    seqs = int(line.split("rollout.max_num_seqs=")[1].split(",")[0].split(";")[0])

    def at(seqs: int) -> bool:
        rollout = cfg.rollout.model_copy(update={"max_num_seqs": seqs})
        return make_plan(QWEN15, cfg.model_copy(update={"rollout": rollout}), 60 * GIB).fits

    assert at(seqs) and not at(seqs + 1)


def test_the_suggested_micro_batch_is_the_largest_that_fits():
    cfg = _cfg(
        "rollout.max_num_seqs=64",
        "rollout.max_model_len=4096",
        "rollout.max_tokens=3072",
        "train.micro_batch_tokens=32768",
    )
    line = refusal(make_plan(QWEN15, cfg, budget=60 * GIB), QWEN15, cfg)
    tokens = int(line.split("train.micro_batch_tokens=")[1].split(",")[0])

    def at(tokens: int) -> bool:
        train = cfg.train.model_copy(update={"micro_batch_tokens": tokens})
        return make_plan(QWEN15, cfg.model_copy(update={"train": train}), 60 * GIB).fits

    assert 4096 <= tokens < 32768 and at(tokens) and not at(tokens + 1)
    assert "train.gradient_checkpointing=true" in line and "max_num_seqs" not in line


def test_engines_asleep_while_the_trainer_steps_need_the_larger_moment_not_the_sum():
    sizes = ["rollout.max_num_seqs=256", "rollout.max_model_len=2112", "rollout.max_tokens=2048"]
    sizes += ["train.micro_batch_size=8", "train.gradient_checkpointing=true"]
    awake_cfg, asleep_cfg = _cfg(*sizes), _cfg(*sizes, "rollout.sleep_while_training=true")
    awake, asleep = make_plan(QWEN15, awake_cfg, 80 * GIB), make_plan(QWEN15, asleep_cfg, 80 * GIB)
    t, e, contexts = awake.trainer, awake.engine, 2 * CUDA_CONTEXT_BYTES
    assert (asleep.trainer, asleep.engine) == (t, e)
    assert awake.need == t.peak + e.total + contexts
    # sampling: the trainer's weights, gradients and AdamW beside the whole engine; training: the trainer's peak
    # beside what a sleeping engine keeps (vLLM's overhead); here sampling is the larger moment, so sleeping saves
    # what the trainer's step adds to its state (bf16 copies, activations, logits)
    sampling, training = t.state + e.total, t.peak + e.overhead
    assert asleep.need == max(sampling, training) + contexts == sampling + contexts
    assert awake.need - asleep.need == t.peak - t.state > 10 * GIB
    budget = (awake.need + asleep.need) // 2
    short = make_plan(QWEN15, awake_cfg, budget)
    assert not short.fits and make_plan(QWEN15, asleep_cfg, budget).fits
    assert "rollout.sleep_while_training=true" in refusal(short, QWEN15, awake_cfg)
    assert "asleep while the trainer steps" in asleep.line() and "asleep" not in awake.line()
    stale = _cfg(*sizes, "train.max_staleness=2")  # it samples while it trains: sleep is no fix for it
    assert "sleep_while_training" not in refusal(make_plan(QWEN15, stale, budget), QWEN15, stale)


def test_checkpointing_is_suggested_where_it_alone_fits():
    # micro-batches of 8 rows of 2112 tokens: out of memory on an 80 GB H100 without checkpointing, 36.7 GiB with
    # it (benchmarks/gpu/h100_train_step_qwen2.5-1.5b.json); the engine small beside it
    cfg = _cfg(
        "train.micro_batch_size=8",
        "rollout.max_model_len=2112",
        "rollout.max_tokens=2048",
        "rollout.max_tokens=2048",
        "rollout.max_num_seqs=1",
    )
    plan = make_plan(QWEN15, cfg, budget=int(79.2 * GIB))
    assert not plan.fits and "train.gradient_checkpointing=true" in refusal(plan, QWEN15, cfg)


@pytest.mark.parametrize(
    ("record", "shape", "max_len"),
    [("h100_gpu_timings.json", SMOL, 512), ("h100_train_step_qwen2.5-1.5b.json", QWEN15, 2048)],
)
def test_trainer_peak_is_within_ten_percent_of_the_recorded_h100_peaks(record, shape, max_len):
    """benchmarks/gpu_timings.py: 16 x 8 samples, 64-token prompts, responses up to max_len, micro-batches of
    ``micro_batch_size`` rows in batch order; its peak is ``torch.cuda.max_memory_allocated`` over three steps."""
    steps = [s for s in json.loads((ROOT / "benchmarks/gpu" / record).read_text())["train_step"] if "peak_gib" in s]
    assert steps
    for s in steps:
        cfg = _cfg(
            f"train.micro_batch_size={s['micro_batch_size']}",
            f"train.gradient_checkpointing={str(s['gradient_checkpointing']).lower()}",
            f"rollout.max_model_len={64 + max_len}",
            f"rollout.max_tokens={max_len}",
        )
        planned = trainer_need(shape, cfg).peak / GIB
        assert math.isclose(planned, s["peak_gib"], rel_tol=0.10), (s, planned)


class _Started(Exception):
    """The driver was reached: the plan let the run through."""


@pytest.fixture
def started(monkeypatch, tmp_path) -> dict:
    """``rl train`` in process up to the driver: the config it would run with lands in the returned dict's "cfg".
    Run from an empty folder: a ``runs/arith_tiny`` of ``make demo`` where the tests run would refuse the run."""
    seen: dict = {}
    monkeypatch.chdir(tmp_path)

    class Driver:
        def __init__(self, cfg, *_args):
            seen["cfg"] = cfg
            raise _Started

    monkeypatch.setattr(driver, "Driver", Driver)
    monkeypatch.setattr(rl.cli.main, "route_output", lambda *_: None)
    monkeypatch.setattr(memory_plan, "visible_gpu", lambda: None)  # the same on a machine with a GPU
    return seen


def test_rl_train_prints_the_plan_and_hands_the_engine_its_share(started, capsys):
    with pytest.raises(_Started):
        main(["train", "arith_tiny", "memory.gpu_gib=24"])
    out = capsys.readouterr().out.splitlines()
    line = next(line for line in out if line.startswith("memory plan: "))
    share = float(line.rsplit("rollout.gpu_memory_utilization=", 1)[1])
    assert started["cfg"].rollout.gpu_memory_utilization == share != 0.5
    assert line.endswith(f"of 24.00 GiB; rollout.gpu_memory_utilization={share:g}")


def test_rl_train_without_a_gpu_or_budget_plans_nothing(started, capsys):
    with pytest.raises(_Started):
        main(["train", "arith_tiny"])
    assert "memory plan" not in capsys.readouterr().out
    assert started["cfg"].rollout.gpu_memory_utilization == 0.5


def test_a_share_the_recipe_sets_stands_when_the_plan_allows_it(started, capsys):
    with pytest.raises(_Started):
        main(["train", "arith_tiny", "memory.gpu_gib=24", "rollout.gpu_memory_utilization=0.3"])
    assert started["cfg"].rollout.gpu_memory_utilization == 0.3
    assert capsys.readouterr().out.rstrip().endswith("rollout.gpu_memory_utilization=0.3 (the recipe's)")


def test_a_share_that_starves_the_trainer_is_refused_in_one_line(started, capsys):
    assert main(["train", "arith_tiny", "memory.gpu_gib=8", "rollout.gpu_memory_utilization=0.95"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rollout.gpu_memory_utilization=0.95" in err[0] and "leave it unset" in err[0]
    assert "cfg" not in started


def test_a_cpu_kv_cache_below_one_longest_sequence_is_refused_before_any_actor(tmp_path):
    """On the CPU vLLM refuses an engine whose KV cache (rollout.kv_cache_bytes) holds less than one max_model_len
    sequence plus its null block (seen: 11796480 bytes for SmolLM2 at 256 tokens refused, 13271040 started)."""
    (tmp_path / "config.json").write_text(json.dumps(SHAPES["smollm2-135m"]))
    token = 2 * 30 * 3 * 64 * 4  # K and V, 30 layers, 3 KV heads of 64, float32 (auto on the CPU)
    need = (256 // memory_plan.CPU_KV_BLOCK_TOKENS + 1) * memory_plan.CPU_KV_BLOCK_TOKENS * token
    assert need == 13271040
    fits = _cfg("rollout.max_model_len=256", f"rollout.kv_cache_bytes={need}")
    memory_plan.check_cpu_kv_cache(fits, str(tmp_path))
    small = _cfg("rollout.max_model_len=256", f"rollout.kv_cache_bytes={need - 1}")
    with pytest.raises(BadInput) as refused:
        memory_plan.apply_memory_plan(small, str(tmp_path))  # this machine has no GPU: its engines run on the CPU
    assert str(refused.value) == (
        f"rollout.kv_cache_bytes ({need - 1}) cannot hold one sequence of rollout.max_model_len (256) tokens on this "
        f"model ({token} bytes of KV cache a token, {need} in all); raise it to at least {need} (each sequence "
        "decoded at once takes as much), or lower rollout.max_model_len"
    )
    halved = _cfg("rollout.max_model_len=256", f"rollout.kv_cache_bytes={need // 2}", "model.dtype=bfloat16")
    memory_plan.check_cpu_kv_cache(halved, str(tmp_path))  # bfloat16 keys and values take half as much
