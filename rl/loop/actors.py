"""Starting Ray and the actors of a run: rollout workers, trainer workers, the trajectory buffer, SART's scorer, all
gathered into the ``Fleet`` the driver takes (``start_fleet``)."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rl.config import RunConfig, ray_address_named
from rl.inputs.preflight import START_RAY, BadInput
from rl.loop import placement
from rl.loop.buffer import TrajectoryBuffer
from rl.loop.fleet import Fleet, RestartCounters, RolloutPool
from rl.loop.weight_channel import make_weight_channel
from rl.models import resolve_model
from rl.output import console
from rl.rollout.engine import EngineSpec
from rl.rollout.scorer_worker import ScorerSpec, remote_scorer_worker
from rl.rollout.worker import remote_rollout_worker
from rl.trainer.engine import TrainerSpec
from rl.trainer.worker import TrainerWorker

log = logging.getLogger("rl.actors")
ActorStarter = Callable[[RunConfig, str, RestartCounters], Fleet]  # config, model directory, counters -> the actors
LOOPBACK = "127.0.0.1"
# set for a local instance before Ray starts, so Ray's processes and every actor inherit them: Ray takes loopback
# as the node's address (as on a laptop) instead of swapping it for the machine's; vLLM's rendezvous uses it too
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "VLLM_HOST_IP": LOOPBACK}


def start_ray(cfg: RunConfig) -> bool:
    """Join ``ray.address`` or start a local instance; returns True if this call started it.

    A local instance lives on loopback only: its GCS, raylet, agents and every worker's server listen on
    127.0.0.1, no dashboard starts, and Ray's token authentication stays as Ray sets it. Joining a cluster is
    unchanged.
    """
    import ray

    if ray.is_initialized():
        return False
    t0 = time.monotonic()
    console.filter_handlers(logging.getLogger("ray"))
    routing = console.ray_runtime_env()  # actors' engine output into the run's logs/ unless --verbose
    extra = {"runtime_env": routing} if routing else {}
    if cfg.ray.address:
        _token_auth_like_the_head()
        try:
            ray.init(address=cfg.ray.address, log_to_driver=True, **extra)
        except ConnectionError:  # "auto" with no cluster on this machine, or one gone since preflight
            raise BadInput(
                f"{ray_address_named(cfg.ray.address)}: no running Ray cluster found; start one first ({START_RAY})"
            ) from None
    else:
        _loopback_node()
        needed = cfg.rollout.num_workers + cfg.train.num_workers + int(cfg.shaping.scorer_worker)
        ray.init(
            address="local",  # a new instance even where `ray start` left a cluster for a plain ray.init() to join
            num_cpus=max(cfg.ray.num_cpus or 0, needed, os.cpu_count() or 1),
            include_dashboard=False,
            _node_ip_address=LOOPBACK,
            log_to_driver=True,
            **extra,
        )
    where = f": {ray_address_named(cfg.ray.address)}" if cfg.ray.address else ""
    log.info("Ray %s in %.1f s%s", "joined" if cfg.ray.address else "started", time.monotonic() - t0, where)
    return True


def link_ray_logs(log_dir: Path) -> Path | None:
    """``log_dir/ray``: a link to this Ray session's own log folder on this node (raylet, GCS, every worker's
    output), so all of a run's logs are reached from its directory; returns it (None if Ray hides the folder)."""
    from ray._private import worker  # the session folder is not in Ray's public API

    node = getattr(worker.global_worker, "node", None)
    if node is None:
        return None
    link = log_dir / "ray"
    log_dir.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(node.get_logs_dir_path(), target_is_directory=True)
    return link


def _token_auth_like_the_head() -> None:
    """Join with Ray's token authentication where a token is at hand and ``RAY_AUTH_MODE`` is unset: the rule by
    which ``ray start --head`` turned it on for the cluster (a joining driver has it off otherwise, and is refused)."""
    try:  # the head's rule is not public API; Ray before token authentication has no such module
        from ray._private.authentication import authentication_token_setup as auth
    except ImportError:
        return
    auth.maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _loopback_node() -> None:
    """Environment and Ray's node-address rule for a loopback-only local instance."""
    from ray._private import ray_constants

    os.environ.update(LOOPBACK_ENV)
    ray_constants.ENABLE_RAY_CLUSTER = False  # the same rule in this process, where Ray read it at import


def start_fleet(cfg: RunConfig, model_dir: str, counters: RestartCounters) -> Fleet:
    """Every actor of a run (Ray must be up): rollout workers (replaced when one dies, while
    ``rollout.max_restarts`` allows and the cpu channel can load weights into a new one), SART's scorer, the trainer
    ranks (asked for, not yet joined: ``form_process_group``), the trajectory buffer, and the weight channel between
    them."""
    import ray

    placement.check(cfg.placement, ray.cluster_resources())
    placement.check_capacity(fleet_demands(cfg), [n["Resources"] for n in ray.nodes() if n["Alive"]])
    cfg = resolve_lora_sync(cfg)
    transport = cfg.weight_sync.transport

    def replacement(index: int) -> Any:
        return start_rollout_workers(cfg, model_dir, range(index, index + 1))[0]

    # Ray places actors in the order asked: the side named onto nodes goes first, so the other side, free to go
    # anywhere, cannot take the room it was named to (an unnamed engine on the only node the ranks may use)
    trainers_first = bool(cfg.placement.trainer_nodes) and not cfg.placement.rollout_nodes
    early = place_trainers(cfg, model_dir) if trainers_first else None
    pool = RolloutPool(
        start_rollout_workers(cfg, model_dir),
        counters,
        start_worker=replacement if transport == "cpu" else None,
        max_restarts=cfg.rollout.max_restarts,
    )
    scorer = start_scorer(cfg, model_dir) if cfg.shaping.scorer_worker else None
    trainers, room = early or place_trainers(cfg, model_dir)
    channel = make_weight_channel(transport, trainers, pool.live, cfg.rollout.partial_rollouts == "resubmit")
    return Fleet(pool, trainers, start_buffer(cfg), channel, scorer, trainer_room=room)


def fleet_demands(cfg: RunConfig) -> list[placement.Demand]:
    """What each of the run's actors that takes CPUs or GPUs asks Ray for, and where (``start_fleet``'s actors)."""
    each = placement.actor_resources(_gpus_per_actor(cfg))
    p = cfg.placement
    demands: list[placement.Demand] = [
        ("rollout engine", r, each) for r in placement.node_resources(p.rollout_nodes, cfg.rollout.num_workers)
    ]
    demands += [("trainer rank", r, each) for r in placement.node_resources(p.trainer_nodes, cfg.train.num_workers)]
    if cfg.shaping.scorer_worker:
        demands.append(("scorer", None, {"CPU": 1.0, "GPU": cfg.shaping.scorer_gpus}))
    return demands


def resolve_lora_sync(cfg: RunConfig) -> RunConfig:
    """``cfg`` with ``train.lora.sync=auto`` made concrete (Ray must be up): ``adapter`` where the cluster has GPUs,
    ``merged`` on CPU, where vLLM's LoRA kernels halved decoding (arith_smollm2: 47 against 91-96 tokens/s) and
    cost more per step than the smaller sync saved (docs/benchmarks.md, LoRA)."""
    lora = cfg.train.lora
    if lora is None or lora.sync != "auto":
        return cfg
    lora = lora.model_copy(update={"sync": "adapter" if _has_gpus() else "merged"})
    log.info("LoRA: the engines get %s", "the adapter" if lora.sync == "adapter" else "merged weights")
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"lora": lora})})


def start_rollout_workers(cfg: RunConfig, model_dir: str, indices: range | None = None) -> list[Any]:
    """One rollout worker actor per index (default: ``rollout.num_workers`` of them); the index picks the CPU bind
    and the node (``placement.rollout_nodes``, while a live node has it)."""
    import ray

    spec = EngineSpec(
        model=model_dir,
        load_kwargs=cfg.model.load_kwargs(model_dir),
        dtype=cfg.model.dtype,
        max_model_len=cfg.rollout.max_model_len,
        kv_cache_bytes=cfg.rollout.kv_cache_bytes,
        gpu_memory_utilization=cfg.rollout.gpu_memory_utilization,
        enforce_eager=cfg.rollout.enforce_eager,
        seed=cfg.rollout.seed,
        max_num_seqs=cfg.rollout.max_num_seqs,
        stream_interval=cfg.shaping.progress_tokens or 1,
        priority_scheduling=cfg.shaping.prioritized,
        weight_transfer=cfg.weight_sync.transport,
        lora=cfg.train.lora if cfg.train.lora is not None and cfg.train.lora.sync == "adapter" else None,
        sleep_mode=cfg.rollout.sleep_while_training,
    )
    binds = cfg.rollout.cpu_threads_bind or [None] * cfg.rollout.num_workers
    actor = remote_rollout_worker(num_cpus=1, num_gpus=_gpus_per_actor(cfg))
    indices = range(cfg.rollout.num_workers) if indices is None else indices
    nodes = placement.node_resources(cfg.placement.rollout_nodes, max(indices, default=0) + 1)
    nodes = placement.on_live_nodes(nodes, ray.cluster_resources())
    log.info("starting %d rollout engine%s on %s", len(indices), "s"[: len(indices) > 1], model_dir)
    return [actor.options(**placement.actor_options(nodes[i])).remote(spec, binds[i % len(binds)]) for i in indices]


def place_trainers(cfg: RunConfig, model_dir: str) -> tuple[list[Any], Any]:
    """The trainer rank actors, not yet joined (``form_process_group``), and the placement group reserved for them
    before they start: all ranks placed together (none waits for a peer never placed), their room held before any
    actor asked for later. Remove the group (``placement.release``) once the ranks are done."""
    import ray

    t = cfg.train
    spec = TrainerSpec.from_config(cfg, model_dir)
    gpus = _gpus_per_actor(cfg)
    actor = ray.remote(num_cpus=1, num_gpus=gpus)(TrainerWorker)
    nodes = placement.node_resources(cfg.placement.trainer_nodes, t.num_workers)
    group = placement.trainer_group(nodes, gpus)
    ranks = [
        actor.options(**placement.rank_options(group, rank, nodes[rank])).remote(spec, rank, t.num_workers)
        for rank in range(t.num_workers)
    ]
    return ranks, group


async def form_process_group(trainers: list[Any]) -> None:
    """Join the trainer actors into one process group meeting on rank 0's node (any node of the cluster); a single
    rank needs none. Awaited, as the ranks load their model first: the driver's start-up, where a stop signal is
    taken meanwhile and a rank whose constructor raised is one line (``driver.did_not_start``)."""
    if len(trainers) < 2:
        return
    init = await trainers[0].rendezvous_address.remote()
    await asyncio.gather(*[t.join_process_group.remote(init) for t in trainers])


def start_scorer(cfg: RunConfig, model_dir: str) -> Any:
    """SART's scorer worker on ``shaping.scorer_model``, or on the policy's initial weights (``model_dir``)."""
    s = cfg.shaping
    spec = ScorerSpec(
        kind=s.scorer,
        model=resolve_model(s.scorer_model) if s.scorer_model else model_dir,
        load_kwargs={} if s.scorer_model else cfg.model.load_kwargs(model_dir),
        device="cuda" if s.scorer_gpus > 0 else "cpu",
        dtype=cfg.model.dtype,
        template_kwargs=cfg.data.chat_template_kwargs,
    )
    return remote_scorer_worker(num_cpus=1, num_gpus=s.scorer_gpus).remote(spec)


def start_buffer(cfg: RunConfig) -> Any:
    """The trajectory buffer, on the driver's node: it holds the run's state, so it must not be lost with a worker
    node (losing the driver's node ends the run anyway)."""
    import ray

    capacity = (cfg.train.max_staleness + 1) * cfg.train.batch_groups
    actor = ray.remote(num_cpus=0)(TrajectoryBuffer).options(**placement.on_driver_node())
    return actor.remote(capacity, cfg.train.max_staleness)


def _has_gpus() -> bool:
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0


def _gpus_per_actor(cfg: RunConfig) -> float:
    """A rollout engine's or trainer's GPUs: a share of what SART's scorer worker (``shaping.scorer_gpus``) leaves."""
    import ray

    scorer = cfg.shaping.scorer_gpus if cfg.shaping.scorer_worker else 0.0
    free = ray.cluster_resources().get("GPU", 0) - scorer
    return gpu_share(free, cfg.rollout.num_workers + cfg.train.num_workers)


def gpu_share(cluster_gpus: float, actors: int) -> float:
    """The GPUs each rollout engine and trainer asks Ray for: a whole one where the cluster has one for each, else an
    equal share, so that on one GPU the engine and the trainer run side by side (colocated; ``rollout.
    gpu_memory_utilization`` bounds the engine's part) instead of one waiting forever for the other's GPU. A share
    is 1/k of one GPU, so k actors fill a GPU exactly."""
    if cluster_gpus <= 0:
        return 0.0
    return 1.0 / math.ceil(actors / cluster_gpus) if actors > cluster_gpus else 1.0
