"""Each group's prompt computed once (``train.share_prompts``): the packed rows' cuts, and the same update as padded
rows on the real tiny policy."""

import json
import random
import shutil

import pytest
import torch
from rl.trainer.batching import rows_of
from rl.trainer.engine import TrainerSpec
from rl.trainer.fsdp_engine import FSDPEngine
from rl.trainer.shared_prompt import ForwardCost, cut_packed_micro_batches, unit_length

from rl.algorithm.losses import LossSpec
from rl.types import Group, PromptRow, Sample


def groups_of(seed: int, n: int = 4, size: int = 4) -> list[Group]:
    """Groups with prompts of their own (2-9 tokens) and responses of 1-14 tokens; one sample's loss mask leaves out
    a tool's result."""
    rng = random.Random(seed)
    groups = []
    for g in range(n):
        prompt = [rng.randrange(4, 20) for _ in range(rng.randrange(2, 10))]
        samples = []
        for i in range(size):
            tokens = [rng.randrange(4, 20) for _ in range(rng.randrange(1, 15))]
            mask = [int(j % 4 != 2) for j in range(len(tokens))] if (g, i) == (1, 2) else None
            lps = [-rng.uniform(1, 4) for _ in tokens]
            samples.append(Sample(i, tokens, lps, [0] * len(tokens), "stop", loss_mask=mask))
        groups.append(Group(PromptRow(f"p{g}", "", ""), prompt, samples, [rng.gauss(0, 1) for _ in range(size)]))
    return groups


TOKENS_ONLY = ForwardCost(per_token=1.0, per_pair=0.0)  # attention free: packing always computes less
SMOLLM2 = ForwardCost(per_token=2.0 * 106.2e6, per_pair=4.0 * 576 * 30)  # 134.5M parameters, 28.3M of them embeddings


def test_a_group_shares_a_row_while_that_computes_less():
    """SmolLM2's shape: 8 responses of 40 tokens behind a 45-token prompt share one row (365 tokens through the
    weights against 680 in padded rows); of 8 of 600 tokens none pairs up, the attention of a 1245-token row
    outweighing the 45-token prompt it would save."""
    for length, pieces in ((40, 1), (600, 8)):
        rows = [([1] * 45, [2] * length, [0.0] * length, 0.0, None) for _ in range(8)]
        cuts = cut_packed_micro_batches(rows, SMOLLM2, max_rows=64)
        assert sum(map(len, cuts)) == pieces


@pytest.mark.parametrize(("max_rows", "max_tokens"), [(64, None), (3, None), (8, 30), (16, 12)])
def test_cuts_hold_every_sample_once_within_the_budgets(max_rows, max_tokens):
    rows = rows_of(groups_of(0, n=6, size=5))
    cuts = cut_packed_micro_batches(rows, TOKENS_ONLY, max_rows, max_tokens)
    pieces = [piece for cut in cuts for piece in cut]
    assert sorted(map(id, (row for piece in pieces for row in piece))) == sorted(map(id, rows))
    for piece in pieces:
        assert all(row[0] == piece[0][0] for row in piece)  # one prompt per packed row
        assert len(piece) == 1 or max_tokens is None or unit_length(piece) <= max_tokens
    for cut in cuts:
        assert sum(map(len, cut)) <= max_rows
        assert len(cut) == 1 or max_tokens is None or len(cut) * max(map(unit_length, cut)) <= max_tokens
    if max_tokens is None and max_rows >= 5:  # a group fits whole: its prompt is packed once
        assert len(pieces) == 6


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"micro_batch_size": 3, "temperature": 0.7},
        {"micro_batch_size": 8, "micro_batch_tokens": 30, "loss": LossSpec(entropy_coef=0.1, kl_coef=0.05)},
        {"micro_batch_size": 4, "mini_batches": 2, "epochs": 2, "loss": LossSpec(decoupled=True)},
    ],
    ids=["one micro-batch", "split groups", "token budget, entropy and KL", "mini-batches, epochs, proximal"],
)
def test_a_packed_step_gives_the_padded_step_s_update(tiny_model_dir, settings):
    """With prompts shared and with padded rows: the same gradients (each weight's within 1e-4 of its norm), then
    over two steps the same loss, gradient norm, entropy and KL, and weights within a tenth of one step's change
    (AdamW moves each weight by about lr); on fewer computed positions."""
    padded = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-3, share_prompts=False, **settings))
    packed = FSDPEngine(TrainerSpec(model=tiny_model_dir, lr=1e-3, **settings))
    assert packed.shares_prompts and not padded.shares_prompts
    padded.accumulate(groups_of(0))
    packed.accumulate(groups_of(0))
    for (name, p), q in zip(padded.model.named_parameters(), packed.model.parameters(), strict=True):
        assert float((q.grad - p.grad).norm() / p.grad.norm()) < 1e-4, name
    padded.finish_step(), packed.finish_step()
    for seed in (1, 2):
        a, b = padded.train_step(groups_of(seed)), packed.train_step(groups_of(seed))
        for key in ("loss", "grad_norm", "entropy", "tokens", "kl_ref"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
        assert b["pad_fraction"] < a["pad_fraction"] or b["pad_fraction"] == 0
    for (name, p), q in zip(padded.model.named_parameters(), packed.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=1e-4, rtol=0, msg=name)


def test_a_model_that_reads_packed_rows_otherwise_trains_on_padded_rows(tiny_model_dir, tmp_path, caplog):
    """Eager attention adds the mask to the scores, so it misreads the boolean 4-D mask: the start-up check sees the
    log-probs differ and the trainer keeps padded rows, saying so once."""
    model_dir = tmp_path / "eager"
    shutil.copytree(tiny_model_dir, model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "attn_implementation": "eager"}))
    engine = FSDPEngine(TrainerSpec(model=str(model_dir)))
    assert not engine.shares_prompts
    assert "does not read packed prompts as padded rows" in caplog.text
    assert engine.train_step(groups_of(0))["pad_fraction"] > 0  # padded rows, as before
