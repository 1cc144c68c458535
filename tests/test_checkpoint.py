"""Checkpoint layout and the resume checks: everything here runs before any actor would start."""

import json
import logging
import time

import pytest
import yaml

from rl.cli.common import recipe_path
from rl.config import load_config, load_run_config
from rl.loop import checkpoint
from rl.loop.checkpoint import CheckpointError, resume_config
from rl.output.metrics import MetricsLogger


def _run(tmp_path, *overrides):
    cfg = load_config(recipe_path("arith_tiny"), [f"output_dir={tmp_path}", "name=r", *overrides])
    checkpoint.save_config(cfg)
    return cfg


def _write_checkpoint(cfg, step, **state):
    tmp = checkpoint.begin(cfg.run_dir, step)
    for name in checkpoint.REQUIRED[:-1]:
        (tmp / name).write_text("x")
    return checkpoint.commit(tmp, {"version": step, "settings": checkpoint.run_settings(cfg), **state}, keep=2)


def test_commit_renames_complete_and_keeps_the_newest(tmp_path):
    cfg = _run(tmp_path)
    for step in (10, 20, 30):
        _write_checkpoint(cfg, step)
    checkpoint.begin(cfg.run_dir, 40)  # a run killed while writing step 40
    assert [p.name for p in checkpoint.complete_checkpoints(cfg.run_dir)] == ["step_000020", "step_000030"]
    assert checkpoint.latest_checkpoint(cfg.run_dir).name == "step_000030"


def test_resume_reads_the_saved_config_with_safe_overrides(tmp_path):
    cfg = _run(tmp_path, "train.max_steps=30", "train.lr=0.002")
    _write_checkpoint(cfg, 20)
    resumed, path = resume_config(cfg.run_dir, ["train.max_steps=60", "eval.every=5"])
    assert path.name == "step_000020"
    assert resumed.train.max_steps == 60 and resumed.eval.every == 5 and resumed.train.lr == 0.002


@pytest.mark.parametrize(
    ("setup", "overrides", "message"),
    [
        ("none", [], "not a run directory"),
        ("config", [], "no complete checkpoint"),
        ("partial", [], "only step_000010.tmp, which was still being written"),
        ("ok", ["train.lr=0.5"], "override 'train.lr' would break the run's continuity"),
        ("ok", ["seed=3"], "override 'seed' would break"),
        ("other", [], "config.yaml changed since step_000010 was written: seed is 0, was 99; restore it or start"),
        ("ok", ["train.max_steps=10"], "already reached step 10 (train.max_steps=10); raise train.max_steps to"),
        (
            "ok",
            ["train.max_steps=5"],
            "already reached step 10 (train.max_steps=5); raise train.max_steps to train on, e.g. train.max_steps=20",
        ),  # not a lower max_steps's double, which the checkpoint had passed
        ("missing", [], "incomplete checkpoint (no trainer_state.pt)"),
    ],
)
def test_resume_refuses_with_one_line(tmp_path, setup, overrides, message):
    cfg = load_config(recipe_path("arith_tiny"), [f"output_dir={tmp_path}", "name=r", "train.max_steps=30"])
    if setup != "none":
        checkpoint.save_config(cfg)
    if setup == "partial":
        checkpoint.begin(cfg.run_dir, 10)
    if setup in ("ok", "other", "missing"):
        other = cfg.model_copy(update={"seed": 99}) if setup == "other" else cfg
        path = _write_checkpoint(other, 10)
        if setup == "missing":
            (path / "trainer_state.pt").unlink()
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        resume_config(cfg.run_dir, overrides)
    assert "\n" not in str(e.value)


def test_a_lora_run_resumes_only_from_a_checkpoint_holding_its_adapter(tmp_path):
    """By --resume or the same command again. Without it the trainer rank raised FileNotFoundError once started
    (a traceback); now one line before."""
    cfg = _run(tmp_path, "train.max_steps=30", "train.lora.rank=4")
    path = _write_checkpoint(cfg, 10)
    for resume in (lambda: resume_config(cfg.run_dir, []), lambda: checkpoint.run_to_continue(cfg)):
        with pytest.raises(CheckpointError, match=r"step_000010: no LoRA adapter \(adapter/adapter_model.safetensors"):
            resume()
    (path / checkpoint.ADAPTER_DIR).mkdir()
    (path / checkpoint.ADAPTER_DIR / checkpoint.ADAPTER_WEIGHTS).write_text("x")
    assert resume_config(cfg.run_dir, [])[1] == checkpoint.run_to_continue(cfg) == path


def test_a_new_run_over_an_old_one_starts_over(tmp_path, caplog):
    cfg = _run(tmp_path)
    _write_checkpoint(cfg, 10)
    earlier = MetricsLogger(cfg.run_dir)  # the earlier run's TensorBoard events: step 1 and 2 of its loss
    for step in (1, 2):
        earlier.log(step, {"loss": 0.5})
    earlier.close()
    for name in ("summary.json", "report.md"):
        (cfg.run_dir / name).write_text("{}")
    (cfg.run_dir / "plots").mkdir()
    (cfg.run_dir / "logs").mkdir(exist_ok=True)
    checkpoint.start_fresh(cfg.run_dir)
    assert checkpoint.complete_checkpoints(cfg.run_dir) == []
    assert "starting over" in caplog.text and "--resume" in caplog.text
    # TensorBoard would show both runs' step 1 and 2; a stale summary or report would describe the old run
    assert [n for n in ("tb", "summary.json", "report.md", "plots") if (cfg.run_dir / n).exists()] == []
    assert (cfg.run_dir / "logs").is_dir()  # the new run's own logs are already there


def test_metrics_of_a_resumed_run_hold_each_step_once(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    logger.log(0, {"accuracy": 0.2}, kind="eval")
    for step in range(1, 6):
        logger.log(step, {"loss": float(step)})
    logger.close()
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "train", "st')  # killed mid-line

    resumed = MetricsLogger(tmp_path, tensorboard=False, resume_step=3)
    for step in range(4, 7):
        resumed.log(step, {"loss": 10.0 + step})
    resumed.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [("eval", 0)] + [("train", s) for s in range(1, 7)]
    assert [r["loss"] for r in records[1:]] == [1.0, 2.0, 3.0, 14.0, 15.0, 16.0]
    times = [r["time_s"] for r in records]
    assert times == sorted(times)  # the clock goes on from the checkpoint

    MetricsLogger(tmp_path, tensorboard=False).close()  # a new run starts the file afresh
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_tensorboard_of_a_resumed_run_holds_each_step_once(tmp_path):
    """A run killed after step 5 and resumed from its step-3 checkpoint: TensorBoard drops steps 4 and 5 as the
    killed run wrote them, and shows the resumed run's values there (as a reader loads the event files)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    killed = MetricsLogger(tmp_path)
    for step in range(1, 6):
        killed.log(step, {"loss": float(step)})
    killed.close()
    (killed_file,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    _second, host, _pid, uid = killed_file.name.removeprefix("events.out.tfevents.").rsplit(".", 3)
    # the killed process had a pid that sorts after any the resumed one gets, and the resume starts in its second
    killed_file.rename(killed_file.with_name(f"events.out.tfevents.{int(time.time()):010d}.{host}.99999999.{uid}"))
    resumed = MetricsLogger(tmp_path, resume_step=3)
    for step in range(4, 7):
        resumed.log(step, {"loss": 10.0 + step})
    resumed.close()

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (4, 14.0),
        (5, 15.0),
        (6, 16.0),
    ]


def test_resume_refuses_when_the_training_rows_changed(tmp_path):
    """The stream's positions index the training rows: a checkpoint written over other rows is refused, in one line,
    before any actor starts."""
    from rl.inputs.preflight import RunInputs
    from rl.loop.driver import Driver
    from rl.types import PromptRow

    rows = [PromptRow(f"p{i}", f"{i}+1=", str(i + 1)) for i in range(4)]
    cfg = _run(tmp_path, "train.max_steps=30")
    path = _write_checkpoint(cfg, 10, data=checkpoint.data_fingerprint(rows))
    edited = [*rows[:3], PromptRow("p3", "3+2=", "5")]  # one prompt changed in place
    with pytest.raises(CheckpointError, match="the training rows changed since it was written") as e:
        Driver(cfg, RunInputs("", None, edited, []), resume=path)
    assert "\n" not in str(e.value)


def _legacy_run(tmp_path, edit):
    """A run directory as an earlier Tailor left it: config.yaml a full dump of that version's config (``edit``
    makes it one: a setting it did not have yet, one it still had), the checkpoint holding only its digest."""
    cfg = _run(tmp_path, "train.max_steps=30")
    dumped = yaml.safe_load((cfg.run_dir / "config.yaml").read_text())
    edit(dumped)
    (cfg.run_dir / "config.yaml").write_text(yaml.safe_dump(dumped, sort_keys=False))
    tmp = checkpoint.begin(cfg.run_dir, 10)
    for name in checkpoint.REQUIRED[:-1]:
        (tmp / name).write_text("x")
    checkpoint.commit(tmp, {"version": 10, "config": checkpoint._digest(dumped)}, keep=2)
    return cfg


def _earlier_version(dumped):
    del dumped["rollout"]["sleep_while_training"]  # added since
    dumped["rollout"]["max_concurrent_groups"] = 4  # removed since


def test_a_run_an_earlier_tailor_started_resumes_with_new_settings_at_their_defaults(tmp_path, caplog):
    cfg = _legacy_run(tmp_path, _earlier_version)
    caplog.set_level(logging.INFO)
    resumed, path = resume_config(cfg.run_dir, ["train.max_steps=60"])
    assert path.name == "step_000010" and resumed.train.max_steps == 60
    assert resumed.rollout.sleep_while_training is False
    assert "settings this version of Tailor no longer has are ignored: rollout.max_concurrent_groups" in caplog.text
    assert "settings new since step_000010 take their defaults: rollout.sleep_while_training" in caplog.text

    (cfg.run_dir / "config.yaml").write_text((cfg.run_dir / "config.yaml").read_text().replace("seed: 0", "seed: 5"))
    with pytest.raises(CheckpointError, match="written under another config than .* now holds; restore that file"):
        resume_config(cfg.run_dir, [])  # edited since: its digest no longer matches, and nothing says what changed


def test_settings_recorded_by_a_checkpoint_that_this_tailor_no_longer_has_are_ignored(tmp_path, caplog):
    cfg = _run(tmp_path, "train.max_steps=30")
    settings = checkpoint.run_settings(cfg)
    del settings["rollout.sleep_while_training"]
    _write_checkpoint(cfg, 10, settings={**settings, "rollout.max_concurrent_groups": 4})
    caplog.set_level(logging.INFO)
    config = cfg.run_dir / "config.yaml"
    config.write_text(config.read_text().replace("seed: 0", "seed: 5", 1))  # the run's own seed
    with pytest.raises(CheckpointError, match="changed since step_000010 was written: seed is 5, was 0"):
        resume_config(cfg.run_dir, [])
    assert "new since" not in caplog.text  # a refused resume says only why it is refused

    config.write_text(config.read_text().replace("seed: 5", "seed: 0", 1))
    assert resume_config(cfg.run_dir, [])[1].name == "step_000010"
    assert "settings new since step_000010 take their defaults: rollout.sleep_while_training" in caplog.text


def test_a_run_directory_from_an_earlier_tailor_loads_for_rl_eval(tmp_path, caplog):
    cfg = _legacy_run(tmp_path, _earlier_version)
    assert load_run_config(cfg.run_dir / "config.yaml").train.max_steps == 30
    assert "rollout.max_concurrent_groups" in caplog.text


def test_the_same_command_after_a_stop_continues_the_run_and_another_one_is_refused(tmp_path, caplog):
    cfg = _run(tmp_path, "train.max_steps=30")
    assert checkpoint.run_to_continue(cfg) is None  # no checkpoint yet: a new run
    _write_checkpoint(cfg, 10, max_steps=30)
    caplog.set_level(logging.INFO)
    assert checkpoint.run_to_continue(cfg).name == "step_000010"
    assert "holds this run, stopped at step 10 of 30: continuing it from step_000010" in caplog.text
    longer = load_config(recipe_path("arith_tiny"), [f"output_dir={tmp_path}", "name=r", "train.max_steps=60"])
    assert checkpoint.run_to_continue(longer).name == "step_000010"  # a resumable setting is the command's own

    other = load_config(recipe_path("arith_tiny"), [f"output_dir={tmp_path}", "name=r", "train.max_steps=30", "seed=5"])
    refused = (
        f"{cfg.run_dir} holds an unfinished run (stopped at step 10 of 30) that this command would not continue "
        f"(seed is 5, was 0); continue it with rl train --resume {cfg.run_dir}, or give this run another name= or "
        "output_dir="
    )
    with pytest.raises(CheckpointError) as e:
        checkpoint.run_to_continue(other)
    assert str(e.value) == refused
    shorter = load_config(recipe_path("arith_tiny"), [f"output_dir={tmp_path}", "name=r", "train.max_steps=8"])
    with pytest.raises(CheckpointError, match=r"\(it is at step 10, this command's train.max_steps is 8\)"):
        checkpoint.run_to_continue(shorter)

    _write_checkpoint(cfg, 30, max_steps=30)  # the run finished: the same command trains a new one over it
    assert checkpoint.run_to_continue(cfg) is None


def test_a_finished_run_is_trained_on_by_a_longer_command_and_kept_from_another_one(tmp_path, caplog):
    """Over a finished run, the same command starts it over; with more steps it trains the run on (as --resume
    does); with other settings (a seed sweep into one name) it is refused, not removed."""
    cfg = _run(tmp_path, "train.max_steps=30")
    _write_checkpoint(cfg, 30, max_steps=30)
    caplog.set_level(logging.INFO)
    assert checkpoint.run_to_continue(cfg) is None
    longer = load_config(recipe_path("arith_tiny"), [f"output_dir={tmp_path}", "name=r", "train.max_steps=60"])
    assert checkpoint.run_to_continue(longer).name == "step_000030"
    assert "holds this run, finished at step 30: training it on to step 60 from step_000030" in caplog.text
    seed = load_config(recipe_path("arith_tiny"), [f"output_dir={tmp_path}", "name=r", "train.max_steps=30", "seed=1"])
    with pytest.raises(CheckpointError) as e:
        checkpoint.run_to_continue(seed)
    assert str(e.value) == (
        f"{cfg.run_dir} holds a finished run (step 30) under other settings (seed is 1, was 0), which a new run there "
        f"would remove; give this run another name= or output_dir=, or remove {cfg.run_dir} first"
    )
    assert [p.name for p in checkpoint.complete_checkpoints(cfg.run_dir)] == ["step_000030"]  # kept


def test_a_run_finished_without_checkpoints_keeps_its_records_from_another_command(tmp_path):
    """``train.save_checkpoint=false``: the finished run's metrics and summary are all it leaves, and a seed sweep
    into its name would remove them; the same command starts it over, as does any command over a stopped run."""
    cfg = _run(tmp_path, "train.max_steps=30", "train.save_checkpoint=false")
    summary = cfg.run_dir / checkpoint.SUMMARY_FILE
    summary.write_text(json.dumps({"steps": 30, "stopped_by": None, "failure": None}))
    assert checkpoint.run_to_continue(cfg) is None
    seed = load_config(
        recipe_path("arith_tiny"),
        [f"output_dir={tmp_path}", "name=r", "train.max_steps=30", "train.save_checkpoint=false", "seed=1"],
    )
    with pytest.raises(CheckpointError) as e:
        checkpoint.run_to_continue(seed)
    assert str(e.value) == (
        f"{cfg.run_dir} holds a finished run (step 30) under other settings (seed is 1, was 0), which a new run there "
        f"would remove; give this run another name= or output_dir=, or remove {cfg.run_dir} first"
    )
    summary.write_text(json.dumps({"steps": 12, "stopped_by": "SIGTERM", "failure": None}))
    assert checkpoint.run_to_continue(seed) is None  # stopped with nothing to resume from: a new run
    with pytest.raises(CheckpointError) as e:
        resume_config(cfg.run_dir, [])
    assert str(e.value) == (
        f"{cfg.run_dir}: ran with train.save_checkpoint=false, so it has no checkpoint to resume from; train it anew "
        "(rl train with its recipe; another name= keeps this run)"
    )


def test_a_resume_takes_the_last_step_the_checkpoint_recorded(tmp_path):
    """A run of 30 steps resumed with train.max_steps=80 and stopped at step 50: a plain --resume continues to 80,
    where config.yaml (written when the run started) still says 30."""
    cfg = _run(tmp_path, "train.max_steps=30")
    _write_checkpoint(cfg, 50, max_steps=80)
    resumed, path = resume_config(cfg.run_dir, [])
    assert path.name == "step_000050" and resumed.train.max_steps == 80
    assert resume_config(cfg.run_dir, ["train.max_steps=120"])[0].train.max_steps == 120  # the command's own wins

    _write_checkpoint(cfg, 80, max_steps=80)
    with pytest.raises(
        CheckpointError, match=r"already reached step 80 \(train.max_steps=80\); raise train.max_steps to train on"
    ):
        resume_config(cfg.run_dir, [])
