"""TRL's environment-owned reward: an environment class with a ``get_reward()`` method scores its own episode from
its state when the episode ends. The live instance stays in the rollout worker; what rewards get of it is a snapshot
(``rl.rollout.tool_workflow.snapshot``) whose ``get_reward()`` returns the value the instance gave then."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EnvironmentReward:
    """An environment's ``get_reward()`` as the snapshot carries it across processes: the value, or the error the
    live instance raised (raised again when called)."""

    value: float | None = None
    error: str | None = None

    def __call__(self) -> float | None:
        if self.error is not None:
            raise RuntimeError(self.error)
        return self.value


def owns_reward(env: Any) -> bool:
    """Whether ``env``'s class defines ``get_reward`` (TRL: the environment owns its reward)."""
    return callable(getattr(env, "get_reward", None))


def environment_reward(environments: list[Any], **_: Any) -> list[float | None]:
    """Built-in ``environment``: each episode's ``get_reward()``; None where the environment has none (TRL: not
    scored), NaN where it raised (a counted failure of that sample)."""
    values: list[float | None] = []
    for env in environments:
        get = getattr(env, "get_reward", None)
        if get is None:
            values.append(None)
            continue
        try:
            values.append(get())
        except Exception:
            values.append(math.nan)
    return values
