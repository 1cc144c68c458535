"""Model builds are quiet: transformers' progress bars ("Writing model shards") stay off the console of whichever
command builds a model first (on a fresh machine that is a user's first ``rl train``, or a one-line bad-input test)."""

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.utils import logging as hf_logging

from rl.models import _publish, _staging_dir, no_progress_bars


def test_a_build_save_prints_no_progress_bar_and_restores_the_setting(tmp_path, capsys):
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config)
    hf_logging.enable_progress_bar()
    model.save_pretrained(tmp_path / "loud")
    assert "Writing model shards" in capsys.readouterr().err  # the bar this guards against
    with no_progress_bars():
        model.save_pretrained(tmp_path / "quiet")
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
    assert hf_logging.is_progress_bar_enabled()


def _build(parent, tag: str):
    tmp = _staging_dir(parent / "model")
    (tmp / "model.safetensors").write_text(tag)
    return tmp


def test_a_published_build_stays_in_place_when_a_concurrent_one_finishes(tmp_path):
    out = tmp_path / "model"
    first, second = _build(tmp_path, "first"), _build(tmp_path, "second")
    _publish(first, out)
    reader = (out / "model.safetensors").open()  # a parallel test worker reading the first build
    _publish(second, out)
    assert reader.read() == "first" and (out / "model.safetensors").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the losing build's staging folder is gone


def test_an_unfinished_leftover_is_replaced_by_a_build(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text("{}")  # no weights: not a finished build
    _publish(_build(tmp_path, "new"), out)
    assert (out / "model.safetensors").read_text() == "new" and not (out / "config.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
