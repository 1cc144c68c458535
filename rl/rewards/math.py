"""Built-in rewards for math and the synthetic arithmetic task, written as TRL reward functions.

Each takes ``(prompts, completions, **columns)`` and returns one value per completion. A completion is a
string or a chat list ``[{"role": "assistant", "content": ...}]``; the reference answer is column ``answer``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from math_verify import parse, verify

from rl.types import THINK_END

_NUMBER = r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[+-]?\d+(?:\.\d+)?"
_LEADING_NUMBER = re.compile(rf"\$?\s*({_NUMBER})\s*\$?\.?(?:\s|$)")
_FINAL_MARKER = re.compile(r"####|answer\s*:", re.IGNORECASE)
_LATEX_DELIMITERS = ("$", "\\boxed", "\\(", "\\[")
_MATH_TIMEOUT_S = 5  # math-verify's own (signal based) limit per parse / comparison, main thread only
_FORMATS = (
    re.compile(r"\\boxed\{\s*[^\s}]"),
    re.compile(r"####\s*\S"),
    re.compile(r"answer\s*:\s*\S", re.IGNORECASE),
)


def completion_text(completion: str | list[dict[str, str]]) -> str:
    """The answer in a completion given as a string or as chat messages (the last message's content): what follows
    a reasoning model's think block (up to the first ``</think>``), where the text has one."""
    text = completion if isinstance(completion, str) else completion[-1]["content"] or ""
    return text.partition(THINK_END)[2] if THINK_END in text else text


def math_accuracy(prompts: list, completions: list, answer: list, **columns) -> list[float | None]:
    """1.0 if the completion's final answer equals ``answer`` under math-verify, else 0.0.

    The final answer is a ``\\boxed{}`` expression, else what follows the last ``####`` or ``answer:``,
    else whatever math-verify extracts (the last LaTeX or plain expression). Where ``answer`` is a number, a final
    answer left as a sum or product of numbers (``43 + 12`` for 55: the question echoed) scores 0.0. A gold answer
    that cannot be parsed gives ``None`` (no reward for that sample). math-verify's signal-based timeouts are used
    only in the main thread; elsewhere they are off and the reward pool's timeout bounds the call.
    """
    timeout = _MATH_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    rewards: list[float | None] = []
    for completion, gold in zip(completions, answer, strict=True):
        gold_parsed = _parse_gold(str(gold), timeout)
        if not gold_parsed:
            rewards.append(None)
            continue
        pred = parse(_final_answer(completion_text(completion)), parsing_timeout=timeout)
        if pred and _is_number(gold_parsed[0]) and _unevaluated_arithmetic(pred[0]):
            rewards.append(0.0)
            continue
        rewards.append(float(bool(pred) and verify(gold_parsed, pred, timeout_seconds=timeout)))
    return rewards


def _is_number(expr: object) -> bool:
    return bool(getattr(expr, "is_Number", False))


def _unevaluated_arithmetic(expr: object) -> bool:
    """Whether math-verify's parse is a sum or product of integers or decimals left as written (``43 + 12``,
    ``7*8``); a mixed number (``1\\frac{1}{2}``) is not one."""
    if not (getattr(expr, "is_Add", False) or getattr(expr, "is_Mul", False)):
        return False
    return all(arg.is_Integer or arg.is_Float for arg in expr.args)  # type: ignore[attr-defined]


def format_reward(prompts: list, completions: list, **columns) -> list[float]:
    """1.0 if the completion gives its answer as ``\\boxed{...}``, ``#### x`` or ``answer: x``, else 0.0."""
    return [float(any(p.search(completion_text(c)) for p in _FORMATS)) for c in completions]


def arith_exact(prompts: list, completions: list, answer: list, **columns) -> list[float | None]:
    """1.0 if the completion ends with the integer ``answer`` after its last ``#`` or ``answer:``, else 0.0.

    ``"12+52=64;#64"`` and ``"answer: 64"`` score for 64; anything but an integer (and whitespace or a
    full stop) after the last marker scores 0. A non-integer ``answer`` gives ``None``.
    """
    rewards: list[float | None] = []
    for completion, gold in zip(completions, answer, strict=True):
        try:
            target = int(str(gold).strip().replace(",", ""))
        except ValueError:
            rewards.append(None)
            continue
        text = completion_text(completion)
        markers = list(re.finditer(r"#|answer\s*:", text, re.IGNORECASE))
        got = re.fullmatch(r"\s*([+-]?\d+)\s*\.?\s*", text[markers[-1].end() :]) if markers else None
        rewards.append(float(got is not None and int(got.group(1)) == target))
    return rewards


def arith_steps(prompts: list, completions: list, solution: list, **columns) -> list[float]:
    """Partial credit on the worked steps: the fraction of the reference ``solution``'s ``;``-separated parts
    (``"12+45=57;57+7=64;#64"``: two steps and the answer) that the completion reproduces in order from the start.

    A dense shaping term beside ``arith_exact``: a group where no sample reaches the answer still ranks the samples
    that got further. Evaluation counts only the recipe's first reward, so it never changes accuracy.
    """
    rewards = []
    for completion, reference in zip(completions, solution, strict=True):
        want, got = str(reference).split(";"), [part.strip() for part in completion_text(completion).split(";")]
        leading = 0
        while leading < min(len(want), len(got)) and want[leading] == got[leading]:
            leading += 1
        rewards.append(leading / len(want))
    return rewards


def overlong_penalty(max_len: int, buffer_len: int) -> Callable[..., list[float]]:
    """DAPO soft overlong punishment: 0 up to ``max_len - buffer_len``, then linear down to -1 at ``max_len``.

    The returned reward reads lengths in tokens from column ``completion_length`` (or TRL's
    ``completion_ids``); without either it falls back to the completion's length in characters.
    """
    if not 0 < buffer_len <= max_len:
        raise ValueError(f"need 0 < buffer_len <= max_len, got buffer_len={buffer_len}, max_len={max_len}")
    start = max_len - buffer_len

    def overlong(prompts: list, completions: list, **columns) -> list[float]:
        if "completion_length" in columns:
            lengths = [int(n) for n in columns["completion_length"]]
        elif "completion_ids" in columns:
            lengths = [len(ids) for ids in columns["completion_ids"]]
        else:
            lengths = [len(completion_text(c)) for c in completions]
        return [max(-1.0, min(0.0, (start - n) / buffer_len)) for n in lengths]

    return overlong


def _parse_gold(gold: str, timeout: int | None) -> list:
    """Parse a reference answer: GSM8K ``... #### 1,234`` keeps the number; bare text is wrapped in ``$``."""
    if "####" in gold:
        gold = gold.rsplit("####", 1)[1].strip()
        if re.fullmatch(_NUMBER, gold):
            gold = gold.replace(",", "")
    wrapped = gold if any(d in gold for d in _LATEX_DELIMITERS) else f"${gold}$"
    return parse(wrapped, parsing_timeout=timeout) or parse(gold, parsing_timeout=timeout)


def _final_answer(text: str) -> str:
    """What math-verify should read: the whole text if boxed, else the line after the last final marker."""
    if "\\boxed" in text:
        return text
    markers = list(_FINAL_MARKER.finditer(text))
    if not markers:
        return text
    line = text[markers[-1].end() :].strip().split("\n", 1)[0]
    number = _LEADING_NUMBER.match(line)
    if number:
        return f"\\boxed{{{number.group(1).replace(',', '')}}}"
    return line
