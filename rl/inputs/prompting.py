"""Prompt tokenization and reward-call shaping, shared by training rollouts and evaluation."""

from __future__ import annotations

from typing import Any

from rl.types import PromptRow, Sample, decoded_message


class PromptEncoder:
    """Encodes prompts (text or chat messages) to token ids and shapes completions the TRL way."""

    def __init__(
        self, model: str | Any, template_kwargs: dict[str, Any] | None = None, load_kwargs: dict[str, Any] | None = None
    ) -> None:
        """``model``: a model folder or hub name, whose tokenizer is loaded (with ``load_kwargs``:
        ``ModelConfig.load_kwargs``), or a loaded tokenizer."""
        if isinstance(model, str):
            from transformers import AutoTokenizer

            model = AutoTokenizer.from_pretrained(model, **(load_kwargs or {}))
        self.tokenizer = model
        self.template_kwargs = dict(template_kwargs or {})  # data.chat_template_kwargs, for every chat rendering
        self._cache: dict[str, list[int]] = {}
        self.tools: list[dict[str, Any]] | None = None  # tool schemas the chat template renders (rollout.tools)

    def encode(self, prompt: str | list[dict[str, str]]) -> list[int]:
        """Token ids of a prompt; chat messages go through the tokenizer's chat template."""
        if isinstance(prompt, list):
            return list(
                self.tokenizer.apply_chat_template(
                    prompt,
                    tools=self.tools,
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=False,
                    **self.template_kwargs,
                )
            )
        if prompt not in self._cache:
            self._cache[prompt] = self.tokenizer(prompt)["input_ids"]
        return self._cache[prompt]

    @staticmethod
    def completion(prompt: str | list[dict[str, str]], text: str) -> str | list[dict[str, str]]:
        """A string for text prompts, a one-message list for chat prompts, the text as its content (a think block
        and all), as TRL passes them."""
        return [decoded_message(text)] if isinstance(prompt, list) else text

    def completions(self, prompt: str | list[dict[str, str]], samples: list[Sample]) -> list[Any]:
        """What rewards get for ``samples`` of ``prompt``: ``completion`` of each one's text, or, for a chat prompt
        and a tokenizer that ships a ``response_template``, each one's message as ``parse_response`` reads it (its
        content apart from its reasoning and calls, under the template's names), as TRL's ``GRPOTrainer`` passes
        them; a sample the template cannot parse is its text."""
        if not (isinstance(prompt, list) and getattr(self.tokenizer, "response_template", None) is not None):
            return [self.completion(prompt, s.text) for s in samples]
        prefix = self.tokenizer.apply_chat_template(
            prompt, tools=self.tools, add_generation_prompt=True, tokenize=False, **self.template_kwargs
        )
        return [[self._parsed(s, prefix)] for s in samples]

    def _parsed(self, sample: Sample, prefix: str) -> dict[str, Any]:
        text = self.tokenizer.decode(sample.tokens, skip_special_tokens=False)
        try:
            message = self.tokenizer.parse_response(text, prefix=prefix, tools=self.tools)
        except (ValueError, TypeError):
            return decoded_message(sample.text)
        return message if isinstance(message, dict) and "content" in message else decoded_message(sample.text)

    @staticmethod
    def columns(rows: list[PromptRow], samples: list[Sample]) -> dict[str, list[Any]]:
        """Reward keyword arguments aligned with ``samples``, as TRL's ``GRPOTrainer`` passes them.

        Every dataset column but the prompt under its own name (the answer field too, as it is in the data),
        ``answer`` as the reference answer the loader extracted, TRL's ``completion_ids`` (response token ids)
        and ``completion_length``.
        """
        names = sorted({k for r in rows for k in r.columns})
        cols: dict[str, list[Any]] = {k: [r.columns.get(k) for r in rows] for k in names}
        cols["answer"] = [r.answer for r in rows]
        cols["completion_ids"] = [list(s.tokens) for s in samples]
        cols["completion_length"] = [len(s.tokens) for s in samples]
        return cols
