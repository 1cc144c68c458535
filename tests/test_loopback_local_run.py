"""A local run (no ``ray.address``) listens on loopback only; joining a cluster is left as Ray does it."""

import ipaddress
import os
import subprocess
import sys
import time

import psutil
import pytest

from rl.actors import LOOPBACK_ENV, start_ray
from rl.config import load_config

SMALL_RUN = [
    "train.max_steps=1",
    "train.batch_groups=2",
    "shaping.m_keep=2",
    "eval.num_problems=2",
    "eval.every=0",
    "rollout.cpu_threads_bind=null",
    "train.save_checkpoint=false",
]


def _listening(root: psutil.Process) -> set[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket of ``root`` and its descendants."""
    found = set()
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return found
    for proc in procs:
        try:
            name = proc.name()
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.add((name, conn.laddr.ip, conn.laddr.port))
        except psutil.Error:  # the process ended between the listing and the look
            continue
    return found


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


@pytest.mark.integration
def test_a_local_run_listens_on_loopback_only(tiny_model_dir, tmp_path):
    """``rl train`` on one machine: Ray's GCS, raylet, agents, every actor and the vLLM engine, sampled every half
    second for the whole run, listen on 127.0.0.1 and nowhere else."""
    cmd = [sys.executable, "-m", "rl.cli", "train", "arith_tiny", *SMALL_RUN, f"output_dir={tmp_path}", "name=lo"]
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # as a user's run: the engine core in its own process
    log = tmp_path / "train.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    root, seen = psutil.Process(proc.pid), set()
    try:
        while proc.poll() is None:
            seen |= _listening(root)
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    names = {name for name, _, _ in seen}
    assert {"gcs_server", "raylet"} <= names and any("Worker" in n for n in names), seen  # the listing saw the run
    assert [s for s in seen if not _is_loopback(s[1])] == [], "listening outside loopback"


def test_joining_a_cluster_is_unchanged(monkeypatch):
    """With ``ray.address`` Ray is joined as it is: no loopback address, no environment change."""
    import ray

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    for key in LOOPBACK_ENV:
        monkeypatch.delenv(key, raising=False)
    assert start_ray(load_config(None, ["ray.address=auto"]))
    assert calls == [{"address": "auto", "log_to_driver": True}]
    assert not any(key in os.environ for key in LOOPBACK_ENV)
