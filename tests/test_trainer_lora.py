"""LoRA (PEFT) on the trainer: only the adapters train, the merged weights are the adapted policy, and a LoRA
checkpoint continues exactly; a short `rl train` run with LoRA (real Ray and vLLM). The merged weights giving vLLM
the trainer's log-probs is tested in test_weight_sync.py."""

import pytest
import torch
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine
from small_runs import small_run
from synthetic import make_groups, trained_and_reloaded
from transformers import AutoModelForCausalLM

from rl.config import LoraConfig
from rl.loop.checkpoint import ADAPTER_DIR, latest_checkpoint
from rl.loop.driver import run_training
from rl.output.metrics import read_records

LORA = LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj", "down_proj"])


def test_only_the_adapters_train_and_the_merged_weights_are_the_adapted_policy(tiny_model_dir):
    spec = TrainerSpec(model=tiny_model_dir, lr=1e-2, lora=LORA)
    engine, full = FSDPEngine(spec), FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-2))
    start = engine.full_weights()
    assert start.keys() == full.full_weights().keys()  # the base model's HF names, nothing of PEFT's
    assert all(torch.equal(start[n], w) for n, w in full.full_weights().items())  # B = 0: the policy starts as is
    trainable = sum(p.numel() for p in engine.model.parameters() if p.requires_grad)
    assert 0 < trainable < 0.1 * sum(p.numel() for p in full.model.parameters())

    for seed in range(2):
        engine.train_step(make_groups(4, seed))
    merged = engine.full_weights()
    moved = {n for n in merged if not torch.equal(merged[n], start[n])}
    assert moved and all(n.endswith(("q_proj.weight", "v_proj.weight", "down_proj.weight")) for n in moved)

    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    plain.load_state_dict(merged, strict=False)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, engine.model(input_ids=ids).logits, atol=1e-5)


def test_a_lora_checkpoint_is_an_hf_model_and_a_peft_adapter(tiny_model_dir, tmp_path):
    """The checkpoint's only top-level weights are the merged model (vLLM loads every ``*.safetensors`` there: an
    adapter file beside it stopped ``rl eval RUN`` of a LoRA run); its adapter folder is one PEFT loads."""
    from peft import PeftModel

    engine = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-2, lora=LORA))
    engine.train_step(make_groups(4, 0))
    engine.save(str(tmp_path / "ckpt"))
    assert [p.name for p in (tmp_path / "ckpt").glob("*.safetensors")] == ["model.safetensors"]
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt", dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    with torch.no_grad():
        untrained = base(ids).logits
        adapted = PeftModel.from_pretrained(base, tmp_path / "ckpt" / ADAPTER_DIR)(ids).logits
        assert torch.allclose(merged(ids).logits, adapted, atol=1e-5)
        assert not torch.allclose(untrained, adapted, atol=1e-5)  # the step moved the policy


def test_a_lora_checkpoint_continues_exactly(tiny_model_dir, tmp_path):
    trained, fresh = trained_and_reloaded(TrainerSpec(model=tiny_model_dir, lr=1e-2, lora=LORA), tmp_path / "ckpt", 4)
    assert fresh.state_digest() == trained.state_digest()  # merged weights and the adapters' AdamW moments
    groups = make_groups(4, seed=7)
    trained.train_step(groups)
    fresh.train_step(groups)
    assert fresh.state_digest() == trained.state_digest()


@pytest.mark.integration
def test_a_lora_run_serves_the_adapter_syncs_and_checkpoints(ray_session, tiny_model_dir, tmp_path):
    """`rl train` with train.lora served as an adapter: real Ray, vLLM (LoRA enabled) and torch, a few steps, only
    the adapter synced every step, the engine's log-probs still the trainer's."""
    overrides = ["train.max_steps=3", "train.max_staleness=0", "train.lora.rank=4", "train.lora.sync=adapter"]
    overrides += ["train.save_checkpoint=true"]  # on-policy, so the log-prob gap compares equal weights
    cfg = small_run(tmp_path, "lora", *overrides)
    assert run_training(cfg)["steps"] == 3
    train = [r for r in read_records(tmp_path / "lora" / "metrics.jsonl")[0] if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert any(r.get("weight_sync_s", 0) > 0 for r in train)  # adapters reached the engine (overlapped syncs
    # report in a later step's record)
    assert all(r["logprob_gap"] < 1e-3 for r in train)  # base + adapter in vLLM = the trainer's PEFT model
    checkpoint = latest_checkpoint(tmp_path / "lora")
    assert (checkpoint / ADAPTER_DIR / "adapter_model.safetensors").is_file()
    assert [p.name for p in checkpoint.glob("*.safetensors")] == ["model.safetensors"]


def test_auto_lora_sync_is_merged_on_cpu_and_adapter_on_gpus(monkeypatch, tmp_path):
    import rl.loop.actors

    cfg = small_run(tmp_path, "auto", "train.lora.rank=4")
    assert cfg.train.lora.sync == "auto"
    for gpus, expected in ((False, "merged"), (True, "adapter")):
        monkeypatch.setattr(rl.loop.actors, "_has_gpus", lambda gpus=gpus: gpus)
        assert rl.loop.actors.resolve_lora_sync(cfg).train.lora.sync == expected
    assert rl.loop.actors.resolve_lora_sync(small_run(tmp_path, "full")).train.lora is None
