"""Turn a local file, a local dataset folder or a hub dataset into ``PromptRow``s, skipping bad rows."""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl.data.presets import DATASET_PRESETS
from rl.types import Messages, PromptRow

logger = logging.getLogger("rl.data")

DEFAULT_ANSWER_FIELD = "answer"
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".tsv")
DELIMITERS = {".csv": ",", ".tsv": "\t"}  # a spreadsheet's export: a header row, then one row per record
_SPLIT_WORDS = {"train", "test", "validation", "valid", "dev", "eval"}


@dataclass
class LoadResult:
    """The usable rows, and how many rows were skipped for each reason."""

    rows: list[PromptRow]
    skipped: dict[str, int] = field(default_factory=dict)


MALFORMED = object()  # a JSON line that does not parse, a CSV row with more cells than its header


class _BadRow(ValueError):
    """A record that cannot become a prompt; ``reason`` is its skip-count key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_SAID: set[str] = set()  # skip warnings given in this process


def load_rows(
    source: str,
    *,
    split: str = "train",
    prompt_field: str | None = None,
    answer_field: str | None = DEFAULT_ANSWER_FIELD,
    template: str = "{prompt}",
    subset: str | None = None,
    limit: int | None = None,
    answer_extractor: Callable[[str], str] | None = None,
    system_prompt: str | None = None,
    chat: bool = False,
    id_prefix: str | None = None,
) -> LoadResult:
    """Load prompts from ``source`` and keep the first ``limit`` usable ones.

    ``source`` is a ``.jsonl``/``.json``/``.parquet``/``.csv``/``.tsv`` file, a folder written by ``save_to_disk`` or
    holding such files (``split`` picks a split of a saved ``DatasetDict`` or the files named after
    it), a name in ``DATASET_PRESETS`` (its values replace the arguments left at their defaults), or
    a hub dataset name. Fields may be dotted paths into nested columns (``reward_model.ground_truth``).
    ``prompt_field=None`` reads the first of ``PROMPT_COLUMNS`` the first row has (TRL's datasets hold ``prompt``);
    ``answer_field`` left at ``"answer"`` reads the first of ``ANSWER_COLUMNS`` where the row has no ``answer``.
    The prompt is ``template`` filled with ``prompt`` (the prompt field) and the row's columns; with
    ``chat`` it becomes a user message after an optional system message. A prompt field that already
    holds chat messages stays a message list: the template fills its last user message and
    ``system_prompt`` replaces its system messages. Every column but the prompt one goes to ``columns``
    (as TRL's ``GRPOTrainer`` passes them to reward functions). A JSON line that does not parse counts as
    ``malformed_line``; a file that is not UTF-8 raises ``ValueError`` naming it. Bad rows are counted per
    reason in ``skipped`` and reported in one warning; ``prompt_id`` is ``<id_prefix>-<index in source>``.

    Raises ``FileNotFoundError`` for a missing local path and ``ValueError`` when no row is usable.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    if system_prompt is not None and not chat:
        raise ValueError("system_prompt needs chat=True")
    label = source
    preset = DATASET_PRESETS.get(source)
    if preset is not None:
        source = preset.path
        subset = preset.subset if subset is None else subset
        split = preset.split or split
        if prompt_field is None:
            prompt_field = preset.prompt_field
        if answer_field == DEFAULT_ANSWER_FIELD:
            answer_field = preset.answer_field
        answer_extractor = answer_extractor or preset.answer_extractor
    records, default_prefix = _open(source, split, subset)
    if preset is not None:
        default_prefix = f"{label}-{split}"
    prefix = default_prefix if id_prefix is None else id_prefix

    rows: list[PromptRow] = []
    skipped: Counter[str] = Counter()
    examined = 0
    columns_seen: list[str] = []  # the first record's columns, to name them when no row is usable
    replaced = 0  # chat-message rows whose own system message data.system_prompt replaced
    prompt_name = prompt_field or PROMPT_COLUMNS[0]  # until the first row says which usual column it has
    for index, record in enumerate(records):
        if limit is not None and len(rows) >= limit:
            break
        examined += 1
        if not columns_seen and isinstance(record, dict):
            columns_seen = sorted(record)
            prompt_name, answer_field = _usual_fields(label, record, prompt_field, answer_field)
        try:
            prompt, answer, columns = _convert(
                record, prompt_name, answer_field, template, answer_extractor, system_prompt, chat
            )
        except _BadRow as bad:
            skipped[bad.reason] += 1
            continue
        rows.append(PromptRow(prompt_id=f"{prefix}-{index}", prompt=prompt, answer=answer, columns=columns))
        replaced += system_prompt is not None and _has_system_message(_lookup(record, prompt_name))

    if not rows:
        if not skipped:
            raise ValueError(f"dataset {label!r} (split {split!r}) has no rows")
        fields = (
            f"; prompt field {prompt_name!r}, answer field {answer_field!r}, the first row's columns {columns_seen}"
            f"{_field_hint(columns_seen, prompt_name, answer_field)}"
            if skipped.get("missing_field")
            else ""
        )
        raise ValueError(f"no usable rows in dataset {label!r} (split {split!r}); skipped {dict(skipped)}{fields}")
    if skipped:
        reasons = ", ".join(f"{reason}={n}" for reason, n in sorted(skipped.items()))
        _say_once(f"dataset {label!r}: skipped {sum(skipped.values())} of {examined} rows ({reasons})")
    if replaced:
        _say_once(
            f"dataset {label!r}: data.system_prompt replaced the system message of {replaced} of {len(rows)} chat "
            "prompts; set data.system_prompt=null to keep the rows' own"
        )
    return LoadResult(rows=rows, skipped=dict(skipped))


def _usual_fields(label: str, record: dict[str, Any], prompt: str | None, answer: str | None) -> tuple[str, str | None]:
    """The prompt and answer fields for rows like ``record``: a prompt field left unset is the first of
    ``PROMPT_COLUMNS`` it has, an answer field left at ``answer`` where it has none the first of ``ANSWER_COLUMNS``
    it has; what was chosen so is said once. Named fields stay as named."""
    answer_falls_back = answer == DEFAULT_ANSWER_FIELD and answer not in record
    chosen = prompt is None or answer_falls_back
    if prompt is None:
        prompt = next((name for name in PROMPT_COLUMNS if name in record), PROMPT_COLUMNS[0])
    if answer_falls_back:
        answer = next((name for name in ANSWER_COLUMNS if name in record), answer)
    if chosen and prompt in record and (answer is None or answer in record):
        where = f"prompts from column {prompt!r}" + (f", answers from column {answer!r}" if answer else "")
        _say_once(f"dataset {label!r}: {where} (data.prompt_field, data.answer_field name others)", logging.INFO)
    return prompt, answer


def _say_once(said: str, level: int = logging.WARNING) -> None:
    """Say ``said`` once per process: a file without splits is read for training and for held-out rows."""
    if said not in _SAID:
        _SAID.add(said)
        logger.log(level, said)


def _has_system_message(raw: Any) -> bool:
    return _is_messages(raw) and any(m["role"] == "system" for m in raw)


def _open(source: str, split: str, subset: str | None) -> tuple[Iterable[Any], str]:
    """The records of ``source`` and the default prompt-id prefix for them."""
    path = Path(source).expanduser()
    if subset is not None and path.exists():
        raise ValueError(f"{source!r} is a local path; a subset (a hub dataset's configuration) names none of it")
    if path.is_file():
        return _read_file(path), path.stem
    if path.is_dir():
        return _read_dir(path, split), f"{path.name}-{split}"
    if source.startswith(("/", ".", "~")) or source.endswith(DATA_SUFFIXES):
        raise FileNotFoundError(f"dataset source {source!r} does not exist")
    import datasets

    from rl.inputs import hub

    cache_only = hub.offline_unless_reachable()  # no Hub to ask: the cache at once, not a minute of retries
    try:
        records = datasets.load_dataset(source, subset, split=split)
    except Exception as e:
        if cache_only:
            raise ValueError(f"dataset {hub.not_cached(source)}") from None
        if "Config name is missing" in str(e):  # the configurations' names are in the message
            raise ValueError(f"{' '.join(str(e).split('Example of usage')[0].split())} (set data.subset)") from None
        raise
    return records, f"{source.rsplit('/', 1)[-1].lower()}-{split}"


def _read_file(path: Path) -> Iterator[Any]:
    """Records of one data file; an undecodable JSON line or an overlong CSV row yields ``MALFORMED``."""
    if path.suffix == ".jsonl":
        yield from _read_json_lines(path)
    elif path.suffix == ".json":
        text = _utf8_text(path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            yield from _read_json_lines(path)  # many ".json" files are JSON lines
            return
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON array of records or JSON lines")
        yield from data
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches():
            yield from batch.to_pylist()
    elif path.suffix in DELIMITERS:  # every value a string, as datasets' csv loader gives it without a schema
        rows = csv.DictReader(io.StringIO(_utf8_text(path), newline=""), delimiter=DELIMITERS[path.suffix])
        for row in rows:  # a row with more cells than the header has them under the key None
            yield MALFORMED if None in row else row
    else:
        raise ValueError(f"{path}: unsupported file type (expected one of {', '.join(DATA_SUFFIXES)})")


def _read_json_lines(path: Path) -> Iterator[Any]:
    """Records of a JSON-lines file; a line that does not parse yields ``MALFORMED``."""
    for line in _utf8_text(path).splitlines():
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            yield MALFORMED


def _utf8_text(path: Path) -> str:
    """The file's text; raises ``ValueError`` naming the file and the first bad byte if it is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); re-save it as UTF-8") from None


def _read_dir(path: Path, split: str) -> Iterator[Any]:
    """Records of a ``save_to_disk`` folder, or of the data files in a folder that belong to ``split``."""
    if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
        import datasets

        saved = datasets.load_from_disk(str(path))
        if isinstance(saved, datasets.DatasetDict):
            if split not in saved:
                raise ValueError(f"{path}: no split {split!r}; available: {sorted(saved)}")
            saved = saved[split]
        yield from saved
        return
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in DATA_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"{path}: no {'/'.join(DATA_SUFFIXES)} files")
    words = {p: set(re.split(r"[^a-z0-9]+", str(p.relative_to(path)).lower())) for p in files}
    chosen = [p for p in files if split in words[p]]
    if not chosen:
        if any(words[p] & _SPLIT_WORDS for p in files):
            raise ValueError(f"{path}: no data file for split {split!r} among {[p.name for p in files]}")
        chosen = files
    for p in chosen:
        yield from _read_file(p)


def _convert(
    record: Any,
    prompt_field: str,
    answer_field: str | None,
    template: str,
    answer_extractor: Callable[[str], str] | None,
    system_prompt: str | None,
    chat: bool,
) -> tuple[str | Messages, str, dict[str, Any]]:
    """Prompt, answer and remaining columns of one record; raises ``_BadRow`` for an unusable one."""
    if record is MALFORMED:
        raise _BadRow("malformed_line")
    if not isinstance(record, dict):
        raise _BadRow("invalid_record")
    raw_prompt = _lookup(record, prompt_field)
    prompt = build_prompt(raw_prompt, record, template, system_prompt, chat)
    answer = "" if answer_field is None else _answer_text(_lookup(record, answer_field), answer_extractor)
    prompt_column = _column_of(record, prompt_field)
    return prompt, answer, {k: v for k, v in record.items() if k != prompt_column}


# what datasets name these columns, commonly; TRL's GRPOTrainer reads prompt
PROMPT_COLUMNS = ("prompt", "question", "problem", "query", "instruction")
ANSWER_COLUMNS = ("answer", "solution", "ground_truth", "target", "reference")


def _field_hint(columns: list[str], prompt_field: str, answer_field: str | None) -> str:
    """What to set when the prompt or answer field is not among ``columns`` and a usual name is (TRL's datasets
    hold ``prompt``), e.g. "; set data.prompt_field=prompt"."""
    settings = []
    for key, wanted, usual, otherwise in (
        ("prompt_field", prompt_field, PROMPT_COLUMNS, "to the column that holds it"),
        ("answer_field", answer_field, ANSWER_COLUMNS, "to the column that holds it (null: the data has none)"),
    ):
        if wanted is not None and wanted.split(".", 1)[0] not in columns:
            found = next((name for name in usual if name in columns), None)
            settings.append(f"data.{key}={found}" if found else f"data.{key} {otherwise}")
    return f"; set {' and '.join(settings)}" if settings else ""


def _column_of(record: dict[str, Any], name: str) -> str:
    return name if name in record else name.split(".", 1)[0]


def _lookup(record: dict[str, Any], name: str) -> Any:
    """The value at column ``name`` or at the dotted path ``name``; absent or null is a bad row."""
    if name in record:
        value = record[name]
    else:
        value = record
        for part in name.split("."):
            if not isinstance(value, dict) or part not in value:
                raise _BadRow("missing_field")
            value = value[part]
    if value is None:
        raise _BadRow("missing_field")
    return value


def _fill(template: str, prompt: str, record: dict[str, Any]) -> str:
    try:
        return template.format_map({**record, "prompt": prompt})
    except KeyError:  # the template names a column this row lacks
        raise _BadRow("missing_field") from None


def _is_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
        )
    )


def build_prompt(
    raw: Any, record: dict[str, Any], template: str, system_prompt: str | None, chat: bool
) -> str | Messages:
    """The policy's prompt from a raw prompt (text or messages), its row's columns and the recipe's framing.

    Raises ``ValueError`` (a row-skip reason) when the row cannot become a prompt.
    """
    if isinstance(raw, str):
        if not raw.strip():
            raise _BadRow("empty_prompt")
        text = _fill(template, raw, record)
        if not chat:
            return text
        messages = [{"role": "user", "content": text}]
    elif _is_messages(raw):
        messages = [
            {"role": m["role"], "content": m["content"]} for m in raw if system_prompt is None or m["role"] != "system"
        ]
        users = [m for m in messages if m["role"] == "user"]
        if not users or not users[-1]["content"].strip():
            raise _BadRow("empty_prompt")
        users[-1]["content"] = _fill(template, users[-1]["content"], record)
    else:
        raise _BadRow("non_string_prompt")
    if system_prompt is not None:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def _answer_text(raw: Any, answer_extractor: Callable[[str], str] | None) -> str:
    """The reference answer as a non-empty string; numbers are accepted, whole floats lose their ``.0``."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise _BadRow("bad_answer")
    text = str(int(raw)) if isinstance(raw, float) and raw.is_integer() else str(raw)
    if answer_extractor is not None:
        try:
            text = answer_extractor(text)
        except ValueError:
            raise _BadRow("bad_answer") from None
    if not text or not text.strip():
        raise _BadRow("bad_answer")
    return text.strip()
