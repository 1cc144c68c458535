"""A model scorer for SART pruning, in its own Ray actor: rates a group's partial responses in one batch.

Two kinds (higher is better for both):

* ``lm-confidence``: the mean log-probability of the response's tokens given the prompt under a causal LM
  (<= 0; an empty response scores 0). A confidence signal that works offline with any local causal LM,
  the policy's initial weights by default.
* ``reward-model``: the scalar of a one-label ``AutoModelForSequenceClassification`` reward model on
  prompt + partial response, through the model's chat template when it has one. Step-level PRM heads
  (token classification at step separators) are not supported.

The rollout side awaits ``score`` through a ``ScorerClient`` (an awaited ObjectRef, never a blocking
``ray.get``), so the rollout worker's event loop keeps generating while a group is scored.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from rl.inputs.prompting import PromptEncoder

Prompt = str | list[dict[str, str]]


@dataclass(frozen=True)
class ScorerSpec:
    kind: Literal["lm-confidence", "reward-model"]
    model: str  # a local HF directory or a hub name
    load_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)  # from_pretrained's (ModelConfig.load_kwargs)
    device: str = "cpu"
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: float32 on CPU, bfloat16 on GPU
    batch_size: int = 16  # texts per forward pass
    template_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)  # data.chat_template_kwargs


class ScorerWorker:
    """One scoring model; Ray runs its calls one at a time. Wrap with ``remote_scorer_worker``."""

    def __init__(self, spec: ScorerSpec) -> None:
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

        t0 = time.monotonic()
        self.spec = spec
        self.encoder = PromptEncoder(spec.model, spec.template_kwargs, spec.load_kwargs)
        self.tokenizer = self.encoder.tokenizer
        full = spec.dtype == "float32" or (spec.dtype == "auto" and spec.device == "cpu")
        dtype = torch.float32 if full else torch.bfloat16
        if spec.kind == "lm-confidence":
            self.model = AutoModelForCausalLM.from_pretrained(spec.model, dtype=dtype, **spec.load_kwargs)
        elif spec.kind == "reward-model":
            self.model = AutoModelForSequenceClassification.from_pretrained(spec.model, dtype=dtype, **spec.load_kwargs)
            if self.model.config.num_labels != 1:
                raise ValueError(f"{spec.model}: a reward model needs one label, it has {self.model.config.num_labels}")
            if self.tokenizer.pad_token is None:
                self.tokenizer.pad_token = self.tokenizer.eos_token
            self.model.config.pad_token_id = self.tokenizer.pad_token_id  # finds each row's last token
        else:
            raise ValueError(f"unknown scorer kind {spec.kind!r}; choose 'lm-confidence' or 'reward-model'")
        self.model.to(spec.device).eval()
        self.startup_s = time.monotonic() - t0
        self.calls = 0
        self.texts = 0
        self.busy_s = 0.0

    def score(self, prompt: Prompt, texts: list[str]) -> list[float]:
        """One score per text, each a response (so far) to ``prompt``."""
        t0 = time.monotonic()
        rate = self._confidence if self.spec.kind == "lm-confidence" else self._reward
        size = self.spec.batch_size
        with torch.inference_mode():
            scores = [s for i in range(0, len(texts), size) for s in rate(prompt, texts[i : i + size])]
        self.calls += 1
        self.texts += len(texts)
        self.busy_s += time.monotonic() - t0
        return scores

    def stats(self) -> dict[str, float]:
        return {"startup_s": self.startup_s, "calls": self.calls, "texts": self.texts, "busy_s": self.busy_s}

    def _confidence(self, prompt: Prompt, texts: list[str]) -> list[float]:
        context = self.encoder.encode(prompt)
        rows = [context + self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        ids = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for k, row in enumerate(rows):  # right padding keeps every row's positions
            ids[k, : len(row)] = torch.tensor(row)
            mask[k, : len(row)] = 1
        logits = self.model(input_ids=ids.to(self.spec.device), attention_mask=mask.to(self.spec.device)).logits
        start = max(len(context), 1)  # the first token has nothing to be predicted from
        scores = []
        for k, row in enumerate(rows):
            if len(row) <= start:
                scores.append(0.0)
                continue
            logprobs = torch.log_softmax(logits[k, start - 1 : len(row) - 1].float(), dim=-1)
            target = ids[k, start : len(row)].to(logprobs.device)
            scores.append(float(logprobs.gather(-1, target[:, None]).mean()))
        return scores

    def _reward(self, prompt: Prompt, texts: list[str]) -> list[float]:
        tok = self.tokenizer
        if tok.chat_template:
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
            inputs = [
                tok.apply_chat_template([*messages, {"role": "assistant", "content": t}], tokenize=False) for t in texts
            ]
        else:
            context = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
            inputs = [context + t for t in texts]
        batch = tok(inputs, padding=True, return_tensors="pt", add_special_tokens=not tok.chat_template)
        logits = self.model(**batch.to(self.spec.device)).logits
        return [float(v) for v in logits[:, 0].float()]


@dataclass(frozen=True)
class ScorerClient:
    """A ``ScorerWorker`` handle bound to one group's prompt: the group runner's ``score_texts``."""

    actor: Any
    prompt: Prompt

    async def __call__(self, texts: list[str]) -> list[float]:
        return await self.actor.score.remote(self.prompt, texts)


def remote_scorer_worker(num_cpus: float = 1.0, num_gpus: float = 0.0):
    """The Ray actor class for ``ScorerWorker``."""
    import ray

    return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(ScorerWorker)
