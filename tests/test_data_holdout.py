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
