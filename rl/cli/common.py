"""What the ``rl`` commands share: recipes by name, config errors as one line per field, option types, and the
``--verbose`` switch with the output routing it turns off."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

import rl.recipes

T = TypeVar("T")

RECIPES_DIR = Path(rl.recipes.__file__).resolve().parent


def recipe_path(name: str) -> Path:
    """A recipe file by path, or by bare name from the bundled ``recipes/`` folder (a folder of that name, such as
    a run's own, is not a recipe)."""
    path = Path(name)
    if path.is_file():
        return path
    bundled = RECIPES_DIR / (name if name.endswith(".yaml") else f"{name}.yaml")
    if bundled.is_file():
        return bundled
    looked = str(path) if bundled == path else f"{path}{' (a folder)' if path.is_dir() else ''} and {bundled}"
    names = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.yaml")))
    raise FileNotFoundError(f"recipe {name!r} not found (looked at {looked}); bundled recipes: {names}")


def checked_config(
    build: Callable[[], T], what: str = "invalid config", name: Callable[[tuple], str] | None = None
) -> T | None:
    """``build()``, or None after printing why the configuration is invalid (nothing has started yet): one line
    per field, each starting with ``what``; ``name`` turns a field's location into the option typed."""
    from rl.config import error_lines, one_line

    try:
        return build()
    except ValidationError as e:
        for line in error_lines(e, name):
            print(f"{what}: {line}", file=sys.stderr)
    except (ValueError, FileNotFoundError) as e:
        print(f"{what}: {one_line(e)}", file=sys.stderr)
    return None


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def temperature(text: str) -> float:
    """A sampling temperature: 0 (greedy) or more."""
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be 0 (greedy) or more, got {text}")
    return value


def comma_list(text: str) -> list[str]:
    """The non-empty items of a comma list."""
    return [item.strip() for item in text.split(",") if item.strip()]


def integers(text: str, option: str) -> list[int]:
    """A comma list of integers; a ``ValueError`` naming ``option`` otherwise."""
    try:
        return [int(item) for item in comma_list(text)]
    except ValueError:
        raise ValueError(f"{option} {text!r}: give comma-separated integers, e.g. 0,1") from None


def add_verbose(parser: argparse.ArgumentParser) -> None:
    """The ``--verbose`` option: engine, Ray and library output on the terminal instead of in OUT/logs/."""
    parser.add_argument(
        "--verbose", action="store_true", help="show the engine, Ray and library logs (default: in OUT/logs/)"
    )


def route_output(args: argparse.Namespace, log_dir: Path) -> None:
    """Unless ``--verbose``: engine, Ray and library output into ``log_dir``, faults still shown
    (``rl.output.console``)."""
    if not args.verbose:
        from rl.output.console import route

        route(log_dir)
