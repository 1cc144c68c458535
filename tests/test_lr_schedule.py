"""The learning-rate schedule: hand values, transformers' schedules of the same names, and the rate each trainer step
takes on the real tiny policy (synchronous steps and periodic asynchrony's streamed steps)."""

import pytest
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine
from rl.trainer.lr_schedule import lr_factor
from synthetic import make_groups


def test_hand_values():
    assert [lr_factor(s, "constant", 2, 6) for s in range(1, 8)] == [0.5, 1, 1, 1, 1, 1, 1]
    assert [lr_factor(s, "linear", 2, 6) for s in range(1, 8)] == [0.5, 1, 1, 0.75, 0.5, 0.25, 0.25]  # 7: as 6
    assert [lr_factor(s, "cosine", 0, 4) for s in range(1, 5)] == pytest.approx([1, 0.853553, 0.5, 0.146447], abs=1e-6)
    assert [lr_factor(s, "constant", 0, 3) for s in range(1, 4)] == [1, 1, 1]
    with pytest.raises(ValueError, match="unknown learning-rate schedule 'step'"):
        lr_factor(1, "step", 0, 3)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_the_decay_is_transformers_schedule_of_the_same_name(schedule):
    """After the warmup, Tailor's step s takes the rate transformers' scheduler gives its optimizer step s (counted
    from 0, so s - 1); only the warmup differs: transformers' first update is at rate 0, Tailor's at lr/warmup."""
    import torch
    from transformers import get_scheduler

    warmup, total = 3, 20
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    hf = get_scheduler(schedule, optimizer, num_warmup_steps=warmup, num_training_steps=total).lr_lambdas[0]
    assert [lr_factor(s, schedule, warmup, total) for s in range(warmup + 1, total + 1)] == pytest.approx(
        [hf(s - 1) for s in range(warmup + 1, total + 1)]
    )
    assert [lr_factor(s, schedule, warmup, total) for s in range(1, warmup + 1)] == pytest.approx([1 / 3, 2 / 3, 1])


def test_each_step_updates_at_its_scheduled_rate(tiny_model_dir):
    spec = TrainerSpec(model=tiny_model_dir, lr=1e-2, lr_schedule="linear", lr_warmup_steps=2, total_steps=4)
    synchronous, streamed = FSDPEngine(spec), FSDPEngine(spec)
    rates = []
    for step in range(4):
        groups = make_groups(2, seed=step)
        rates.append(synchronous.train_step(groups)["lr"])
        for group in groups:  # periodic asynchrony: each group as it arrives, one update at the end
            streamed.accumulate([group])
        assert streamed.finish_step()["lr"] == rates[-1]
    assert rates == pytest.approx([5e-3, 1e-2, 1e-2, 5e-3])
