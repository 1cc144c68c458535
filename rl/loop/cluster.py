"""A Ray cluster of several nodes on one machine, each node at its own loopback address, for trying multi-node runs.

Every address in 127.0.0.0/8 is loopback on Linux, so a head at 127.0.0.2 and workers at 127.0.0.3, 127.0.0.4, …
are distinct Ray nodes (distinct node ids, addresses, raylets, object stores) and nothing leaves the machine.
Underneath it is plain ``ray start`` (``--head`` once, then ``--address HEAD`` per worker). Node ``i`` carries the
custom resource ``node_resource(i)`` (``tailor_node_0`` is the head), which recipes name in
``placement.trainer_nodes`` / ``placement.rollout_nodes``.

Invariants: everything lives under one folder of its own (a ``--temp-dir`` per node inside it, the head's holding
the address file a plain ``ray.init()`` would look for, so other Ray instances on the machine never see this
cluster; separate ones, so each node's log monitor reads only its own node's logs); every port is
chosen free, never a Ray default another instance may hold; ``stop`` ends only the processes whose command line
names that folder (and their children), never ``ray stop``, which would end every Ray instance on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FIRST_HOST = 2  # 127.0.0.1 is the machine's own loopback, used by single-node runs: the cluster starts above it
MAX_NODES = 16
STATE_FILE = "cluster.json"
NODE_OBJECT_STORE_BYTES = 100 * 2**20  # Ray's floor is 75 MiB; tiny models' weights are far smaller
# never inherited by the nodes: a loopback-only single-node run sets these in its own process (rl/loop/actors.py), and a
# node must take its own address instead
SINGLE_NODE_ENV = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "VLLM_HOST_IP", "RAY_ADDRESS")


def node_address(index: int) -> str:
    """Node ``index``'s address: 127.0.0.2 for the head (index 0), then 127.0.0.3, …"""
    return f"127.0.0.{FIRST_HOST + index}"


def node_resource(index: int) -> str:
    """The custom Ray resource naming node ``index`` (what placement keys refer to)."""
    return f"tailor_node_{index}"


@dataclass(frozen=True)
class LoopbackCluster:
    folder: Path  # holds each node's Ray temp dir (n0 the head's, n1, ...): sessions, logs, the address file
    address: str  # the head's GCS, "127.0.0.2:PORT": what ``ray.address`` takes
    nodes: list[str]  # node addresses, head first

    def save(self) -> None:
        (self.folder / STATE_FILE).write_text(json.dumps({"address": self.address, "nodes": self.nodes}))


def start(folder: Path, nodes: int = 3, cpus_per_node: int = 2) -> LoopbackCluster:
    """Start a head and ``nodes - 1`` workers under ``folder`` (which must not hold a running cluster); on any
    failure whatever started is stopped again."""
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"--nodes {nodes}: a loopback cluster has 1 to {MAX_NODES} nodes")
    if (folder / STATE_FILE).exists():
        raise ValueError(f"{folder} already holds a cluster: stop it first (rl cluster down --dir {folder})")
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cluster = LoopbackCluster(folder, f"{node_address(0)}:{port}", [node_address(i) for i in range(nodes)])
    cluster.save()  # first: it marks the folder as a cluster's, which ``stop`` requires
    try:
        for i in range(nodes):
            _ray_start(cluster, i, cpus_per_node, port)
    except BaseException:
        stop(folder)
        raise
    return cluster


def _ray_start(cluster: LoopbackCluster, index: int, cpus: int, gcs_port: int) -> None:
    """``ray start`` for node ``index``: the head (index 0) on ``gcs_port``, a worker joining it otherwise."""
    host = cluster.nodes[index]
    role = ["--head", f"--port={gcs_port}", f"--ray-client-server-port={free_port()}"]
    role += [f"--dashboard-port={free_port()}", "--include-dashboard=false"]
    cmd = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        *(role if index == 0 else [f"--address={cluster.address}"]),
        f"--node-ip-address={host}",
        f"--temp-dir={cluster.folder / f'n{index}'}",  # a session (logs, sockets) per node, as on separate hosts
        f"--num-cpus={cpus}",
        f"--resources={json.dumps({node_resource(index): 1})}",
        f"--object-store-memory={NODE_OBJECT_STORE_BYTES}",
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        "--disable-usage-stats",
    ]
    env = {k: v for k, v in os.environ.items() if k not in SINGLE_NODE_ENV}
    env["VLLM_HOST_IP"] = host  # each node's engines announce their own node's address
    if _has_ray_token():
        env.setdefault("RAY_AUTH_MODE", "token")  # the head turns token auth on when a token exists; workers must too
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        raise RuntimeError(f"ray start for node {host} failed: {tail[0] if tail else done.returncode}")


def _has_ray_token() -> bool:
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or (Path.home() / ".ray" / "auth_token").is_file()


def free_port() -> int:
    """A TCP port nothing listens on now, on any address."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def stop(folder: Path, grace_s: float = 10.0) -> list[int]:
    """End every process of the cluster under ``folder`` (SIGTERM, then SIGKILL after ``grace_s``; at once for 0,
    as a crash: one node's folder ``n<i>`` so is a lost node), remove what the cluster wrote there (the folder
    too, once empty: nothing else in it is touched); returns the process ids ended."""
    if not any((f / STATE_FILE).is_file() for f in (folder, folder.parent)):
        raise ValueError(f"{folder} holds no loopback cluster (no {STATE_FILE}): nothing stopped")
    state = folder / STATE_FILE  # the whole cluster, not one node's folder: its head's address marks its client server
    address = json.loads(state.read_text())["address"] if state.is_file() else None
    pids = _cluster_processes(folder, address)
    for pid in pids:
        _signal(pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            _signal(pid, signal.SIGKILL)
    _remove_cluster_files(folder)
    return pids


def _remove_cluster_files(folder: Path) -> None:
    """Delete the node folders (``n<i>``, or ``folder`` itself when it is one) and the state file."""
    if folder.name[:1] == "n" and folder.name[1:].isdigit():
        shutil.rmtree(folder, ignore_errors=True)
        return
    for node in folder.glob("n*"):
        if node.name[1:].isdigit():
            shutil.rmtree(node, ignore_errors=True)
    (folder / STATE_FILE).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: something else lives there
        folder.rmdir()


def _cluster_processes(folder: Path, address: str | None = None) -> list[int]:
    """Processes whose command line names ``folder`` (GCS, raylets, agents, monitors) or, given the head's
    ``address``, takes it as ``--address`` (the head's Ray Client server, which names no folder), and all their
    descendants (workers and actors, started by a raylet)."""
    mark = os.path.join(folder.resolve(), "")  # with its separator: n1 must not match n10
    client = f"--address={address} " if address else None  # with a space: port 3939 must not match 39393
    parents: dict[int, int] = {}
    roots = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if mark in line or (client and client in line):
                roots.append(int(proc.name))
            parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # the process ended while being read
            continue
    found = set(roots)
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        grew = bool(children)
    return sorted(found)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
