"""Reward models as rewards: scoring as TRL does it (prompt + completion, chat template, one logit), in batches, in
the reward workers; config and start-up checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from rl.config import load_config
from rl.inputs.preflight import BadInput, check_reward_model
from rl.rewards.loading import load_reward_fn
from rl.rewards.model import RewardModelSpec
from rl.rewards.pool import RewardPool

PROMPTS = ["3+4=", "12+5=", "1+1="]
COMPLETIONS = ["7", "17 and more", "2;#2"]
TEMPLATE = "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}|{% endfor %}"


def _logit(model_dir: str, text: str) -> float:
    """The model's logit for one unpadded text, computed here without Tailor."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = AutoTokenizer.from_pretrained(model_dir)(text, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        return float(model(**ids).logits[0, 0])


def test_scores_are_the_logit_of_prompt_plus_completion_in_batches(tiny_reward_model):
    rm = load_reward_fn(RewardModelSpec(tiny_reward_model, batch_size=2))  # 3 texts: a padded batch of 2, then 1
    scores = rm(prompts=PROMPTS, completions=COMPLETIONS, answer=["7", "17", "2"])
    expected = [_logit(tiny_reward_model, p + c) for p, c in zip(PROMPTS, COMPLETIONS, strict=True)]
    assert scores == pytest.approx(expected, abs=1e-5)
    assert len(set(scores)) == 3  # the texts score differently


def test_chat_samples_go_through_the_processing_class_template(tiny_reward_model, tmp_path):
    tokenizer = tmp_path / "chat-tokenizer"
    shutil.copytree(tiny_reward_model, tokenizer)
    config = json.loads((tokenizer / "tokenizer_config.json").read_text())
    (tokenizer / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    rm = load_reward_fn(RewardModelSpec(tiny_reward_model, processing_class=str(tokenizer)))
    prompt = [{"role": "user", "content": "3+4="}]
    completion = [{"role": "assistant", "content": "7"}]
    assert rm.text(prompt, completion) == "u:3+4=|a:7|"
    assert rm(prompts=[prompt], completions=[completion]) == pytest.approx([_logit(tiny_reward_model, "u:3+4=|a:7|")])


def test_a_weighted_model_reward_scores_in_the_reward_workers(tiny_reward_model):
    spec = RewardModelSpec(tiny_reward_model)
    with RewardPool([(spec, 2.0)], num_workers=1) as pool:
        result = pool.score_sync(PROMPTS, COMPLETIONS)
    direct = [_logit(tiny_reward_model, p + c) for p, c in zip(PROMPTS, COMPLETIONS, strict=True)]
    assert result.rewards == pytest.approx([2 * v for v in direct], abs=1e-5)
    assert list(result.per_function) == [f"model:{tiny_reward_model}"] and sum(result.failures.values()) == 0


def test_a_model_without_one_label_is_refused(tiny_model_dir):
    with pytest.raises(ValueError, match=r"one label \(num_labels=1\), this one has 2"):
        load_reward_fn(RewardModelSpec(tiny_model_dir))  # a causal LM: a fresh head of two labels
    cfg = load_config(None, [f"reward.functions=[{{model: {tiny_model_dir}}}]"])
    with pytest.raises(BadInput, match=r"reward.functions.0.model .*its config.json has 2"):
        check_reward_model(cfg.reward.functions[0], 0)


def test_reward_config_names_a_function_or_a_model(tiny_reward_model, tmp_path):
    cfg = load_config(None, [f"reward.functions=[{{model: {tiny_reward_model}, weight: 0.5, batch_size: 4}}]"])
    assert cfg.reward.functions[0].spec == RewardModelSpec(tiny_reward_model, None, 4)
    check_reward_model(cfg.reward.functions[0], 0)  # a good one passes
    for bad, message in [
        ("[{fn: format, model: x}]", "exactly one of fn"),
        ("[{weight: 2}]", "exactly one of fn"),
        ("[{fn: format, batch_size: 4}]", "belong to a reward model"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_config(None, [f"reward.functions={bad}"])
    missing = load_config(None, [f"reward.functions=[{{model: {tiny_reward_model}, processing_class: {tmp_path}/no}}]"])
    with pytest.raises(BadInput, match=r"reward.functions.0.processing_class .* does not exist"):
        check_reward_model(missing.reward.functions[0], 0)
    absent = load_config(None, [f"reward.functions=[{{model: {Path(tmp_path) / 'absent'}}}]"])
    with pytest.raises(BadInput, match=r"reward.functions.0.model .* does not exist"):
        check_reward_model(absent.reward.functions[0], 0)
