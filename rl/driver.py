"""The asynchronous GRPO driver: two coroutines, ``continuous_rollouts`` and ``continuous_training``.

Rollouts: plan a batch of prompts with the shaping policy, start each group when admission control
allows, sample it on a rollout worker, score it, compute advantages, put it into the buffer.
Training: take a batch from the buffer, step the trainers, sync weights every ``sync_every`` steps,
log, evaluate. ``max_staleness=0`` makes the two alternate exactly (synchronous on-policy).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import pickle
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ray.exceptions import RayActorError
from tqdm import tqdm

from rl import checkpoint, placement
from rl.actors import link_ray_logs, start_fleet, start_ray
from rl.admission import AdmissionControl
from rl.advantages import compute_advantages
from rl.balance import balanced_shards, round_robin_shards
from rl.completions import completion_rows
from rl.config import RunConfig
from rl.console import step_postfix
from rl.data.stream import PromptStream
from rl.evaluation import evaluate
from rl.fleet import Fleet
from rl.metrics import MetricsLogger, summarize_groups
from rl.preflight import RunInputs, preflight
from rl.rewards.hooks import RewardState
from rl.rewards.pool import RewardPool
from rl.rollout.engine import SamplingSpec
from rl.rollout.scorer_worker import ScorerClient
from rl.rollout.tool_workflow import ToolSettings
from rl.rollout.workflow import Episode, episode_group
from rl.shaping.factory import make_policy, shaping_options
from rl.shaping.idle_governor import IdleGovernor
from rl.types import Group, PromptRow

log = logging.getLogger("rl.driver")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # the first: a checkpoint at the step boundary, then a clean stop


class RunStopped(Exception):
    """The run is stopping (e.g. no rollout worker left) while the trainer waits for data."""


class RunFailed(Exception):
    """The run stopped on an error it cannot train through; the message is one line."""


@dataclass
class RunCounters:
    """Things that happen outside any one step, counted for the run summary (and kept by checkpoints).

    Group accounting, an invariant of every run: ``groups_started == groups_trained + rollout_errors +
    sum(dropped_groups) + replayed_groups + groups in flight or buffered now``.
    """

    groups_started: int = 0
    groups_trained: int = 0
    rollout_errors: int = 0  # groups whose sampling call failed (a dead worker, a failed call)
    dead_workers: int = 0
    restarted_workers: int = 0
    zero_variance_admitted: int = 0  # dynamic sampling's cap was hit: trained on anyway
    replayed_groups: int = 0  # in flight or buffered at the checkpoint a run resumed from: sampled again
    dropped_groups: dict[str, int] = field(default_factory=dict)
    reward_failures: dict[str, int] = field(default_factory=dict)
    scored_samples: int = 0  # samples given to the reward functions (reward_failures["none"] counts those unscored)

    def drop(self, reason: str) -> None:
        self.dropped_groups[reason] = self.dropped_groups.get(reason, 0) + 1

    def unaccounted(self, open_groups: int) -> int:
        """Started groups the invariant does not place, given ``open_groups`` in flight or buffered: 0."""
        placed = self.groups_trained + self.rollout_errors + sum(self.dropped_groups.values()) + self.replayed_groups
        return self.groups_started - placed - open_groups


ActorStarter = Callable[[RunConfig, str, "RunCounters"], Fleet]  # config, model directory, counters -> the actors


class Driver:
    def __init__(
        self,
        cfg: RunConfig,
        inputs: RunInputs | None = None,
        resume: Path | None = None,
        start_actors: ActorStarter | None = None,
    ) -> None:
        """``inputs``: what ``preflight(cfg)`` loaded (checked here when not given); ``resume``: a complete
        checkpoint of this run to continue from (see ``rl.checkpoint.resume_config``); ``start_actors``: builds
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
        self.encoder = inputs.encoder
        if resume:
            shaping = pickle.loads((resume / checkpoint.SHAPING_STATE).read_bytes())
            self.policy, self.governor = shaping["policy"], shaping["governor"]
        else:
            self.policy = make_policy(cfg.shaping.policy, **shaping_options(cfg))
            s = cfg.shaping
            self.governor = (
                IdleGovernor(s.avg_redundancy, s.min_redundancy, s.max_redundancy, s.idle_target)
                if s.idle_target is not None
                else None
            )
        self.sampling = SamplingSpec(cfg.rollout.max_tokens, cfg.rollout.temperature, cfg.rollout.top_p)
        self.eval_sampling = SamplingSpec(cfg.rollout.max_tokens, cfg.eval.temperature)  # 0 = greedy
        self.progress_every_tokens = cfg.shaping.progress_tokens
        self.tools = ToolSettings.of(cfg.rollout)  # None: single-turn groups under the shaping policy
        self.group_ids = itertools.count()
        self.admission = AdmissionControl(cfg.train.batch_groups, cfg.train.max_staleness)
        self.counters = RunCounters(**saved.get("counters", {}))
        self.reward_streaks: dict[str, int] = {}  # consecutive failed calls of each reward function
        self.failure: str | None = None  # why the run stopped on an error, if it did
        self.stopping = asyncio.Event()
        self.stop_signal: int | None = None  # SIGTERM/SIGINT asked for a checkpoint, then a clean stop
        self.version = saved.get("version", 0)
        self.accuracy_before = saved.get("accuracy_before", math.nan)
        self.zero_variance_this_step = 0
        self.pending_sync: asyncio.Task | None = None  # an overlapped weight sync still loading
        self.last_sync: dict[str, float] = {}  # the last finished weight sync: whole, trainer export, engine load

    async def run(self) -> dict[str, Any]:
        """Start everything, train ``max_steps`` steps, save, shut down; returns the run summary."""
        import ray

        cfg = self.cfg
        owns_ray, start_actors = False, self.start_actors
        if start_actors is None:
            owns_ray, start_actors = start_ray(cfg), start_fleet
            link_ray_logs(cfg.run_dir / "logs")
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:  # after ray.init, whose own SIGTERM handler would abort the process
            loop.add_signal_handler(signum, self.request_stop, signum)
        if cfg.weight_sync.transport != "cpu" and not ray.cluster_resources().get("GPU"):
            if owns_ray:
                ray.shutdown()
            raise ValueError("weight_sync.transport=nccl needs GPUs; this Ray cluster has none")
        self.rewards = RewardPool(
            [(f.spec, f.weight) for f in cfg.reward.functions],
            cfg.reward.num_workers,
            cfg.reward.timeout_s,
            cfg.reward.on_failure,
        )
        self.fleet = start_actors(cfg, self.model_dir, self.counters)
        if not self.resume:
            checkpoint.start_fresh(cfg.run_dir)
            checkpoint.save_config(cfg)
        self.logger = MetricsLogger(
            cfg.run_dir,
            resume_step=self.version if self.resume else None,
            wandb=cfg.logging.wandb,
            config=cfg.model_dump(mode="json"),
        )
        try:
            await self.fleet.channel.start()
            if self.start_actors is None:  # a fleet of real actors: say where each runs
                await placement.log_where(self.fleet.trainers, self.fleet.rollout.started)
            t0 = time.monotonic()
            stats = await asyncio.gather(*[w.stats.remote() for w in self.fleet.rollout.started])
            log.info("rollout engines up in %.1f s", max(s["startup_s"] for s in stats))
            if self.fleet.scorer:
                log.info("scorer worker up in %.1f s", (await self.fleet.scorer.stats.remote())["startup_s"])
            if self.resume:
                await self._restore()
            else:
                self.accuracy_before = (await self._evaluate("before"))["accuracy"]
            rollouts = asyncio.create_task(self.continuous_rollouts())
            await self.continuous_training()
            self.stopping.set()
            rollouts.cancel()
            await asyncio.gather(rollouts, return_exceptions=True)
            if self.failure:
                raise RunFailed(self.failure)
            train_seconds = time.monotonic() - t0
            finished = self.stop_signal is None and bool(self.fleet.rollout.live)
            after = await self._evaluate("after") if finished else {"accuracy": math.nan}
            saved = checkpoint.complete_checkpoints(cfg.run_dir)
            if cfg.train.save_checkpoint and not (saved and checkpoint.step_of(saved[-1]) == self.version):
                saved.append(await self._checkpoint())
            summary = {
                "accuracy_before": self.accuracy_before,
                "accuracy_after": after["accuracy"],
                "train_seconds": train_seconds,
                "steps": self.version,
                "stopped_by": signal.Signals(self.stop_signal).name if self.stop_signal else None,
                "checkpoint": str(saved[-1]) if cfg.train.save_checkpoint and saved else None,
                "engine_startup_s": max(s["startup_s"] for s in stats),
                "buffer": await self.fleet.buffer.stats.remote(),
                "rollout_errors": self.counters.rollout_errors,
                "dead_workers": self.counters.dead_workers,
                "restarted_workers": self.counters.restarted_workers,
                "zero_variance_admitted": self.counters.zero_variance_admitted,
                "replayed_groups": self.counters.replayed_groups,
                "groups_started": self.counters.groups_started,
                "groups_trained": self.counters.groups_trained,
                "groups_open": len(self.unfinished),
                "groups_unaccounted": self.counters.unaccounted(len(self.unfinished)),
                "dropped_groups": self.counters.dropped_groups,
                "reward_failures": self.counters.reward_failures,
                "scored_samples": self.counters.scored_samples,
            }
            scalars = {k: v for k, v in summary.items() if isinstance(v, (int, float))}
            for name in ("dropped_groups", "reward_failures"):  # counts by reason, flattened for the JSONL
                scalars.update({f"{name}_{k}": v for k, v in summary[name].items()})
            self.logger.log(self.version, scalars, kind="summary")
            return summary
        finally:
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)
            self.logger.close()
            self.rewards.close()
            await self.fleet.shutdown()
            if owns_ray:
                ray.shutdown()

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
            prompt_tokens, result, episodes = await self._sample(worker, row, plan)
            group = await self._score(row, prompt_tokens, result, episodes)
            if group is not None:
                group.position = position
                self.policy.observe(row.prompt_id, [len(s.tokens) for s in group.samples])
            if group is not None and not self._filtered_out(group):
                await self.fleet.buffer.put.remote(group)
                accepted = True
            else:  # dropped; ``_score`` or ``_filtered_out`` counted why
                self._finish(position)
        except asyncio.CancelledError:
            raise  # the run is ending: the group stays open (a resume samples it again)
        except Exception as e:  # a dead worker or a failed call: count it, free the slot, go on
            self.counters.rollout_errors += 1
            self._finish(position)
            log.error("group %s failed: %s", row.prompt_id, e)
            if isinstance(e, RayActorError):
                self._lost(worker)
            if self.counters.rollout_errors > 10 * self.cfg.train.batch_groups:
                log.error("too many rollout errors; stopping")
                self.stopping.set()
        finally:
            await self.admission.finish(accepted)

    def _finish(self, position: int) -> None:
        """``position``'s group was trained or dropped: a resume will not sample it again."""
        self.unfinished.discard(position)
        self.stream.finish(position)

    def _lost(self, worker: Any) -> None:
        """A rollout worker died: the pool takes it out of the rotation and replaces it while restarts are left."""
        self.fleet.rollout.lost(worker, self._load_current, self._no_worker_left)

    async def _load_current(self, worker: Any) -> int:
        """Load the trainer's current weights into a new rollout worker; returns the version it serves."""
        loaded = None
        while loaded != self.version:  # a sync may land while this one loads: then load again
            loaded = self.version
            await worker.load_weights.remote(self.fleet.channel.export_bytes(), loaded, False)
        return loaded

    def _no_worker_left(self) -> None:
        log.error("no rollout worker left; stopping")
        self.stopping.set()

    async def _sample(self, worker: Any, row: PromptRow, plan: Any) -> tuple[list[int], Any, list[Episode]]:
        """One group on ``worker``: its prompt ids, its ``GroupResult`` and, with tools, its episodes (one a sample)."""
        group_id = f"g{next(self.group_ids)}-{row.prompt_id}"
        if self.tools is not None:
            t0 = time.monotonic()
            episodes = await worker.generate_episodes.remote(group_id, row, self.sampling, self.tools, plan.n_launch)
            return *episode_group(episodes, time.monotonic() - t0), episodes
        prompt_tokens = self.encoder.encode(row.prompt)
        result = await worker.generate_group.remote(
            group_id,
            prompt_tokens,
            self.sampling,
            self.policy.controller(plan),
            self.progress_every_tokens,
            ScorerClient(self.fleet.scorer, row.prompt) if self.fleet.scorer else None,
        )
        return prompt_tokens, result, []

    async def _score(
        self, row: PromptRow, prompt_tokens: list[int], result: Any, episodes: list[Episode]
    ) -> Group | None:
        """Rewards for the group's samples (TRL's arguments; with tools each completion is its episode's messages and
        ``environments`` its environments); None if it is dropped, counted."""
        samples = result.samples
        if len(samples) < self.cfg.shaping.m_keep:
            self.counters.drop("short_group")
            return None
        generated_with = min((min(s.versions) for s in samples if s.versions), default=self.version)
        scored = await self.rewards.score(
            [row.prompt] * len(samples),
            [e.messages for e in episodes] or [self.encoder.completion(row.prompt, s.text) for s in samples],
            self.encoder.columns([row] * len(samples), samples) | _environments(episodes),
            self._reward_state(generated_with),
        )
        self.counters.scored_samples += len(samples)
        for kind, n in scored.failures.items():
            if n:
                self.counters.reward_failures[kind] = self.counters.reward_failures.get(kind, 0) + n
        self._watch_reward_errors(scored.errors)
        keep = [i for i, r in enumerate(scored.rewards) if r is not None]
        kept = [(samples[i], scored.rewards[i]) for i in keep]
        if len(kept) < 2:
            self.counters.drop("reward_dropped")
            return None
        for s, r in kept:
            s.reward = float(r)
        stats = {
            **result.controller_stats,
            "generated_tokens": result.generated_tokens,
            "resubmitted": result.resubmits,
            "seconds": result.seconds,
            **({"scored_texts": result.scored, "score_failures": result.score_failures} if self.fleet.scorer else {}),
        }
        return Group(
            prompt=row,
            prompt_tokens=prompt_tokens,
            samples=[s for s, _ in kept],
            stats=stats,
            reward_log=scored.log_of(keep),
        )

    def _reward_state(self, weights_version: int | None = None) -> RewardState:
        """The rewards' ``trainer_state`` now: the trainer's step, for samples of ``weights_version`` (default the
        trainer's)."""
        train = self.cfg.train
        return RewardState.at(self.version, train.max_steps, train.batch_groups, len(self.train_rows), weights_version)

    def _watch_reward_errors(self, errors: dict[str, str]) -> None:
        """Stop the run once a reward function's call has failed for a whole step's worth of groups in a row
        (``train.batch_groups``): training on its fallback rewards would teach nothing."""
        for name in self.rewards.names:
            self.reward_streaks[name] = self.reward_streaks.get(name, 0) + 1 if name in errors else 0
            if self.reward_streaks[name] >= self.cfg.train.batch_groups and self.failure is None:
                self.failure = (
                    f"reward {name!r} failed on all of the last {self.reward_streaks[name]} groups, a whole step; "
                    f"last error: {errors[name]}"
                )
                log.error("%s; stopping", self.failure)
                self.stopping.set()

    def _filtered_out(self, group: Group) -> bool:
        """DAPO dynamic sampling: drop a group whose rewards are all equal (no signal); its slot goes to a new prompt.

        At most ``dynamic_sampling_max_factor * batch_groups`` groups are dropped per step, so a run whose prompts
        are all solved (or all failed) keeps training instead of sampling forever; those are counted.
        """
        algo = self.cfg.algorithm
        if not algo.dynamic_sampling or len({s.reward for s in group.samples}) > 1:
            return False
        if self.zero_variance_this_step >= algo.dynamic_sampling_max_factor * self.cfg.train.batch_groups:
            self.counters.zero_variance_admitted += 1
            return False
        self.zero_variance_this_step += 1
        self.counters.drop("zero_variance")
        return True

    async def continuous_training(self) -> None:
        """Consume batches, step the trainers, sync weights, log; ``max_steps`` times."""
        cfg = self.cfg.train
        bar = tqdm(total=cfg.max_steps, initial=self.version, desc="train", unit="step", dynamic_ncols=True)
        last, last_idle = time.monotonic(), self.admission.idle_seconds()
        for step in range(self.version + 1, cfg.max_steps + 1):
            if self.stopping.is_set():
                log.error("stopping early at step %d", step)
                break
            try:
                groups, results = await (self._streamed_step() if cfg.periodic_async else self._batch_step())
            except RunStopped:
                log.error("stopping early at step %d: no more rollouts are coming", step)
                break
            for group in groups:
                self._finish(group.position)
            self.counters.groups_trained += len(groups)
            for position in await self.fleet.buffer.take_dropped_positions.remote():
                self.counters.drop("stale")
                self._finish(position)
            buffer_stats = await self.fleet.buffer.stats.remote()
            await self.admission.forget(buffer_stats.get("dropped_stale", 0) - self.admission.forgotten)
            batch_stats = summarize_groups(groups, self.version)
            self.version = step
            busy = max(r["seconds"] for r in results)
            metrics = {
                **batch_stats,
                **results[0],
                **{f"buffer_{k}": float(v) for k, v in buffer_stats.items()},
                "rollout_idle_s": self.admission.idle_seconds(),
                "rollout_errors": self.counters.rollout_errors,
                "zero_variance_dropped": float(self.zero_variance_this_step),
                "trainer_tokens_per_s": batch_stats["kept_tokens"] / max(busy, 1e-9),
                "dp_wait_s": sum(r["dp_wait_s"] for r in results),  # data-parallel ranks waiting for a straggler
                "prompt_ids": [g.prompt.prompt_id for g in groups],  # what this step trained on
            }
            self.zero_variance_this_step = 0
            if step % cfg.sync_every == 0:
                metrics.update(await self._sync_weights())
            now = time.monotonic()
            metrics["step_seconds"] = now - last
            metrics["rollout_tokens_per_s"] = batch_stats["generated_tokens"] / max(now - last, 1e-9)
            metrics["trainer_idle_s"] = max(now - last - busy, 0.0)
            metrics["trainer_idle_frac"] = metrics["trainer_idle_s"] / max(now - last, 1e-9)
            idle = metrics["rollout_idle_s"]
            metrics["rollout_idle_frac"] = (idle - last_idle) / max(now - last, 1e-9)
            if self.governor:  # the next batch's plans take the steered redundancy
                self.policy.avg_redundancy = metrics["avg_redundancy"] = self.governor.update(
                    metrics["rollout_idle_frac"]
                )
            last, last_idle = now, idle
            self.logger.log(step, metrics)
            self.logger.log_completions(step, completion_rows(step, groups, self.cfg.logging.completions_per_step))
            bar.set_postfix_str(step_postfix(metrics))
            bar.update(1)
            every = cfg.checkpoint_every
            if cfg.save_checkpoint and step < cfg.max_steps and (self.stop_signal or (every and step % every == 0)):
                await self._checkpoint()
            if self.stop_signal:
                log.warning("stopped at step %d on %s", step, signal.Signals(self.stop_signal).name)
                break
            if self.cfg.eval.every and step % self.cfg.eval.every == 0 and step < cfg.max_steps:
                await self._synced()
                await self._evaluate(f"step{step}")
        await self._synced()
        bar.close()

    def request_stop(self, signum: int) -> None:
        """A signal handler: the first SIGTERM/SIGINT stops the run at the next step boundary with a checkpoint;
        a second one stops it now (``finally`` blocks still shut everything down)."""
        if self.stop_signal is not None:
            raise KeyboardInterrupt
        self.stop_signal = signum
        log.warning(
            "%s: stopping after this step with a checkpoint (send it again to stop now)", signal.Signals(signum).name
        )

    async def _checkpoint(self) -> Path:
        """Write a complete checkpoint of step ``self.version`` (see ``rl.checkpoint``); returns its directory."""
        t0 = time.monotonic()
        tmp = checkpoint.begin(self.cfg.run_dir, self.version)
        await self._on_every_rank("save", str(tmp))
        (tmp / checkpoint.SHAPING_STATE).write_bytes(pickle.dumps({"policy": self.policy, "governor": self.governor}))
        state = {
            "version": self.version,
            "config": checkpoint.config_fingerprint(self.cfg),
            "data": self.data_fingerprint,
            "stream": self.stream.state(),
            "in_flight": len(self.unfinished),
            "counters": asdict(self.counters),
            "accuracy_before": self.accuracy_before,
            "trainer_digest": await self._on_every_rank("state_digest"),
        }
        path = checkpoint.commit(tmp, state, self.cfg.train.keep_checkpoints)
        log.info("checkpoint of step %d written to %s in %.1f s", self.version, path, time.monotonic() - t0)
        return path

    async def _on_every_rank(self, method: str, *args: Any) -> Any:
        """Call ``method`` on every trainer rank at once (their gathers meet); returns rank 0's answer."""
        return (await asyncio.gather(*[getattr(t, method).remote(*args) for t in self.fleet.trainers]))[0]

    async def _restore(self) -> None:
        """Load the checkpoint into every trainer rank and the rollout engines; log what was restored."""
        path = str(self.resume)
        await asyncio.gather(*[t.load.remote(path) for t in self.fleet.trainers])
        saved = checkpoint.read_driver_state(self.resume)
        digest = await self._on_every_rank("state_digest")  # every parameter and AdamW moment, as loaded
        equal = digest == saved["trainer_digest"]  # the digest taken of the trainer when the checkpoint was written
        resumed = {"trainer_digest_equal": float(equal), "replayed_groups": float(saved["in_flight"])}
        self.logger.log(self.version, resumed, kind="resume")
        if not equal:
            raise RunFailed(f"{path}: the trainer state loaded differs from the one saved; the checkpoint is damaged")
        self.admission.accepted = self.version * self.cfg.train.batch_groups  # every trained group, as if run on
        await self._publish(self.version, None)
        self.counters.replayed_groups += saved["in_flight"]
        log.warning(
            "resumed at step %d from %s; %d groups in flight or buffered at that checkpoint are sampled again",
            self.version,
            path,
            saved["in_flight"],
        )

    async def _sync_weights(self) -> dict[str, float]:
        """Publish ``self.version`` to the rollout engines; returns the sync's metrics.

        Synchronous training waits for the engines. With ``max_staleness >= 1`` (and a channel that can export
        ahead) the engines load while the trainer takes its next step: the export is queued on the trainer before
        that step's call, so it holds exactly this version; syncs stay in version order (one in flight, the next
        waits for it); and admission control learns the new version only once the engines serve it, so the
        staleness bound holds as before. ``weight_sync_wait_s`` is the time the training loop waited for syncs.
        """
        t0 = time.monotonic()
        await self._synced()
        channel = self.fleet.channel
        if self.cfg.train.max_staleness >= 1 and channel.overlaps:
            self.pending_sync = asyncio.create_task(self._publish(self.version, channel.export()))
        else:
            await self._publish(self.version, None)
        return {**self.last_sync, "weight_sync_wait_s": time.monotonic() - t0}

    async def _publish(self, version: int, exported: Any) -> None:
        report = await self.fleet.channel.send(version, exported)
        for worker in report.dead:
            self._lost(worker)
        await self.admission.set_trainer_version(version)
        self.last_sync = {
            "weight_sync_s": report.seconds,
            "weight_sync_export_s": report.export_seconds,
            "weight_sync_load_s": max(report.engine_seconds, default=0.0),
        }

    async def _synced(self) -> None:
        """Wait until the engines serve the trainer's last published version (raises what the sync raised)."""
        if self.pending_sync is not None:
            pending, self.pending_sync = self.pending_sync, None
            await pending

    async def _batch_step(self) -> tuple[list[Group], list[dict[str, float]]]:
        """Take a whole batch, compute its advantages, one ``train_step`` per data-parallel rank."""
        groups = await self._unless_stopping(
            self.fleet.buffer.get_batch.remote(self.cfg.train.batch_groups, self.version)
        )
        assign_advantages(self.cfg.algorithm.advantage, groups)
        split = balanced_shards if self.cfg.train.dp_balance == "tokens" else round_robin_shards
        trainers = self.fleet.trainers
        shards = split(groups, len(trainers))
        results = await asyncio.gather(*[t.train_step.remote(shard) for t, shard in zip(trainers, shards, strict=True)])
        return groups, results

    async def _streamed_step(self) -> tuple[list[Group], list[dict[str, float]]]:
        """Periodic asynchrony: each group is accumulated as soon as it arrives, the step waits for the last one.

        Every group of the step was sampled with the current weights (``max_staleness=0``) and the trainer
        divides the summed gradient by the step's global loss units, so the update equals ``_batch_step``'s.
        """
        groups: list[Group] = []
        pending = []
        for i in range(self.cfg.train.batch_groups):
            group = (await self._unless_stopping(self.fleet.buffer.get_batch.remote(1, self.version)))[0]
            assign_advantages(self.cfg.algorithm.advantage, [group])  # group-local estimators only (config check)
            groups.append(group)
            pending.append(self.fleet.trainers[i % len(self.fleet.trainers)].accumulate.remote([group]))
        await asyncio.gather(*pending)
        results = await asyncio.gather(*[t.finish_step.remote() for t in self.fleet.trainers])
        return groups, results

    async def _unless_stopping(self, ref: Any) -> Any:
        """Await ``ref``, unless the run is stopping first (then raise ``RunStopped``)."""
        get, stop = asyncio.ensure_future(ref), asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({get, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if get.done():
            return get.result()
        get.cancel()
        raise RunStopped

    async def _evaluate(self, tag: str) -> dict[str, float]:
        metrics = await evaluate(
            self.test_rows,
            self.fleet.rollout.live,
            self.encoder,
            self.rewards,
            self.eval_sampling,
            tag,
            state=self._reward_state(),
        )
        self.logger.log(self.version, metrics, kind="eval")
        tqdm.write(  # above the training bar, which a print would break
            f"[eval {tag}] step {self.version}: held-out accuracy {metrics['accuracy']:.3f} "
            f"({int(metrics['num_problems'])} problems)"
        )
        return metrics


def _environments(episodes: list[Episode]) -> dict[str, list[Any]]:
    """TRL's ``environments`` reward argument, for runs with ``rollout.environment``."""
    return {"environments": [e.environment for e in episodes]} if any(e.environment for e in episodes) else {}


def assign_advantages(estimator: str, groups: list[Group]) -> None:
    """Fill every group's ``advantages`` with ``estimator`` computed over ``groups`` together."""
    values = compute_advantages(estimator, [[s.reward for s in g.samples] for g in groups])
    for group, advantages in zip(groups, values, strict=True):
        group.advantages = advantages


def run_training(
    cfg: RunConfig,
    inputs: RunInputs | None = None,
    resume: Path | None = None,
    start_actors: ActorStarter | None = None,
) -> dict[str, Any]:
    """Synchronous entry point used by tests (``inputs``, ``resume``, ``start_actors``: see ``Driver``)."""
    return asyncio.run(Driver(cfg, inputs, resume, start_actors).run())
