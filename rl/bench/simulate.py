"""``rl bench simulate``: replay a rollout benchmark's modes on the simulated engine (``simulator.py``).

A ``bench_rollout.json`` (``rl bench rollout``) gives the batch (prompts, M, cap), the shaping knobs, the measured
runs and the natural lengths: the sample pool of prompt ``g`` in repeat ``r`` comes from the mode's own run when
nothing in it was aborted (``plain``, ``raw``: it then replays exactly), else from that repeat's ``shadow`` run, else
from its unaborted run with the most samples. Each mode's policy is built as the bench builds it, with no scorer
(there are no texts). A mode's time to batch is a warm-up pass (the policy's length history, as the bench's) then
a timed pass; its steady-state figure runs ``batches`` batches with ``in_flight`` groups in flight after a warm-up.

Engine defaults follow the run: ``max_num_seqs`` and ``stream_interval`` from its ``engine`` record when there, else
as the bench sized its engine; a run from before the token clock (its shaping config has ``progress_every_s``) had
vLLM's default cap of 128, streamed every token and looked on the wall clock every ``progress_every_s``.
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rl.bench.cost_model import DecodeProfile
from rl.bench.rollout import (
    CONFIG_FILE,
    PASSES_FILE,
    SHADOW,
    RolloutBenchConfig,
    mode_shaping,
    policy_name,
    policy_options,
    uses_tie,
    widest_launch,
)
from rl.bench.simulator import (
    EngineModel,
    HostCost,
    LinearStep,
    Looks,
    NaturalSample,
    Pool,
    SimResult,
    StepTime,
    simulate_batch,
    simulate_steady,
    steady_groups_per_s,
)
from rl.config import ShapingConfig
from rl.shaping.factory import make_policy
from rl.shaping.plain import PlainPolicy
from rl.shaping.policy import GroupPlan, ShapingPolicy

VLLM_DEFAULT_MAX_NUM_SEQS = 128
LINEAR = "linear:"  # a --profile of the form linear:A,C is the line A + C*b seconds per step
AS_RUN = "as run"  # a row's lengths: the measured pass's own samples, replayed without decisions
FIT = "fit"  # --profile fit: the line through the run's own passes that aborted nothing; fit:P: P plus a context cost


class SimulateError(ValueError):
    """Bad input to the simulator (a missing file, no natural lengths, an unknown mode): one line for the user."""


@dataclass(frozen=True)
class RunFile:
    """What a ``bench_rollout.json`` holds for the simulator: its config, runs and engine defaults."""

    cfg: RolloutBenchConfig
    runs: list[dict]
    max_num_seqs: int
    stream_interval: int
    wall_every_s: float | None  # the old wall-clock look period, for runs from before the token clock


@dataclass(frozen=True)
class ModeRow:
    """One mode and repeat: the simulated batch, the steady-state rate, the measured time where there is one."""

    mode: str
    repeat: int
    pool: str  # the run the natural lengths came from ("as run": the pass's own samples, ``replay_as_run``)
    batch: SimResult
    steady_groups_per_s: float | None  # None for a pass replayed as it ran: its decisions are not the policy's
    measured_s: float | None
    draws_s: tuple[float, float, float] | None = None  # fastest, median, slowest time to batch over other draws

    @property
    def kept_tokens(self) -> int | None:
        """The simulated kept tokens; None for a pass replayed as it ran (every sample of it runs, none is chosen)."""
        return None if self.pool == AS_RUN else self.batch.kept_tokens

    def to_dict(self) -> dict[str, Any]:
        b = self.batch
        return {
            "mode": self.mode,
            "repeat": self.repeat,
            "pool": self.pool,
            "simulated_s": b.seconds,
            "measured_s": self.measured_s,
            "steps": b.steps,
            "generated_tokens": b.generated_tokens,
            "kept_tokens": self.kept_tokens,
            "launched": b.launched,
            "aborted": b.aborted,
            "max_running": b.max_running,
            "waited": b.waited,
            "steady_groups_per_s": self.steady_groups_per_s,
            "draws_s": self.draws_s,
        }


def load_run_file(path: Path) -> RunFile:
    """Read a ``bench_rollout.json``, or the folder holding one, or a cut-short run's folder: its
    ``bench_config.json`` and the passes that ended (``bench_passes.jsonl``)."""
    file = path / "bench_rollout.json" if path.is_dir() else path
    try:
        if file.exists() or not (path / CONFIG_FILE).exists():
            data = json.loads(file.read_text())
        else:
            file = path / PASSES_FILE
            runs = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
            data = {**json.loads((path / CONFIG_FILE).read_text()), "runs": runs}
        cfg, wall = bench_config(data["config"])
        runs = list(data["runs"])
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise SimulateError(f"cannot read a rollout benchmark from {file}: {e}".splitlines()[0]) from None
    engine = data.get("engine") or {}
    if wall is not None:
        cap, interval = VLLM_DEFAULT_MAX_NUM_SEQS, 1
    else:
        clocks = [mode_shaping(cfg, m).progress_tokens for m in cfg.modes]
        cap, interval = cfg.prompts * widest_launch(cfg), min([k for k in clocks if k] or [1])
    return RunFile(
        cfg, runs, int(engine.get("max_num_seqs") or cap), int(engine.get("stream_interval") or interval), wall
    )


def bench_config(data: dict) -> tuple[RolloutBenchConfig, float | None]:
    """The run's bench config, less what this code no longer has (and no reward or cost model to load), and its
    wall-clock look period if it is from before the token clock."""
    shaping = dict(data.get("shaping") or {})
    wall = shaping.pop("progress_every_s", None)
    fields = {k: v for k, v in data.items() if k in RolloutBenchConfig.model_fields}
    fields.update(
        shaping={k: v for k, v in shaping.items() if k in ShapingConfig.model_fields},
        reward="none",
        cost_model=None,
        plots=False,
    )
    return RolloutBenchConfig.model_validate(fields), None if wall is None else float(wall)


def device_model(run: RunFile, engine: EngineModel, profile: str) -> tuple[EngineModel, str]:
    """``engine`` with the device cost ``--profile`` names, and its label: ``fit`` (``fit_line``), ``fit:P``
    (``fit_context``), or ``step_model``'s."""
    if profile.startswith(f"{FIT}:"):
        return fit_context(run, engine, profile.removeprefix(f"{FIT}:"))
    step_s, label = fit_line(run, engine) if profile == FIT else step_model(profile)
    return replace(engine, step_s=step_s), label


def step_model(profile: str) -> tuple[StepTime, str]:
    """The device's step time from ``linear:A,C`` or a decode profile (path or shipped name), and its label."""
    if profile.startswith(LINEAR):
        try:
            a, c = (float(x) for x in profile.removeprefix(LINEAR).split(","))
        except ValueError:
            raise SimulateError(
                f"a linear profile is linear:A,C (seconds, seconds per sequence), got {profile!r}"
            ) from None
        return LinearStep(a, c), f"{a * 1e3:g} ms + {c * 1e6:g} µs per sequence"
    try:
        p = DecodeProfile.load(profile)
    except (OSError, KeyError, ValueError) as e:
        raise SimulateError(f"cannot read decode profile {profile!r}: {e}") from None
    return p.ptl, f"profile of `{p.model}` on {p.device}"


def fit_line(run: RunFile, engine: EngineModel) -> tuple[LinearStep, str]:
    """The device line ``a + c·b`` that best fits, by least squares, the measured time to batch of the run's passes
    that aborted nothing (plain, raw, shadow: their lengths replay exactly, so each pass's simulated steps and
    running sequences are known), and its label. The shaped passes stay out of the fit: how near the simulator comes
    to them is its check. Host cost and prefill must be 0 (the step is then linear in ``a`` and ``c``)."""
    import numpy as np

    counting = replace(engine, step_s=LinearStep(0.0, 1.0))  # simulated seconds = running sequences summed over steps
    points = [(batch.steps, batch.seconds, measured) for batch, measured in natural_passes(run, counting)]
    x, y = np.array([p[:2] for p in points], dtype=float), np.array([p[2] for p in points])
    fits = [np.linalg.lstsq(x, y, rcond=None)[0]] + [  # the line; where a term came out negative, one term alone
        np.where(np.arange(2) == i, y @ x[:, i] / (x[:, i] @ x[:, i]), 0.0) for i in (0, 1)
    ]
    a, c = min((f for f in fits if min(f) >= 0), key=lambda f: float(np.sum((x @ f - y) ** 2)))
    label = f"{a * 1e3:.3g} ms + {c * 1e6:.3g} µs per sequence, fitted to the {len(points)} passes that aborted nothing"
    return LinearStep(float(a), float(c)), label


def fit_context(run: RunFile, engine: EngineModel, profile: str) -> tuple[EngineModel, str]:
    """``engine`` with ``profile``'s step time (``step_model``) and the context cost (``EngineModel.context_s``) that
    best fits, by least squares, the measured time to batch of the run's passes that aborted nothing, and its label.
    The profile gives how a step's time grows with the running sequences, which a line fits badly where it is not
    straight (a CPU's batching gain), but it was measured at short outputs: the passes' long samples pay attention
    over contexts the profile never held. Host cost and prefill must be 0 (each simulated time is then the profile's
    plus ``context_s`` times the contexts summed over steps)."""
    step_s, label = step_model(profile)
    profiled = [b.seconds for b, _ in natural_passes(run, replace(engine, step_s=step_s, context_s=0.0), 1)]
    counting = replace(engine, step_s=LinearStep(0.0, 0.0), context_s=1.0)  # simulated seconds = contexts summed
    contexts, measured = zip(*[(b.seconds, m) for b, m in natural_passes(run, counting, 1)], strict=True)
    fitted = sum(c * (m - p) for c, m, p in zip(contexts, measured, profiled, strict=True))
    context_s = max(0.0, fitted / sum(c * c for c in contexts)) if any(contexts) else 0.0
    fit = f"{context_s * 1e6:.3g} µs per context token, fitted to the {len(profiled)} passes that aborted nothing"
    return replace(engine, step_s=step_s, context_s=context_s), f"{label} + {fit}"


def natural_passes(run: RunFile, engine: EngineModel, at_least: int = 2) -> list[tuple[SimResult, float]]:
    """Each of the run's passes that aborted nothing, simulated on ``engine`` (its own lengths, looks as it ran),
    with its measured time to batch; ``at_least`` of them, or a ``SimulateError``. Refuses host cost and prefill: the
    fits that use these take simulated time as a sum of device steps."""
    if engine.host != HostCost() or engine.prefill_s:
        raise SimulateError(f"--profile {FIT} fits the device step alone: leave out --host and --prefill-s")
    passes = []
    for r in (r for r in run.runs if _natural(r)):
        pools, _ = natural_pools(run.runs, r["repeat"], r["mode"])
        looks = mode_looks(run.cfg, r["mode"], None, run.wall_every_s)
        passes.append(
            (timed_batch(run.cfg, r["mode"], pools, engine, looks, r["repeat"]), r["metrics"]["time_to_batch_s"])
        )
    if len(passes) < at_least:
        passes_needed = "a pass" if at_least == 1 else "two passes"
        raise SimulateError(f"--profile {FIT} needs {passes_needed} that aborted nothing (plain, raw or shadow modes)")
    return passes


def parse_host(text: str) -> HostCost:
    """``h0,h_req,h_out,h_abort`` in seconds (trailing ones may be left out: 0)."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not 1 <= len(values) <= 4 or min(values) < 0:
        raise SimulateError(f"--host takes h0,h_req,h_out,h_abort: up to four non-negative seconds, got {text!r}")
    return HostCost(*values)


def check_modes(cfg: RolloutBenchConfig, modes: list[str]) -> None:
    """Every mode is one the bench knows, takes valid knobs, and needs no vLLM priorities."""
    try:
        RolloutBenchConfig.model_validate({**cfg.model_dump(), "modes": modes})
    except ValueError as e:
        raise SimulateError(f"unknown mode in {','.join(modes)}: {_first_error(e)}") from None
    if tied := [m for m in modes if uses_tie(m)]:
        raise SimulateError(f"mode {tied[0]!r}: vLLM priorities are not simulated")


def natural_pools(runs: list[dict], repeat: int, mode: str) -> tuple[list[list[NaturalSample]], str]:
    """Prompt by prompt natural samples for ``mode`` in ``repeat`` (module docstring), and the run they came from."""
    here = {r["mode"]: r for r in runs if r["repeat"] == repeat and _natural(r)}
    if mode in here:
        source = mode
    elif SHADOW in here:
        source = SHADOW
    elif here:
        source = max(here, key=lambda m: len(here[m]["samples"]))
    else:
        raise SimulateError(f"repeat {repeat} has no run with natural lengths: add a shadow, plain or raw mode")
    records = sorted(here[source]["samples"], key=lambda s: (s["group"], s["index"]))
    pools: list[list[NaturalSample]] = [[] for _ in range(max(s["group"] for s in records) + 1)]
    for s in records:
        pools[s["group"]].append(NaturalSample(int(s["length"]), str(s["finish_reason"])))
    return pools, "own" if source == mode else source


def mode_policy(cfg: RolloutBenchConfig, mode: str) -> ShapingPolicy:
    """The policy ``mode`` runs, built as the bench builds it, without a scorer's scores (there are no texts)."""
    if mode == "raw":
        return PlainPolicy(cfg.m_keep)
    if mode == SHADOW:
        return PlainPolicy(widest_launch(cfg))
    options = policy_options(cfg, mode)
    if "scorer" in options:
        options["scorer"] = "external"  # scores come with the samples, and none do
    return make_policy(policy_name(mode), **options)


def mode_looks(cfg: RolloutBenchConfig, mode: str, every_tokens: int | None, every_s: float | None) -> Looks | None:
    """How ``mode``'s controllers look at running samples (None: they do not); overrides go to every watching mode."""
    shaping = mode_shaping(cfg, mode)
    if mode in ("raw", SHADOW) or not shaping.watches_running:
        return None
    if every_s:
        return Looks(every_s=every_s)
    return Looks(every_tokens=every_tokens or shaping.progress_every_tokens)


def timed_batch(
    cfg: RolloutBenchConfig,
    mode: str,
    pools: list[Pool],
    engine: EngineModel,
    looks: Looks | None,
    seed: int = 0,
    draw: random.Random | None = None,
) -> SimResult:
    """``mode``'s simulated timed batch, after a warm-up pass that gives its policy a length history as the bench's;
    its samples are each pool in order, or drawn from it with replacement with ``draw`` (``simulator.pick``)."""
    policy, streamed = mode_policy(cfg, mode), is_streamed(mode, looks)
    simulate_batch(policy, pools, engine, looks, streamed, random.Random(seed))
    return simulate_batch(policy, pools, engine, looks, streamed, draw, resample=draw is not None)


def is_streamed(mode: str, looks: Looks | None) -> bool:
    """Whether ``mode``'s requests stream their tokens: where its controllers look, and raw's one n=M request."""
    return looks is not None or mode == "raw"


def simulate_mode(
    cfg: RolloutBenchConfig,
    mode: str,
    pools: list[Pool],
    engine: EngineModel,
    looks: Looks | None,
    batches: int,
    in_flight: int,
    seed: int = 0,
) -> tuple[SimResult, float]:
    """``mode``'s simulated timed batch (after a warm-up pass) and steady-state groups per second."""
    batch = timed_batch(cfg, mode, pools, engine, looks, seed)
    steady_policy, streamed = mode_policy(cfg, mode), is_streamed(mode, looks)
    simulate_batch(steady_policy, pools, engine, looks, streamed, random.Random(seed))
    steady = simulate_steady(steady_policy, pools, engine, batches, in_flight, looks, streamed, random.Random(seed + 1))
    return batch, steady_groups_per_s(steady, in_flight)


def simulate_run_file(
    run: RunFile,
    engine: EngineModel,
    modes: list[str] | None = None,
    every_tokens: int | None = None,
    every_s: float | None = None,
    batches: int = 4,
    in_flight: int | None = None,
    draws: int = 0,
) -> list[ModeRow]:
    """Every mode (default: the run's, shadow left out) of every repeat in ``run``, simulated on ``engine``.

    Looks follow each mode's ``progress_every_tokens`` unless ``every_tokens`` or ``every_s`` is given; a run from
    before the token clock looks on its wall clock. ``in_flight`` defaults to the batch's prompts. Each measured
    pass that aborted samples is also replayed as it ran (``replay_as_run``), after the mode's own row. A mode
    simulated on another pass's lengths is also run on ``draws`` other draws of them, with replacement as a fresh
    pass draws (``simulator.pick``): the median and range of times a batch's own draw of samples moves it over.
    """
    modes = modes or [m for m in dict.fromkeys(r["mode"] for r in run.runs) if m != SHADOW]
    check_modes(run.cfg, modes)
    wall = every_s or (run.wall_every_s if not every_tokens else None)
    rows = []
    for repeat in sorted({r["repeat"] for r in run.runs}):
        passes = {r["mode"]: r for r in run.runs if r["repeat"] == repeat}
        measured = {mode: r["metrics"]["time_to_batch_s"] for mode, r in passes.items()}
        for mode in modes:
            pools, source = natural_pools(run.runs, repeat, mode)
            looks = mode_looks(run.cfg, mode, every_tokens, wall)
            batch, steady = simulate_mode(run.cfg, mode, pools, engine, looks, batches, in_flight or len(pools), repeat)
            spread = None
            if draws and source != "own":
                seeds = [1000 * (repeat + 1) + d for d in range(draws)]  # the warm-up's draw, then the timed one's
                times = [
                    timed_batch(run.cfg, mode, pools, engine, looks, seed, random.Random(-seed)).seconds
                    for seed in seeds
                ]
                spread = (min(times), statistics.median(times), max(times))
            rows.append(ModeRow(mode, repeat, source, batch, steady, measured.get(mode), spread))
            if mode in passes and not _natural(passes[mode]):
                as_run = replay_as_run(passes[mode], engine, is_streamed(mode, looks))
                rows.append(ModeRow(mode, repeat, AS_RUN, as_run, None, measured[mode]))
    return rows


def replay_as_run(measured: dict, engine: EngineModel, streamed: bool) -> SimResult:
    """A measured pass's own samples on the simulated engine, each run to the length it had (an aborted one to where
    it was stopped), nothing decided: the engine model's check alone, apart from the draw of samples that makes a
    shaped pass and its simulation (on another pass's natural lengths) decide differently."""
    groups: dict[int, list[NaturalSample]] = {}
    for s in sorted(measured["samples"], key=lambda s: (s["group"], s["index"])):
        reason = s["finish_reason"] if s["finish_reason"] in ("stop", "length") else "stop"
        if s["length"] > 0:  # one aborted before its first token ran nowhere
            groups.setdefault(s["group"], []).append(NaturalSample(int(s["length"]), reason))
    pools = [groups[g] for g in sorted(groups)]
    return simulate_batch(_EachAsRun([len(p) for p in pools]), pools, engine, None, streamed)


class _EachAsRun(PlainPolicy):
    """Launches and keeps group ``g``'s ``sizes[g]`` recorded samples (prompt ids are the groups' indices)."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__(max(sizes))
        self.sizes = sizes

    def plan(self, prompt_ids: list[str]) -> list[GroupPlan]:
        return [GroupPlan(p, self.sizes[int(p)], self.sizes[int(p)]) for p in prompt_ids]


def markdown(rows: list[ModeRow]) -> str:
    """A table: simulated and measured time to batch, their ratio (the gate: within ±10 %), speed-ups vs plain."""
    plain = {r.repeat: r for r in rows if r.mode == "plain"}
    lines = [
        "| mode | repeat | lengths from | simulated s | measured s | sim/measured | speed-up sim | speed-up measured "
        "| steps | generated | kept | max running | waited | steady groups/s | other draws s: median (range) |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        b, base = r.batch, plain.get(r.repeat)
        ratio = _fmt(r.measured_s and b.seconds / r.measured_s, "{:.2f}")
        sim_up = _fmt(base and b.seconds and base.batch.seconds / b.seconds, "{:.2f}×")
        measured_up = _fmt(base and base.measured_s and r.measured_s and base.measured_s / r.measured_s, "{:.2f}×")
        kept = _fmt(r.kept_tokens, "{}")
        spread = f"{r.draws_s[1]:.3f} ({r.draws_s[0]:.3f}–{r.draws_s[2]:.3f})" if r.draws_s else "–"
        lines.append(
            f"| {r.mode} | {r.repeat} | {r.pool} | {b.seconds:.3f} | {_fmt(r.measured_s, '{:.3f}')} | {ratio} "
            f"| {sim_up} | {measured_up} | {b.steps} | {b.generated_tokens} | {kept} | {b.max_running} "
            f"| {b.waited} | {_fmt(r.steady_groups_per_s, '{:.2f}')} | {spread} |"
        )
    return "\n".join(lines) + "\n"


def mean_lines(rows: list[ModeRow]) -> str:
    """Per mode, over the repeats with a measured time: the simulated mean (a mode with other draws by their
    medians) against the measured mean, and each side's speed-up of the means over plain's. How a shaped mode's
    time is quoted: one simulated batch may land far from one measured batch, their means do not."""
    by_mode: dict[str, list[ModeRow]] = {}
    for r in rows:
        if r.pool != AS_RUN and r.measured_s:
            by_mode.setdefault(r.mode, []).append(r)
    means = {
        mode: (statistics.mean(r.draws_s[1] if r.draws_s else r.batch.seconds for r in rs),
               statistics.mean(r.measured_s or 0.0 for r in rs), len(rs))
        for mode, rs in by_mode.items()
    }  # fmt: skip
    lines = []
    for mode, (simulated, measured, n) in means.items():
        line = f"{mode}: mean over {n} batch(es) {simulated:.3f} s simulated, {measured:.3f} s measured"
        line += f" ({simulated / measured:.2f}×)"
        if mode != "plain" and "plain" in means:
            plain_sim, plain_measured, _ = means["plain"]
            line += f"; speed-up {plain_sim / simulated:.2f}× simulated, {plain_measured / measured:.2f}× measured"
        lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


def engine_line(engine: EngineModel, label: str) -> str:
    """The simulated engine's settings in one line, for the table's header (``label``: the device cost, a fitted
    context cost included)."""
    h = engine.host
    return (
        f"simulated engine: {label}; max_num_seqs {engine.max_num_seqs}, stream_interval {engine.stream_interval}, "
        f"lag {engine.lag_steps} steps, prefill {engine.prefill_s:g} s per request; "
        f"host h0={h.step_s:g}, h_req={h.per_seq_s:g}, h_out={h.per_output_s:g}, h_abort={h.per_abort_s:g} s"
    )


def write_json(path: Path, rows: list[ModeRow], engine: EngineModel, profile: str) -> None:
    """The rows and the engine settings they were simulated with."""
    settings = {
        "profile": profile,
        "max_num_seqs": engine.max_num_seqs,
        "stream_interval": engine.stream_interval,
        "lag_steps": engine.lag_steps,
        "prefill_s": engine.prefill_s,
        "context_s": engine.context_s,
        "host": asdict(engine.host),
    }
    path.write_text(json.dumps({"settings": settings, "rows": [r.to_dict() for r in rows]}, indent=1))


def _natural(run: dict) -> bool:
    """Whether nothing in ``run`` was aborted: its lengths are natural."""
    return bool(run["samples"]) and all(s["finish_reason"] in ("stop", "length") for s in run["samples"])


def _fmt(value: float | None, pattern: str) -> str:
    return "–" if not value else pattern.format(value)


def _first_error(e: ValueError) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return next((line for line in lines if "mode" in line and "validation error" not in line), lines[-1])
