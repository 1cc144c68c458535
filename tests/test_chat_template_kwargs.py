"""``data.chat_template_kwargs`` (TRL's ``chat_template_kwargs``, e.g. Qwen3's ``enable_thinking: false``) reach every
rendering of the policy's chat template: the prompts the engine gets, tool episodes' first prompt and tool results,
the TRL peer's config; kwargs that break the template are refused in one line, kwargs that change nothing are said."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from rl.rollout.tool_workflow import ToolSettings
from test_tool_preflight import TOOLS
from tool_chat import TEMPLATE, byte_chat_tokenizer

from rl.bench.trl_peer import grpo_arguments
from rl.config import load_config
from rl.inputs.preflight import BadInput, preflight

NO_THINKING = "<think>\n\n</think>\n\n"
# Qwen3's switch on the generation prompt, and a template check that raises on a value it does not know
QWEN3_LIKE = TEMPLATE.replace(
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}",
    "{% if mode is defined and mode != 'a' %}{{ raise_exception('unknown mode ' + mode) }}{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    + NO_THINKING.replace("\n", "{{ '\\n' }}")
    + "{% endif %}{% endif %}",
)


def _config(tmp_path: Path, *overrides: str):
    model = tmp_path / "model"
    tok = byte_chat_tokenizer()
    tok.chat_template = QWEN3_LIKE
    tok.save_pretrained(model)
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (model / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    (model / "config.json").write_text('{"model_type": "llama", "max_position_embeddings": 8192}')
    (tmp_path / "tools.py").write_text(TOOLS)
    base = [
        f"model.path={model}",
        "data.chat=true",
        "data.arith.num_train=40",
        "data.arith.num_test=8",
        "train.batch_groups=2",
        "eval.num_problems=2",
        "rollout.max_model_len=4096",
        "rollout.max_tokens=64",
    ]
    return load_config("recipes/arith_tiny.yaml", [*base, *overrides])


def _text(tok, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False)


def test_prompts_render_with_the_kwargs(tmp_path):
    plain = preflight(_config(tmp_path))
    given = preflight(_config(tmp_path, "data.chat_template_kwargs={enable_thinking: false}"))
    row = given.train_rows[0]
    assert _text(given.encoder.tokenizer, given.encoder.encode(row.prompt)).endswith("assistant\n" + NO_THINKING)
    assert _text(plain.encoder.tokenizer, plain.encoder.encode(row.prompt)).endswith("assistant\n")


def test_tool_episodes_render_their_prompt_and_results_with_the_kwargs(tmp_path):
    tools = [f"rollout.tools=[{tmp_path / 'tools.py'}:add]"]
    cfg = _config(tmp_path, *tools, "data.chat_template_kwargs={enable_thinking: false}")
    inputs = preflight(cfg)
    settings = ToolSettings.of(cfg)
    assert settings.template_kwargs == {"enable_thinking": False}
    assert {settings: 1}[ToolSettings.of(cfg)] == 1  # a rollout worker's cache key: hashable, equal when equal
    workflow = settings.build(inputs.encoder.tokenizer)
    tok = inputs.encoder.tokenizer
    assert _text(tok, workflow.prompt(inputs.train_rows[0])).endswith("assistant\n" + NO_THINKING)
    assert _text(tok, workflow.format.results([("add", "5")])).endswith("assistant\n" + NO_THINKING)
    unset = ToolSettings.of(_config(tmp_path, *tools)).build(tok)
    assert not _text(tok, unset.format.results([("add", "5")])).endswith(NO_THINKING)


def test_kwargs_that_break_the_template_are_refused_in_one_line(tmp_path):
    refused = r"^data\.chat_template_kwargs: the chat template of model\.path '.*' fails with them \("
    refused += r"TemplateError: unknown mode b\); correct them$"
    with pytest.raises(BadInput, match=refused):
        preflight(_config(tmp_path, "data.chat_template_kwargs={mode: b}"))


@pytest.mark.parametrize(
    "overrides, said",
    [
        (["data.chat_template_kwargs={enable_thinkin: false}"], "['enable_thinkin'] change nothing"),
        (["data.chat=false", "data.chat_template_kwargs={enable_thinking: false}"], "the prompts are plain text"),
    ],
    ids=["misspelt", "plain-text"],
)
def test_kwargs_that_do_nothing_are_said(tmp_path, caplog, overrides, said):
    with caplog.at_level(logging.WARNING, logger="rl.preflight"):
        preflight(_config(tmp_path, *overrides))
    assert [r.message for r in caplog.records if said in r.message], caplog.text


def test_kwargs_that_work_are_not_warned_about(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rl.preflight"):
        preflight(_config(tmp_path, "data.chat_template_kwargs={enable_thinking: false, mode: a}"))
    assert "chat_template_kwargs" not in caplog.text


def test_the_trl_peer_gets_the_same_kwargs(tmp_path):
    cfg = _config(tmp_path, "data.chat_template_kwargs={enable_thinking: false}")
    assert grpo_arguments(cfg, 0, 2, tmp_path, False)["chat_template_kwargs"] == {"enable_thinking": False}
    assert grpo_arguments(_config(tmp_path), 0, 2, tmp_path, False)["chat_template_kwargs"] is None
