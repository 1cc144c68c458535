"""LoRA (PEFT) on the trainer: only the adapters train, the merged weights are the adapted policy, and a LoRA
checkpoint continues exactly. Syncing the merged weights into vLLM is tested in test_weight_sync.py."""

import torch
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine
from synthetic import make_groups
from transformers import AutoModelForCausalLM

from rl.config import LoraConfig

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


def test_a_lora_checkpoint_continues_exactly(tiny_model_dir, tmp_path):
    spec = TrainerSpec(model=tiny_model_dir, lr=1e-2, lora=LORA)
    trained = FSDPEngine(spec)
    for seed in range(2):
        trained.train_step(make_groups(4, seed))
    trained.save(str(tmp_path / "ckpt"))
    fresh = FSDPEngine(spec)
    assert fresh.load(str(tmp_path / "ckpt")) == 2
    assert fresh.state_digest() == trained.state_digest()  # merged weights and the adapters' AdamW moments
    groups = make_groups(4, seed=7)
    trained.train_step(groups)
    fresh.train_step(groups)
    assert fresh.state_digest() == trained.state_digest()
