"""Held-out rows for a source with one set of rows: a fixed fraction, chosen by a hash of each prompt.

The same prompt lands on the same side in every run and on every machine, whatever the file's order, so a
held-out accuracy is never measured on training prompts.
"""

from __future__ import annotations

import hashlib
import json
import logging

from rl.types import PromptRow

log = logging.getLogger("rl.data")


def same_rows(train: list[PromptRow], test: list[PromptRow]) -> bool:
    """Whether the two splits hold the same prompts (a source without a separate test split)."""
    return {_key(r) for r in train} == {_key(r) for r in test}


class HeldOutIsTraining(ValueError):
    """Every held-out row is a training prompt: a held-out accuracy would be measured on the training rows."""


def check_disjoint(train: list[PromptRow], held: list[PromptRow], what: str, fix: str) -> None:
    """Held-out rows ``what`` names that are training prompts too: all of them is ``HeldOutIsTraining`` (``fix``
    says what to do), some of them a warning with their count."""
    trained = {_key(r) for r in train}
    shared = sum(_key(r) in trained for r in held)
    if held and shared == len(held):
        raise HeldOutIsTraining(
            f"{what}: all {shared} of its rows are training prompts, so held-out accuracy would be measured on "
            f"training rows; {fix}"
        )
    if shared:
        log.warning(
            "%s: %d of its %d rows are training prompts too; held-out accuracy counts them", what, shared, len(held)
        )


def hold_out(rows: list[PromptRow], fraction: float, source: str) -> tuple[list[PromptRow], list[PromptRow]]:
    """(training rows, held-out rows): ``fraction`` of ``rows`` by prompt hash, at least one row held out.

    ``fraction`` 0 keeps every row on both sides and warns that evaluation is on training rows.
    """
    if fraction == 0:
        log.warning("data.source %r has no test split and data.test_fraction=0: evaluating on training rows", source)
        return rows, rows
    cut = max(fraction, min(_hash_fraction(r) for r in rows) + 1e-12)
    held = [r for r in rows if _hash_fraction(r) < cut]
    print(
        f"data: {source!r} has no test split; holding out {len(held)} of {len(rows)} rows "
        f"(data.test_fraction={fraction}, by prompt hash)",
        flush=True,
    )
    return [r for r in rows if _hash_fraction(r) >= cut], held


def _key(row: PromptRow) -> str:
    return row.prompt if isinstance(row.prompt, str) else json.dumps(row.prompt, sort_keys=True)


def _hash_fraction(row: PromptRow) -> float:
    """A number in [0, 1) fixed by the row's prompt alone."""
    return int(hashlib.sha256(_key(row).encode()).hexdigest()[:12], 16) / 16**12
