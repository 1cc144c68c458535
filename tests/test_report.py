"""``rl report``: plots and Markdown summary from a synthetic metrics.jsonl."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from rl.cli.main import main
from rl.output.report import load_run, summary_rows, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ALL_PLOTS = {"reward", "response_length", "tokens", "staleness", "weight_sync", "throughput", "optimization"}
SYNC_S = {1: 0.1, 2: 0.2, 4: 0.3, 5: 0.4, 6: 0.5}  # step 3 lacks weight_sync_s: the mean must be 0.3, not 0.25


def train_record(step: int) -> dict:
    """A full train line like ``continuous_training`` logs (step 3 drops several keys)."""
    record = {
        "kind": "train",
        "step": step,
        "time_s": 10.0 + 2 * step,
        "reward_mean": 0.1 * step + 0.15,
        "reward_std": 0.3,
        "accuracy": 0.1 * step,
        "truncated_frac": 0.05 * step,
        "generated_tokens": 1000.0 + step,
        "kept_tokens": 900.0,
        "waste_ratio": 1 - 900.0 / (1000.0 + step),
        "staleness_mean": 0.5,
        "staleness_max": float(step % 3),
        "response_len_p50": 20.0,
        "response_len_p90": 30.0,
        "response_len_p99": 35.0,
        "response_len_max": 40.0,
        "loss": 0.01 / step,
        "grad_norm": 1.0 / step,
        "approx_kl": 1e-3 * step,
        "step_seconds": 2.0,
        "trainer_idle_frac": 0.4,
        "rollout_tokens_per_s": 500.0,
        "trainer_tokens_per_s": 2000.0,
    }
    if step in SYNC_S:
        record["weight_sync_s"] = SYNC_S[step]
    if step == 3:
        for key in ("loss", "grad_norm", "approx_kl", "response_len_p50", "response_len_max", "waste_ratio"):
            del record[key]
    return record


def eval_record(step: int, accuracy: float, time_s: float) -> dict:
    return {"kind": "eval", "step": step, "time_s": time_s, "accuracy": accuracy, "num_problems": 8.0}


def write_lines(run_dir: Path, records: list[dict], tail: str = "") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in records)
    (run_dir / "metrics.jsonl").write_text(text + tail)


def synthetic_run(summary: bool = True) -> list[dict]:
    """Eval at step 0 (0.25), six train steps, eval at step 6 (0.625), optionally the summary line."""
    records = [eval_record(0, 0.25, 5.0), *[train_record(s) for s in range(1, 7)], eval_record(6, 0.625, 30.0)]
    if summary:
        records.append(
            {"kind": "summary", "step": 6, "time_s": 31.0, "accuracy_before": 0.25, "accuracy_after": 0.625}
            | {"train_seconds": 24.5, "steps": 6}
        )
    return records


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def table(report: str) -> dict[str, str]:
    """The report's summary table as {metric: value}."""
    rows = [line.strip("|").split("|") for line in report.splitlines() if line.startswith("| ")]
    return {name.strip(): value.strip() for name, value in rows}


def test_report_writes_plots_and_summary(tmp_path: Path) -> None:
    # A partial last line (a run killed mid-write) must be skipped, not counted as step 7.
    write_lines(tmp_path, synthetic_run(), tail='{"kind": "train", "step": 7, "reward_mean": 0.9')
    report = write_report(tmp_path)

    assert report == tmp_path / "report.md"
    pngs = {p.stem: p for p in (tmp_path / "plots").glob("*.png")}
    assert set(pngs) == ALL_PLOTS
    for path in pngs.values():
        width, height = png_size(path)
        assert width >= 400 and height >= 200
    text = report.read_text()
    for name in ALL_PLOTS:
        assert f"(plots/{name}.png)" in text
    rows = table(text)
    assert rows["held-out accuracy"] == "0.250 -> 0.625"
    assert rows["train steps"] == "6 (last step 6)"
    assert rows["final train reward"] == "0.750 (step 6)"
    assert rows["mean weight-sync seconds"] == "0.300"
    assert rows["mean step seconds"] == "2.000"
    assert rows["mean staleness"] == "0.50 (max 2)"
    assert rows["rollout tokens/s (mean)"] == "500"
    assert "24.5 s training" in rows["wall time"]
    assert "1 unreadable line(s) skipped" in text


def test_report_uses_last_run_and_eval_points_without_summary(tmp_path: Path) -> None:
    # The logger appends: an earlier (crashed) run precedes the one to report.
    earlier = [eval_record(0, 0.9, 50.0), train_record(1) | {"time_s": 60.0, "reward_mean": 0.99}]
    write_lines(tmp_path, earlier + synthetic_run(summary=False))
    run = load_run(tmp_path / "metrics.jsonl")  # the table only: plotting is covered above
    assert run.earlier_runs == 1
    rows = dict(summary_rows(run))
    assert rows["held-out accuracy"] == "0.250 (step 0) -> 0.625 (step 6)"
    assert rows["train steps"] == "6 (last step 6)"
    assert rows["final train reward"] == "0.750 (step 6)"


def test_evaluations_of_several_samples_get_a_pass_at_k_row(tmp_path: Path) -> None:
    """``eval.samples=4``: the evaluations log pass@1..4; the table shows pass@4 from the first to the last."""
    evals = [
        eval_record(step, acc, time_s) | {"samples_per_problem": 4.0, "pass@2": acc + 0.1, "pass@4": acc + 0.2}
        for step, acc, time_s in ((0, 0.25, 5.0), (6, 0.5, 30.0))
    ]
    write_lines(tmp_path, [evals[0], *(train_record(s) for s in range(1, 7)), evals[1]])
    rows = dict(summary_rows(load_run(tmp_path / "metrics.jsonl")))
    assert rows["held-out pass@4"] == "0.450 (step 0) -> 0.700 (step 6)"
    write_lines(tmp_path, synthetic_run(summary=False))  # one sample a problem: no such row
    assert not any(name.startswith("held-out pass@") for name, _ in summary_rows(load_run(tmp_path / "metrics.jsonl")))


def reward_only_run() -> list[dict]:
    """Two train lines with reward keys only: just the reward plot has data."""
    return [{"kind": "train", "step": s, "time_s": float(s), "reward_mean": 0.5, "accuracy": 0.5} for s in (1, 2)]


def test_plots_with_absent_keys_are_skipped(tmp_path: Path) -> None:
    write_lines(tmp_path, reward_only_run())
    text = write_report(tmp_path).read_text()
    assert [p.name for p in (tmp_path / "plots").glob("*.png")] == ["reward.png"]
    assert "plots/tokens.png" not in text
    rows = table(text)
    assert rows["held-out accuracy"].startswith("n/a")
    assert rows["mean weight-sync seconds"] == "n/a"


def test_reward_log_metric_values_get_a_plot_and_rows(tmp_path: Path) -> None:
    logged = [{"reward/length_target": 10.0 + s, "reward/seen": 2.0 * s} if s != 2 else {} for s in (1, 2, 3)]
    write_lines(tmp_path, [train_record(s) | extra for s, extra in zip((1, 2, 3), logged, strict=True)])
    text = write_report(tmp_path).read_text()
    assert "(plots/reward_logged.png)" in text and png_size(tmp_path / "plots" / "reward_logged.png")[0] >= 400
    rows = table(text)
    assert rows["reward/length_target (last)"] == "13.000 (step 3)"
    assert rows["reward/seen (last)"] == "6.000 (step 3)"


def test_missing_metrics_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "metrics.jsonl"))):
        write_report(tmp_path)


def test_no_train_records(tmp_path: Path) -> None:
    write_lines(tmp_path, [eval_record(0, 0.25, 5.0)], tail='{"kind": "tra')
    with pytest.raises(ValueError, match="no train records"):
        write_report(tmp_path)
    assert not (tmp_path / "report.md").exists()


def test_cli_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    write_lines(run_dir, reward_only_run())
    assert main(["report", str(run_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / "report.md")
    assert (run_dir / "report.md").is_file()
    assert png_size(run_dir / "plots" / "reward.png")[0] > 0

    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "metrics.jsonl" in capsys.readouterr().err
