"""Training progress on the console: on a terminal a bar redrawn in place; off one (a file or a pipe: ``nohup``, a
cluster job's log, CI) a plain line at the first step, then at most every ``LINE_EVERY_S`` seconds, and at the last,
so that a log reads line by line instead of as one line of carriage-return refreshes."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

LINE_EVERY_S = 30.0  # off a terminal: the longest time between two progress lines while steps go on


class TrainingProgress:
    """Steps ``done + 1 .. total`` as they end, each with the metrics ``step_postfix`` says of it."""

    def __init__(
        self, total: int, done: int, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.done, self.first = total, done, done
        self.clock = clock
        self.started, self.last_line = clock(), -math.inf
        self.bar = tqdm(  # off a terminal disabled: lines of our own instead of the bar's refreshes
            total=total,
            initial=done,
            desc="train",
            unit="step",
            dynamic_ncols=True,
            file=self.stream,
            disable=not self.stream.isatty(),
        )

    def step(self, postfix: str) -> None:
        """One more step done; ``postfix`` is what it measured (reward, accuracy, step time, ...)."""
        self.done += 1
        if not self.bar.disable:
            self.bar.set_postfix_str(postfix)
            self.bar.update(1)
            return
        now = self.clock()
        if self.done - self.first == 1 or self.done >= self.total or now - self.last_line >= LINE_EVERY_S:
            self.last_line = now
            print(self.line(postfix, now), file=self.stream, flush=True)

    def line(self, postfix: str, now: float) -> str:
        """``train: step 40/200 (0:34 in, ~2:16 left): reward ...``: the time since this process's first step began
        (a resumed run's earlier time aside) and what is left at its pace."""
        spent = now - self.started
        left = spent / (self.done - self.first) * (self.total - self.done)
        return f"train: step {self.done}/{self.total} ({_clock(spent)} in, ~{_clock(left)} left): {postfix}"

    def close(self) -> None:
        self.bar.close()


def _clock(seconds: float) -> str:
    """``h:mm:ss`` or ``m:ss``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
