"""``algorithm.ref_sync_every`` / ``ref_sync_mix`` on the real tiny policy: every N steps the KL reference becomes
``(1 - mix) * reference + mix * policy`` (TR-DPO; mix 1 is ProRL's reset), between syncs it stays put; a checkpoint
holds the moved reference (folder of its own, digested), so a resumed run continues exactly."""

import dataclasses

import pytest
import torch
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine
from synthetic import make_groups, trained_and_reloaded
from test_trainer_lora import LORA

from rl.algorithm.losses import LossSpec
from rl.loop.checkpoint import REFERENCE_WEIGHTS


def _spec(model: str, every: int | None, mix: float = 0.6) -> TrainerSpec:
    return TrainerSpec(model=model, lr=1e-3, loss=LossSpec(kl_coef=0.1), ref_sync_every=every, ref_sync_mix=mix)


def _params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def test_the_reference_moves_toward_the_policy_every_n_steps_only(tiny_model_dir):
    engine = FSDPEngine(_spec(tiny_model_dir, every=2))
    initial = _params(engine.reference)
    engine.train_step(make_groups(2, 0))
    assert all(torch.equal(p, initial[n]) for n, p in engine.reference.named_parameters())  # step 1: no sync
    engine.train_step(make_groups(2, 1))
    policy = _params(engine.model)
    for name, p in engine.reference.named_parameters():
        assert torch.allclose(p, 0.4 * initial[name] + 0.6 * policy[name], atol=1e-7), name
    assert not torch.equal(engine.reference.model.embed_tokens.weight, initial["model.embed_tokens.weight"])


@pytest.mark.parametrize("lora", [None, LORA], ids=["full", "lora"])
def test_mix_one_resets_the_reference_to_the_policy(tiny_model_dir, lora):
    """With LoRA the reference (a whole model) becomes the merged policy."""
    engine = FSDPEngine(dataclasses.replace(_spec(tiny_model_dir, every=1, mix=1.0), lora=lora))
    initial = _params(engine.reference)
    engine.train_step(make_groups(2, 0))
    policy = engine.full_weights()
    assert all(torch.equal(p, policy[n]) for n, p in engine.reference.named_parameters())
    assert not all(torch.equal(p, initial[n]) for n, p in engine.reference.named_parameters())


def test_without_sync_the_reference_stays_the_initial_policy(tiny_model_dir):
    engine = FSDPEngine(_spec(tiny_model_dir, every=None))
    initial = _params(engine.reference)
    for seed in range(2):
        engine.train_step(make_groups(2, seed))
    assert all(torch.equal(p, initial[n]) for n, p in engine.reference.named_parameters())


def test_a_checkpoint_holds_the_moved_reference_and_a_resume_continues_exactly(tiny_model_dir, tmp_path):
    trained, fresh = trained_and_reloaded(_spec(tiny_model_dir, every=2), tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / REFERENCE_WEIGHTS).is_file()
    assert [p.name for p in (tmp_path / "ckpt").glob("*.safetensors")] == ["model.safetensors"]  # what vLLM loads
    assert fresh.state_digest() == trained.state_digest()
    pairs = zip(fresh.reference.parameters(), trained.reference.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    with torch.no_grad():  # the digest covers the reference: a damaged one is told apart
        next(fresh.reference.parameters())[0, 0] += 1e-3
    assert fresh.state_digest() != trained.state_digest()
    fresh.load(str(tmp_path / "ckpt"))
    for worker in (trained, fresh):
        for seed in (7, 8):  # the second step syncs again
            worker.train_step(make_groups(2, seed))
    for (name, a), (_, b) in zip(trained.reference.named_parameters(), fresh.reference.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    for (name, a), (_, b) in zip(trained.model.named_parameters(), fresh.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
