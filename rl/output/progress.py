"""Progress on the console (training steps, evaluated problems, a bench's passes and its peer's steps): on a terminal
a bar redrawn in place; off one (a file or a pipe: ``nohup``, a cluster job's log, CI) a plain line at the first item,
then at most every ``LINE_EVERY_S`` seconds, and at the last or where it stops short of it, so that a log reads line
by line instead of as one line of carriage-return refreshes."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

LINE_EVERY_S = 30.0  # off a terminal: the longest time between two progress lines while items go on


class Progress:
    """Items ``done + 1 .. total`` (``unit``\\ s: steps, problems) as they end, under the name ``desc``."""

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str,
        done: int = 0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.done, self.first = total, done, done
        self.desc, self.unit, self.clock = desc, unit, clock
        self.started, self.last_line = clock(), -math.inf
        self.shown, self.postfix = done, ""  # off a terminal: the item of the last line printed, the latest postfix
        self.bar = tqdm(  # off a terminal disabled: lines of our own instead of the bar's refreshes
            total=total,
            initial=done,
            desc=desc,
            unit=unit,
            dynamic_ncols=True,
            file=self.stream,
            disable=not self.stream.isatty(),
        )

    def advance(self, postfix: str = "") -> None:
        """One more item done; ``postfix`` is what it measured (a step's reward, accuracy, step time, ...)."""
        self.done += 1
        if not self.bar.disable:
            if postfix:
                self.bar.set_postfix_str(postfix, refresh=False)
            self.bar.update(1)
            return
        self.postfix = postfix
        now = self.clock()
        if self.done - self.first == 1 or self.done >= self.total or now - self.last_line >= LINE_EVERY_S:
            self._print(now)

    def _print(self, now: float) -> None:
        self.last_line, self.shown = now, self.done
        print(self.line(self.postfix, now), file=self.stream, flush=True)

    def line(self, postfix: str, now: float) -> str:
        """``train: step 40/200 (0:34 in, ~2:16 left): reward ...``: the time since this process's first item began
        (a resumed run's earlier time aside) and what is left at its pace, from the second item on (the first one's
        time holds the start's)."""
        spent, ran = now - self.started, self.done - self.first
        left = f", ~{_clock(spent / ran * (self.total - self.done))} left" if ran > 1 else ""
        head = f"{self.desc}: {self.unit} {self.done}/{self.total} ({_clock(spent)} in{left})"
        return f"{head}: {postfix}" if postfix else head

    def close(self) -> None:
        """The end: off a terminal, a last line where items ended since the one before (a run stopped short of
        ``total``, by a signal or a time budget)."""
        lines = self.bar.disable  # read before close(), which disables the bar
        self.bar.close()
        if lines and self.done > self.shown:
            self._print(self.clock())


def _clock(seconds: float) -> str:
    """``h:mm:ss`` or ``m:ss``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
