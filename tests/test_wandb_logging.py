"""``logging.wandb``: an offline W&B run, with no network, holds the step metrics and the run config."""

import json
import subprocess
import sys

import pytest
from wandb_files import history, wandb_records

from rl.config import RunConfig, load_config
from rl.output.metrics import MetricsLogger
from rl.output.wandb_sink import WandbSink

pytest.importorskip("wandb")


def test_an_offline_run_writes_the_step_metrics_and_the_config(tmp_path):
    cfg = load_config(None, ["logging.wandb.project=tailor-test", "logging.wandb.mode=offline", "train.lr=0.25"])
    sink = WandbSink(cfg.logging.wandb, tmp_path, cfg.model_dump(mode="json"))
    logger = MetricsLogger(tmp_path, tensorboard=False, wandb=sink)
    logger.log(0, {"accuracy": 0.25}, kind="eval")
    logger.log(1, {"reward_mean": 0.5, "tag": "not a number"})
    logger.log(2, {"reward_mean": 0.75})
    logger.close()
    records = wandb_records(tmp_path)
    steps = [(h["_step"], {k: v for k, v in h.items() if not k.startswith("_")}) for h in history(records)]
    assert steps == [
        ("0", {"eval/accuracy": "0.25"}),
        ("1", {"train/reward_mean": "0.5"}),
        ("2", {"train/reward_mean": "0.75"}),
    ]
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.project == "tailor-test" and run.run_id == (tmp_path / "wandb_run_id").read_text().strip()
    config = {i.key: i.value_json for i in run.config.update}
    assert '"lr":0.25' in config["train"].replace(" ", "")
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 3  # the JSONL record is unchanged


def test_wandb_is_a_config_section_and_not_imported_unless_configured(tmp_path):
    assert RunConfig().logging.wandb is None
    with pytest.raises(ValueError, match="mode"):
        load_config(None, ["logging.wandb.project=p", "logging.wandb.mode=sometimes"])
    code = (
        "import sys; from pathlib import Path; from rl.output.metrics import MetricsLogger; "
        f"MetricsLogger(Path({str(tmp_path)!r}), tensorboard=False).close(); print('wandb' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_a_resumed_run_continues_its_wandb_run_and_a_new_one_starts_another(tmp_path):
    cfg = load_config(None, ["logging.wandb.project=tailor-test", "logging.wandb.mode=offline"]).logging.wandb
    ids = []
    for resume_step in (None, 1, None):
        sink = WandbSink(cfg, tmp_path, {}, resume=resume_step is not None)
        logger = MetricsLogger(tmp_path, tensorboard=False, resume_step=resume_step, wandb=sink)
        logger.log(2, {"reward_mean": 0.5})
        logger.close()
        ids.append((tmp_path / "wandb_run_id").read_text().strip())
    assert ids[0] == ids[1] != ids[2]


def test_each_steps_completions_are_a_wandb_table(tmp_path):
    cfg = load_config(None, ["logging.wandb.project=tailor-test", "logging.wandb.mode=offline"]).logging.wandb
    logger = MetricsLogger(tmp_path, tensorboard=False, wandb=WandbSink(cfg, tmp_path, {}))
    row = {"step": 1, "prompt_id": "p", "prompt": "3+4=", "completion": "7", "reward": 1.0, "advantage": 0.5}
    logger.log(1, {"reward_mean": 0.5})
    logger.log_completions(1, [row | {"rewards": {"arith_exact": 1.0}, "extra": {"note": [1, 2]}}])
    logger.close()
    tables = [h for h in history(wandb_records(tmp_path)) if "completions/_type" in h]
    assert [(h["_step"], h["completions/_type"], h["completions/nrows"]) for h in tables] == [
        ("1", '"table-file"', "1")
    ]
    (table_file,) = (tmp_path / "wandb").glob("offline-run-*/files/media/table/completions_1_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == [
        "step",
        "prompt_id",
        "prompt",
        "completion",
        "reward",
        "advantage",
        "arith_exact",
        "note",
    ]
    assert table["data"] == [[1, "p", "3+4=", "7", 1.0, 0.5, 1.0, "[1, 2]"]]
    assert (tmp_path / "completions.jsonl").read_text().count("\n") == 1


def test_an_online_run_without_an_api_key_is_one_line_before_ray(tmp_path, capsys, monkeypatch):
    """W&B online with no key configured: wandb's UsageError came as a traceback after Ray and the engines had started
    (~15 s in); now the run starts W&B first and says it in one line, no Ray started."""
    import ray

    from rl.cli.main import main

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # wandb reads its key from a netrc file too
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))

    def tripwire(*_args, **_kwargs):
        raise AssertionError("Ray started")

    monkeypatch.setattr(ray, "init", tripwire)
    argv = ["train", "arith_tiny", "logging.wandb.project=tailor-test", f"output_dir={tmp_path}", "train.max_steps=1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("bad input: logging.wandb: W&B did not start a run: No API key configured."), err
    assert err[-1].endswith("; log in (wandb login, or WANDB_API_KEY), or set logging.wandb.mode=offline")
