"""The training prompt stream: endless shuffled passes over the rows, every row tagged with its position.

Position ``p`` is row ``order(e)[p % per_epoch]`` of pass ``e = p // per_epoch``, where ``order(e)`` is a shuffle
seeded by ``(seed, e)`` alone and ``per_epoch`` is the largest multiple of the chunk size that the rows fill (the
rest of a pass is left out, so no chunk spans two passes). Any position can be recomputed, so a resumed run
continues the same stream.

Invariant: every position below ``low`` is finished (its group was trained or dropped with a reason), and
``finished`` holds the finished positions above it. A stream rebuilt from ``state()`` yields every unfinished
position again, in order (groups that were in flight or in the buffer at a checkpoint are sampled again),
then goes on with positions never drawn.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from rl.types import PromptRow


class PromptStream:
    def __init__(self, rows: list[PromptRow], chunk: int, seed: int, state: dict[str, Any] | None = None) -> None:
        """``ValueError`` if ``rows`` cannot fill one chunk; ``state``: a ``state()`` to continue from."""
        if len(rows) < chunk:
            raise ValueError(f"{len(rows)} training rows cannot fill a batch of {chunk} groups (train.batch_groups)")
        self.rows, self.chunk, self.seed = rows, chunk, seed
        self.per_epoch = len(rows) // chunk * chunk
        self.low = int(state["low"]) if state else 0
        self.finished: set[int] = set(state["finished"]) if state else set()
        self._orders: dict[int, list[int]] = {}

    def row(self, position: int) -> PromptRow:
        """The row at ``position`` of the stream."""
        epoch, offset = divmod(position, self.per_epoch)
        if epoch not in self._orders:
            order = list(range(len(self.rows)))
            random.Random(f"{self.seed}/{epoch}").shuffle(order)
            self._orders = {epoch: order}  # one pass at a time is enough: positions are drawn in order
        return self.rows[self._orders[epoch][offset]]

    def chunks(self) -> Iterator[list[tuple[int, PromptRow]]]:
        """Chunks of ``(position, row)`` from the lowest unfinished position on, skipping finished ones."""
        position, skip = self.low, set(self.finished)
        while True:
            chunk = []
            while len(chunk) < self.chunk:
                if position not in skip:
                    chunk.append((position, self.row(position)))
                position += 1
            yield chunk

    def finish(self, position: int) -> None:
        """``position``'s group was trained or dropped: a resumed run does not sample it again."""
        self.finished.add(position)
        while self.low in self.finished:
            self.finished.remove(self.low)
            self.low += 1

    def state(self) -> dict[str, Any]:
        """What ``PromptStream(..., state=...)`` needs to continue: plain JSON."""
        return {"low": self.low, "finished": sorted(self.finished)}
