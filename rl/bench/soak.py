"""``rl bench soak``: train a recipe for many steps while faults are injected on a schedule, then check that the
run survived every one of them and lost nothing it did not account for.

Faults, at the run's own steps (read from ``metrics.jsonl``):

- ``rollout_worker_killed``: SIGKILL to a rollout worker's process; the driver starts a replacement
  (``rollout.max_restarts``) and loads the current weights into it.
- ``reward_raises`` / ``reward_nan`` / ``reward_hangs``: the recipe's reward is
  ``rl.bench.faults.arith_exact_with_faults``, which fails on a fixed share of its calls; the reward pool counts
  each, and kills a hung call after ``reward.timeout_s``.
- ``nan_loss``: the trainer's loss is NaN at one step (``TAILOR_FAULTS``, through the trainer hook
  ``rl.bench.faults.nan_loss``); the update is skipped and counted.
- ``run_sigkilled``: SIGKILL to the whole run (every process of it); ``rl train --resume`` continues from the last
  checkpoint, and the steps after it are trained again.
- ``run_sigterm``: SIGTERM; the run writes a checkpoint at the step boundary and stops; it is resumed.

Checks at the end: every step appears once in ``metrics.jsonl``; the group accounting invariant holds
(``groups_unaccounted == 0``: every group started was trained, dropped with a reason, sampled again after a
kill, or was still open at the end); the NaN-loss step was skipped; the replacement worker was counted; the
reward failures were counted. Faults injected after a run's last checkpoint and before a SIGKILL are rolled
back with it: the run's counters can be lower than the injected counts, never higher.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rl.bench.faults import FAULT_LOG_ENV, FAULTS_ENV
from rl.bench.stopped import BenchStopped
from rl.loop.checkpoint import latest_checkpoint, step_of
from rl.loop.processes import alive, command_line, descendants, kill_tree, wait_for
from rl.trainer.hooks import HOOKS_ENV

ROLLOUT_WORKER_TITLE = "ray::RolloutWorker"


@dataclass
class SoakSchedule:
    """The steps at which each scheduled fault strikes (reward faults strike throughout)."""

    steps: int = 120
    checkpoint_every: int = 10
    kill_worker_at: int = 15
    nan_loss_at: int = 30
    sigkill_at: int = 55
    sigterm_at: int | None = 85  # None: no SIGTERM (the tests' soak; tests/test_e2e_resume.py covers it)

    @property
    def min_steps(self) -> int:
        """The fewest steps that see every fault and still train after the last: a SIGTERM stops the run at the end
        of the step in progress (one or two past ``sigterm_at``), and a resume needs a step left to train."""
        return max(at for at in (self.kill_worker_at, self.sigkill_at, self.sigterm_at) if at is not None) + 5

    def events(self) -> list[tuple[int, str]]:
        """The faults the soak itself delivers, in step order."""
        events = [
            (self.kill_worker_at, "rollout_worker_killed"),
            (self.sigkill_at, "run_sigkilled"),
            (self.sigterm_at, "run_sigterm"),
        ]
        return sorted((at, kind) for at, kind in events if at is not None and at < self.steps)


@dataclass
class SoakResult:
    schedule: SoakSchedule
    wall_s: float
    launches: int
    delivered: list[dict[str, Any]] = field(default_factory=list)  # each fault: kind, step, what happened
    injected: dict[str, int] = field(default_factory=dict)  # reward faults, by kind, from the fault log
    summary: dict[str, Any] = field(default_factory=dict)  # the final run summary record
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(self.checks.values())


class SoakFailed(BenchStopped):
    """The run did something the soak does not survive (it exited on its own with an error)."""


def train_records(run_dir: Path) -> list[dict[str, Any]]:
    """The readable records of ``metrics.jsonl`` (a line cut by a kill is skipped)."""
    path = run_dir / "metrics.jsonl"
    records = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def last_step(run_dir: Path) -> int:
    return max((r["step"] for r in train_records(run_dir) if r["kind"] == "train"), default=0)


def soak_settings(schedule: SoakSchedule, out_dir: Path, overrides: list[str]) -> list[str]:
    """The overrides the soak's ``rl train`` runs with: its run in ``out_dir/run``, the faulty reward, the schedule's
    steps and checkpoints, then the command's ``overrides``."""
    return [
        f"output_dir={out_dir}",
        "name=run",
        "reward.functions.0.fn=rl.bench.faults:arith_exact_with_faults",
        f"train.max_steps={schedule.steps}",
        f"train.checkpoint_every={schedule.checkpoint_every}",
        "rollout.max_restarts=2",
        "reward.timeout_s=2",  # a hung call costs this much
        *overrides,
    ]


def run_soak(recipe: str, schedule: SoakSchedule, out_dir: Path, overrides: list[str]) -> SoakResult:
    """Train ``recipe`` under ``schedule``'s faults in ``out_dir/run``; returns what happened and the checks."""
    out_dir.mkdir(parents=True, exist_ok=True)
    run_dir = out_dir / "run"
    shutil.rmtree(run_dir, ignore_errors=True)  # an earlier soak's run there, unfinished, would be continued
    fault_log = out_dir / "faults.log"
    fault_log.write_text("")
    env = {
        **os.environ,
        FAULTS_ENV: f"nan_loss@{schedule.nan_loss_at}",
        HOOKS_ENV: "rl.bench.faults:nan_loss",
        FAULT_LOG_ENV: str(fault_log),
    }
    settings = soak_settings(schedule, out_dir, overrides)
    log = out_dir / "train.log"
    log.write_text("")
    t0 = time.monotonic()
    result = SoakResult(schedule, 0.0, 0)
    proc = _launch(["train", recipe, *settings], env, log)
    result.launches += 1
    pending = schedule.events()
    try:
        while proc.poll() is None or proc.returncode != 0:
            if proc.poll() is not None:
                raise SoakFailed(f"rl train exited with {proc.returncode}; see {log}")
            if pending and last_step(run_dir) >= pending[0][0]:
                _, kind = pending.pop(0)
                result.delivered.append(_deliver(kind, proc, run_dir))
                if kind in ("run_sigkilled", "run_sigterm"):
                    proc = _launch(["train", "--resume", str(run_dir)], env, log)
                    result.launches += 1
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
    result.wall_s = time.monotonic() - t0
    result.injected = dict(Counter(fault_log.read_text().split()))
    records = train_records(run_dir)
    result.summary = next(r for r in reversed(records) if r["kind"] == "summary")
    result.checks = _checks(schedule, records, result)
    return result


def _launch(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("a") as out:
        command = [sys.executable, "-m", "rl.cli", *args]
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _deliver(kind: str, proc: subprocess.Popen, run_dir: Path) -> dict[str, Any]:
    """Strike with fault ``kind``; returns what was done."""
    step = last_step(run_dir)
    if kind == "rollout_worker_killed":
        workers = [p for p in descendants(proc.pid) if command_line(p).startswith(ROLLOUT_WORKER_TITLE)]
        if not workers:
            raise SoakFailed("no rollout worker process found to kill")
        os.kill(workers[0], signal.SIGKILL)
        return {"kind": kind, "step": step, "detail": f"SIGKILL to pid {workers[0]}"}
    if kind == "run_sigkilled":
        pids = kill_tree(proc.pid)
        proc.wait(timeout=60)
        wait_for(lambda: not any(alive(p) for p in pids), 60)
        resume_at = step_of(latest_checkpoint(run_dir))
        return {"kind": kind, "step": step, "detail": f"resumed from step {resume_at}: {step - resume_at} steps redone"}
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=600)
    if code != 128 + signal.SIGTERM:
        raise SoakFailed(f"after SIGTERM rl train exited with {code}, not {128 + signal.SIGTERM}")
    stopped = step_of(latest_checkpoint(run_dir))
    return {"kind": kind, "step": step, "detail": f"checkpoint at step {stopped}, clean exit 143"}


def _checks(schedule: SoakSchedule, records: list[dict[str, Any]], result: SoakResult) -> dict[str, bool]:
    train = [r for r in records if r["kind"] == "train"]
    summary = result.summary
    nan_step = [r for r in train if r["step"] == schedule.nan_loss_at]
    failures = {k: summary.get(f"reward_failures_{k}", 0) for k in ("raised", "nan", "timeout")}
    injected = {k: result.injected.get(f"reward_{k}", 0) for k in ("raises", "nan", "hangs")}
    return {
        "each step once": [r["step"] for r in train] == list(range(1, schedule.steps + 1)),
        "every group accounted for": summary.get("groups_unaccounted") == 0,
        "NaN loss skipped": bool(nan_step) and nan_step[0]["skipped_nonfinite"] >= 1,
        "worker replaced": summary.get("restarted_workers", 0) >= 1,
        "reward failures counted, none invented": all(
            0 < counted <= injected[k]
            for k, counted in zip(("raises", "nan", "hangs"), failures.values(), strict=True)
            if injected[k]
        ),
        "resumed after each kill": result.launches
        == 1 + sum(d["kind"] in ("run_sigkilled", "run_sigterm") for d in result.delivered),
    }


def soak_table(result: SoakResult) -> str:
    """The Markdown table of faults injected and how the run came through them."""
    s = result.summary
    failures = {k: int(s.get(f"reward_failures_{k}", 0)) for k in ("raised", "nan", "timeout")}
    rows = [("fault", "when", "injected", "outcome")]
    for d in result.delivered:
        rows.append((d["kind"], f"step {d['step']}", "1", d["detail"]))
    rows.append(("nan_loss", f"step {result.schedule.nan_loss_at}", "1", "update skipped (skipped_nonfinite)"))
    for kind, counted in zip(("reward_raises", "reward_nan", "reward_hangs"), failures.values(), strict=True):
        rows.append((kind, "throughout", str(result.injected.get(kind, 0)), f"{counted} counted by the run"))
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    lines.insert(1, "|" + "---|" * 4)
    lines += [
        "",
        f"steps {s.get('steps')}, launches {result.launches}, wall {result.wall_s:.0f} s; held-out accuracy "
        f"{s.get('accuracy_before', float('nan')):.3f} -> {s.get('accuracy_after', float('nan')):.3f}",
        f"groups: started {s.get('groups_started')}, trained {s.get('groups_trained')}, replayed after a kill "
        f"{s.get('replayed_groups')}, rollout errors {s.get('rollout_errors')}, open at the end "
        f"{s.get('groups_open')}, unaccounted {s.get('groups_unaccounted')}; workers dead {s.get('dead_workers')}, "
        f"restarted {s.get('restarted_workers')}",
        "",
        *[f"- [{'x' if ok else ' '}] {name}" for name, ok in result.checks.items()],
    ]
    return "\n".join(lines)


def write_soak(result: SoakResult, out_dir: Path) -> None:
    (out_dir / "soak.json").write_text(
        json.dumps({**asdict(result), "passed": result.passed}, indent=2, default=str) + "\n"
    )
    (out_dir / "soak.md").write_text(soak_table(result) + "\n")
