"""A reward model as a reward function: a one-label sequence-classification model scores prompt + completion.

As TRL's ``GRPOTrainer`` scores with a reward model: a conversational sample (chat messages) goes through the
tokenizer's chat template, a plain one is the prompt's text followed by the completion's; texts are tokenized
without added special tokens, padded on the right, and the score is the model's single logit. The model loads in
the process that calls ``load_reward_fn`` (each reward worker), on the CPU in float32; torch and transformers are
imported only there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RewardModelSpec:
    """A reward model named in ``reward.functions`` (``model``), picklable to the reward workers."""

    model: str  # a local Hugging Face directory or a hub name
    processing_class: str | None = None  # the tokenizer's directory or hub name; None: the model's own
    batch_size: int = 16  # completions per forward pass

    def __str__(self) -> str:
        return f"model:{self.model}"


class RewardModel:
    """The reward function of a ``RewardModelSpec``: one float per completion. Raises ``ValueError`` at load for a
    model without exactly one label."""

    def __init__(self, spec: RewardModelSpec) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.spec = spec
        self.__name__ = str(spec)
        self.model = AutoModelForSequenceClassification.from_pretrained(spec.model, dtype=torch.float32).eval()
        if self.model.config.num_labels != 1:
            raise ValueError(
                f"a reward model has one label (num_labels=1), this one has {self.model.config.num_labels}"
            )
        self.tokenizer = AutoTokenizer.from_pretrained(spec.processing_class or spec.model)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.config.pad_token_id = self.tokenizer.pad_token_id  # how the model finds each row's last token

    def __call__(self, prompts: list, completions: list, **_: Any) -> list[float]:
        texts = [self.text(p, c) for p, c in zip(prompts, completions, strict=True)]
        size = self.spec.batch_size
        return [score for i in range(0, len(texts), size) for score in self._scores(texts[i : i + size])]

    def text(self, prompt: str | list[dict], completion: str | list[dict]) -> str:
        """The text scored for one sample: chat messages through the chat template, plain text concatenated."""
        if isinstance(prompt, str) and isinstance(completion, str):
            return prompt + completion
        messages = _messages(prompt, "user") + _messages(completion, "assistant")
        return self.tokenizer.apply_chat_template(messages, tokenize=False)

    def _scores(self, texts: list[str]) -> list[float]:
        import torch

        batch = self.tokenizer(texts, padding=True, padding_side="right", add_special_tokens=False, return_tensors="pt")
        with torch.inference_mode():
            logits = self.model(**batch).logits
        return [float(v) for v in logits[:, 0]]


def _messages(part: str | list[dict], role: str) -> list[dict]:
    """A prompt or completion as chat messages (a plain string becomes one message of ``role``)."""
    return [{"role": role, "content": part}] if isinstance(part, str) else list(part)
