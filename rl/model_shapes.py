"""Config-only models: ``dummy:NAME`` is a folder holding nothing but a ``config.json`` of a known model's shape.

vLLM serves such a folder with ``load_format="dummy"`` (random weights) and ``skip_tokenizer_init=True`` (no
tokenizer): the engine runs at the real model's shape (layers, heads, KV size, vocabulary) with nothing downloaded.
The outputs are meaningless tokens, so a benchmark on one draws its response lengths elsewhere
(``rl/bench/synthetic_lengths.py``). The numbers below are those of each model's published ``config.json`` on the
Hugging Face hub (Qwen/Qwen2.5-7B-Instruct, Qwen/Qwen2.5-1.5B-Instruct, HuggingFaceTB/SmolLM2-135M-Instruct);
``tiny`` is the shape of ``builtin:arith-tiny`` (``TINY_ARCH``), for fast CPU tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DUMMY_PREFIX = "dummy:"
CONFIG_FORMAT = 1  # bump when the written config.json changes, so cached folders are rewritten

_QWEN2 = dict(
    architectures=["Qwen2ForCausalLM"],
    model_type="qwen2",
    hidden_act="silu",
    attention_dropout=0.0,
    bos_token_id=151643,
    eos_token_id=151645,
    initializer_range=0.02,
    use_cache=True,
    use_sliding_window=False,
    torch_dtype="bfloat16",
)
_LLAMA = dict(
    architectures=["LlamaForCausalLM"],
    model_type="llama",
    hidden_act="silu",
    attention_bias=False,
    attention_dropout=0.0,
    mlp_bias=False,
    initializer_range=0.02,
    pretraining_tp=1,
    use_cache=True,
    torch_dtype="bfloat16",
)

# name -> config.json fields (shape from the model's published config.json)
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-7b": {
        **_QWEN2,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    },
    "qwen2.5-1.5b": {
        **_QWEN2,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    "smollm2-135m": {
        **_LLAMA,
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "vocab_size": 49152,
        "rope_theta": 100000.0,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    "tiny": {**_QWEN2, "vocab_size": 20, "tie_word_embeddings": True, "rope_theta": 10000.0, "rms_norm_eps": 1e-6},
}


def _tiny_arch() -> dict[str, Any]:
    from rl.models import TINY_ARCH

    return dict(TINY_ARCH, bos_token_id=1, eos_token_id=2)


def is_dummy(name: str) -> bool:
    """Whether ``name`` is a config-only model (``dummy:NAME``)."""
    return name.startswith(DUMMY_PREFIX)


def dummy_config(name: str) -> dict[str, Any]:
    """The ``config.json`` fields of ``dummy:NAME``; a one-line ValueError for an unknown name."""
    key = name.removeprefix(DUMMY_PREFIX)
    if key not in SHAPES:
        raise ValueError(f"unknown dummy model {name!r}; known: {', '.join(DUMMY_PREFIX + k for k in SHAPES)}")
    config = dict(SHAPES[key])
    if key == "tiny":
        config.update(_tiny_arch())
    return config


def build_dummy(name: str) -> Path:
    """The cached folder of ``dummy:NAME``: only its ``config.json`` (written on first use)."""
    from rl.models import cache_dir

    config = dummy_config(name)
    out = cache_dir() / "models" / f"dummy-{name.removeprefix(DUMMY_PREFIX)}-v{CONFIG_FORMAT}"
    path = out / "config.json"
    if not path.is_file() or json.loads(path.read_text()) != config:
        out.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"config.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(config, indent=1))
        tmp.replace(path)  # atomic: a concurrent reader sees the old file or the new one
    return out


def vocab_size(model_dir: str) -> int:
    """The vocabulary size in ``model_dir``'s ``config.json``."""
    return int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])
