"""Progress on the console (rl/output/progress.py): a bar on a terminal, plain lines now and then off one."""

import io
import re

from rl.output import progress
from rl.output.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_the_first_step_then_one_line_a_while_and_the_last_are_printed():
    clock, out = Clock(), io.StringIO()
    shown = Progress(200, "train", "step", stream=out, clock=clock)
    for step in range(1, 201):
        clock.now = 2.0 * step  # 2 s a step
        shown.advance(f"reward {step}")
    shown.close()

    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    every = int(progress.LINE_EVERY_S / 2)  # steps between two lines
    steps = [1, *range(1 + every, 200, every), 200]
    assert [int(re.match(r"train: step (\d+)/200 \(", line).group(1)) for line in lines] == steps
    assert lines[0] == "train: step 1/200 (0:02 in): reward 1"
    assert lines[-1] == "train: step 200/200 (6:40 in, ~0:00 left): reward 200"


def test_a_resumed_run_counts_its_pace_from_its_own_first_step():
    clock, out = Clock(), io.StringIO()
    shown = Progress(100, "train", "step", done=60, stream=out, clock=clock)
    clock.now = 3.0
    shown.advance("r")
    assert out.getvalue() == "train: step 61/100 (0:03 in): r\n"  # no pace from one step: it holds the start's
    clock.now = 6.0
    shown.advance("r")
    assert shown.line("r", clock.now) == "train: step 62/100 (0:06 in, ~1:54 left): r"  # 3 s a step, 38 to go


def test_an_evaluation_off_a_terminal_counts_its_problems():
    clock, out = Clock(), io.StringIO()
    shown = Progress(64, "eval", "problem", stream=out, clock=clock)
    for n in range(1, 65):
        clock.now = 0.4 * n
        shown.advance()
    lines = out.getvalue().splitlines()
    assert lines == ["eval: problem 1/64 (0:00 in)", "eval: problem 64/64 (0:25 in, ~0:00 left)"], lines


def test_a_run_stopped_short_ends_on_a_line_of_where_it_stopped():
    """A signal or a time budget ends the items before ``total``: the last one done still gets its line, once."""
    clock, out = Clock(), io.StringIO()
    shown = Progress(40, "trl", "step", stream=out, clock=clock)
    for step in range(1, 8):
        clock.now = 1.0 * step
        shown.advance(f"reward {step}")
    shown.close()
    assert out.getvalue().splitlines() == [
        "trl: step 1/40 (0:01 in): reward 1",
        "trl: step 7/40 (0:07 in, ~0:33 left): reward 7",
    ]

    out = io.StringIO()
    shown = Progress(2, "train", "step", stream=out, clock=clock)
    shown.advance()
    shown.advance()
    shown.close()  # the last was printed already: nothing more
    assert len(out.getvalue().splitlines()) == 2


def test_on_a_terminal_the_bar_is_redrawn_in_place():
    out = Terminal()
    shown = Progress(3, "train", "step", stream=out)
    for _ in range(3):
        shown.advance("reward 0.500")
    shown.close()
    text = out.getvalue()
    assert "\r" in text and "3/3" in text and "reward 0.500" in text
    assert "train: step" not in text


def test_a_log_line_on_a_terminal_goes_above_the_bar_not_after_it():
    """The console's handler writes above the bar; a plain stream handler would glue the line to the bar's end."""
    import logging

    from rl.output.console import AboveTheBar

    out = Terminal()
    shown = Progress(3, "train", "step", stream=out)
    shown.advance("reward 0.500")
    logger = logging.getLogger("tests.progress")
    logger.propagate = False
    logger.addHandler(AboveTheBar(out))
    try:
        logger.warning("checkpoint of step 1 written")
    finally:
        logger.handlers.clear()
    shown.advance("reward 0.600")
    shown.close()
    pieces = [piece.strip() for piece in re.split(r"[\r\n]", out.getvalue())]
    assert "checkpoint of step 1 written" in pieces  # a line of its own, the bar's text cleared before it
    assert "reward 0.600" in out.getvalue().split("checkpoint of step 1 written")[1]  # the bar drawn again below
