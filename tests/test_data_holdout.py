"""hold_out: a fixed fraction of one set of rows by prompt hash, independent of the rows' order."""

import logging

from rl.data.holdout import hold_out, same_rows
from rl.types import PromptRow

ROWS = [PromptRow(prompt_id=f"r-{i}", prompt=f"{i}+{i}=", answer=str(2 * i)) for i in range(200)]


def test_the_same_prompts_are_held_out_in_any_order(capsys):
    train, held = hold_out(ROWS, 0.25, "d.jsonl")
    assert "holding out" in capsys.readouterr().out
    assert 30 <= len(held) <= 70 and len(train) + len(held) == len(ROWS)
    assert not same_rows(train, held) and not {r.prompt for r in train} & {r.prompt for r in held}
    _, again = hold_out(list(reversed(ROWS)), 0.25, "d.jsonl")
    assert {r.prompt for r in again} == {r.prompt for r in held}


def test_a_tiny_fraction_still_holds_out_one_row_and_zero_warns(caplog):
    train, held = hold_out(ROWS[:3], 0.001, "d.jsonl")
    assert len(held) == 1 and len(train) == 2
    with caplog.at_level(logging.WARNING, logger="rl.data"):
        train, held = hold_out(ROWS, 0.0, "d.jsonl")
    assert train == held == ROWS and "evaluating on training rows" in caplog.text


def _source(splits: dict[tuple[str, str], list[PromptRow]]):
    """A ``rows`` reader over fixed splits, keyed by (source, split)."""
    return lambda cfg, split: splits[(cfg.source, split)]


def test_held_out_rows_that_are_all_training_prompts_are_refused_and_some_warned_of(caplog):
    """``data.test_source`` naming the training file (or a part of it) evaluated on the training rows, as held-out
    accuracy; a source whose own test split is inside its training split did too."""
    import pytest

    from rl.config import DataConfig
    from rl.data.holdout import HeldOutIsTraining
    from rl.data.source import train_and_held_out

    other = [PromptRow(prompt_id=f"o-{i}", prompt=f"{i}*{i}=", answer=str(i * i)) for i in range(10)]
    splits = {("d.csv", "train"): ROWS, ("d.csv", "test"): ROWS, ("part.csv", "test"): ROWS[:20]}
    splits |= {("hub", "train"): ROWS, ("hub", "test"): ROWS[5:15], ("mix.csv", "test"): ROWS[:3] + other}
    for cfg, what in [
        (DataConfig(source="d.csv", test_source="part.csv"), "data.test_source 'part.csv' (split 'test'): all 20"),
        (DataConfig(source="hub"), "data.source 'hub' (split 'test'): all 10 of its rows are training prompts"),
    ]:
        with pytest.raises(HeldOutIsTraining, match=what.replace("(", r"\(").replace(")", r"\)")):
            train_and_held_out(cfg, _source(splits))
    with caplog.at_level(logging.WARNING, logger="rl.data"):
        train, held = train_and_held_out(DataConfig(source="d.csv", test_source="mix.csv"), _source(splits))
    assert held == ROWS[:3] + other and "3 of its 13 rows are training prompts too" in caplog.text
