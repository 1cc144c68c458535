"""Calculator tools for the ``calculator_qwen2.5-0.5b`` recipe (``rl.recipes.calculator:add``), written as for TRL's
``tools=[...]``: a name, type hints and a docstring with one ``Args:`` line per argument."""


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


def subtract(a: int, b: int) -> int:
    """Subtract the second integer from the first.

    Args:
        a: the integer to subtract from
        b: the integer to subtract
    """
    return a - b
