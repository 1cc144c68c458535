"""A run's checkpoints on disk, written (``write``) and loaded (``load``) with the trainer ranks, and the checks that
decide whether a run can resume from one.

Layout of a run directory::

    config.yaml                    the run's resolved config, written when it starts
    metrics.jsonl                  one line per record; a resume truncates it to the checkpoint's step
    checkpoints/step_000040/       one complete checkpoint
        model.safetensors, config.json, tokenizer files   the HF model (what ``rl eval`` and vLLM read)
        adapter/                   with LoRA: the adapter, as PEFT saves one (what a resume trains on)
        trainer_state.pt           optimizer state, trainer version, torch RNG (written by trainer rank 0)
        shaping.pkl                the shaping policy and the idle governor (length EMAs, TIE fits, budgets)
        driver.json                the prompt stream, counters, metrics clock, the run's settings and data digest

A checkpoint is written under ``step_N.tmp`` and renamed when complete, so a directory named ``step_N`` is
complete; a ``.tmp`` one (a run killed while writing) is never read and is removed by the next write.

A resume keeps every setting but ``RESUMABLE`` ones: it compares ``config.yaml`` with the settings the checkpoint
recorded, key by key. A setting added to Tailor since takes its default (said in the log), one removed is ignored
(``load_run_config`` warns of it), so a run started by an earlier version resumes under a later one. Checkpoints
written before the settings were recorded hold only their digest; for them ``config.yaml`` itself, a full dump of
the config that wrote them, stands in for the settings where its digest matches.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import pickle
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

from rl.config import RunConfig, load_run_config, parse_override, read_recipe
from rl.types import PromptRow

log = logging.getLogger("rl.checkpoint")
DISK_FULL_BYTES = 1 << 20  # less free space than this after a failed write: the disk filled

CHECKPOINTS = "checkpoints"
CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"  # rl train's, written as a run ends
DRIVER_STATE = "driver.json"
SHAPING_STATE = "shaping.pkl"
REQUIRED = ("model.safetensors", "config.json", "trainer_state.pt", SHAPING_STATE, DRIVER_STATE)
ADAPTER_DIR = "adapter"  # with LoRA: the adapter as PEFT saves one, what a resume trains on (not beside the model:
# vLLM loads every *.safetensors file beside config.json as the model's weights)
ADAPTER_WEIGHTS = "adapter_model.safetensors"
REFERENCE_WEIGHTS = "reference/model.safetensors"  # with algorithm.ref_sync_every: the KL reference, in a folder
# of its own for the same reason
# config keys a resume may change: how long to train, how often to save and evaluate, where and how wide things
# run. Anything else (model, data, seed, batch, algorithm, shaping, ...) would break the run's continuity.
RESUMABLE = (
    "train.max_steps",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.save_checkpoint",
    "eval.every",
    "eval.num_problems",
    "reward.num_workers",
    "reward.timeout_s",
    "rollout.num_workers",
    "rollout.cpu_threads_bind",
    "ray.address",
    "ray.num_cpus",
    "placement",  # where actors run: a run may resume on another (smaller) cluster
    "logging",
)
_WHERE = ("output_dir", "name")  # the run directory itself: follows the directory given to --resume


class CheckpointError(ValueError):
    """A run that cannot resume; the message is one line that says why and what to do."""


class CheckpointNotWritten(RuntimeError):
    """A checkpoint that could not be written (a full disk, a trainer rank's error); the message is one line."""


def _resumable(key: str) -> bool:
    return key in _WHERE or any(key == k or key.startswith(f"{k}.") for k in RESUMABLE)


def run_settings(cfg: RunConfig) -> dict[str, Any]:
    """Every setting a resume must keep (all but ``RESUMABLE`` and the run directory), by dotted key."""
    return _settings(cfg.model_dump(mode="json"))


def _settings(dumped: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and value:
                walk(value, f"{prefix}{key}.")
            else:
                flat[prefix + key] = value

    walk(dumped, "")
    return {k: v for k, v in flat.items() if not _resumable(k)}


def _digest(dumped: dict[str, Any]) -> str:
    """The settings digest checkpoints held before they recorded the settings themselves (of a dumped config)."""
    settings = json.loads(json.dumps(dumped))
    for key in [*RESUMABLE, *_WHERE]:
        *parents, leaf = key.split(".")
        node = settings
        for part in parents:
            node = node.get(part, {})
        node.pop(leaf, None)
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def data_fingerprint(rows: list[PromptRow]) -> str:
    """A digest of the training rows' ids and prompts, in order (the stream's positions index them)."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps([row.prompt_id, row.prompt]).encode())
    return h.hexdigest()[:16]


def save_config(cfg: RunConfig) -> None:
    """Write the resolved config to ``RUN_DIR/config.yaml`` (what ``--resume`` reads back)."""
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    (cfg.run_dir / CONFIG_FILE).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


def is_complete_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a run's complete checkpoint: a folder ``checkpoints/step_N`` (not ``step_N.tmp``)."""
    name = path.name
    return path.parent.name == CHECKPOINTS and name.startswith("step_") and name[5:].isdigit() and path.is_dir()


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """The complete checkpoints of ``run_dir``, oldest first."""
    found = [p for p in (run_dir / CHECKPOINTS).glob("step_*") if is_complete_checkpoint(p)]
    return sorted(found, key=lambda p: int(p.name[5:]))


def step_of(checkpoint: Path) -> int:
    return int(checkpoint.name[5:])


def latest_checkpoint(run_dir: Path) -> Path:
    """The newest complete checkpoint; ``CheckpointError`` if there is none or it lacks a file."""
    found = complete_checkpoints(run_dir)
    if not found:
        partial = sorted((run_dir / CHECKPOINTS).glob("step_*.tmp"))
        hint = f" (only {partial[-1].name}, which was still being written)" if partial else ""
        raise CheckpointError(
            f"{run_dir}: no complete checkpoint in {CHECKPOINTS}/{hint}; runs write one every "
            "train.checkpoint_every steps and at the end"
        )
    missing = [f for f in REQUIRED if not (found[-1] / f).exists()]
    if missing:
        raise CheckpointError(f"{found[-1]}: incomplete checkpoint (no {', '.join(missing)}); remove it to resume")
    return found[-1]


def read_driver_state(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / DRIVER_STATE).read_text())


def resume_config(run_dir: Path, overrides: list[str]) -> tuple[RunConfig, Path]:
    """The saved config of ``run_dir`` with ``overrides``, and the checkpoint to resume from. ``train.max_steps``
    is the checkpoint's own where it recorded one and ``overrides`` give none: an earlier resume may have moved it.

    Raises ``CheckpointError`` (one line) for a directory that is not a run, an override that would break
    continuity, no complete checkpoint, or a checkpoint written under another config.
    """
    if not (run_dir / CONFIG_FILE).exists():
        raise CheckpointError(f"{run_dir}: not a run directory (no {CONFIG_FILE}); give the directory of a run")
    for item in overrides:
        key = ".".join(parse_override(item)[0])
        if not _resumable(key):
            raise CheckpointError(
                f"override {key!r} would break the run's continuity; a resume may change only "
                f"{', '.join(RESUMABLE)} (start a new run to change the rest)"
            )
    if not complete_checkpoints(run_dir) and not _saves_checkpoints(run_dir / CONFIG_FILE):
        raise CheckpointError(
            f"{run_dir}: ran with train.save_checkpoint=false, so it has no checkpoint to resume from; train it anew "
            "(rl train with its recipe; another name= keeps this run)"
        )
    checkpoint = latest_checkpoint(run_dir)
    saved = read_driver_state(checkpoint)
    planned = [f"train.max_steps={saved['max_steps']}"] if "max_steps" in saved else []  # maybe moved by a resume
    where = [f"output_dir={run_dir.parent}", f"name={run_dir.name}"]
    cfg = load_run_config(run_dir / CONFIG_FILE, [*planned, *overrides, *where])
    then = settings_then(checkpoint, saved, run_dir / CONFIG_FILE)
    if then is None:
        raise CheckpointError(
            f"{checkpoint}: written under another config than {run_dir / CONFIG_FILE} now holds; restore that file or "
            "start a new run"
        )
    if changed := setting_changes(then, cfg):
        raise CheckpointError(
            f"{run_dir / CONFIG_FILE} changed since {checkpoint.name} was written: {changed}; restore it or start a "
            "new run"
        )
    check_adapter(cfg, checkpoint)
    if (step := saved["version"]) >= cfg.train.max_steps:
        raise CheckpointError(
            f"{checkpoint}: the run already reached step {step} (train.max_steps={cfg.train.max_steps}); raise "
            f"train.max_steps to train on, e.g. train.max_steps={step * 2}"
        )
    log_new_settings(then, cfg, checkpoint)
    return cfg, checkpoint


def _saves_checkpoints(config_file: Path) -> bool:
    """Whether the run whose config is ``config_file`` writes checkpoints (``train.save_checkpoint``)."""
    return read_recipe(config_file, local_paths=False).get("train", {}).get("save_checkpoint", True) is not False


def run_to_continue(cfg: RunConfig) -> Path | None:
    """The checkpoint to continue from when ``cfg``'s run directory holds this same run and the command trains it
    further: stopped before its last step (the command run again after a stop or a crash), or finished at fewer steps
    than the command's ``train.max_steps``; None where it holds no run, or this run finished (the same command again
    starts it over). Raises ``CheckpointError`` (one line) for a run there under other settings, which a new run
    would remove."""
    config_file = cfg.run_dir / CONFIG_FILE
    if not config_file.exists():
        return None
    try:
        checkpoint = latest_checkpoint(cfg.run_dir)
    except CheckpointError:  # none, or an incomplete one: nothing a resume could read
        _keep_finished_records(cfg, config_file)
        return None
    saved = read_driver_state(checkpoint)
    step = saved["version"]
    planned = saved.get("max_steps") or read_recipe(config_file, local_paths=False)["train"]["max_steps"]
    then = settings_then(checkpoint, saved, config_file)
    changed = setting_changes(then, cfg) if then is not None else f"{config_file} was edited since"
    where = shlex.quote(str(cfg.run_dir))
    if step >= planned:  # finished
        if changed:
            raise _finished_elsewhere(cfg, step, changed)
        if cfg.train.max_steps <= step:
            return None
        return _continuing(
            cfg, checkpoint, then, f"finished at step {step}: training it on to step {cfg.train.max_steps}"
        )
    if not changed and step >= cfg.train.max_steps:
        changed = f"it is at step {step}, this command's train.max_steps is {cfg.train.max_steps}"
    if changed:
        raise CheckpointError(
            f"{cfg.run_dir} holds an unfinished run (stopped at step {step} of {planned}) that this command would not "
            f"continue ({changed}); continue it with rl train --resume {where}, or give this run another name= or "
            "output_dir="
        )
    return _continuing(cfg, checkpoint, then, f"stopped at step {step} of {planned}: continuing it")


def _keep_finished_records(cfg: RunConfig, config_file: Path) -> None:
    """A run that finished without checkpoints (``train.save_checkpoint=false``) leaves its metrics and summary:
    ``CheckpointError`` where ``cfg`` holds other settings, as over a finished run with checkpoints; nothing for a
    run that stopped or failed, which has no step to resume from."""
    try:
        ended = json.loads((cfg.run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):  # none: the run did not end (its records start anew), or it is unreadable
        return
    if ended.get("stopped_by") or ended.get("failure"):
        return
    if changed := setting_changes(_settings(read_recipe(config_file, local_paths=False)), cfg):
        raise _finished_elsewhere(cfg, ended.get("steps"), changed)


def _finished_elsewhere(cfg: RunConfig, step: int | None, changed: str) -> CheckpointError:
    """The refusal of a new run over a finished one held under other settings (``changed``)."""
    return CheckpointError(
        f"{cfg.run_dir} holds a finished run (step {step}) under other settings ({changed}), which a new run there "
        f"would remove; give this run another name= or output_dir=, or remove {shlex.quote(str(cfg.run_dir))} first"
    )


def _continuing(cfg: RunConfig, checkpoint: Path, then: dict[str, Any], how: str) -> Path:
    """``checkpoint``, once its adapter is checked, with a line saying the run continues (``how``)."""
    check_adapter(cfg, checkpoint)
    log_new_settings(then, cfg, checkpoint)
    log.info("%s holds this run, %s from %s (another name= starts a new one)", cfg.run_dir, how, checkpoint.name)
    return checkpoint


def check_adapter(cfg: RunConfig, checkpoint: Path) -> None:
    """A LoRA run resumes from its checkpoint's adapter: ``CheckpointError`` (one line) where it has none."""
    if cfg.train.lora is not None and not (checkpoint / ADAPTER_DIR / ADAPTER_WEIGHTS).is_file():
        raise CheckpointError(
            f"{checkpoint}: no LoRA adapter ({ADAPTER_DIR}/{ADAPTER_WEIGHTS}), which a LoRA run resumes from; resume "
            "from a checkpoint that has one, or start a new run with model.path set to this checkpoint"
        )


def settings_then(checkpoint: Path, saved: dict[str, Any], config_file: Path) -> dict[str, Any] | None:
    """The settings ``checkpoint`` was written under: recorded, or, where it holds only their digest (written
    before they were recorded), ``config_file``'s if its digest matches; None where it does not (the file was
    edited since)."""
    if "settings" in saved:
        return saved["settings"]
    dumped = read_recipe(config_file, local_paths=False)
    return _settings(dumped) if _digest(dumped) == saved.get("config") else None


def setting_changes(then: dict[str, Any], cfg: RunConfig) -> str:
    """The settings ``cfg`` holds otherwise than ``then`` (a checkpoint's), said briefly ("" for none)."""
    now = run_settings(cfg)
    changed = sorted(k for k in now.keys() & then.keys() if now[k] != then[k])
    more = f" (and {len(changed) - 3} more)" if len(changed) > 3 else ""
    return "; ".join(f"{k} is {now[k]!r}, was {then[k]!r}" for k in changed[:3]) + more


def log_new_settings(then: dict[str, Any], cfg: RunConfig, checkpoint: Path) -> None:
    """Say which settings of ``cfg`` Tailor added since ``checkpoint`` was written: a resume gives them defaults."""
    if added := sorted(run_settings(cfg).keys() - then.keys()):
        log.info("settings new since %s take their defaults: %s", checkpoint.name, ", ".join(added))


EARLIER_OUTPUTS = ("tb", SUMMARY_FILE, "report.md", "plots")  # TensorBoard, rl train's summary, rl report's


def start_fresh(run_dir: Path) -> None:
    """A new run in ``run_dir``: an earlier run's checkpoints there are removed, with a warning saying so, and its
    outputs that the new run would not overwrite at once (``metrics.jsonl`` and ``completions.jsonl`` start anew
    with the run's logger); ``logs/`` already holds the new run's."""
    found = complete_checkpoints(run_dir)
    if found:
        log.warning(
            "%s held an earlier run (checkpoint at step %d); starting over. To continue a run instead: "
            "rl train --resume %s",
            run_dir,
            step_of(found[-1]),
            shlex.quote(str(run_dir)),
        )
    shutil.rmtree(run_dir / CHECKPOINTS, ignore_errors=True)
    for name in EARLIER_OUTPUTS:
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def partial(run_dir: Path, step: int) -> Path:
    """Where step ``step``'s checkpoint is written until it is complete."""
    return run_dir / CHECKPOINTS / f"step_{step:06d}.tmp"


def begin(run_dir: Path, step: int) -> Path:
    """An empty directory to write step ``step``'s checkpoint into (an old partial one is removed)."""
    tmp = partial(run_dir, step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def commit(tmp: Path, driver_state: dict[str, Any], keep: int) -> Path:
    """Write ``driver.json`` into ``tmp``, rename it complete, keep only the newest ``keep`` checkpoints."""
    (tmp / DRIVER_STATE).write_text(json.dumps(driver_state, indent=1))
    final = tmp.with_suffix("")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in complete_checkpoints(final.parent.parent)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


async def on_every_rank(trainers: list[Any], method: str, *args: Any) -> Any:
    """Call ``method`` on every trainer rank at once (their gathers meet); returns rank 0's answer."""
    return (await asyncio.gather(*[getattr(t, method).remote(*args) for t in trainers]))[0]


async def write(cfg: RunConfig, step: int, trainers: list[Any], shaping: Any, state: dict[str, Any]) -> Path:
    """A complete checkpoint of ``step``: every trainer rank's state, ``shaping`` (the shaping policy and idle
    governor, pickled) and the driver's ``state`` with the trainer's digest; returns its directory."""
    t0 = time.monotonic()
    tmp = partial(cfg.run_dir, step)
    try:
        begin(cfg.run_dir, step)
        await on_every_rank(trainers, "save", str(tmp))
        (tmp / SHAPING_STATE).write_bytes(pickle.dumps(shaping))
        state = {**state, "trainer_digest": await on_every_rank(trainers, "state_digest")}
        path = commit(tmp, state, cfg.train.keep_checkpoints)
    except (OSError, RuntimeError) as e:  # a rank's error comes wrapped by Ray, as a subclass of its own type
        log.debug("checkpoint of step %d failed", step, exc_info=True)
        raise _not_written(tmp, step, e) from None
    log.info("checkpoint of step %d written to %s in %.1f s", step, path, time.monotonic() - t0)
    return path


def _not_written(tmp: Path, step: int, error: BaseException) -> CheckpointNotWritten:
    """Why step ``step``'s checkpoint failed, in one line; its partial directory is removed (on a full disk it
    only holds the space a resume, or the next checkpoint, needs)."""
    written = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file()) if tmp.is_dir() else 0
    try:
        full = shutil.disk_usage(tmp.parent).free < DISK_FULL_BYTES
    except OSError:  # no folder to ask (it could not be made)
        full = False
    shutil.rmtree(tmp, ignore_errors=True)
    where = f"the checkpoint of step {step} could not be written to {tmp.parent}"
    if full:
        return CheckpointNotWritten(
            f"{where}: the disk is full ({written / 2**20:.1f} MB written before it filled, removed); free space there"
        )
    cause = getattr(error, "cause", None) or error  # a trainer rank's own error, as Ray carries it
    lines = str(cause).strip().splitlines()
    return CheckpointNotWritten(f"{where}: {type(cause).__name__}: {lines[-1] if lines else ''}")


def read_shaping(checkpoint: Path) -> dict[str, Any]:
    """The shaping policy and idle governor a checkpoint holds (``{"policy": ..., "governor": ...}``)."""
    return pickle.loads((checkpoint / SHAPING_STATE).read_bytes())


async def load(checkpoint: Path, trainers: list[Any]) -> tuple[dict[str, Any], bool]:
    """Load ``checkpoint`` into every trainer rank; returns the driver's saved state and whether the trainer state
    loaded (every parameter and AdamW moment) has the digest taken of the trainer when the checkpoint was written."""
    await asyncio.gather(*[t.load.remote(str(checkpoint)) for t in trainers])
    saved = read_driver_state(checkpoint)
    return saved, await on_every_rank(trainers, "state_digest") == saved["trainer_digest"]
