"""A run's inputs checked before any actor starts: the model, the data, the reward functions, the output folder.

Each problem is one ``BadInput`` line naming the field, file or row and what to do; rows that cannot be used
(malformed lines, empty prompts or answers, prompts too long for the model) are skipped and counted in a
logged warning. ``preflight`` returns what the driver needs, so nothing is loaded twice.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl.config import DataConfig, RewardFn, RolloutConfig, RunConfig, ray_address_named
from rl.data.holdout import HeldOutIsTraining
from rl.data.source import dataset_rows, train_and_held_out
from rl.inputs import hub
from rl.inputs.prompting import PromptEncoder
from rl.models import BUILTIN_MODELS, built_here, resolve_model
from rl.rewards.environment import EnvironmentReward, owns_reward
from rl.rewards.hooks import CallLog, RewardState
from rl.rewards.loading import load_reward_fn, overlong_lengths
from rl.rewards.pool import RESERVED_KEYWORDS, TRL_HOOKS, call_reward, reward_values
from rl.rollout.cpu_cores import local_cores
from rl.types import PromptRow, Sample

if TYPE_CHECKING:
    from rl.rollout.tool_format import ChatTemplateFormat

log = logging.getLogger("rl.preflight")

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
SAFETENSORS_MAX_HEADER = 100_000_000  # the safetensors loader refuses a longer header ("header too large")


class BadInput(ValueError):
    """An input the run cannot use; the message is one line that says what to change."""


@dataclass
class RunInputs:
    """What the checks loaded: the model directory, its prompt encoder, training and held-out rows."""

    model_dir: str
    encoder: PromptEncoder
    train_rows: list[PromptRow]
    test_rows: list[PromptRow]


def preflight(cfg: RunConfig, say: bool = True) -> RunInputs:
    """Check the model, data and rewards of ``cfg``; raises ``BadInput`` with one line for the first problem. What
    needs neither torch nor the tokenizer (files, data rows, reward imports) is checked first: a mistyped path is
    reported in about a second, not after the seconds transformers takes to import. ``say``: print the data line
    (and a reward warning); a bench that checks its recipe before runs that check it again says it once."""
    if cfg.ray.address is None:  # a local Ray: the rollout workers run on this machine's cores and GPUs
        for bind in cfg.rollout.cpu_threads_bind or []:
            check_local_cores(bind, "rollout.cpu_threads_bind")
    _check_weight_transport(cfg)
    _check_engine_sleep(cfg)
    _warn_of_truncated_sampling(cfg)
    if cfg.ray.address is not None:
        check_ray_address(cfg.ray.address)
    model_dir = check_model_path(cfg.model.path)
    if cfg.model.revision is not None and Path(model_dir).exists():
        raise BadInput(
            f"model.revision picks a version of a hub model, and model.path {cfg.model.path!r} is a local folder; "
            "remove model.revision, or give the hub name"
        )
    train, test = split_rows(cfg.data)
    _check_column_names(cfg, train)
    functions = load_rewards(cfg)
    encoder = prompt_encoder(cfg, model_dir, cfg.model.path)
    check_chat_template(encoder, cfg, train, f"model.path {cfg.model.path!r}")
    extra_columns = check_tools(cfg, encoder, train + test)  # held-out rows run episodes too
    train_lengths = [len(encoder.encode(r.prompt)) for r in train]  # the tools' schemas in: check_tools set them
    test_lengths = [len(encoder.encode(r.prompt)) for r in test]
    context = size_context(cfg, model_dir, max(train_lengths + test_lengths))
    train = fitting_rows(train, train_lengths, cfg.rollout, "training")
    test = fitting_rows(test, test_lengths, cfg.rollout, "held-out")
    if len(train) < cfg.train.batch_groups:
        raise BadInput(
            f"data.source {cfg.data.source!r}: {len(train)} usable training rows, fewer than train.batch_groups "
            f"({cfg.train.batch_groups}); add rows or lower train.batch_groups"
        )
    if not test:
        fix = (
            "raise data.arith.num_test"
            if cfg.data.source == "arith"
            else "give data.test_source, or raise data.test_fraction"
        )
        raise BadInput(
            f"data.source {cfg.data.source!r}: no held-out rows, and a run measures held-out accuracy before and "
            f"after training; {fix}"
        )
    values = check_rewards(cfg, functions, train, encoder, extra_columns)
    owned = _reads_environment_reward(cfg)  # it scores episodes: None before one
    if say and len(values) == len(cfg.reward.functions) and all(v is None for v in values) and not owned:
        print(
            f"warning: every reward function returned None for row {train[0].prompt_id} (its answer as the "
            f"completion), so the run would train on zero rewards; return a float for every sample (0.0 for a wrong "
            f"answer)",
            file=sys.stderr,
            flush=True,
        )
    if say:
        print(f"data: {len(train)} training rows, {len(test)} held-out rows{context}", flush=True)
    return RunInputs(model_dir, encoder, train, test)


def load_rewards(cfg: RunConfig) -> list[tuple[str, Callable[..., Any]]]:
    """Each reward function of ``cfg`` imported (its name as given and the function), each reward model's files
    checked (``check_reward_model``), in the recipe's order."""
    loaded = []
    for index, reward in enumerate(cfg.reward.functions):
        if reward.model is not None:
            check_reward_model(reward, index)
            continue
        try:
            loaded.append((reward.fn, load_reward_fn(reward.fn)))
        except ValueError as e:
            raise BadInput(f"reward.functions: {e}") from None
        check_overlong_reach(reward.fn, cfg.rollout.max_tokens)
    return loaded


def check_overlong_reach(spec: str, max_tokens: int) -> None:
    """DAPO's overlong penalty is meant to end at the response cap (MAX_LEN = ``rollout.max_tokens``): one that
    starts beyond the cap never applies (``BadInput``); one that ends beyond it never reaches -1 (a warning)."""
    lengths = overlong_lengths(spec)
    if lengths is None:
        return
    max_len, buffer_len = lengths
    fits = f"overlong({max_tokens},{buffer_len if buffer_len < max_tokens else max(1, max_tokens // 5)})"
    if max_len - buffer_len >= max_tokens:
        raise BadInput(
            f"reward {spec!r} never applies: its penalty starts after {max_len - buffer_len} tokens, and no response "
            f"is longer than rollout.max_tokens={max_tokens}; end it at the cap, e.g. {fits}"
        )
    if max_len > max_tokens:
        log.warning(
            "reward %r reaches at most %.2f, not -1: it ends at %d tokens and responses stop at rollout.max_tokens=%d "
            "(DAPO ends it at the cap, e.g. %s)",
            spec,
            (max_len - buffer_len - max_tokens) / buffer_len,
            max_len,
            max_tokens,
            fits,
        )


def check_model_path(path: str, key: str = "model.path", weights: bool = True) -> str:
    """The local directory of ``path`` (the option ``key`` names it in errors); a hub name is accepted as it is (no
    network here). A local directory needs a ``config.json`` and, unless ``weights`` is False (random weights),
    weight files whose headers read as loading reads them."""
    if built_here(path):
        try:
            return resolve_model(path)
        except ValueError as e:
            raise BadInput(f"{key}: {e}") from None
    if not path.strip():
        raise BadInput(f"{key} is empty; give a local model directory, builtin:NAME or a hub name")
    local = Path(path).expanduser()
    if local.exists():
        if not (local / "config.json").is_file():
            raise BadInput(f"{key} {path!r} has no config.json: give a Hugging Face model directory")
        try:
            config = json.loads((local / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise BadInput(f"{key} {path!r}: config.json is not readable JSON ({_line(e)})") from None
        if not isinstance(config, dict):
            raise BadInput(f"{key} {path!r}: config.json is not a JSON object")
        if weights:
            check_weights(local, f"{key} {path!r}")
        return str(local)
    if path.startswith((".", "/", "~")) or not _HUB_NAME.fullmatch(path):
        raise BadInput(
            f"{key} {path!r} does not exist; give a local model directory, builtin:NAME "
            f"({', '.join(BUILTIN_MODELS)}) or a hub name like Qwen/Qwen2.5-0.5B-Instruct"
        )
    return path


def check_weights(model_dir: Path, where: str) -> None:
    """The weight files of ``model_dir``: every ``*.safetensors`` file (or the shards its index lists) must have a
    header that parses and tensors that lie within the file; ``pytorch_model*.bin`` files are taken as they are."""
    index = model_dir / "model.safetensors.index.json"
    files = sorted(model_dir.glob("*.safetensors"))
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise BadInput(
                f"{where}: {index.name} is not a weight index ({_line(e)}); download the model again"
            ) from None
        if missing := [s for s in shards if not (model_dir / s).is_file()]:
            raise BadInput(
                f"{where}: {index.name} lists {len(shards)} weight files, {len(missing)} missing ({missing[0]}); "
                f"download the model again"
            )
        files = [model_dir / s for s in shards]
    if not files:
        if any(model_dir.glob("pytorch_model*.bin")):
            return
        raise BadInput(
            f"{where} has a config.json but no weights (model.safetensors or pytorch_model.bin); copy the model's "
            f"weight files into it"
        )
    for file in files:
        if problem := safetensors_problem(file):
            raise BadInput(
                f"{where}: {file.name} is not a readable safetensors file ({problem}); save or download it again"
            )


def safetensors_problem(file: Path) -> str | None:
    """Why ``file`` would not load as safetensors (its 8-byte header length, JSON header, tensor offsets), or None."""
    try:
        size = file.stat().st_size
        with file.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"{size} bytes, too short for a header"
            length = int.from_bytes(head, "little")
            if 8 + length > size:
                return f"header length {length} exceeds the file's {size} bytes"
            if length > SAFETENSORS_MAX_HEADER:
                return f"header length {length}, over the loader's limit of {SAFETENSORS_MAX_HEADER} bytes"
            header = json.loads(f.read(length))
    except OSError as e:
        return _line(e)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError
        return "its header is not JSON"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    end = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            return f"tensor {name!r} has no data_offsets"
        if not 0 <= offsets[0] <= offsets[1]:
            return f"tensor {name!r} has data_offsets {offsets}"
        end = max(end, offsets[1])
    if 8 + length + end > size:
        return f"truncated: its tensors end at byte {8 + length + end}, the file has {size}"
    return None


RAY_CONNECT_TIMEOUT_S = 5.0  # how long the head of a cluster given as ray.address may take to answer a connection
START_RAY = "rl cluster up, or ray start --head on its head node"


def check_ray_address(address: str) -> None:
    """``ray.address`` is ``auto`` or a ``HOST:PORT`` (``ray://`` too) that answers a TCP connection: Ray itself
    would retry a dead address for ever, warning every half minute. ``auto`` is left to Ray, which says at once when
    it finds no cluster."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise BadInput(
            f"{ray_address_named(address)}: give auto (a cluster started on this machine) or the head's HOST:PORT, as "
            "rl cluster up or ray start --head prints it (e.g. 127.0.0.2:6379)"
        )
    import socket

    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise BadInput(
            f"{ray_address_named(address)}: nothing answers there ({e.strerror or e}); start the cluster first "
            f"({START_RAY}) and give the address it prints"
        ) from None


def check_local_cores(bind: str, where: str) -> None:
    """``bind`` lists cores this machine gives (``local_cores``); else a one-line ``BadInput`` naming ``where``."""
    try:
        local_cores(bind)
    except ValueError as e:
        raise BadInput(f"{where}: {e}") from None


def check_output_dir(directory: str | Path, where: str) -> Path:
    """``directory`` created if need be and written to (a probe file, removed); ``where`` names it in the error."""
    path = Path(directory).expanduser()
    probe = path / f".tailor-probe-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        reason = f"{e.strerror}: {e.filename}" if e.strerror and e.filename else _line(e)
        raise BadInput(f"{where} cannot be created or written ({reason}); give a folder you can write to") from None
    return path


def prompt_encoder(cfg: RunConfig, model_dir: str, path: str, where: str = "model.path") -> PromptEncoder:
    """The prompt encoder of ``model_dir`` (``path`` as the user gave it, named ``where``) with ``cfg``'s chat
    template arguments, or a one-line ``BadInput``, also for a tokenizer that is code of its own that
    ``model.trust_remote_code`` does not allow; a hub name where the Hub cannot be reached is read from the cache only
    (``hub``)."""
    cache_only = not Path(model_dir).is_dir() and hub.offline_unless_reachable()  # a hub name, no Hub to ask
    try:
        return PromptEncoder(model_dir, cfg.data.chat_template_kwargs, cfg.model.load_kwargs(model_dir))
    except Exception as e:
        if cache_only:
            raise BadInput(f"{where} {hub.not_cached(path)}") from None
        if needs_remote_code(e):
            raise BadInput(f"{where} {path!r} {REMOTE_CODE}") from None
        raise BadInput(f"{where} {path!r}: cannot load its tokenizer ({_line(e)})") from None


REMOTE_CODE = (
    "ships its own Python code (an architecture or tokenizer transformers does not include); set "
    "model.trust_remote_code=true if you trust it"
)


def needs_remote_code(e: Exception) -> bool:
    """Whether transformers refused to load a model because its repository's own code would have to run."""
    return "trust_remote_code" in str(e)


def _check_weight_transport(cfg: RunConfig) -> None:
    """NCCL weight transport only where there are GPUs (a cluster's are checked once Ray is up); CUDA IPC only
    where the trainer and every engine share this machine's one GPU, from one trainer rank, never on a cluster."""
    transport = cfg.weight_sync.transport
    if cfg.ray.address is not None:
        if transport == "ipc":
            raise BadInput(
                "weight_sync.transport=ipc shares one machine's one GPU; on a cluster use transport=nccl or cpu"
            )
        return
    if transport == "cpu":
        return
    import torch

    if transport == "nccl" and not torch.cuda.is_available():
        raise BadInput("weight_sync.transport=nccl needs GPUs, and this machine has none; use transport=cpu")
    if transport == "ipc":
        gpus = torch.cuda.device_count()
        if gpus != 1:
            raise BadInput(
                f"weight_sync.transport=ipc needs the trainer and the engines on one GPU, and this machine has "
                f"{gpus}; use transport={'nccl' if gpus else 'cpu'}"
            )
        if cfg.train.num_workers != 1:
            raise BadInput("weight_sync.transport=ipc sends from one trainer: set train.num_workers=1")


def _warn_of_truncated_sampling(cfg: RunConfig) -> None:
    """Warn where the rollouts sample from a truncated or penalized distribution under coupled PPO: vLLM reports the
    log-probs of what it sampled from, the trainer computes them over the whole vocabulary at the rollout
    temperature, and the PPO ratio, taken against vLLM's, starts below 1 on fresh samples."""
    r = cfg.rollout
    defaults = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
    changed = [f"rollout.{k}={getattr(r, k)}" for k, v in defaults.items() if getattr(r, k) != v]
    if changed and not cfg.algorithm.decoupled:
        log.warning(
            "%s: vLLM reports the log-probs of the truncated or penalized distribution it samples from and the "
            "trainer computes them over the whole vocabulary, so the PPO ratio starts below 1 on fresh samples "
            "(logprob_gap in the metrics says by how much); set algorithm.decoupled=true to anchor the clip on the "
            "trainer's own log-probs",
            ", ".join(changed),
        )


def _check_engine_sleep(cfg: RunConfig) -> None:
    """Engines sleep to lend their memory to trainers on the same GPU: one machine with a GPU."""
    if not cfg.rollout.sleep_while_training:
        return
    if cfg.ray.address is not None:
        raise BadInput(
            "rollout.sleep_while_training lends the engines' GPU memory to trainers on the same GPU; on a cluster "
            "leave it off"
        )
    import torch

    if not torch.cuda.is_available():
        raise BadInput(
            "rollout.sleep_while_training lends the engines' GPU memory to the trainer, and this machine has no GPU "
            "(vLLM's CPU engines cannot sleep); leave it off"
        )


POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")
CONTEXT_BLOCK = 16  # an unset rollout.max_model_len is rounded up to vLLM's KV-cache blocks


def size_context(cfg: RunConfig, model_dir: str, longest: int) -> str:
    """Check ``rollout.max_model_len`` against the positions the model's config gives (``model_positions``), or,
    left unset, set it (on ``cfg``, which the run then uses throughout): the longest prompt + ``rollout.max_tokens``,
    rounded up to vLLM's 16-token blocks, at most the model's positions (longer prompts are then skipped). Returns
    what was set, for the data line ("" where the recipe gave it)."""
    r = cfg.rollout
    positions = model_positions(model_dir, cfg.model.load_kwargs(model_dir), f"model.path {cfg.model.path!r}")
    if r.max_model_len is not None:
        if positions is not None and r.max_model_len > positions:
            raise BadInput(
                f"rollout.max_model_len ({r.max_model_len}) is more than the model's {positions} positions (its "
                f"config.json); set rollout.max_model_len to at most {positions}, with rollout.max_tokens below it"
            )
        return ""
    if positions is not None and r.max_tokens >= positions:
        raise BadInput(
            f"rollout.max_tokens ({r.max_tokens}) leaves no room for a prompt within the model's {positions} "
            f"positions (its config.json); lower rollout.max_tokens"
        )
    needed = -(-(longest + r.max_tokens) // CONTEXT_BLOCK) * CONTEXT_BLOCK
    r.max_model_len = needed if positions is None else min(needed, positions)
    within = f", within the model's {positions} positions" if needed > r.max_model_len else ""
    return f"; context {r.max_model_len} tokens (the longest prompt, {longest}, + rollout.max_tokens{within})"


def model_positions(model_dir: str, load_kwargs: dict[str, Any], where: str) -> int | None:
    """The longest context the model's config allows, as vLLM reads it; None for a model that scales RoPE or whose
    config does not load here (left to the engine). ``load_kwargs``: ``ModelConfig.load_kwargs``; a config that is
    code of its own, which they do not allow to run, is a ``BadInput`` naming the model as ``where`` does
    (``model.path 'NAME'``)."""
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_dir, **load_kwargs)
        text = config.get_text_config()
    except Exception as e:
        if needs_remote_code(e):
            raise BadInput(f"{where} {REMOTE_CODE}") from None
        return None
    rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return None
    positions = [value for key in POSITION_KEYS if isinstance(value := getattr(text, key, None), int)]
    return min(positions) if positions else None


def split_rows(cfg: DataConfig) -> tuple[list[PromptRow], list[PromptRow]]:
    """``train_and_held_out``, each loading error, and held-out rows that are all training prompts, as one line."""
    try:
        return train_and_held_out(cfg, _rows)
    except HeldOutIsTraining as e:
        raise BadInput(str(e)) from None


def _rows(cfg: DataConfig, split: str) -> list[PromptRow]:
    """``dataset_rows``, with any loading error as one line naming the source."""
    try:
        return dataset_rows(cfg, split)
    except FileNotFoundError as e:
        raise BadInput(f"data.source: {e}; give an existing file, folder, preset or hub dataset") from None
    except ValueError as e:  # the loader's own message names the problem
        raise BadInput(f"data.source {cfg.source!r} (split {split!r}): {str(e).splitlines()[0]}") from None
    except Exception as e:
        raise BadInput(f"data.source {cfg.source!r} (split {split!r}): {_line(e)}") from None


def _check_column_names(cfg: RunConfig, rows: list[PromptRow]) -> None:
    """Dataset columns reach the rewards as keywords beside TRL's own, which a column may not shadow."""
    taken = sorted(set(RESERVED_KEYWORDS) & {name for row in rows for name in row.columns})
    if taken:
        raise BadInput(
            f"data.source {cfg.data.source!r}: column {taken[0]!r} has the name of a keyword every reward gets "
            f"({', '.join(RESERVED_KEYWORDS)}); rename it in the data"
        )


def check_chat_template(encoder: PromptEncoder, cfg: RunConfig, rows: list[PromptRow], model: str) -> None:
    """Chat prompts (``data.chat``, or rows of messages) need a chat template; ``model`` names the model's setting
    and value for the message (``model.path 'NAME'``). ``data.chat_template_kwargs`` must render (``BadInput``
    otherwise) and, where no prompt is chat or the first renders as without them, are said to do nothing."""
    if getattr(encoder.tokenizer, "chat_template", None):
        _check_template_kwargs(encoder, cfg, rows, model)
        return
    where = f"{model} has no chat template"
    if cfg.data.chat:
        raise BadInput(f"{where}, but data.chat is set; set data.chat=false or use a model with a chat template")
    if any(isinstance(r.prompt, list) for r in rows):
        raise BadInput(f"{where}, but the data's prompts are chat messages; use a model with a chat template")


def _check_template_kwargs(encoder: PromptEncoder, cfg: RunConfig, rows: list[PromptRow], model: str) -> None:
    kwargs = cfg.data.chat_template_kwargs
    if not kwargs:
        return
    chat = next((r.prompt for r in rows if isinstance(r.prompt, list)), None)
    if chat is None and not cfg.data.chat:
        log.warning("data.chat_template_kwargs do nothing: the prompts are plain text (set data.chat=true)")
        return
    messages = chat or [{"role": "user", "content": "-"}]
    render = encoder.tokenizer.apply_chat_template
    try:
        given = render(messages, add_generation_prompt=True, tokenize=False, **kwargs)
    except Exception as e:
        fails = f"data.chat_template_kwargs: the chat template of {model} fails with them ({_line(e)})"
        raise BadInput(f"{fails}; correct them") from None
    if given == render(messages, add_generation_prompt=True, tokenize=False):
        log.warning(
            "data.chat_template_kwargs %s change nothing in the chat template of %s (the first prompt renders the "
            "same without them); check their names against the template",
            sorted(kwargs),
            model,
        )


def _check_workflow(spec: str) -> None:
    """``rollout.workflow`` names an async ``run(episode, row)`` (or a class with one) that loads here."""
    from rl.rollout.user_workflow import load_workflow

    try:
        load_workflow(spec, os.getcwd())
    except ValueError as e:
        raise BadInput(f"rollout.workflow: {e}") from None


def tool_format(cfg: RunConfig, encoder: PromptEncoder) -> ChatTemplateFormat:
    """The run's ``ChatTemplateFormat``; with ``rollout.tool_parser``, one whose vLLM parser is known and reads the
    call the chat template writes for a probe (``BadInput`` otherwise)."""
    from rl.rollout.tool_format import ChatTemplateFormat

    name = cfg.rollout.tool_parser
    if name is None:
        return ChatTemplateFormat(encoder.tokenizer, encoder.template_kwargs, revision=cfg.model.revision)
    try:
        fmt = ChatTemplateFormat(encoder.tokenizer, encoder.template_kwargs, name, cfg.model.revision)
    except ValueError as e:
        raise BadInput(f"rollout.tool_parser: {e}") from None
    texts = _probe_texts(encoder)
    try:
        if _reads_probe(fmt.reader, texts):
            return fmt
    except Exception as e:  # the parser's own error (vLLM keeps stubs under some names)
        raise BadInput(f"rollout.tool_parser {name!r}: vLLM's parser failed on a call: {_line(e)}") from None
    shown = (texts or [""])[-1][-100:].replace("\n", "\\n")
    raise BadInput(
        f"rollout.tool_parser {name!r}: vLLM's parser reads no call in the one this model's chat template writes "
        f"(...{shown}); name the parser of this model's family, or none to let Tailor pick its reader"
    )


def vllm_parsers_for(encoder: PromptEncoder) -> list[str]:
    """The names of vLLM's tool parsers that read the call the chat template writes for a probe (none where this
    vLLM has no parsers Tailor reads)."""
    from rl.rollout.vllm_tool_parser import VllmToolParser, tool_parser_names

    texts = _probe_texts(encoder)
    try:
        names = tool_parser_names()
    except ImportError:
        return []
    found = []
    for name in names:
        try:
            if _reads_probe(VllmToolParser(name, encoder.tokenizer), texts):
                found.append(name)
        except Exception:  # a parser that needs tokens this vocabulary lacks, or a stub: not this model's
            continue
    return found


def _probe_texts(encoder: PromptEncoder) -> list[str]:
    """The chat template's renderings of the probe call: under Tailor's probe id and, where the template takes it,
    Kimi's id form (``functions.NAME:0``), which Kimi's templates write where the name goes."""
    from rl.rollout.tool_calls import PROBE, PROBE_ID, probe_rendering

    texts = []
    for call_id in (PROBE_ID, f"functions.{PROBE}:0"):
        try:
            texts.append(probe_rendering(encoder.tokenizer, encoder.template_kwargs, call_id)[0])
        except Exception:  # the template's own error: it refuses ids of that form (Mistral's take 9 characters)
            continue
    return texts


def _reads_probe(reader: Any, texts: list[str]) -> bool:
    """Whether ``reader`` reads exactly the probe call, ``{"x": 1}`` typed by its schema, in one of ``texts``."""
    from rl.rollout.tool_calls import PROBE

    schema = {"name": PROBE, "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}
    read = [reader.read(text, [{"type": "function", "function": schema}]) for text in texts]
    return any([(c.name, c.arguments) for c in calls] == [(PROBE, {"x": 1})] for calls in read)


def check_tools(cfg: RunConfig, encoder: PromptEncoder, rows: list[PromptRow]) -> dict[str, list[Any]]:
    """``rollout.workflow`` loads; ``rollout.tools`` and ``rollout.environment``: each loads and is a documented
    tool, the run can take them (chat prompts), the chat template renders their schemas and a tool's result. Sets
    ``encoder.tools``, so prompt lengths count the schemas the model will see. Returns the reward arguments the
    first row's episode adds (``environments``: an instance reset with the row), for the rewards' check."""
    from rl.rollout.tool_calls import CALL_SYNTAXES, UnknownCallSyntax
    from rl.rollout.tool_workflow import ToolSettings, environment_name, reset_arguments, snapshot
    from rl.rollout.tools import environment_tools, load_environment, load_tool, tool_schema

    if cfg.rollout.workflow is not None:
        _check_workflow(cfg.rollout.workflow)
    settings = ToolSettings.of(cfg)
    if settings is None:
        _check_environment_reward(cfg, [])
        return {}
    if not all(isinstance(r.prompt, list) for r in rows):
        raise BadInput(
            "rollout.tools/environment need chat prompts (the tools reach the model through the chat "
            "template); set data.chat=true"
        )
    tools = []
    for index, spec in enumerate(settings.tools):
        try:
            tools.append(load_tool(spec, settings.base_dir))
        except ValueError as e:
            raise BadInput(f"rollout.tools.{index}: {e}") from None
    environments: dict[str | None, Any] = {}  # an instance of each, by name (None: the one of every row)
    for name, spec in settings.specs().items():
        try:
            environments[name] = load_environment(spec, settings.base_dir)()
        except ValueError as e:
            raise BadInput(f"rollout.environment{'' if name is None else '.' + name}: {e}") from None
    _check_environment_reward(cfg, list(environments.values()))
    tool_sets = [tools + environment_tools(env) for env in environments.values()] or [tools]
    for tool_set in tool_sets:
        names = [t.__name__ for t in tool_set]
        if len(set(names)) < len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise BadInput(f"rollout.tools/environment: two tools named {twice[0]!r}; the model calls tools by name")
    # prompt lengths count every environment's tools: a bound, never short
    tools = list({t.__name__: t for tool_set in tool_sets for t in tool_set}.values())
    for row in rows:
        try:
            environment_name(environments, row)
        except ValueError as e:
            raise BadInput(f"rollout.environment: {e}; give each row an environment column naming one") from None
    schemas = [tool_schema(t) for t in tools]
    try:
        shown = encoder.tokenizer.apply_chat_template(
            [{"role": "user", "content": "-"}],
            tools=schemas,
            add_generation_prompt=True,
            tokenize=False,
            **encoder.template_kwargs,
        )
        renders = schemas[0]["function"]["name"] in shown
        if renders:
            tool_format(cfg, encoder).results([(tools[0].__name__, "-")])
    except UnknownCallSyntax as e:
        found = vllm_parsers_for(encoder)
        fix = (
            f"vLLM's {' and '.join(found)} parser reads it: set rollout.tool_parser={found[0]}"
            if found
            else "no tool parser of vLLM's reads it either"
        )
        raise BadInput(f"model.path {cfg.model.path!r}: {e}; {CALL_SYNTAXES}; {fix}") from None
    except BadInput:
        raise
    except Exception:  # the template failed on a tool call or a tool message
        renders = False
    if not renders:
        raise BadInput(
            f"model.path {cfg.model.path!r}: its chat template does not render tools and tool results; use a model "
            f"whose template supports tool calling ({CALL_SYNTAXES})"
        )
    encoder.tools = schemas
    if not environments:
        return {}
    row = rows[0]
    name = environment_name(environments, row)
    env = environments[name]
    try:
        env.reset(**reset_arguments(row, named=name is not None))
    except Exception as e:
        raise BadInput(
            f"rollout.environment: reset(**row) failed on row {row.prompt_id}: {type(e).__name__}: {e}"
        ) from None
    owned = EnvironmentReward() if owns_reward(env) else None
    return {"environments": [snapshot(env, owned)]}  # no episode yet: nothing for get_reward to score


def _check_environment_reward(cfg: RunConfig, environments: list[Any]) -> None:
    """The built-in reward ``environment`` needs an environment whose class defines ``get_reward``; such an
    environment without it is said in one warning (a reward function of the user's may call it instead)."""
    reads = _reads_environment_reward(cfg)
    owners = sorted({type(e).__name__ for e in environments if owns_reward(e)})
    if reads and not owners:
        classes = " and ".join(sorted({type(e).__name__ for e in environments}))
        what = f"{classes} defines no get_reward()" if environments else "there is no rollout.environment"
        raise BadInput(f"reward 'environment' is rollout.environment's get_reward(), but {what}; drop it or add one")
    if owners and not reads:
        log.warning(
            "rollout.environment %s defines get_reward(), which no reward reads unless one of yours calls it: add "
            "{fn: environment} to reward.functions to train on it (TRL adds it with weight 1)",
            " and ".join(owners),
        )


def _reads_environment_reward(cfg: RunConfig) -> bool:
    """Whether ``reward.functions`` lists the built-in ``environment`` (an environment's own ``get_reward()``)."""
    return any(f.fn == "environment" for f in cfg.reward.functions)


def fitting_rows(rows: list[PromptRow], lengths: list[int], rollout: RolloutConfig, what: str) -> list[PromptRow]:
    """Rows whose prompt (of ``lengths`` tokens, row by row) leaves ``rollout.max_tokens`` within
    ``rollout.max_model_len``; the rest counted and logged."""
    assert rollout.max_model_len is not None  # size_context sets it
    room = rollout.max_model_len - rollout.max_tokens
    kept = [r for r, n in zip(rows, lengths, strict=True) if n <= room]
    if rows and not kept:
        raise BadInput(
            f"no {what} prompt fits: the shortest has {min(lengths)} tokens, rollout.max_model_len "
            f"({rollout.max_model_len}) - rollout.max_tokens ({rollout.max_tokens}) leaves {room}; raise "
            f"rollout.max_model_len or lower rollout.max_tokens"
        )
    if len(kept) < len(rows):
        log.warning(
            "skipped %d of %d %s rows: prompt longer than %d tokens (rollout.max_model_len - rollout.max_tokens)",
            len(rows) - len(kept),
            len(rows),
            what,
            room,
        )
    return kept


def check_reward_model(reward: RewardFn, index: int) -> None:
    """A reward model's directory (config.json with one label, readable weights) and tokenizer, checked without
    loading the model; a hub name is taken as it is (no network here)."""
    key = f"reward.functions.{index}"
    path = check_model_path(reward.model, f"{key}.model")
    if Path(path).is_dir():
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
        labels = len(config.get("id2label") or {}) or config.get("num_labels", 2)
        if labels != 1:
            raise BadInput(
                f"{key}.model {reward.model!r}: a reward model has one label (num_labels=1), its config.json has "
                f"{labels}; give a sequence-classification reward model"
            )
    source, field = (
        (reward.processing_class, f"{key}.processing_class") if reward.processing_class else (path, f"{key}.model")
    )
    if Path(source).expanduser().exists():
        from transformers import AutoTokenizer

        try:
            AutoTokenizer.from_pretrained(source)
        except Exception as e:
            raise BadInput(f"{field} {source!r}: cannot load its tokenizer ({_line(e)})") from None
    elif source.startswith((".", "/", "~")) or not _HUB_NAME.fullmatch(source):
        raise BadInput(f"{field} {source!r} does not exist; give a tokenizer directory or a hub name")


def check_rewards(
    cfg: RunConfig,
    functions: list[tuple[str, Callable[..., Any]]],
    rows: list[PromptRow],
    encoder: PromptEncoder,
    extra_columns: dict[str, list[Any]],
) -> list[float | None]:
    """``check_reward`` of each reward function on the first of ``rows``, with the ``trainer_state`` of a run's
    first step; their values for it. With ``rollout.workflow``, a reward that requires an argument no row gives
    (one that the workflow's ``run`` returns, as TRL's ``rollout_func`` extra fields) is left to the run: a workflow
    that never returns it stops the run after a step's worth of groups, naming the argument."""
    state = RewardState.at(0, cfg.train.max_steps, cfg.train.batch_groups, len(rows))
    given = set(reward_arguments(rows[0], extra_columns))
    values = []
    for name, fn in functions:
        if cfg.rollout.workflow is not None and (needs := required_beyond(fn, given)):
            log.info(
                "reward %r is checked at the first groups, not here: it needs %s, which rollout.workflow %r returns",
                name,
                ", ".join(needs),
                cfg.rollout.workflow,
            )
            continue
        values.append(check_reward(name, fn, rows[0], encoder, cfg.reward.timeout_s, state, extra_columns))
    return values


def reward_arguments(row: PromptRow, extra: Iterable[str] = ()) -> list[str]:
    """The keyword arguments a reward call on ``row``'s group gets: ``prompts``, ``completions``, the row's columns
    and the per-sample ones, ``extra`` (what episodes add), TRL's hooks."""
    sample = Sample(index=0, tokens=[], logprobs=[], versions=[], finish_reason="stop")
    return ["prompts", "completions", *PromptEncoder.columns([row], [sample]), *extra, *TRL_HOOKS]


def required_beyond(fn: Callable[..., Any], given: set[str]) -> list[str]:
    """The parameters ``fn`` requires (no default) that are none of ``given``; none where its signature cannot be
    read."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in _parameters(fn) if p.kind in named and p.default is p.empty and p.name not in given]


def takes_any_keyword(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes ``**kwargs`` (as TRL's rewards do, since every column is passed to every reward); False
    where its signature cannot be read."""
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in _parameters(fn))


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    """``fn``'s parameters; none where its signature cannot be read (a builtin, an extension's callable)."""
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []


def check_reward(
    name: str,
    fn: Callable[..., Any],
    row: PromptRow,
    encoder: PromptEncoder,
    timeout_s: float,
    state: RewardState,
    extra_columns: dict[str, list[Any]] | None = None,
) -> float | None:
    """Call the reward ``fn`` (``name`` as the recipe gives it), in this process, on a group of ``PREFLIGHT_GROUP``
    samples of ``row``, each with its answer as the completion and ``state`` as the ``trainer_state``; its value for
    the first. A group of more than one, as training calls it: a reward that returns one value whatever it is given
    is found here, not at the first step.

    A reward that exits (``sys.exit``, or ``os._exit`` from the calling thread) is reported as one that raises."""
    where = f"reward {name!r} on row {row.prompt_id}"
    given = reward_arguments(row, extra_columns or {})
    arguments = ", ".join(given)
    if takes_any_keyword(fn) and (needs := required_beyond(fn, set(given))):  # a column the data lacks
        raise BadInput(
            f"{where}: it needs {' and '.join(map(repr, needs))}, which the data has no column for; give data with it "
            f"or drop the reward (a reward gets the keyword arguments {arguments})"
        )
    sample = Sample(index=0, tokens=encoder.encode(row.answer), logprobs=[], versions=[], finish_reason="stop")
    n = PREFLIGHT_GROUP
    columns = PromptEncoder.columns([row] * n, [sample] * n)
    columns |= {k: v * n for k, v in (extra_columns or {}).items()}  # with tools, ``environments``: the row's one
    outcome: dict[str, Any] = {}
    call = threading.Thread(
        target=_call_into,
        args=(outcome, fn, [row.prompt] * n, [encoder.completion(row.prompt, row.answer)] * n, columns, state),
        daemon=True,
    )
    real_exit, pid = os._exit, os.getpid()

    def exit_guard(code: int) -> None:  # os._exit of the reward's own thread (not of a forked child): raise instead
        if os.getpid() == pid and threading.get_ident() == call.ident:
            raise _Exited(f"os._exit({code})")
        real_exit(code)

    os._exit = exit_guard
    try:
        call.start()
        call.join(timeout_s)
    finally:
        os._exit = real_exit
    if call.is_alive():
        raise BadInput(f"{where}: no result within reward.timeout_s ({timeout_s:g} s)")
    if "exited" in outcome:
        raise BadInput(f"{where}: it exited ({outcome['exited']}); a reward returns a list of floats, it does not exit")
    if "error" in outcome:
        raise BadInput(f"{where}: {outcome['error']} (a reward gets the keyword arguments {arguments})")
    if "bad_output" in outcome:
        raise BadInput(f"{where}: {outcome['bad_output']}")
    if len(outcome["values"]) != n:
        raise BadInput(
            f"{where}: returned {len(outcome['values'])} value(s) for {n} completions; return one value per completion"
        )
    return outcome["values"][0]


PREFLIGHT_GROUP = 2  # the samples of the preflight call


class _Exited(SystemExit):
    """``os._exit`` called by a reward during the preflight call."""


def _call_into(
    outcome: dict[str, Any], fn: Any, prompts: list, completions: list, columns: dict, state: RewardState
) -> None:
    """Thread body: ``outcome["values"]``, or one line in ``outcome["error"]`` (the call raised),
    ``outcome["exited"]`` (it exited) or ``outcome["bad_output"]`` (it returned something other than numbers)."""
    try:
        out = call_reward(fn, prompts, completions, columns, state, CallLog())
    except _Exited as e:
        outcome["exited"] = str(e.code)
        return
    except SystemExit as e:
        outcome["exited"] = f"sys.exit({e.code!r})"
        return
    except BaseException as e:
        outcome["error"] = _line(e)
        return
    try:
        outcome["values"] = reward_values(out)
    except TypeError as e:
        outcome["bad_output"] = str(e)


def _line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
