"""Where a run's actors go on a Ray cluster, and the lines that say where they went.

A placement entry (``placement.trainer_nodes`` / ``placement.rollout_nodes``) names a node by address (Ray gives
every node the resource ``node:<address>``) or by a custom resource it was started with; an actor placed there
asks for a sliver (``SLIVER``) of that resource, so any number of actors fit on the node while no other node can
take them. The data-parallel trainer ranks are one placement group, a bundle per rank, so Ray reserves all of
them together or none (no rank waits forever for a peer that never fits).
"""

from __future__ import annotations

import ipaddress
import logging
from collections import Counter
from typing import Any

from rl.config import PlacementConfig
from rl.inputs.preflight import BadInput

log = logging.getLogger("rl.placement")
SLIVER = 0.001  # of a node's resource, per actor (Ray's granularity is 0.0001)
GROUP_READY_S = 120.0  # how long the trainer ranks' placement group may take to be reserved


def resource_of(entry: str) -> str:
    """The Ray resource an entry names: ``node:<address>`` for an IP address, the entry itself otherwise."""
    try:
        return f"node:{ipaddress.ip_address(entry)}"
    except ValueError:
        return entry


def node_resources(entries: list[str], count: int) -> list[str | None]:
    """The resource for each of ``count`` actors, actor i on entry i mod n (None for all when no entry is given)."""
    return [resource_of(entries[i % len(entries)]) if entries else None for i in range(count)]


def check(placement: PlacementConfig, cluster_resources: dict[str, float]) -> None:
    """Raise ``BadInput`` naming an entry no node of the cluster has (before any actor starts)."""
    nodes = sorted(r.removeprefix("node:") for r in cluster_resources if r.startswith("node:") and "__" not in r)
    for key in ("trainer_nodes", "rollout_nodes"):
        for entry in getattr(placement, key):
            if resource_of(entry) not in cluster_resources:
                raise BadInput(
                    f"placement.{key}: no Ray node is {entry!r} (node addresses: {', '.join(nodes)}); name one of "
                    "them or a resource given to `ray start --resources`"
                )


def on_live_nodes(resources: list[str | None], cluster_resources: dict[str, float]) -> list[str | None]:
    """``resources`` with those no live node holds any more let go (None, with a warning): a replacement for an
    actor whose node was lost goes wherever Ray has room instead of waiting forever for that node."""
    kept = [r if r is None or r in cluster_resources else None for r in resources]
    for lost in sorted({r for r, k in zip(resources, kept, strict=True) if r != k}):
        log.warning("no live node has %s any more: its replacement actors go wherever Ray has room", lost)
    return kept


def actor_options(resource: str | None) -> dict[str, Any]:
    """Ray options pinning one actor to the node(s) holding ``resource`` (none for None)."""
    return {"resources": {resource: SLIVER}} if resource else {}


def on_driver_node() -> dict[str, Any]:
    """Ray options keeping an actor on the driver's node (whatever resources other nodes offer)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)}


def actor_resources(gpus: float) -> dict[str, float]:
    """What one rollout engine or trainer rank asks Ray for: a CPU, and its GPU share where it has one."""
    return {"CPU": 1.0, **({"GPU": gpus} if gpus else {})}


class NotPlaced(RuntimeError):
    """The trainer ranks fit the cluster's nodes, but their room was not free within ``GROUP_READY_S``."""


def trainer_group(resources: list[str | None], gpus: float) -> Any:
    """A placement group with one bundle per trainer rank (1 CPU, its GPUs, its node's resource), reserved; packed
    on as few nodes as fit when no node is named. ``NotPlaced`` where the nodes are busy (``check_capacity`` first
    refuses ranks they could never hold)."""
    import ray
    from ray.util.placement_group import placement_group

    bundles = [{**actor_resources(gpus), **({r: SLIVER} if r else {})} for r in resources]
    group = placement_group(bundles, strategy="PACK")
    try:
        ray.get(group.ready(), timeout=GROUP_READY_S)
    except ray.exceptions.GetTimeoutError:
        ray.util.remove_placement_group(group)
        raise NotPlaced(
            f"the {len(bundles)} trainer ranks could not be placed in {GROUP_READY_S:.0f} s: other work holds the "
            "CPUs or GPUs they need (`ray status` shows what the nodes have free)"
        ) from None
    return group


def release(group: Any) -> None:
    """Give a placement group's room back to the cluster (its actors are ended with it)."""
    import ray

    ray.util.remove_placement_group(group)


Demand = tuple[str, str | None, dict[str, float]]  # an actor's kind, its placement entry's resource, its CPUs/GPUs


def check_capacity(demands: list[Demand], nodes: list[dict[str, float]]) -> None:
    """Raise ``BadInput`` where the actors placed on one entry (None: anywhere; the whole cluster for all of them)
    need more CPUs or GPUs than all live ``nodes`` holding it offer, idle or not: Ray would wait for them for ever."""
    entries = [e for e in dict.fromkeys(r for _, r, _ in demands) if e is not None]
    for where in [*entries, None]:
        asked = [(kind, need) for kind, r, need in demands if where is None or r == where]
        holding = [n for n in nodes if where is None or where in n]
        for unit in ("CPU", "GPU"):
            need, have = sum(b.get(unit, 0.0) for _, b in asked), sum(n.get(unit, 0.0) for n in holding)
            if need > have + SLIVER / 10:  # shares of a GPU (9 x 1/9) sum to a hair above it in floating point
                on = "the cluster's nodes" if where is None else f"the node(s) with {where.removeprefix('node:')}"
                counts = ", ".join(f"{n} {kind}{'s'[: n > 1]}" for kind, n in Counter(k for k, _ in asked).items())
                raise BadInput(
                    f"the run needs {need:g} {unit}(s) on {on} ({counts}), which offer {have:g} in all: name more "
                    "nodes in placement.*_nodes, start fewer workers, or start the nodes with more (ray start "
                    "--num-cpus / --num-gpus; rl cluster up --cpus)"
                )


def rank_options(group: Any, rank: int, resource: str | None) -> dict[str, Any]:
    """Ray options putting trainer ``rank`` into its bundle of ``group``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank)
    return {"scheduling_strategy": strategy, **actor_options(resource)}


async def log_where(trainers: list[Any], rollout_workers: list[Any]) -> list[str]:
    """Log (and return) which node each actor runs on, by address and short node id: one line per actor across
    nodes, one line in all when everything runs on the driver's node."""
    import asyncio

    import ray

    addresses = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    here = ray.get_runtime_context().get_node_id()
    ids = await asyncio.gather(*[a.node_id.remote() for a in [*trainers, *rollout_workers]])
    names = [f"trainer rank {i}" for i in range(len(trainers))]
    names += [f"rollout engine {i}" for i in range(len(rollout_workers))]
    if set(ids) <= {here}:
        lines = [f"driver, trainers and rollout engines on node {addresses.get(here, '?')} ({here[:8]})"]
        log.info(lines[0])
        return lines
    lines = [f"driver on node {addresses.get(here, '?')} ({here[:8]})"]
    lines += [f"{name} on node {addresses.get(i, '?')} ({i[:8]})" for name, i in zip(names, ids, strict=True)]
    for line in lines:
        log.info(line)
    return lines
