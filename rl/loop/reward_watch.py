"""Reward failures watched: the run stops once a reward function's call has failed for a whole step's worth of groups
in a row (``train.batch_groups``), since training on its fallback rewards would teach nothing."""

from __future__ import annotations


class RewardWatch:
    """Each reward function's run of consecutive groups whose call failed."""

    def __init__(self, names: list[str], limit: int) -> None:
        self.names, self.limit = names, limit
        self.streaks: dict[str, int] = {}  # consecutive failed calls of each reward function

    def failure(self, errors: dict[str, str]) -> str | None:
        """After a group's reward calls (``errors``: the failed functions' errors, by name): why the run must stop,
        one line, or None."""
        found = None
        for name in self.names:
            self.streaks[name] = self.streaks.get(name, 0) + 1 if name in errors else 0
            if self.streaks[name] >= self.limit and found is None:
                found = (
                    f"reward {name!r} failed on all of the last {self.streaks[name]} groups, a whole step; "
                    f"last error: {errors[name]}"
                )
        return found
