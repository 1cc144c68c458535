import json
import logging
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rl.data.answers import boxed_answer, gsm8k_answer
from rl.data.loaders import LoadResult, load_rows
from rl.data.presets import DATASET_PRESETS


def _write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


GOOD = [
    {"question": "What is 2+2?", "answer": "2+2=4\n#### 4", "topic": "add"},
    {"question": "What is 10*100?", "answer": "10*100=1000\n#### 1,000", "topic": "mul"},
]
BAD = [
    {"question": "no answer column", "topic": "x"},  # missing_field
    {"question": None, "answer": "#### 1"},  # missing_field (null)
    {"question": "   ", "answer": "#### 1"},  # empty_prompt
    {"question": 7, "answer": "#### 1"},  # non_string_prompt
    {"question": {"text": "hi"}, "answer": "#### 1"},  # non_string_prompt
    {"question": "answer has no marker", "answer": "just text"},  # bad_answer (unparsable)
    {"question": "empty answer", "answer": ""},  # bad_answer (empty)
    "{not json",  # malformed_line
    "[1, 2]",  # invalid_record
]
BAD_COUNTS = {
    "missing_field": 2,
    "empty_prompt": 1,
    "non_string_prompt": 2,
    "bad_answer": 2,
    "invalid_record": 1,
    "malformed_line": 1,
}


def test_jsonl_good_and_bad_rows(tmp_path, caplog):
    path = _write_jsonl(tmp_path / "mix.jsonl", [GOOD[0], *BAD, GOOD[1]])
    with caplog.at_level(logging.WARNING, logger="rl.data"):
        result = load_rows(str(path), answer_extractor=gsm8k_answer)
    assert isinstance(result, LoadResult)
    assert result.skipped == BAD_COUNTS
    assert [r.prompt for r in result.rows] == ["What is 2+2?", "What is 10*100?"]
    assert [r.answer for r in result.rows] == ["4", "1000"]
    assert [r.prompt_id for r in result.rows] == ["mix-0", f"mix-{len(BAD) + 1}"]  # index in the file
    assert result.rows[0].columns == {"topic": "add", "answer": "2+2=4\n#### 4"}  # every column but the prompt
    warnings = [r for r in caplog.records if r.name == "rl.data"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert "skipped 9 of 11" in warnings[0].getMessage() and "malformed_line=1" in warnings[0].getMessage()


def test_no_warning_when_all_rows_good(tmp_path, caplog):
    path = _write_jsonl(tmp_path / "good.jsonl", GOOD)
    with caplog.at_level(logging.WARNING, logger="rl.data"):
        result = load_rows(str(path), answer_extractor=gsm8k_answer, id_prefix="g")
    assert result.skipped == {}
    assert [r.prompt_id for r in result.rows] == ["g-0", "g-1"]
    assert not [r for r in caplog.records if r.name == "rl.data"]


def test_json_array_with_template_and_custom_fields(tmp_path):
    records = [
        {"problem": "1+1", "solution": 2, "level": "easy"},
        {"problem": "3/2", "solution": 1.5, "level": "hard"},
        {"problem": "2*3", "solution": 6.0, "level": "easy"},
        {"problem": "flag", "solution": True, "level": "easy"},  # bool is not an answer
        {"problem": "list", "solution": [1, 2], "level": "easy"},
    ]
    path = tmp_path / "set.json"
    path.write_text(json.dumps(records))
    result = load_rows(
        str(path),
        prompt_field="problem",
        answer_field="solution",
        template="[{level}] Compute {prompt}. Answer:",
    )
    assert [r.prompt for r in result.rows] == [
        "[easy] Compute 1+1. Answer:",
        "[hard] Compute 3/2. Answer:",
        "[easy] Compute 2*3. Answer:",
    ]
    assert [r.answer for r in result.rows] == ["2", "1.5", "6"]
    assert result.rows[1].columns == {"level": "hard", "solution": 1.5}
    assert result.skipped == {"bad_answer": 2}


def test_unnamed_fields_read_the_usual_columns_and_say_which(tmp_path, caplog):
    """No prompt field named: TRL's prompt column before a question column; no answer column: the solution."""
    rows = [{"question": "raw", "prompt": [{"role": "user", "content": "1+1="}], "solution": "2"}]
    path = _write_jsonl(tmp_path / "trl.jsonl", rows)
    with caplog.at_level(logging.INFO, logger="rl.data"):
        (row,) = load_rows(str(path)).rows
    assert (row.prompt, row.answer) == ([{"role": "user", "content": "1+1="}], "2")
    assert row.columns == {"question": "raw", "solution": "2"}  # every column but the prompt's, as TRL passes them
    said = [r.getMessage() for r in caplog.records if r.name == "rl.data"]
    assert said == [
        f"dataset {str(path)!r}: prompts from column 'prompt', answers from column 'solution' "
        "(data.prompt_field, data.answer_field name others)"
    ]


def test_named_fields_are_read_as_named(tmp_path, caplog):
    """A named prompt field is that column even where a prompt column exists; a named answer field is not replaced."""
    rows = [{"question": "1+1=", "prompt": "other", "answer": "2", "solution": "3"}]
    path = _write_jsonl(tmp_path / "named.jsonl", rows)
    with caplog.at_level(logging.INFO, logger="rl.data"):
        (row,) = load_rows(str(path), prompt_field="question").rows
    assert (row.prompt, row.answer) == ("1+1=", "2")
    assert not [r for r in caplog.records if r.name == "rl.data"]  # nothing chosen: nothing to say
    missing = _write_jsonl(tmp_path / "missing.jsonl", [{"prompt": "1+1=", "solution": "2"}])
    with pytest.raises(ValueError, match="answer field 'reference'"):
        load_rows(str(missing), answer_field="reference")


def test_json_file_holding_json_lines_and_template_missing_column(tmp_path):
    path = _write_jsonl(tmp_path / "lines.json", [{"question": "a", "answer": "1", "ctx": "c"}, GOOD[0]])
    result = load_rows(str(path), template="{ctx}: {prompt}")
    assert [r.prompt for r in result.rows] == ["c: a"]
    assert result.skipped == {"missing_field": 1}  # second row has no `ctx` column


def test_limit_counts_usable_rows(tmp_path):
    path = _write_jsonl(tmp_path / "l.jsonl", [GOOD[0], BAD[2], GOOD[1], GOOD[0], GOOD[1]])
    result = load_rows(str(path), limit=2, answer_extractor=gsm8k_answer)
    assert [r.prompt_id for r in result.rows] == ["l-0", "l-2"]
    assert result.skipped == {"empty_prompt": 1}
    with pytest.raises(ValueError):
        load_rows(str(path), limit=0)


def test_chat_mode(tmp_path):
    path = _write_jsonl(tmp_path / "c.jsonl", GOOD)
    result = load_rows(
        str(path),
        chat=True,
        system_prompt="Be brief.",
        template="{prompt} Think.",
        answer_extractor=gsm8k_answer,
    )
    assert result.rows[0].prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2? Think."},
    ]
    plain = load_rows(str(path), chat=True, answer_extractor=gsm8k_answer)
    assert plain.rows[1].prompt == [{"role": "user", "content": "What is 10*100?"}]
    with pytest.raises(ValueError, match="chat=True"):
        load_rows(str(path), system_prompt="x")


def _dapo_like_table() -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "data_source": "math",
                "prompt": [{"role": "system", "content": "old"}, {"role": "user", "content": "Solve x+1=3."}],
                "reward_model": {"ground_truth": "2", "style": "rule"},
                "extra_info": {"index": "a"},
            },
            {
                "data_source": "math",
                "prompt": [{"role": "user", "content": "Solve 2x=8."}],
                "reward_model": {"ground_truth": None, "style": "rule"},  # missing_field
                "extra_info": {"index": "b"},
            },
            {
                "data_source": "math",
                "prompt": [{"role": "user", "content": " "}],  # empty_prompt
                "reward_model": {"ground_truth": "1", "style": "rule"},
                "extra_info": {"index": "c"},
            },
            {
                "data_source": "math",
                "prompt": [{"role": "user", "content": "Solve 3x=9."}],
                "reward_model": {"ground_truth": "3", "style": "rule"},
                "extra_info": {"index": "d"},
            },
        ]
    )


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_a_spreadsheet_export_loads_with_its_columns_and_a_row_past_the_header_is_skipped(tmp_path, suffix):
    """A header row, quoted cells holding the delimiter and line breaks, every value a string (as datasets' csv
    loader gives them); a row with more cells than the header counts as malformed, one with fewer gets None."""
    sep = "," if suffix == ".csv" else "\t"
    lines = [
        sep.join(["q", "a", "topic"]),
        sep.join(['"What is 2+3, then?"', "5", "sums"]),
        sep.join(['"Two\nlines"', "7", "lines"]),
        sep.join(["Too many", "1", "x", "extra"]),
        sep.join(["No topic", "9"]),
    ]
    path = tmp_path / f"d{suffix}"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = load_rows(str(path), prompt_field="q", answer_field="a")
    assert [(r.prompt, r.answer) for r in result.rows] == [
        ("What is 2+3, then?", "5"),
        ("Two\nlines", "7"),
        ("No topic", "9"),
    ]
    assert result.rows[0].columns == {"a": "5", "topic": "sums"} and result.rows[2].columns["topic"] is None
    assert result.skipped == {"malformed_line": 1}


def test_parquet_chat_list_prompt_and_dotted_answer(tmp_path):
    path = tmp_path / "dapo.parquet"
    pq.write_table(_dapo_like_table(), path)
    result = load_rows(str(path), prompt_field="prompt", answer_field="reward_model.ground_truth")
    assert [r.answer for r in result.rows] == ["2", "3"]
    assert result.rows[0].prompt == [
        {"role": "system", "content": "old"},
        {"role": "user", "content": "Solve x+1=3."},
    ]
    assert result.rows[0].columns == {
        "data_source": "math",
        "extra_info": {"index": "a"},
        "reward_model": {"ground_truth": "2", "style": "rule"},
    }
    assert result.skipped == {"missing_field": 1, "empty_prompt": 1}

    replaced = load_rows(
        str(path),
        prompt_field="prompt",
        answer_field="reward_model.ground_truth",
        chat=True,
        system_prompt="new",
        template="{prompt}\nAnswer in a box.",
    )
    assert replaced.rows[1].prompt == [
        {"role": "system", "content": "new"},
        {"role": "user", "content": "Solve 3x=9.\nAnswer in a box."},
    ]
    assert all(m["content"] != "old" for m in replaced.rows[0].prompt)


def test_a_replaced_system_message_is_said_once(tmp_path, caplog):
    """data.system_prompt takes the place of a chat-message row's own system message: one warning says how many."""
    path = tmp_path / "dapo.parquet"
    pq.write_table(_dapo_like_table(), path)
    fields = {"prompt_field": "prompt", "answer_field": "reward_model.ground_truth", "chat": True}
    with caplog.at_level(logging.WARNING, logger="rl.data"):
        load_rows(str(path), **fields)  # the rows' own system messages kept: nothing to say
        assert "system_prompt replaced" not in caplog.text
        for _ in range(2):  # training and held-out rows of a file without splits
            load_rows(str(path), **fields, system_prompt="new")
    said = [r.getMessage() for r in caplog.records if "system_prompt replaced" in r.getMessage()]
    assert said == [
        f"dataset {str(path)!r}: data.system_prompt replaced the system message of 1 of 2 chat prompts; set "
        "data.system_prompt=null to keep the rows' own"
    ]


def test_save_to_disk_dataset_dict_selects_split(tmp_path):
    splits = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list([{"question": "t1", "answer": "1"}, {"question": "", "answer": "2"}]),
            "test": datasets.Dataset.from_list([{"question": "e1", "answer": "9"}]),
        }
    )
    folder = tmp_path / "saved"
    splits.save_to_disk(str(folder))
    train = load_rows(str(folder))
    assert [r.prompt for r in train.rows] == ["t1"] and train.skipped == {"empty_prompt": 1}
    assert train.rows[0].prompt_id == "saved-train-0"
    test = load_rows(str(folder), split="test")
    assert [(r.prompt, r.answer) for r in test.rows] == [("e1", "9")]
    with pytest.raises(ValueError, match="validation"):
        load_rows(str(folder), split="validation")


def test_save_to_disk_single_dataset(tmp_path):
    folder = tmp_path / "one"
    datasets.Dataset.from_list([{"q": "x?", "a": "5", "extra": 1}]).save_to_disk(str(folder))
    result = load_rows(str(folder), prompt_field="q", answer_field="a")
    assert [(r.prompt, r.answer, r.columns) for r in result.rows] == [("x?", "5", {"a": "5", "extra": 1})]


def test_folder_of_data_files_picks_split_files(tmp_path):
    folder = tmp_path / "files"
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{"question": "tr", "answer": "1"}]), folder / "data" / "train-0.parquet")
    _write_jsonl(folder / "data" / "test.jsonl", [{"question": "te", "answer": "2"}])
    assert [r.prompt for r in load_rows(str(folder)).rows] == ["tr"]
    assert [r.prompt for r in load_rows(str(folder), split="test").rows] == ["te"]
    with pytest.raises(ValueError, match="no data file for split 'dev'"):
        load_rows(str(folder), split="dev")


def test_missing_sources_raise_naming_them(tmp_path):
    missing = tmp_path / "absent.jsonl"
    with pytest.raises(FileNotFoundError, match="absent.jsonl"):
        load_rows(str(missing))
    with pytest.raises(FileNotFoundError, match="nowhere.parquet"):
        load_rows("nowhere.parquet")
    with pytest.raises(FileNotFoundError, match="no .jsonl"):
        load_rows(str(tmp_path))  # a folder without data files


def test_all_bad_or_empty_raises_naming_source(tmp_path):
    bad = _write_jsonl(tmp_path / "bad.jsonl", BAD)
    with pytest.raises(ValueError, match=r"no usable rows in dataset '.*bad\.jsonl'"):
        load_rows(str(bad), answer_extractor=gsm8k_answer)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty.jsonl.*has no rows"):
        load_rows(str(empty))


def test_extractor_raising_value_error_is_a_bad_row(tmp_path):
    path = _write_jsonl(tmp_path / "n.jsonl", [{"question": "a", "answer": "12"}, {"question": "b", "answer": "x"}])

    def as_int(text: str) -> str:
        return str(int(text))

    result = load_rows(str(path), answer_extractor=as_int)
    assert [r.answer for r in result.rows] == ["12"] and result.skipped == {"bad_answer": 1}


def test_preset_resolves_hub_call_and_fields(monkeypatch):
    calls = []
    rows = [{"question": "q1", "answer": "work\n#### 42"}, {"question": "q2", "answer": "no marker"}]

    def fake_load_dataset(path, name=None, *, split):
        calls.append((path, name, split))
        return datasets.Dataset.from_list(rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    result = load_rows("gsm8k", split="test")
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [(r.prompt_id, r.prompt, r.answer) for r in result.rows] == [("gsm8k-test-0", "q1", "42")]
    assert result.skipped == {"bad_answer": 1}

    rows[:] = [{"problem": "p", "answer": "7", "subject": "alg"}]
    result = load_rows("math500")  # single-split eval set: the preset's split wins
    assert calls[-1] == ("HuggingFaceH4/MATH-500", None, "test")
    assert [(r.prompt, r.answer, r.columns) for r in result.rows] == [("p", "7", {"answer": "7", "subject": "alg"})]


def test_a_hub_datasets_configuration_is_data_subset(monkeypatch, tmp_path):
    """data.subset reaches load_dataset (TRL's dataset_config); a hub dataset that needs one and was given none is
    refused naming its configurations and the key; a local path takes none."""
    from rl.config import DataConfig
    from rl.data.source import dataset_rows

    calls = []

    def fake_load_dataset(path, name=None, *, split):
        calls.append((path, name, split))
        if name is None:
            raise ValueError(
                "Config name is missing.\nPlease pick one among the available configs: ['main', 'socratic']\n"
                "Example of usage:\n\t`load_dataset('openai/gsm8k', 'main')`"
            )
        return datasets.Dataset.from_list([{"question": "q", "answer": "1"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr("rl.inputs.hub.offline_unless_reachable", lambda: False)  # as where the Hub answers
    (row,) = dataset_rows(DataConfig(source="openai/gsm8k", subset="socratic"), "train")
    assert calls == [("openai/gsm8k", "socratic", "train")] and row.prompt == "q"
    with pytest.raises(ValueError) as refused:
        dataset_rows(DataConfig(source="openai/gsm8k"), "train")
    assert str(refused.value) == (
        "Config name is missing. Please pick one among the available configs: ['main', 'socratic'] (set data.subset)"
    )
    local = _write_jsonl(tmp_path / "d.jsonl", GOOD)
    with pytest.raises(ValueError, match="is a local path; a subset"):
        dataset_rows(DataConfig(source=str(local), subset="main"), "train")


def test_presets_cover_known_datasets():
    assert {"gsm8k", "math", "math500", "dapo-math", "aime"} <= set(DATASET_PRESETS)
    dapo = DATASET_PRESETS["dapo-math"]
    assert (dapo.path, dapo.prompt_field, dapo.answer_field) == (
        "BytedTsinghua-SIA/DAPO-Math-17k",
        "prompt",
        "reward_model.ground_truth",
    )
    assert DATASET_PRESETS["gsm8k"].answer_extractor is gsm8k_answer
    assert DATASET_PRESETS["math"].answer_extractor is boxed_answer


def test_gsm8k_answer():
    assert gsm8k_answer("Some work\n#### 42") == "42"
    assert gsm8k_answer("#### 1,234,567 ") == "1234567"
    assert gsm8k_answer("#### -3.5") == "-3.5"
    assert gsm8k_answer("no marker 42") == ""


def test_boxed_answer():
    assert boxed_answer(r"so $\boxed{\frac{1}{2}}$.") == r"\frac{1}{2}"
    assert boxed_answer(r"\boxed{1} then \boxed{ {a}+{b} }") == "{a}+{b}"
    assert boxed_answer(r"\fbox{3}") == "3"
    assert boxed_answer(r"hence $\boxed 5$") == "5"
    assert boxed_answer(r"\boxed{unclosed {x}") == ""
    assert boxed_answer("no box here") == ""
