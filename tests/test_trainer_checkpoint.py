"""A trainer's checkpoint holds everything its next step depends on."""

import torch
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine
from synthetic import make_groups, trained_and_reloaded


def test_a_loaded_checkpoint_continues_exactly(tiny_model_dir, tmp_path):
    """Train, save, load into a fresh trainer: equal digests (every parameter and AdamW moment), equal version,
    and the next step of both gives bit-identical parameters."""
    spec = TrainerSpec(model=tiny_model_dir, lr=1e-3)
    trained, fresh = trained_and_reloaded(spec, tmp_path / "ckpt")
    assert FSDPEngine(spec).state_digest() != trained.state_digest()
    assert fresh.version == trained.version == 2
    assert fresh.state_digest() == trained.state_digest()

    for worker in (trained, fresh):
        worker.train_step(make_groups(2, seed=7))
    for (name, a), (_, b) in zip(trained.model.named_parameters(), fresh.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
