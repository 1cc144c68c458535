"""`rl train` on a four-node Ray cluster on loopback addresses (rl/loop/cluster.py): the trainer's two FSDP2 ranks on
two worker nodes, an engine on the head and one on the fourth node, weights crossing nodes through the object store,
the engines' log-probs still the trainer's after every sync, and the fourth node lost mid-run."""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from user_run import user_env

from rl.loop import cluster
from rl.loop.processes import command_line, wait_for

pytestmark = pytest.mark.integration(seconds=75)  # starts a Ray cluster, real vLLM and torch


@pytest.fixture(scope="module")
def loopback_cluster():
    """A head at 127.0.0.2 and workers at 127.0.0.3 to 127.0.0.5, in a folder (and on ports) of their own."""
    folder = Path(tempfile.mkdtemp(prefix="tlc-", dir="/tmp"))  # short: Ray's socket paths live under it
    started = cluster.start(folder, nodes=4, cpus_per_node=2)
    yield started
    cluster.stop(folder, grace_s=1)  # nothing of the run is left to end gently
    # nothing of the cluster outlives it: not a node's process, not the head's Ray Client server (which names no
    # folder, only the head's address)
    marks = (str(folder), f"--address={started.address} ")
    assert wait_for(lambda: not _processes_naming(marks), 10), _processes_naming(marks)


def _processes_naming(marks: tuple[str, ...]) -> list[str]:
    """The command lines of live processes that hold any of ``marks``."""
    lines = [command_line(int(proc.name)) for proc in Path("/proc").iterdir() if proc.name.isdigit()]
    return [line[:200] for line in lines if any(mark in line for mark in marks)]


def start_rl_train(c: cluster.LoopbackCluster, out: Path, *overrides: str) -> subprocess.Popen:
    """``rl train arith_tiny`` on cluster ``c``, as a user runs it, its console into ``out/console``."""
    small = ["train.batch_groups=2", "shaping.m_keep=2", "eval.num_problems=2", "eval.every=0"]
    small += ["rollout.cpu_threads_bind=null", "train.save_checkpoint=false", f"output_dir={out}", "name=multi"]
    cmd = [sys.executable, "-m", "rl.cli", "train", "arith_tiny", *small, f"ray.address={c.address}", *overrides]
    env = user_env()
    with (out / "console").open("w") as console:
        return subprocess.Popen(cmd, env=env, cwd=out, stdout=console, stderr=subprocess.STDOUT)


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_ranks_and_engines_on_four_nodes_sync_exact_weights_and_survive_a_lost_node(loopback_cluster, tmp_path):
    head, second, third, fourth = loopback_cluster.nodes
    run = start_rl_train(
        loopback_cluster,
        tmp_path,
        "train.max_steps=3",
        "train.num_workers=2",
        f"placement.trainer_nodes=[{second},{third}]",
        "rollout.num_workers=2",
        f"placement.rollout_nodes=[{cluster.node_resource(0)},{fourth}]",  # the head by its resource, then an address
        "train.max_staleness=0",  # on-policy: after each sync the engines sample with the trainer's weights
        "train.lr=1e-2",  # a step moves the weights well beyond the 1e-3 log-prob tolerance
    )
    deadline = time.monotonic() + 600
    try:
        while (
            run.poll() is None
            and time.monotonic() < deadline
            and not [r for r in records(tmp_path / "multi") if r["kind"] == "train"]
        ):
            time.sleep(0.5)
        cluster.stop(loopback_cluster.folder / "n3", grace_s=0)  # the fourth node crashes after the first step
        code = run.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        run.kill()
    console = (tmp_path / "console").read_text()

    assert code == 0, console[-3000:]
    assert f"trainer rank 0 on node {second}" in console and f"trainer rank 1 on node {third}" in console
    assert f"rollout engine 0 on node {head}" in console and f"rollout engine 1 on node {fourth}" in console
    assert "weights: Ray's object store" in console  # not the shared-memory file: the nodes are different hosts
    got = records(tmp_path / "multi")
    train = [r for r in got if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert all(r["weight_sync_s"] > 0 for r in train)  # timed each step
    assert all(r["logprob_gap"] < 1e-3 for r in train)  # the engines serve what the two ranks trained
    summary = next(r for r in got if r["kind"] == "summary")
    assert summary["dead_workers"] == 1  # the engine on the lost node; the run went on with the head's
    assert summary["groups_unaccounted"] == 0


def test_ranks_named_onto_a_full_node_get_it_before_unnamed_engines(loopback_cluster, tmp_path):
    """The head's two CPUs are the ranks' only room; the engine, named nowhere, would take one of them were it asked
    for first (Ray prefers the driver's node), leaving the ranks to wait 120 s for room their own run holds."""
    head = loopback_cluster.nodes[0]
    run = start_rl_train(
        loopback_cluster, tmp_path, "train.max_steps=1", "train.num_workers=2", f"placement.trainer_nodes=[{head}]"
    )
    try:
        code = run.wait(timeout=100)  # placed at once; the ranks' 120 s wait would run past this
    finally:
        run.kill()
    console = (tmp_path / "console").read_text()

    assert code == 0, console[-3000:]
    assert f"trainer rank 0 on node {head}" in console and f"trainer rank 1 on node {head}" in console
    assert f"rollout engine 0 on node {head}" not in console
