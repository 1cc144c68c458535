"""The asynchronous GRPO driver: two coroutines, ``continuous_rollouts`` and ``continuous_training``.

Rollouts: plan a batch of prompts with the shaping policy, start each group when admission control
allows, sample it on a rollout worker, score it, compute advantages, put it into the buffer.
Training: take a batch from the buffer, step the trainers, sync weights every ``sync_every`` steps,
log, evaluate. ``max_staleness=0`` makes the two alternate exactly (synchronous on-policy).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import re
import signal
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

from ray.exceptions import RayActorError
from tqdm import tqdm

from rl.config import RunConfig
from rl.data.stream import PromptStream
from rl.evaluation.held_out import EvaluationFailed, evaluate, held_out_sampling
from rl.inputs.preflight import RunInputs, preflight
from rl.loop import checkpoint, placement
from rl.loop.actors import ActorStarter, form_process_group, link_ray_logs, start_fleet, start_ray
from rl.loop.admission import AdmissionControl
from rl.loop.counters import RunCounters
from rl.loop.engine_sleep import EngineSleep, EngineWakeFailed
from rl.loop.groups import GroupMaker, new_shaping
from rl.loop.records import step_metrics, step_timing, summarize_run, summary_scalars
from rl.loop.signal_watch import SignalWatch
from rl.loop.stall import StallWatch, rollout_state, warn_of_stalls
from rl.loop.steps import RunStopped, batch_step, streamed_step
from rl.loop.weight_sync import WeightSync
from rl.output.completions import completion_rows
from rl.output.console import error_line, eval_line, last_raised, step_postfix
from rl.output.metrics import MetricsLogger, summarize_groups
from rl.output.progress import Progress
from rl.output.provenance import stack_versions
from rl.output.trl_metrics import trained_tokens
from rl.output.wandb_sink import start_wandb
from rl.rewards.hooks import RewardState
from rl.rewards.pool import RewardPool
from rl.types import PromptRow

log = logging.getLogger("rl.driver")

# the first: a checkpoint at the step boundary, then a clean stop; SIGHUP (the terminal closed) unless ignored (nohup)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
SHUTDOWN_WAIT_S = 5.0  # how long a run stopped while starting waits for its engines to shut down, then ends them


def died(error: RayActorError) -> str:
    """Which actor's process died, in a few words from Ray's long message (its class and pid, where Ray gives
    them)."""
    text = str(error)
    name, pid = re.search(r"class_name: (\w+)", text), re.search(r"\bpid: (\d+)", text)
    who = f"a {name.group(1)} process" if name else "an actor's process"
    return f"{who}{f' (pid {pid.group(1)})' if pid else ''} died"


def did_not_start(error: RayActorError, log_dir: Path) -> str | None:
    """For an actor whose constructor raised (an engine vLLM refused, a model that does not load): which one, the
    error's last line and where its traceback is; None for an actor that died otherwise."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))  # Ray colours the actor's name
    actor = re.search(r"error raised in its creation task, ray::(\w+)\.__init__\(\) \(pid=(\d+)", text)
    if actor is None:
        return None
    log = log_dir / f"worker-{actor.group(2)}.log"
    reason = _ENGINE_START_ERROR.sub("", last_raised(text))  # the engine's own error, as EngineStartError says it
    return f"{actor.group(1)} did not start: {reason} (its traceback: {log if log.exists() else log_dir})"


_ENGINE_START_ERROR = re.compile(r"^[\w.]*\bEngineStartError: ")


class RunFailed(Exception):
    """The run stopped on an error it cannot train through; the message is one line, ``summary`` the run's summary
    up to the failure (None for one before training)."""

    def __init__(self, message: str, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.summary = summary


class Driver:
    def __init__(
        self,
        cfg: RunConfig,
        inputs: RunInputs | None = None,
        resume: Path | None = None,
        start_actors: ActorStarter | None = None,
    ) -> None:
        """``inputs``: what ``preflight(cfg)`` loaded (checked here when not given); ``resume``: a complete
        checkpoint of this run to continue from (see ``rl.loop.checkpoint.resume_config``); ``start_actors``: builds
        the run's ``Fleet`` (default: Ray actors, starting or joining Ray first)."""
        self.cfg = cfg
        self.start_actors = start_actors
        inputs = inputs or preflight(cfg)
        self.model_dir = inputs.model_dir
        self.train_rows = inputs.train_rows
        self.test_rows = inputs.test_rows[: cfg.eval.num_problems]
        self.data_fingerprint = checkpoint.data_fingerprint(self.train_rows)
        self.resume = resume
        saved = checkpoint.read_driver_state(resume) if resume else {}
        if saved and saved["data"] != self.data_fingerprint:
            raise checkpoint.CheckpointError(f"{resume}: the training rows changed since it was written")
        self.stream = PromptStream(self.train_rows, cfg.train.batch_groups, cfg.seed, saved.get("stream"))
        self.unfinished: set[int] = set()  # stream positions started and neither trained nor dropped yet
        self.group_errors: set[str] = set()  # the errors groups failed with, each logged once
        self.encoder = inputs.encoder
        shaping = checkpoint.read_shaping(resume) if resume else new_shaping(cfg)
        self.policy, self.governor = shaping["policy"], shaping["governor"]
        self.eval_sampling = held_out_sampling(
            cfg.rollout, cfg.eval.samples, cfg.eval.temperature, cfg.rollout.max_tokens
        )
        self.admission = AdmissionControl(cfg.train.batch_groups, cfg.train.max_staleness)
        self.counters = RunCounters(**saved.get("counters", {}))
        self.stall = StallWatch()  # what the training loop waits on: a wait far longer than a step is warned of
        self.signal = SignalWatch()  # steps whose every advantage is 0: many in a row are warned of
        self.failure: str | None = None  # why the run stopped on an error, if it did
        self.stopping = asyncio.Event()
        self.stop_signal: int | None = None  # a stop signal asked for a checkpoint, then a clean stop
        self.starting: asyncio.Task | None = None  # engines starting, the evaluation before training: a stop ends it
        self.version = saved.get("version", 0)
        self.accuracy_before = saved.get("accuracy_before", math.nan)
        self.trained_before = saved.get("train_seconds", 0.0)  # training time of the run before this resume
        self.t0 = math.nan  # when this process's training clock started

    async def run(self) -> dict[str, Any]:
        """Start everything, train ``max_steps`` steps, save, shut down; returns the run summary. The stop signals
        stop the run meanwhile (``request_stop``); after it, however it ended, they reach the command's own handlers
        again, not the SIG_DFL the event loop leaves: a command that goes on (a bench) still unwinds on SIGTERM."""
        commands_handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}  # before ray.init's
        try:
            return await self._run()
        finally:
            for signum, handler in commands_handlers.items():
                asyncio.get_running_loop().remove_signal_handler(signum)
                signal.signal(signum, handler)

    async def _run(self) -> dict[str, Any]:
        import ray

        cfg = self.cfg
        owns_ray, start_actors = False, self.start_actors
        wandb = start_wandb(cfg, resume=self.resume is not None)  # first: a W&B that cannot start is one line
        self._take_stop_signals()
        if start_actors is None:
            owns_ray, start_actors = start_ray(cfg), start_fleet
            link_ray_logs(cfg.run_dir / "logs")
            self._take_stop_signals()  # again: ray.init sets a SIGTERM handler of its own, which exits at once
        if cfg.weight_sync.transport != "cpu" and not ray.cluster_resources().get("GPU"):
            if owns_ray:
                ray.shutdown()
            asked = f"weight_sync.transport={cfg.weight_sync.transport}"
            raise RunFailed(f"{asked} needs GPUs, and this Ray cluster has none; use transport=cpu")
        r = cfg.reward
        self.rewards = RewardPool([(f.spec, f.weight) for f in r.functions], r.num_workers, r.timeout_s, r.on_failure)
        self.fleet_started = time.monotonic()
        try:
            self.fleet = start_actors(cfg, self.model_dir, self.counters)
        except placement.NotPlaced as e:
            raise RunFailed(str(e)) from None
        scorer, state, fail = self.fleet.scorer, self._reward_state, self._fail
        self.groups = GroupMaker(cfg, self.encoder, self.policy, self.rewards, scorer, self.counters, state, fail)
        sleeps = cfg.rollout.sleep_while_training  # the engines lend their GPU memory to each trainer step
        self.sleep = EngineSleep(cfg, self.fleet.rollout, self.fleet.trainers) if sleeps else None
        overlap = cfg.train.max_staleness >= 1
        self.weights = WeightSync(self.fleet.channel, self.admission, overlap, self._lost, self.sleep)
        if not self.resume:
            checkpoint.start_fresh(cfg.run_dir)
            checkpoint.save_config(cfg)
        resume_step = self.version if self.resume else None
        self.logger = MetricsLogger(cfg.run_dir, resume_step=resume_step, wandb=wandb)
        rollouts: asyncio.Task | None = None
        self.stall.waiting_for("the rollout engines and the trainers to start")
        state = functools.partial(rollout_state, self.fleet, self.admission, cfg.train.batch_groups)
        stalls = asyncio.create_task(warn_of_stalls(self.stall, state, self._count_stall))
        try:
            self.starting = asyncio.create_task(self._start_up())
            try:
                startup_s = await self.starting
            except asyncio.CancelledError:
                if self.stop_signal is None:
                    raise
                return self._stopped_while_starting()
            except RayActorError as e:  # an actor died while the run started: nothing to train with
                raise RunFailed(did_not_start(e, cfg.run_dir / "logs") or f"{died(e)} while the run started") from None
            rollouts = asyncio.create_task(self.continuous_rollouts())
            try:
                await self.continuous_training()
            except RayActorError as e:  # a trainer rank or the buffer: the run cannot train on without it
                self._fail(f"{died(e)}; the run cannot train on without it")
            finally:  # the start-up and the training loop are watched; the run's end is not
                stalls.cancel()
                await asyncio.gather(stalls, return_exceptions=True)
            self.stopping.set()
            rollouts.cancel()
            await asyncio.gather(rollouts, return_exceptions=True)
            train_seconds = self._train_seconds()
            try:
                buffer = await self.fleet.buffer.stats.remote()
            except RayActorError:  # the buffer was the one that died
                buffer = {}
            if self.failure:
                self._end_failed(self.failure, math.nan, train_seconds, startup_s, buffer)
            finished = self.stop_signal is None and bool(self.fleet.rollout.live)
            after = await self._evaluate("after") if finished else {"accuracy": math.nan}
            saved = checkpoint.complete_checkpoints(cfg.run_dir)
            if cfg.train.save_checkpoint and not (saved and checkpoint.step_of(saved[-1]) == self.version):
                try:
                    saved.append(await self._checkpoint())
                except checkpoint.CheckpointNotWritten as e:
                    self.failure = str(e)
                    self._end_failed(self.failure, after["accuracy"], train_seconds, startup_s, buffer)
            last = saved[-1] if cfg.train.save_checkpoint and saved else None
            summary = self._summary(after["accuracy"], train_seconds, last, startup_s, buffer)
            self.logger.log(self.version, summary_scalars(summary), kind="summary")
            if unwritten := self._records_unwritten():
                raise RunFailed(unwritten, summary)
            return summary
        finally:
            stalls.cancel()  # where the start-up ended the run
            await asyncio.gather(stalls, return_exceptions=True)
            if rollouts is not None:  # a run ended by an error: its groups in flight end before the reward pool
                rollouts.cancel()
                await asyncio.gather(rollouts, return_exceptions=True)
            self.logger.close()
            self.rewards.close()
            stopped_while_starting = self.starting is not None and self.starting.cancelled()
            await self.fleet.shutdown(SHUTDOWN_WAIT_S if stopped_while_starting else None)
            if owns_ray:
                ray.shutdown()

    def _count_stall(self) -> None:
        self.counters.stalls += 1

    def _records_unwritten(self) -> str | None:
        """Why the run's records (metrics, completions) stopped reaching the disk, or None while they do."""
        error = self.logger.write_error
        return f"the run's records cannot be written: {error}" if error else None

    def _end_failed(
        self, why: str, accuracy_after: float, train_seconds: float, startup_s: float, buffer: dict
    ) -> NoReturn:
        """Log the summary of a run that failed for ``why`` (counted up to here) and raise its ``RunFailed``; the
        last complete checkpoint is where a resume starts."""
        saved = checkpoint.complete_checkpoints(self.cfg.run_dir)
        summary = self._summary(accuracy_after, train_seconds, saved[-1] if saved else None, startup_s, buffer)
        self.logger.log(self.version, summary_scalars(summary), kind="summary")
        raise RunFailed(why, summary)

    def _take_stop_signals(self) -> None:
        """Route the stop signals to ``request_stop`` (SIGHUP only where the command did not ignore it: nohup)."""
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            if signum != signal.SIGHUP or signal.getsignal(signum) is not signal.SIG_IGN:
                loop.add_signal_handler(signum, self.request_stop, signum)

    async def _start_up(self) -> float:
        """Wait for the actors, start the training clock, then restore the checkpoint or evaluate before training;
        returns the engines' start-up seconds."""
        engines = self.fleet.rollout.wait_until_up()
        stats, _ = await asyncio.gather(engines, form_process_group(self.fleet.trainers))  # all up, or one died
        waited = time.monotonic() - self.fleet_started  # the user's wait: worker processes, imports, the engine
        startup_s = max(s["startup_s"] for s in stats)
        await self.fleet.channel.start()
        if self.start_actors is None:  # a fleet of real actors: say where each runs
            await placement.log_where(self.fleet.trainers, self.fleet.rollout.started)
        self.t0 = time.monotonic()
        log.info("rollout engines up in %.1f s (building the engine %.1f s)", waited, startup_s)
        if self.fleet.scorer:
            log.info("scorer worker up in %.1f s", (await self.fleet.scorer.stats.remote())["startup_s"])
        if self.resume:
            self.stall.waiting_for("the restore of the checkpoint")
            await self._restore()
        else:
            self.stall.waiting_for("the evaluation before training")
            self.accuracy_before = (await self._evaluate("before"))["accuracy"]
        return startup_s

    def _stopped_while_starting(self) -> dict[str, Any]:
        """The summary of a run a stop signal ended before its first step: nothing trained, nothing saved."""
        saved = checkpoint.complete_checkpoints(self.cfg.run_dir) if self.resume else []
        return self._summary(math.nan, self.trained_before, saved[-1] if saved else None, math.nan, {})

    def _summary(
        self, accuracy_after: float, train_seconds: float, saved: Path | None, startup_s: float, buffer: dict
    ) -> dict[str, Any]:
        """The run summary (``summarize_run``) as it stands: how it stopped, and why if it failed."""
        return summarize_run(
            self.counters,
            len(self.unfinished),
            accuracy_before=self.accuracy_before,
            accuracy_after=accuracy_after,
            train_seconds=train_seconds,
            steps=self.version,
            stopped_by=signal.Signals(self.stop_signal).name if self.stop_signal else None,
            failure=self.failure,
            checkpoint=str(saved) if saved else None,
            engine_startup_s=startup_s,
            buffer=buffer,
            versions=stack_versions(),
        )

    async def continuous_rollouts(self) -> None:
        """Plan prompts a batch at a time; start each group as soon as admission allows. When this ends (the run
        cancels it, or no worker is left) the groups still in flight are cancelled with it: they stay open for a
        resume, instead of failing later against a closed reward pool and counting as rollout errors."""
        in_flight: set[asyncio.Task] = set()
        try:
            for chunk in self.stream.chunks():
                plans = self.policy.plan([row.prompt_id for _, row in chunk])
                for (position, row), plan in zip(chunk, plans, strict=True):
                    await self.admission.acquire()
                    if not await self.fleet.rollout.wait_for_a_live_worker():  # the trainer side stops the run
                        return
                    worker = self.fleet.rollout.next()
                    task = asyncio.create_task(self.produce_group(worker, position, row, plan))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
        finally:
            pending = list(in_flight)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def produce_group(self, worker: Any, position: int, row: PromptRow, plan: Any) -> None:
        """Sample, score and buffer one group (the stream's ``position``); every outcome releases its admission
        slot, and one that does not reach the buffer finishes its stream position."""
        accepted = False
        self.unfinished.add(position)
        self.counters.groups_started += 1
        try:
            group = await self.groups.make(worker, row, plan, self.version)
            if group is not None:
                group.position = position
                await self.fleet.buffer.put.remote(group)
                accepted = True
            else:  # dropped; ``GroupMaker.make`` counted why
                self._finish(position)
        except asyncio.CancelledError:
            raise  # the run is ending: the group stays open (a resume samples it again)
        except Exception as e:  # a dead worker or a failed call: count it, free the slot, go on
            self.counters.rollout_errors += 1
            self._finish(position)
            if isinstance(e, RayActorError):  # the pool says once that the worker died; each of its groups, here
                log.debug("group %s failed: %s", row.prompt_id, e)
                self._lost(worker)
            elif (error := error_line(e)) not in self.group_errors:
                self.group_errors.add(error)
                log.error(
                    "group %s failed: %s (groups failing so again: counted in rollout_errors)", row.prompt_id, error
                )
            if self.counters.rollout_errors > 10 * self.cfg.train.batch_groups:
                self._stop("too many rollout errors")
        finally:
            self.stall.progressed()
            await self.admission.finish(accepted)

    def _finish(self, position: int) -> None:
        """``position``'s group was trained or dropped: a resume will not sample it again."""
        self.unfinished.discard(position)
        self.stream.finish(position)

    def _lost(self, worker: Any) -> None:
        """A rollout worker died: the pool takes it out of the rotation and replaces it while restarts are left."""
        self.fleet.rollout.lost(worker, self._load_current, lambda: self._stop("no rollout worker left"))

    async def _load_current(self, worker: Any) -> int:
        """Load the trainer's current weights into a new rollout worker; returns the version it serves."""
        return await self.weights.load_current(worker, lambda: self.version)

    def _stop(self, why: str) -> None:
        """Stop the run (the training loop ends before its next step), logging ``why`` as an error."""
        log.error("%s; stopping", why)
        self.stopping.set()

    def _fail(self, why: str) -> None:
        """Stop the run on an error it cannot train through (the first one is the run's ``failure``)."""
        if self.failure is None:
            self.failure = why
            self._stop(why)

    def _reward_state(self, weights_version: int | None = None) -> RewardState:
        """The rewards' ``trainer_state`` now: the trainer's step, for samples of ``weights_version`` (default the
        trainer's)."""
        train = self.cfg.train
        return RewardState.at(self.version, train.max_steps, train.batch_groups, len(self.train_rows), weights_version)

    async def continuous_training(self) -> None:
        """Consume batches, step the trainers, sync weights, log; ``max_steps`` times."""
        cfg = self.cfg.train
        progress = Progress(cfg.max_steps, "train", "step", self.version)
        last, last_idle = time.monotonic(), self.admission.idle_seconds()
        for step in range(self.version + 1, cfg.max_steps + 1):
            if self.stopping.is_set():
                log.error("stopping before step %d", step)
                break
            self.stall.waiting_for(f"step {step} (its batch, then the trainers)", rollouts=True)
            try:
                if cfg.periodic_async:
                    groups, results = await streamed_step(self.cfg, self.fleet, self.version, self.stopping)
                else:
                    before = self.sleep.sleep if self.sleep else None
                    groups, results = await batch_step(self.cfg, self.fleet, self.version, self.stopping, before)
            except RunStopped:
                log.error("stopping before step %d: no more rollouts are coming", step)
                break
            for group in groups:
                self._finish(group.position)
            self.counters.groups_trained += len(groups)
            self.counters.tokens_trained += trained_tokens(groups)
            for position in await self.fleet.buffer.take_dropped_positions.remote():
                self.counters.drop("stale")
                self._finish(position)
            buffer_stats = await self.fleet.buffer.stats.remote()
            await self.admission.forget(buffer_stats.get("dropped_stale", 0) - self.admission.forgotten)
            batch_stats = summarize_groups(groups, self.version)
            silent, warning = self.signal.after_step(step, groups)
            self.counters.steps_without_signal += silent
            if warning:
                log.warning(warning)
            self.version = step
            errors, dropped = self.counters.rollout_errors, self.groups.dynamic_sampling.end_step()
            self.stall.waiting_for(f"the weight sync of version {step}")
            try:
                synced = await self.weights.sync(self.version) if step % cfg.sync_every == 0 else {}
            except EngineWakeFailed as e:
                self._fail(str(e))
                break
            # the clock and the idle total are read together, after the sync: a step's idle lies within its interval
            now, busy, idle = time.monotonic(), max(r["seconds"] for r in results), self.admission.idle_seconds()
            metrics = step_metrics(groups, results, batch_stats, buffer_stats, idle, errors, dropped) | synced
            metrics["num_tokens"] = float(self.counters.tokens_trained)  # TRL's name: the run's tokens so far
            metrics.update(step_timing(now - last, busy, batch_stats["generated_tokens"], idle - last_idle))
            if self.governor:  # the next batch's plans take the steered redundancy
                redundancy = self.governor.update(metrics["rollout_idle_frac"])
                self.policy.avg_redundancy = metrics["avg_redundancy"] = redundancy
            self.stall.step_took(now - last)
            last, last_idle = now, idle
            self.logger.log(step, metrics)
            self.logger.log_completions(step, completion_rows(step, groups, self.cfg.logging.completions_per_step))
            progress.advance(step_postfix(metrics))
            if unwritten := self._records_unwritten():  # a full disk: training on would leave steps nobody can read
                self._fail(unwritten)
                break
            every = cfg.checkpoint_every
            if cfg.save_checkpoint and step < cfg.max_steps and (self.stop_signal or (every and step % every == 0)):
                self.stall.waiting_for(f"the checkpoint of step {step}")
                try:
                    await self._checkpoint()
                except checkpoint.CheckpointNotWritten as e:
                    self._fail(str(e))
                    break
            if self.stop_signal:
                log.warning("stopped at step %d on %s", step, signal.Signals(self.stop_signal).name)
                break
            if self.cfg.eval.every and step % self.cfg.eval.every == 0 and step < cfg.max_steps:
                self.stall.waiting_for(f"the evaluation after step {step}")
                await self.weights.synced()
                await self._evaluate(f"step{step}")
        await self.weights.synced()
        progress.close()

    def request_stop(self, signum: int) -> None:
        """A signal handler: the first stop signal ends the start-up at once, or the run at the next step boundary
        with a checkpoint; a second one stops it now (``finally`` blocks still shut everything down)."""
        if self.stop_signal is not None:
            raise KeyboardInterrupt
        self.stop_signal = signum
        name = signal.Signals(signum).name
        if self.starting is None or not self.starting.done():
            log.warning("%s: stopping before training starts", name)
            if self.starting is not None:
                self.starting.cancel()
            return
        log.warning("%s: stopping after this step with a checkpoint (send it again to stop now)", name)

    async def _checkpoint(self) -> Path:
        """Write a complete checkpoint of step ``self.version`` (see ``rl.loop.checkpoint``); returns its directory."""
        state = {
            "version": self.version,
            "settings": checkpoint.run_settings(self.cfg),
            "max_steps": self.cfg.train.max_steps,  # this run's last step: a run stopped before it is unfinished
            "data": self.data_fingerprint,
            "stream": self.stream.state(),
            "in_flight": len(self.unfinished),
            "counters": asdict(self.counters),
            "accuracy_before": self.accuracy_before,
            "train_seconds": self._train_seconds(),
        }
        shaping = {"policy": self.policy, "governor": self.governor}
        return await checkpoint.write(self.cfg, self.version, self.fleet.trainers, shaping, state)

    def _train_seconds(self) -> float:
        """The run's training time so far, the segments before a resume included."""
        return self.trained_before + time.monotonic() - self.t0

    async def _restore(self) -> None:
        """Load the checkpoint into every trainer rank and the rollout engines; log what was restored."""
        saved, equal = await checkpoint.load(self.resume, self.fleet.trainers)
        resumed = {"trainer_digest_equal": float(equal), "replayed_groups": float(saved["in_flight"])}
        self.logger.log(self.version, resumed, kind="resume")
        if not equal:
            older = [c for c in checkpoint.complete_checkpoints(self.cfg.run_dir) if c != self.resume]
            fix = f"remove it to resume from {older[-1].name}" if older else "it is the run's only one: start anew"
            damaged = f"the trainer state loaded differs from the one saved: the checkpoint is damaged; {fix}"
            raise checkpoint.CheckpointError(f"{self.resume}: {damaged}")
        self.admission.accepted = self.version * self.cfg.train.batch_groups  # every trained group, as if run on
        await self.weights.publish(self.version, None)
        self.counters.replayed_groups += saved["in_flight"]
        resumed_at = "resumed at step %d from %s; %d groups in flight or buffered at that checkpoint are sampled again"
        log.info(resumed_at, self.version, self.resume, saved["in_flight"])

    async def _evaluate(self, tag: str) -> dict[str, float]:
        live, state = self.fleet.rollout.live, self._reward_state()
        rows, sampling, tools = self.test_rows, self.eval_sampling, self.groups.episodes  # episodes, as in training
        progressed = self.stall.progressed  # each problem's samples are progress for the stall watch
        samples = self.cfg.eval.samples
        try:
            metrics = await evaluate(
                rows, live, self.encoder, self.rewards, sampling, tag, samples, state, tools, on_problem=progressed
            )
        except EvaluationFailed as e:
            raise RunFailed(f"the held-out evaluation {tag} failed: {e}") from None
        self.logger.log(self.version, metrics, kind="eval")
        tqdm.write(eval_line(tag, self.version, metrics))  # above the training bar, which a print would break
        return metrics


def run_training(
    cfg: RunConfig,
    inputs: RunInputs | None = None,
    resume: Path | None = None,
    start_actors: ActorStarter | None = None,
) -> dict[str, Any]:
    """Synchronous entry point used by tests (``inputs``, ``resume``, ``start_actors``: see ``Driver``)."""
    return asyncio.run(Driver(cfg, inputs, resume, start_actors).run())
