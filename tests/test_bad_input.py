"""Bad input is answered in one line before any actor starts (exit code 2), or skipped and counted.

Each case runs an ``rl`` command in-process with everything that would start an actor, an engine or a benchmark
replaced by a tripwire, so a case that got past the checks would fail loudly; one case runs the ``rl`` command in a
subprocess to show stderr has no traceback.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl.cli.main import main
from rl.config import load_config
from rl.data.stream import PromptStream
from rl.inputs.preflight import BadInput, check_model_path, preflight, split_rows
from rl.loop import driver
from rl.output.console import run_summary
from rl.rewards.pool import RewardPool

ROWS = [{"question": f"{a}+{b}=", "answer": str(a + b), "topic": "add"} for a in range(10) for b in range(10)]
NON_UTF8_LINE = b'{"question": "1+\xff=", "answer": "1"}\n'  # Latin-1, not UTF-8
# a small run of the tiny model on a data file; the file's rows fit its character vocabulary
BASE = ["train.batch_groups=4", "eval.num_problems=4", "data.prompt_field=question", "data.answer_field=answer"]


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _raw(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _safetensors(tensors: dict, data: bytes) -> bytes:
    """A safetensors file: its 8-byte header length, the JSON header, the tensor bytes."""
    header = json.dumps(tensors).encode()
    return len(header).to_bytes(8, "little") + header + data


ONE_MIB_KV_CACHE = "rollout.kv_cache_bytes=1048576"  # the least it may be
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
SMOLLM2_CONFIG = json.dumps(
    {"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9}
    | {"num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152}
)
GOOD_WEIGHTS = _safetensors({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
CORRUPT_WEIGHTS = {"model.safetensors": b"\xff" * 64}  # its header length reads as 2**64 - 1
NOT_JSON_HEADER = (2).to_bytes(8, "little") + b"[}"


def _model(tmp_path: Path, files: dict[str, bytes | str] | None = None, config: str = '{"model_type": "llama"}') -> str:
    """A model folder under ``tmp_path``: ``config.json`` and ``files`` (by default one good weight file)."""
    out = tmp_path / "model"
    out.mkdir(exist_ok=True)
    (out / "config.json").write_text(config)
    for name, content in (files if files is not None else {"model.safetensors": GOOD_WEIGHTS}).items():
        (out / name).write_bytes(content.encode() if isinstance(content, str) else content)
    return str(out)


def _tokenized_model(tmp_path: Path, config: str) -> str:
    """``_model`` with ``config`` and the tiny model's tokenizer, so that prompts can be counted in tokens."""
    from rl.models import resolve_model

    tiny = Path(resolve_model("builtin:arith-tiny"))
    tokenizer = {name: (tiny / name).read_bytes() for name in TOKENIZER_FILES}
    return _model(tmp_path, {"model.safetensors": GOOD_WEIGHTS, **tokenizer}, config)


def _reward(tmp_path: Path, body: str) -> str:
    """A reward file under ``tmp_path`` holding ``body``; returns the spec of its function ``r``."""
    _file(tmp_path / "my_reward.py", body)
    return f"{tmp_path / 'my_reward.py'}:r"


def _train(capsys, recipe: str | Path, *overrides: str) -> tuple[int, str]:
    """``rl train`` in-process; returns the exit code and stderr, which must be one line without a traceback. Ray is
    as it was (up only where an earlier test of this pytest worker started the session's instance)."""
    import ray

    ray_before = ray.is_initialized()
    code = main(["train", str(recipe), *overrides])
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert ray.is_initialized() == ray_before
    return code, err


def _data_case(tmp_path: Path, rows: list) -> list[str]:
    """The recipe on a question/answer file; its rewards but arith_steps (which needs the arith rows' solutions)."""
    return [*BASE, f"data.source={_jsonl(tmp_path / 'data.jsonl', rows)}", "reward.functions=[{fn: arith_exact}]"]


def _bad_reward(tmp_path: Path, body: str) -> list[str]:
    return [*_data_case(tmp_path, ROWS), f"reward.functions.0.fn={_reward(tmp_path, body)}", "reward.timeout_s=2"]


# (case id, overrides built from tmp_path, the message's expected fragment)
CASES = [
    (
        "fewer_rows_than_batch_groups",
        lambda t: _data_case(t, ROWS[:3]),
        "usable training rows, fewer than train.batch_groups (4); add rows or lower train.batch_groups",
    ),
    ("missing_data_file", lambda t: [*BASE, f"data.source={t / 'nope.jsonl'}"], "does not exist"),
    *[  # the run directory was output_dir itself or its parent: a new run cleared their checkpoints/, tb/, ...
        (
            f"run_name_{label}",
            lambda t, name=name: [*BASE, f"output_dir={t}", f"name={name}"],
            f"invalid config: name: the run directory is a folder below output_dir, such as 'exp1' or "
            f"'exp1/seed0'; got {name!r}",
        )
        for label, name in [("empty", ""), ("dot", "."), ("parent", ".."), ("up_and_over", "../x"), ("absolute", "/x")]
    ],
    (  # Ray retried it for ever, a C++ warning every 40 s (killed after 7 minutes)
        "ray_address_nothing_answers",
        lambda t: [*BASE, "ray.address=127.0.0.2:1"],
        "bad input: ray.address '127.0.0.2:1': nothing answers there (Connection refused); start the cluster first",
    ),
    (  # Ray's ValueError traceback for a port that is no number
        "ray_address_without_port",
        lambda t: [*BASE, "ray.address=127.0.0.2"],
        "ray.address '127.0.0.2': give auto (a cluster started on this machine) or the head's HOST:PORT",
    ),
    ("missing_data_dir", lambda t: [*BASE, "data.source=./no/such/folder"], "does not exist"),
    ("no_usable_rows", lambda t: _data_case(t, [{"question": " ", "answer": "1"}] * 5), "no usable rows"),
    (  # "held-out accuracy" measured on the training rows
        "test_source_is_the_training_file",
        lambda t: [*_data_case(t, ROWS), f"data.test_source={t / 'data.jsonl'}"],
        "all 100 of its rows are training prompts, so held-out accuracy would be measured on training rows",
    ),
    (
        "wrong_prompt_field",
        lambda t: [*_data_case(t, ROWS), "data.prompt_field=problem"],
        "skipped {'missing_field': 100}; prompt field 'problem', answer field 'answer', the first row's columns "
        "['answer', 'question', 'topic']",
    ),
    ("unsupported_file_type", lambda t: [*BASE, f"data.source={_file(t / 'd.xlsx', 'a,b')}"], "unsupported file"),
    (
        "non_utf8_data",
        lambda t: [*BASE, "data.source=" + str(_raw(t / "d.jsonl", NON_UTF8_LINE))],
        "not UTF-8 text",
    ),
    ("missing_model_dir", lambda t: ["model.path=./no_model_here"], "model.path './no_model_here' does not exist"),
    ("model_dir_without_config", lambda t: [f"model.path={t}"], "has no config.json"),
    ("unknown_builtin_model", lambda t: ["model.path=builtin:nope"], "unknown builtin model"),
    ("list_index_out_of_range", lambda t: ["reward.functions.3.fn=format"], "is not an item of a list of 2"),
    ("max_tokens_over_model_len", lambda t: ["rollout.max_tokens=96"], "leaves no room for a prompt"),
    ("empty_stop_string", lambda t: ['rollout.stop=[";", ""]'], "an empty stop string would end every sample at once"),
    ("cpu_bind_not_a_core_list", lambda t: ['rollout.cpu_threads_bind=["0-x"]'], "'0-x' is not a list of CPU cores"),
    ("cpu_bind_core_not_here", lambda t: ['rollout.cpu_threads_bind=["4096"]'], "names core(s) [4096], which this"),
    (
        "no_prompt_fits",
        lambda t: [*_data_case(t, ROWS), "rollout.max_model_len=43"],
        "no training prompt fits: the shortest has 4 tokens",
    ),
    ("missing_reward_file", lambda t: ["reward.functions.0.fn=./absent.py:r"], "does not exist"),
    ("missing_reward_function", lambda t: ["reward.functions.0.fn=rl.rewards.math:nope"], "has no attribute 'nope'"),
    ("unknown_reward_module", lambda t: ["reward.functions.0.fn=no_such_pkg.mod:r"], "cannot import module"),
    (
        "reward_factory_refuses_its_arguments",
        lambda t: ["reward.functions.0.fn=trl.rewards:get_soft_overlong_punishment(size=9)"],
        "the call failed: TypeError: get_soft_overlong_punishment() got an unexpected keyword argument 'size'",
    ),
    (
        "reward_wrong_arguments",
        lambda t: _bad_reward(t, "def r(completions, solution):\n    return [1.0] * len(completions)\n"),
        "unexpected keyword argument 'prompts' (a reward gets the keyword arguments prompts, completions, answer",
    ),
    (
        "reward_returns_strings",
        lambda t: _bad_reward(t, "def r(completions, **kw):\n    return ['1.0'] * len(completions)\n"),
        "on row data-0: a reward function must return numbers or None, got str '1.0'",
    ),
    (
        "reward_returns_a_dict",
        lambda t: _bad_reward(t, "def r(completions, **kw):\n    return {'r': 1.0}\n"),
        "on row data-0: a reward function must return a list of numbers, got dict",
    ),
    (
        "reward_wrong_length",  # one value whatever it is given: found at the first step before (groups of 8)
        lambda t: _bad_reward(t, "def r(completions, **kw):\n    return [1.0]\n"),
        "returned 1 value(s) for 2 completions; return one value per completion",
    ),
    (
        "reward_raises",
        lambda t: _bad_reward(t, "def r(completions, **kw):\n    raise KeyError('gold')\n"),
        "KeyError: 'gold'",
    ),
    (
        "reward_hangs",
        lambda t: _bad_reward(t, "import time\ndef r(completions, **kw):\n    time.sleep(30)\n"),
        "no result within reward.timeout_s (2 s)",
    ),
    ("reward_import_fails", lambda t: _bad_reward(t, "import not_a_module\n"), "importing"),
    ("chat_without_template", lambda t: ["data.chat=true"], "has no chat template, but data.chat is set"),
    (
        "chat_rows_without_template",
        lambda t: _data_case(
            t, [{"question": [{"role": "user", "content": f"{n}+1="}], "answer": str(n + 1)} for n in range(8)]
        ),
        "but the data's prompts are chat messages; use a model with a chat template",
    ),
    (
        "reward_calls_sys_exit",
        lambda t: _bad_reward(t, "import sys\ndef r(completions, **kw):\n    sys.exit(3)\n"),
        "it exited (sys.exit(3)); a reward returns a list of floats, it does not exit",
    ),
    (
        "reward_calls_os_exit",
        lambda t: _bad_reward(t, "import os\ndef r(completions, **kw):\n    os._exit(3)\n"),
        "it exited (os._exit(3))",
    ),
    ("reward_exits_on_import", lambda t: _bad_reward(t, "import sys\nsys.exit(1)\n"), "failed: SystemExit: 1"),
    (
        "reward_needs_a_column_the_data_lacks",  # it said only "TypeError: r() missing 1 required positional argument"
        lambda t: _bad_reward(t, "def r(completions, solution, **kw):\n    return [0.0] * len(completions)\n"),
        "it needs 'solution', which the data has no column for; give data with it or drop the reward",
    ),
    (
        "reward_whose_own_helper_misses_an_argument",  # its TypeError, not a column the data lacks
        lambda t: _bad_reward(
            t, "def f(x):\n    return x\ndef r(completions, **kw):\n    return [f()] * len(completions)\n"
        ),
        "TypeError: f() missing 1 required positional argument: 'x' (a reward gets the keyword arguments",
    ),
    (
        "corrupt_safetensors",
        lambda t: [f"model.path={_model(t, CORRUPT_WEIGHTS)}"],
        "model.safetensors is not a readable safetensors file (header length 18446744073709551615 exceeds the file's "
        "64 bytes)",
    ),
    (
        "truncated_safetensors",
        lambda t: [f"model.path={_model(t, {'model.safetensors': GOOD_WEIGHTS[:-2]})}"],
        "truncated: its tensors end at byte",
    ),
    (
        "safetensors_header_not_json",
        lambda t: [f"model.path={_model(t, {'model.safetensors': NOT_JSON_HEADER})}"],
        "its header is not JSON",
    ),
    ("model_without_weights", lambda t: [f"model.path={_model(t, {})}"], "has a config.json but no weights"),
    (
        "missing_weight_shard",
        lambda t: [
            "model.path="
            + _model(
                t,
                {
                    "model.safetensors.index.json": json.dumps(
                        {
                            "weight_map": {
                                "a": "model-00001-of-00002.safetensors",
                                "b": "model-00002-of-00002.safetensors",
                            }
                        }
                    ),
                    "model-00001-of-00002.safetensors": GOOD_WEIGHTS,
                },
            )
        ],
        "lists 2 weight files, 1 missing (model-00002-of-00002.safetensors)",
    ),
    ("config_not_json", lambda t: [f"model.path={_model(t, config='{oops')}"], "config.json is not readable JSON"),
    ("empty_model_path", lambda t: ["model.path="], "model.path is empty; give a local model directory"),
    (
        "output_dir_cannot_be_created",
        lambda t: ["output_dir=/proc/tailor_runs"],
        "output_dir '/proc/tailor_runs' cannot be created or written",
    ),
    (
        "output_dir_under_a_file",
        lambda t: [f"output_dir={_file(t / 'a_file', '')}/runs"],
        "cannot be created or written (Not a directory",
    ),
    (
        "gpu_budget_too_small",
        lambda t: ["memory.gpu_gib=1"],
        "bad input: memory plan: trainer",  # then what it needs, "short by", and what to change
    ),
    (
        "column_named_like_a_reward_keyword",
        lambda t: _data_case(t, [{"question": f"{n}+1=", "answer": str(n + 1), "completions": "x"} for n in range(8)]),
        "column 'completions' has the name of a keyword every reward gets (prompts, completions, trainer_state, "
        "log_extra, log_metric); rename it in the data",
    ),
    (
        "subset_of_a_local_file",
        lambda t: [*_data_case(t, ROWS), "data.subset=main"],
        "data.jsonl' is a local path; a subset (a hub dataset's configuration) names none of it",
    ),
    (
        "unusual_columns",
        lambda t: _data_case(t, [{"text": f"{n}+1=", "label": str(n + 1)} for n in range(8)]),
        "the first row's columns ['label', 'text']; set data.prompt_field to the column that holds it and "
        "data.answer_field to the column that holds it (null: the data has none)",
    ),
    ("no_held_out_rows", lambda t: ["data.arith.num_test=0"], "no held-out rows, and a run measures held-out"),
    (
        "response_cap_past_the_model",
        lambda t: ["rollout.max_model_len=null", "rollout.max_tokens=256"],
        "rollout.max_tokens (256) leaves no room for a prompt within the model's 256 positions (its config.json); "
        "lower rollout.max_tokens",
    ),
    ("unknown_key", lambda t: ["train.nope=1"], "invalid config: train.nope: not a known key"),
    ("misspelt_key", lambda t: ["train.batchgroups=2"], "did you mean train.batch_groups?"),
    ("trl_name", lambda t: ["train.num_generations=4"], "(TRL's num_generations is shaping.m_keep here;"),
    ("trl_model_argument", lambda t: ["model_name_or_path=gpt2"], "(TRL's model_name_or_path is model.path here;"),
    ("trl_scheduler", lambda t: ["train.lr_scheduler_type=cosine"], "(TRL's lr_scheduler_type is train.lr_schedule"),
    ("model_as_a_name", lambda t: ["model=Qwen/Qwen2.5-0.5B"], "; did you mean model.path=Qwen/Qwen2.5-0.5B?"),
    ("data_as_a_name", lambda t: ["data=gsm8k"], "; did you mean data.source=gsm8k?"),
    ("unknown_section", lambda t: ["nope.x=1"], "invalid config: nope: not a known key"),
    ("not_a_number", lambda t: ["train.lr=abc"], "invalid config: train.lr: Input should be a valid number"),
    ("zero_batch_groups", lambda t: ["train.batch_groups=0"], "train.batch_groups: Input should be greater than"),
    ("negative_engine_seed", lambda t: ["rollout.seed=-1"], "rollout.seed: Input should be greater than or equal to 0"),
    ("not_a_choice", lambda t: ["algorithm.advantage=foo"], "algorithm.advantage: Input should be 'grpo'"),
    ("not_a_list", lambda t: ["reward.functions=5"], "reward.functions: Input should be a valid list (got 5)"),
    ("override_without_value", lambda t: ["train.lr"], "override 'train.lr' must look like key.path=value"),
    ("override_into_a_value", lambda t: ["seed.x=1"], "'seed' is not a section"),
    (
        "override_split_by_the_shell",
        lambda t: ["reward.functions=[{fn:", "my.py:r}]"],
        "override 'reward.functions=[{fn:': the value is not valid YAML (expected the node content, but found",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_before_any_actor(tmp_path, capsys, nothing_starts, overrides, message):
    code, err = _train(capsys, "arith_tiny", *overrides(tmp_path))
    assert code == 2
    assert message in err
    assert len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "a recipe must be a mapping at the top level, not a list"),
        ("a: [1\n", "not valid YAML"),
        (b"name: \xff\xfe\n", "not UTF-8 text"),
        ("train:\n  lr: 1.0e-4\n  lr: 2.0e-4\n", "'lr' is given twice in one mapping (lines 2 and 3); keep one"),
    ],
    ids=["not_a_mapping", "not_yaml", "not_utf8", "key_given_twice"],  # key_given_twice: trained on the last one
)
def test_bad_recipe_file(tmp_path, capsys, nothing_starts, text, message):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes(text if isinstance(text, bytes) else text.encode())
    code, err = _train(capsys, recipe)
    assert code == 2 and message in err and len(err.splitlines()) == 1


def test_missing_recipe(capsys, nothing_starts):
    code, err = _train(capsys, "no_such_recipe")
    assert code == 2 and "recipe 'no_such_recipe' not found" in err


def test_a_folder_named_as_a_recipe_is_not_read_as_one(tmp_path, monkeypatch, capsys, nothing_starts):
    """Where the working directory holds a run's folder (``output_dir=.``, or ``cd runs``), its name still picks the
    bundled recipe; a folder that names none is said to be one."""
    from rl.cli.common import RECIPES_DIR, recipe_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "arith_tiny").mkdir()
    (tmp_path / "my_run").mkdir()
    assert recipe_path("arith_tiny") == RECIPES_DIR / "arith_tiny.yaml"
    code, err = _train(capsys, "my_run")
    assert code == 2 and "recipe 'my_run' not found (looked at my_run (a folder) and " in err, err


def test_a_refused_resume_says_so(tmp_path, capsys, nothing_starts):
    code = main(["train", "--resume", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert (
        code == 2
        and err == f"cannot resume: {tmp_path}: not a run directory (no config.yaml); give the directory of a run"
    )


def test_list_item_override_reaches_the_list():
    cfg = load_config(None, ["reward.functions=[{fn: format}, {fn: arith_exact}]", "reward.functions.1.weight=0.5"])
    assert [(f.fn, f.weight) for f in cfg.reward.functions] == [("format", 1.0), ("arith_exact", 0.5)]
    cfg = load_config(None, ["reward.functions.0.fn=math_accuracy"])
    assert cfg.reward.functions[0].fn == "math_accuracy"


def test_hub_names_pass_without_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert check_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert check_model_path("gpt2") == "gpt2"
    with pytest.raises(BadInput, match="does not exist"):
        check_model_path("~/models/none/here")


@pytest.mark.parametrize("command", ["train", "eval"])
def test_an_unreachable_hub_reads_the_cache_at_once(monkeypatch, capsys, nothing_starts, command):
    """Offline, a hub name fails in one line within seconds (not a minute of retries and a traceback), for
    ``rl train`` and ``rl eval`` alike, and the processes the command starts inherit the Hub's offline mode."""
    import datasets
    from huggingface_hub import constants

    from rl.inputs import hub

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)  # switched too: restored after the test
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    args = {
        "train": ["train", "recipes/arith_tiny.yaml", "model.path=nobody/no-such-model"],
        "eval": ["eval", "nobody/no-such-model", "--dataset", "arith"],
    }[command]
    where = {"train": "model.path", "eval": "model"}[command]
    started = time.monotonic()
    code = main(args)
    assert code == 2 and capsys.readouterr().err.strip() == (
        f"bad input: {where} 'nobody/no-such-model' is not in the local Hugging Face cache, and the Hub "
        "(http://127.0.0.1:9) cannot be reached or HF_HUB_OFFLINE is set; give a local path, or fetch it where the "
        "Hub is reachable"
    )
    assert time.monotonic() - started < 15
    assert hub.offline() and os.environ["HF_HUB_OFFLINE"] == "1"


def test_a_prompt_only_dataset_trains_with_rewards_that_need_no_answer(tmp_path):
    """TRL takes datasets of prompts alone (for length or format rewards, reward models): data.answer_field=null."""
    rows = [{"prompt": f"{n}+{n}=", "topic": "sums"} for n in range(40)]
    overrides = [*_data_case(tmp_path, rows), "data.prompt_field=prompt", "data.answer_field=null"]
    length = _reward(tmp_path, "def r(completions, **kw):\n    return [1.0] * len(completions)\n")
    overrides.append(f"reward.functions=[{length}]")
    inputs = preflight(load_config("recipes/arith_tiny.yaml", overrides))
    assert inputs.train_rows and inputs.test_rows
    assert all(row.answer == "" and row.columns == {"topic": "sums"} for row in inputs.train_rows + inputs.test_rows)


def test_bad_rows_are_counted_skips(tmp_path, caplog):
    """Malformed lines, empty prompts or answers and over-long prompts are skipped, each reason counted in a log."""
    rows = [*ROWS[:20], "{broken", "also not json", {"question": "", "answer": "1"}, {"question": "1+1=", "answer": ""}]
    rows.append({"question": "1+" * 40 + "1=", "answer": "41"})  # 82 tokens: over 96 - 40
    cfg = load_config("recipes/arith_tiny.yaml", _data_case(tmp_path, rows))
    with caplog.at_level(logging.WARNING):
        inputs = preflight(cfg)
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert "malformed_line=2" in log and "empty_prompt=1" in log and "bad_answer=1" in log
    assert sum("malformed_line" in r.getMessage() for r in caplog.records) == 1  # one file read twice: one warning
    assert "skipped 1 of " in log and "prompt longer than 56 tokens" in log
    assert len(inputs.train_rows) + len(inputs.test_rows) == 20


def test_a_context_left_unset_is_the_longest_prompt_and_the_response_cap(tmp_path, capsys, caplog):
    """rollout.max_model_len unset: the longest prompt + rollout.max_tokens, rounded up to 16 tokens, kept on the
    config the run goes on with; within the model's 256 positions, where the longer prompts are skipped."""
    rows = [*ROWS[:20], {"question": "1+" * 40 + "1=", "answer": "41"}]  # 82 tokens, the rest 5 or 6
    longest = 82
    cfg = load_config("recipes/arith_tiny.yaml", [*_data_case(tmp_path, rows), "rollout.max_model_len=null"])
    inputs = preflight(cfg)
    assert cfg.rollout.max_model_len == 16 * -(-(longest + cfg.rollout.max_tokens) // 16)
    assert len(inputs.train_rows) + len(inputs.test_rows) == 21  # none skipped
    said = f"data: 19 training rows, 2 held-out rows; context {cfg.rollout.max_model_len} tokens (the longest prompt, "
    assert f"{said}{longest}, + rollout.max_tokens)\n" in capsys.readouterr().out

    capped = load_config("recipes/arith_tiny.yaml", [*_data_case(tmp_path, rows), "rollout.max_model_len=null"])
    capped.rollout.max_tokens = 200
    with caplog.at_level(logging.WARNING):
        inputs = preflight(capped)
    assert capped.rollout.max_model_len == 256
    assert len(inputs.train_rows) + len(inputs.test_rows) == 20
    assert "skipped 1 of " in caplog.text and "prompt longer than 56 tokens" in caplog.text
    assert "context 256 tokens (the longest prompt, 82, + rollout.max_tokens, within the model's 256 positions)" in (
        capsys.readouterr().out
    )


def test_one_file_holds_out_a_fixed_part(tmp_path, capsys):
    cfg = load_config("recipes/arith_tiny.yaml", [*_data_case(tmp_path, ROWS), "data.test_fraction=0.2"])
    train, test = split_rows(cfg.data)
    assert "holding out" in capsys.readouterr().out
    assert not {r.prompt for r in train} & {r.prompt for r in test}
    assert len(train) + len(test) == len(ROWS) and 10 <= len(test) <= 30
    again = split_rows(cfg.data.model_copy(update={"test_fraction": 0.2}))
    assert [r.prompt_id for r in again[1]] == [r.prompt_id for r in test]  # deterministic
    from rl.evaluation.offline import same_source, split_of

    data_file = Path(cfg.data.source)  # rl eval holds out a run's rows only where it is given the run's own data
    assert same_source(cfg.data.source, os.path.relpath(data_file)) and same_source("arith", "arith")
    assert not same_source(cfg.data.source, str(data_file.with_name("other.jsonl")))

    held = split_of(cfg.data, "test")  # rl eval's test split of the file: the rows rl train held out, no others
    assert [r.prompt_id for r in held] == [r.prompt_id for r in test]
    assert [r.prompt_id for r in split_of(cfg.data, "train")] == [r.prompt_id for r in train]
    limited = cfg.data.model_copy(update={"limit": 3})
    assert [r.prompt_id for r in split_of(limited, "test")] == [r.prompt_id for r in test[:3]]


def test_test_source_and_the_warning_for_no_hold_out(tmp_path, caplog):
    held = _jsonl(tmp_path / "held.jsonl", ROWS[:5])
    cfg = load_config("recipes/arith_tiny.yaml", [*_data_case(tmp_path, ROWS[5:]), f"data.test_source={held}"])
    train, test = split_rows(cfg.data)
    assert len(train) == len(ROWS) - 5 and [r.prompt for r in test] == [r["question"] for r in ROWS[:5]]
    with caplog.at_level(logging.WARNING):
        train, test = split_rows(cfg.data.model_copy(update={"test_source": None, "test_fraction": 0.0}))
    assert train == test and "evaluating on training rows" in caplog.text


def test_prompt_stream_refuses_too_few_rows():
    with pytest.raises(ValueError, match="3 training rows cannot fill a batch of 4"):
        PromptStream([object()] * 3, 4, seed=0)


def test_subprocess_exit_code_and_no_traceback(tmp_path):
    data = _jsonl(tmp_path / "few.jsonl", ROWS[:3])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "rl.cli", "train", "arith_tiny", *BASE, f"data.source={data}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "bad input: data.source" in done.stderr and "fewer than train.batch_groups (4)" in done.stderr


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.source=/no/such/rows.jsonl", "bad input: data.source: dataset source '/no/such/rows.jsonl' does not"),
        ("reward.functions.0.fn=no_such_file.py:score", "bad input: reward.functions: reward spec 'no_such_file.py"),
    ],
)
def test_a_mistyped_path_is_reported_before_torch_or_transformers_load(tmp_path, override, message):
    """The checks that need neither the tokenizer nor torch come first: a mistyped data or reward path is one line
    in about a second, not after the seconds transformers and torch take to import."""
    script = (
        "import sys\nfrom rl.cli.main import main\ncode = main(sys.argv[1:])\n"
        "print('heavy:', sorted(m for m in ('torch', 'transformers') if m in sys.modules))\nsys.exit(code)"
    )
    argv = ["train", "arith_tiny", f"output_dir={tmp_path}", override]
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]
    assert "heavy: []" in done.stdout, done.stdout


@pytest.fixture
def nothing_starts(monkeypatch):
    """Fail the test if a command would start an actor, an engine or a benchmark, or route the console's output."""
    import ray

    import rl.bench.decode_profile
    import rl.bench.dp_balance
    import rl.bench.peer
    import rl.bench.rollout
    import rl.bench.soak
    import rl.bench.train
    import rl.cli.bench
    import rl.cli.bench_decode
    import rl.cli.main
    import rl.evaluation.offline

    def tripwire(*_args, **_kwargs):
        raise AssertionError("bad input got past the checks: something would start")

    async def async_tripwire(*_args, **_kwargs):
        tripwire()

    monkeypatch.setattr(driver.Driver, "run", async_tripwire)
    for module, name in [
        (ray, "init"),
        (rl.cli.main, "route_output"),
        (rl.cli.bench, "route_output"),
        (rl.cli.bench_decode, "route_output"),
        (rl.evaluation.offline, "run_eval"),
        (rl.bench.rollout, "run_rollout_bench"),
        (rl.bench.train, "run_train_bench"),
        (rl.bench.peer, "run_peer_bench"),
        (rl.bench.decode_profile, "profile_decode"),
        (rl.bench.dp_balance, "run_dp_balance_bench"),
        (rl.bench.soak, "run_soak"),
    ]:
        monkeypatch.setattr(module, name, tripwire)


def _run(argv: list[str]) -> int:
    """``rl.cli.main``; argparse's own errors exit (code 2) with its usage."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _metrics(tmp_path: Path, lines: list[str]) -> str:
    run = tmp_path / "run"
    run.mkdir()
    _file(run / "metrics.jsonl", "".join(f"{line}\n" for line in lines))
    return str(run)


USAGE = 1  # argparse's errors too: one line that points at -h
# (case id, argv built from tmp_path, exit code, the message's expected fragment, most stderr lines)
COMMANDS = [
    ("train_no_recipe", lambda t: ["train"], 2, "give a recipe (e.g. rl train arith_tiny) or --resume RUN_DIR", 1),
    ("train_two_bad_values", lambda t: ["train", "arith_tiny", "train.lr=abc", "train.batch_groups=0"], 2, "", 2),
    ("train_resume_missing", lambda t: ["train", "--resume", str(t / "no_run")], 2, "no_run", 1),
    (
        "train_resume_with_recipe",
        lambda t: ["train", "arith_tiny", "--resume", str(t)],
        2,
        "--resume continues the run's saved config; 'arith_tiny' is not key=value",
        1,
    ),
    ("train_unknown_option", lambda t: ["train", "arith_tiny", "--lr", "1"], 2, "unrecognized arguments", USAGE),
    (
        "train_context_past_the_model",  # vLLM refused it in the engine: 146 lines after Ray and the engine started
        lambda t: ["train", "arith_tiny", "rollout.max_model_len=300", f"output_dir={t}"],
        2,
        "rollout.max_model_len (300) is more than the model's 256 positions (its config.json); set",
        1,
    ),
    (
        "eval_missing_model",
        lambda t: ["eval", "/path/that/does/not/exist", "--dataset", "arith"],
        2,
        "bad input: model '/path/that/does/not/exist' does not exist",
        1,
    ),
    (
        "eval_corrupt_model",
        lambda t: ["eval", _model(t, CORRUPT_WEIGHTS), "--dataset", "arith"],
        2,
        "model.safetensors is not a readable safetensors file",
        1,
    ),
    ("eval_empty_dir", lambda t: ["eval", str(t), "--dataset", "arith"], 2, "is neither an HF model directory", 1),
    (
        "eval_kv_cache_too_small",  # vLLM refused it in the engine: a 63-line traceback
        lambda t: ["eval", _tokenized_model(t, SMOLLM2_CONFIG), "--dataset", "arith", "--set", ONE_MIB_KV_CACHE],
        2,
        "bad input: rollout.kv_cache_bytes (1048576) cannot hold one sequence of rollout.max_model_len (",  # the
        1,  # longest prompt and the response cap: the engine's context (1 MiB is 22 tokens of SmolLM2's cache)
    ),
    ("eval_without_dataset", lambda t: ["eval", _model(t)], 2, "rl eval: give --dataset (arith, a preset", 1),
    (
        "eval_mistyped_run_dir",  # not "give --dataset", which a run directory does not need
        lambda t: ["eval", str(t / "runs" / "arith_tinny")],
        2,
        "bad input: model '",
        1,
    ),
    ("eval_unknown_builtin", lambda t: ["eval", "builtin:nope", "--dataset", "arith"], 2, "unknown builtin model", 1),
    (
        "eval_missing_dataset",
        lambda t: ["eval", _model(t), "--dataset", str(t / "none.jsonl"), "--recipe", "arith_tiny"],
        2,
        "bad input: --dataset: dataset source",
        1,
    ),
    (
        "eval_missing_recipe",
        lambda t: ["eval", _model(t), "--dataset", "arith", "--recipe", "nope"],
        2,
        "invalid config: recipe 'nope' not found",
        1,
    ),
    (
        "eval_bad_override",
        lambda t: ["eval", _model(t), "--dataset", "arith", "--set", "train.lr=abc"],
        2,
        "invalid config: train.lr: Input should be a valid number",
        1,
    ),
    (
        "eval_missing_reward",
        lambda t: ["eval", _model(t), "--dataset", "arith", "--set", "reward.functions.0.fn=./absent.py:r"],
        2,
        "bad input: reward.functions: reward spec './absent.py:r'",
        1,
    ),
    (
        "eval_out_unwritable",
        lambda t: ["eval", _model(t), "--dataset", "arith", "--out", "/proc/tailor/eval.json"],
        2,
        "--out '/proc/tailor/eval.json': its folder cannot be created or written",
        1,
    ),
    (
        "eval_zero_samples",
        lambda t: ["eval", "builtin:arith-tiny", "--dataset", "arith", "--samples", "0"],
        2,
        "",
        USAGE,
    ),
    ("eval_no_dataset", lambda t: ["eval", "builtin:arith-tiny"], 2, "--dataset", USAGE),
    (  # vLLM's VLLMValidationError traceback once the engine was up
        "eval_negative_temperature",
        lambda t: ["eval", "builtin:arith-tiny", "--dataset", "arith", "--temperature", "-1"],
        2,
        "argument --temperature: must be 0 (greedy) or more, got -1",
        USAGE,
    ),
    (  # sampled the greedy response 4 times and printed pass@2 and pass@4 equal to pass@1
        "eval_samples_at_greedy",
        lambda t: ["eval", "builtin:arith-tiny", "--dataset", "arith", "--samples", "4", "--temperature", "0"],
        2,
        "bad input: --samples 4 at --temperature 0 (greedy) is one response 4 times, and its pass@k is pass@1",
        1,
    ),
    (  # evaluated the training rows
        "eval_arith_unknown_split",
        lambda t: ["eval", "builtin:arith-tiny", "--dataset", "arith", "--split", "validation"],
        2,
        "bad input: --dataset 'arith' (split 'validation'): arith problems come in two splits, 'train' and 'test'",
        1,
    ),
    (  # the reward raised on every sample, scored 0, after the engine started
        "eval_reward_column_the_file_lacks",
        lambda t: ["eval", "builtin:arith-tiny", "--dataset", str(_jsonl(t / "d.jsonl", ROWS)), "--recipe=arith_tiny"],
        2,
        "bad input: reward 'arith_steps' on row ",
        1,
    ),
    (
        "eval_response_past_the_model",  # vLLM refused the engine's max_model_len: a 52-line traceback
        lambda t: ["eval", "builtin:arith-tiny", "--dataset", "arith", "--max-tokens", "100000"],
        2,
        "bad input: --max-tokens (100000) and the longest prompt (",
        1,
    ),
    (
        "eval_recipe_response_past_the_model",
        lambda t: (
            ["eval", "builtin:arith-tiny", "--dataset", "arith", "--recipe", "math_qwen2.5-1.5b"]
            + ["--set", "data.chat=false", "--set", "data.system_prompt=null"]
        ),
        2,
        "the recipe's rollout.max_tokens (2048) and the longest prompt (",
        1,
    ),
    (
        "eval_chat_recipe_model_without_template",  # a traceback from apply_chat_template before
        lambda t: ["eval", "builtin:arith-tiny", "--dataset", "arith", "--recipe", "math_qwen2.5-1.5b"],
        2,
        "bad input: model 'builtin:arith-tiny' has no chat template, but data.chat is set; set data.chat=false",
        1,
    ),
    (
        "rollout_zero_prompts",
        lambda t: ["bench", "rollout", "--prompts", "0"],
        2,
        "invalid benchmark options: --prompts: Input should be greater than or equal to 1 (got 0)",
        1,
    ),
    ("rollout_m_keep_one", lambda t: ["bench", "rollout", "--m-keep", "1"], 2, "--m-keep: Input should be", 1),
    ("rollout_zero_temperature", lambda t: ["bench", "rollout", "--temperature", "0"], 2, "--temperature: Input", 1),
    ("rollout_unknown_mode", lambda t: ["bench", "rollout", "--modes", "nope"], 2, "--modes: mode 'nope'", 1),
    ("rollout_negative_seed", lambda t: ["bench", "rollout", "--seed", "-1"], 2, "--seed: Input should be greater", 1),
    ("peer_negative_seed", lambda t: ["bench", "peer", "arith_tiny", "--seeds", "-1"], 2, "rollout.seed: Input", 1),
    (
        "rollout_mode_knob_not_a_number",
        lambda t: ["bench", "rollout", "--modes", "darts+sart@long_wait=abc"],
        2,
        "mode 'darts+sart@long_wait=abc': long_wait: Input should be a valid number",
        1,
    ),
    (
        "rollout_unknown_knob",
        lambda t: ["bench", "rollout", "--shaping", "nope=1"],
        2,
        "invalid benchmark options: shaping.nope: not a known key",
        1,
    ),
    ("rollout_set_without_recipe", lambda t: ["bench", "rollout", "--set", "seed=1"], 2, "needs --recipe", 1),
    ("rollout_missing_recipe", lambda t: ["bench", "rollout", "--recipe", "nope"], 2, "recipe 'nope' not found", 1),
    (
        "rollout_missing_model",
        lambda t: ["bench", "rollout", "--model", "/no/such/model"],
        2,
        "bad input: --model '/no/such/model' does not exist",
        1,
    ),
    (
        "rollout_corrupt_model",
        lambda t: ["bench", "rollout", "--model", _model(t, {"model.safetensors": b"junk"})],
        2,
        "model.safetensors is not a readable safetensors file (4 bytes, too short for a header)",
        1,
    ),
    (
        "rollout_missing_profile",
        lambda t: ["bench", "rollout", "--cost-model", "no_such_profile"],
        2,
        "decode profile 'no_such_profile' not found",
        1,
    ),
    ("rollout_missing_reward", lambda t: ["bench", "rollout", "--reward", "no_such_reward"], 2, "reward spec", 1),
    (
        "rollout_out_unwritable",
        lambda t: ["bench", "rollout", "--out", "/proc/tailor_bench"],
        2,
        "bad input: --out '/proc/tailor_bench' cannot be created or written",
        1,
    ),
    (
        "rollout_cpu_bind_backwards",
        lambda t: ["bench", "rollout", "--cpu-bind", "1-0"],
        2,
        "range 1-0 runs backwards",
        1,
    ),
    (
        "eval_cpu_bind_core_not_here",
        lambda t: ["eval", "builtin:arith-tiny", "--dataset", "arith", "--cpu-bind", "4096"],
        2,
        "bad input: --cpu-bind: '4096' names core(s) [4096]",
        1,
    ),
    ("rollout_unknown_dataset", lambda t: ["bench", "rollout", "--dataset", "nope"], 2, "invalid choice", USAGE),
    (
        "bench_train_missing_model",
        lambda t: ["bench", "train", "arith_tiny", "model.path=/no/such/model"],
        2,
        "bad input: model.path '/no/such/model'",
        1,
    ),
    (
        "bench_train_missing_data",
        lambda t: ["bench", "train", "arith_tiny", "data.source=/no/such.jsonl"],
        2,
        "bad input: data.source",
        1,
    ),
    (
        "cluster_of_zero_cpu_nodes",  # was started: nodes no actor could ever be placed on
        lambda t: ["cluster", "up", "--nodes", "2", "--cpus", "0", "--dir", str(t / "cluster")],
        2,
        "argument --cpus: must be a positive integer, got 0",
        USAGE,
    ),
    (
        "bench_train_zero_steps",  # was the recipe's 200 steps, silently
        lambda t: ["bench", "train", "arith_tiny", "--steps", "0"],
        2,
        "argument --steps: must be a positive integer, got 0",
        USAGE,
    ),
    (
        "bench_train_bad_value",
        lambda t: ["bench", "train", "arith_tiny", "train.lr=abc"],
        2,
        "invalid config: train.lr: Input should be a valid number",
        1,
    ),
    (
        "bench_train_bad_variant",
        lambda t: ["bench", "train", "arith_tiny", "--variant", "fast"],
        2,
        "variant 'fast' must look like NAME:key.path=value",
        1,
    ),
    (
        "bench_train_variant_unknown_key",
        lambda t: ["bench", "train", "arith_tiny", "--variant", "x:train.nope=1"],
        2,
        "invalid config: train.nope: not a known key",
        1,
    ),
    (
        "bench_train_out_unwritable",
        lambda t: ["bench", "train", "arith_tiny", "--out", "/proc/tailor_bench"],
        2,
        "bad input: --out '/proc/tailor_bench' cannot be created or written",
        1,
    ),
    ("peer_missing_recipe", lambda t: ["bench", "peer", "nope"], 2, "recipe 'nope' not found", 1),
    (
        "peer_seeds_not_integers",
        lambda t: ["bench", "peer", "arith_tiny", "--seeds", "a,b"],
        2,
        "--seeds 'a,b': give comma-separated integers",
        1,
    ),
    (
        "simulate_missing_result",
        lambda t: ["bench", "simulate", str(t / "none"), "--profile", "x"],
        2,
        "cannot simulate",
        1,
    ),
    (
        "simulate_not_json",
        lambda t: ["bench", "simulate", _file(t / "r.json", "{oops"), "--profile", "linear:0.001,0.0001"],
        2,
        "cannot simulate",
        1,
    ),
    (
        "profile_decode_missing_model",
        lambda t: ["bench", "profile-decode", "--model", "/no/such/model"],
        2,
        "bad input: --model '/no/such/model' does not exist",
        1,
    ),
    (
        "profile_decode_corrupt_model",
        lambda t: ["bench", "profile-decode", "--model", _model(t, CORRUPT_WEIGHTS)],
        2,
        "model.safetensors is not a readable safetensors file",
        1,
    ),
    (
        "profile_decode_bad_batch_sizes",
        lambda t: ["bench", "profile-decode", "--batch-sizes", "4,2"],
        2,
        "invalid profile options: batch sizes must be increasing",
        1,
    ),
    (
        "profile_decode_batch_sizes_not_integers",
        lambda t: ["bench", "profile-decode", "--batch-sizes", "one"],
        2,
        "--batch-sizes 'one': give comma-separated integers",
        1,
    ),
    (
        "profile_decode_one_step",
        lambda t: ["bench", "profile-decode", "--steps", "1"],
        2,
        "steps must be at least 2",
        1,
    ),
    (
        "cost_model_missing_result",
        lambda t: ["bench", "cost-model", str(t / "none"), "--profile", "x"],
        2,
        "no benchmark result at",
        1,
    ),
    (
        "dp_balance_fewer_groups_than_ranks",
        lambda t: ["bench", "dp-balance", "arith_tiny", "--groups", "1", "--ranks", "2"],
        2,
        "--groups must be at least --ranks (2)",
        1,
    ),
    (
        "dp_balance_seeds_not_integers",
        lambda t: ["bench", "dp-balance", "arith_tiny", "--seeds", "x"],
        2,
        "--seeds 'x': give comma-separated integers",
        1,
    ),
    (
        "soak_too_few_steps",
        lambda t: ["bench", "soak", "arith_tiny", "--steps", "86"],
        2,
        "--steps must be at least 90",
        1,
    ),
    (
        "soak_bad_override",  # refused before the soak's first `rl train` process starts
        lambda t: ["bench", "soak", "arith_tiny", "train.lr=abc", "--steps", "90", "--out", str(t / "soak")],
        2,
        "invalid config: train.lr: Input should be a valid number",
        1,
    ),
    ("report_missing_run", lambda t: ["report", str(t / "none")], 2, "cannot report: no metrics file at", 1),
    ("report_no_train_records", lambda t: ["report", _metrics(t, ["{oops", "{}"])], 2, "has no train records", 1),
    ("models_unknown_builtin", lambda t: ["models", "build", "nope"], 2, "invalid choice: 'nope'", USAGE),
    ("models_no_subcommand", lambda t: ["models"], 2, "required", USAGE),
    ("unknown_command", lambda t: ["trian", "arith_tiny"], 2, "invalid choice: 'trian'", USAGE),
]


@pytest.mark.parametrize(("argv", "code", "message", "lines"), [c[1:] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
def test_every_command_answers_bad_input_before_anything_starts(
    tmp_path, capsys, nothing_starts, argv, code, message, lines
):
    import ray

    ray_before = ray.is_initialized()  # up only where an earlier test of this pytest worker started it
    assert _run([str(a) for a in argv(tmp_path)]) == code
    out, err = capsys.readouterr()
    err = err.strip()
    assert message in err and "Traceback" not in err + out and "errors.pydantic.dev" not in err
    assert 1 <= len(err.splitlines()) <= lines, err
    assert ray.is_initialized() == ray_before


def test_nccl_weights_on_a_machine_without_gpus_are_refused_before_ray(tmp_path, capsys, nothing_starts):
    """It started Ray and then died with a 20-line traceback; a cluster's GPUs are checked once Ray is up."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: NCCL weight transport is allowed")
    assert _run(["train", "arith_tiny", "weight_sync.transport=nccl", f"output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "bad input: weight_sync.transport=nccl needs GPUs, and this machine has none; use transport=cpu"


def test_ipc_weights_without_one_shared_gpu_are_refused_before_ray(tmp_path, capsys, nothing_starts):
    """CUDA IPC needs the trainer and the engines on this machine's one GPU, from one trainer rank."""
    import torch

    if torch.cuda.device_count() == 1:
        pytest.skip("this machine has one GPU: IPC weight transport is allowed")
    gpus = torch.cuda.device_count()
    assert _run(["train", "arith_tiny", "weight_sync.transport=ipc", f"output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"bad input: weight_sync.transport=ipc needs the trainer and the engines on one GPU, and this machine has "
        f"{gpus}; use transport={'nccl' if gpus else 'cpu'}"
    )


def test_ipc_weights_on_a_cluster_are_refused_before_ray(tmp_path, capsys, nothing_starts):
    argv = ["train", "arith_tiny", "weight_sync.transport=ipc", "ray.address=127.0.0.2:6379", f"output_dir={tmp_path}"]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    cluster = "on a cluster use transport=nccl or cpu"
    assert err == f"bad input: weight_sync.transport=ipc shares one machine's one GPU; {cluster}"


def test_auto_with_no_cluster_to_join_is_one_line(monkeypatch):
    """``ray.address=auto`` where Ray finds no cluster: Ray raises ConnectionError (its traceback before); the run
    says it in one line. (Faked: this test session runs a Ray instance that auto would find.)"""
    import ray

    from rl.config import load_config
    from rl.inputs.preflight import BadInput
    from rl.loop import actors
    from rl.loop.actors import start_ray

    def no_cluster(**_kwargs):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(actors, "_token_auth_like_the_head", lambda: None)  # it may set this process's environment
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_cluster)
    with pytest.raises(BadInput, match="^ray.address 'auto': no running Ray cluster found; start one first "):
        start_ray(load_config(None, ["ray.address=auto"]))


def test_engine_sleep_is_refused_where_it_cannot_lend_gpu_memory(tmp_path, capsys, nothing_starts):
    """Without a GPU (vLLM's CPU engines cannot sleep), on a cluster, and in a run that samples while it trains."""
    import torch

    asked = [
        "train",
        "arith_tiny",
        "rollout.sleep_while_training=true",
        "train.max_staleness=0",
        f"output_dir={tmp_path}",
    ]
    if not torch.cuda.is_available():
        assert _run(asked) == 2
        no_gpu = "lends the engines' GPU memory to the trainer, and this machine has no GPU"
        assert capsys.readouterr().err.strip() == (
            f"bad input: rollout.sleep_while_training {no_gpu} (vLLM's CPU engines cannot sleep); leave it off"
        )
    assert _run([*asked, "ray.address=127.0.0.2:6379"]) == 2
    cluster = "lends the engines' GPU memory to trainers on the same GPU; on a cluster leave it off"
    assert capsys.readouterr().err.strip() == f"bad input: rollout.sleep_while_training {cluster}"
    assert _run(["train", "arith_tiny", "rollout.sleep_while_training=true", f"output_dir={tmp_path}"]) == 2
    assert capsys.readouterr().err.strip() == (  # the recipe's staleness 2
        "invalid config: rollout.sleep_while_training puts the engines to sleep while the trainers step, but this run "
        "samples while it trains: set train.max_staleness=0 and train.periodic_async=false, or leave it off"
    )


def test_a_reward_returning_none_for_every_sample_is_a_warning(tmp_path, capsys):
    body = "def r(completions, **kw):\n    return [None] * len(completions)\n"
    preflight(load_config("recipes/arith_tiny.yaml", _bad_reward(tmp_path, body)))
    err = capsys.readouterr().err.strip()
    assert err.startswith("warning: every reward function returned None for row data-0") and len(err.splitlines()) == 1
    assert "return a float for every sample (0.0 for a wrong answer)" in err
    summary = {"stopped_by": "SIGINT", "reward_failures": {"none": 32, "raised": 0}, "scored_samples": 32}
    text = run_summary(summary, tmp_path)
    assert "warning: every reward function returned None for all 32 samples" in text and "note:" not in text
    assert "for 3 of 32 samples" in run_summary({**summary, "reward_failures": {"none": 3}}, tmp_path)


def test_a_reward_that_exits_in_the_worker_counts_as_raised_and_the_pool_goes_on(tmp_path):
    body = "import os, sys\ndef r(completions, answer, **kw):\n    sys.exit(3) if answer[0] == 'a' else os._exit(3)\n"
    spec = _reward(tmp_path, body)
    with RewardPool([(spec, 1.0), ("arith_exact", 1.0)], num_workers=1, timeout_s=30) as pool:
        exited = pool.score_sync(["1+1="], ["2"], {"answer": ["a"]})  # sys.exit: the call raised, the worker lives
        died = pool.score_sync(["1+1="], ["2"], {"answer": ["b"]})  # os._exit: its worker died and was replaced
        again = pool.score_sync(["1+1="], ["#2"], {"answer": ["2"]})  # the new worker scores: arith_exact 1.0
    assert exited.failures["raised"] == 1 and "SystemExit: 3" in exited.errors[spec]
    assert died.failures["raised"] == 1 and "worker process died (exit code 3)" in died.errors[spec]
    assert exited.rewards == died.rewards == [0.0] and again.rewards == [1.0] and again.failures["raised"] == 1


def test_a_model_cache_that_cannot_be_written_is_one_line(tmp_path, capsys, nothing_starts, monkeypatch):
    """A builtin model is built into ``TAILOR_CACHE`` on first use; where that folder cannot be made (here: below a
    file) the run stops in one line naming it, not in pathlib's traceback."""
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("TAILOR_CACHE", str(tmp_path / "a_file" / "cache"))
    code, err = _train(capsys, "arith_tiny")
    assert code == 2
    cache = tmp_path / "a_file" / "cache"
    assert err.startswith(f"bad input: model.path: builtin:arith-tiny could not be built in {cache} (Not a directory: ")
    assert err.endswith("); set TAILOR_CACHE to a folder you can write to") and len(err.splitlines()) == 1


def test_truncated_sampling_under_coupled_ppo_is_warned_of_once(caplog):
    from rl.inputs.preflight import _warn_of_truncated_sampling

    for overrides, warned in (
        (["rollout.top_p=0.9", "rollout.min_p=0.05"], "rollout.top_p=0.9, rollout.min_p=0.05: vLLM reports the"),
        (["rollout.top_p=0.9", "algorithm.decoupled=true"], None),  # the trainer's own log-probs anchor the clip
        (["rollout.temperature=0.7"], None),  # the trainer scores at the rollout temperature: no gap
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            _warn_of_truncated_sampling(load_config("recipes/arith_tiny.yaml", overrides))
        said = [r.getMessage() for r in caplog.records]
        assert [m[: len(warned)] for m in said] == ([warned] if warned else []), said
