"""Where code from outside the trainer acts on a training step without the trainer importing it: the fault soak
(``rl bench soak``) turns a step's loss NaN through here (``rl.bench.faults.nan_loss``).

``TAILOR_TRAINER_HOOKS="package.module:name,..."``: each named loss hook is imported in the trainer's own process
when its engine starts, and applied in order to every micro-batch's loss. Unset, as in every ordinary run: no hook.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

HOOKS_ENV = "TAILOR_TRAINER_HOOKS"
LossHook = Callable[[Any, int], Any]  # (a micro-batch's loss tensor, the step it counts for) -> the loss to use


def loss_hooks() -> list[LossHook]:
    """The loss hooks ``TAILOR_TRAINER_HOOKS`` names, imported now (an import error names the hook)."""
    hooks = []
    for spec in filter(None, (s.strip() for s in os.environ.get(HOOKS_ENV, "").split(","))):
        module, _, name = spec.partition(":")
        try:
            hooks.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError) as e:
            raise ImportError(f"{HOOKS_ENV}: cannot load the trainer hook {spec!r}: {e}") from e
    return hooks
