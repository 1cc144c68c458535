"""A local run (no ``ray.address``) listens on loopback only; joining a cluster is left as Ray does it."""

import ipaddress
import os

import pytest

from rl.actors import LOOPBACK_ENV, start_ray
from rl.config import load_config


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


@pytest.mark.integration
def test_a_local_run_listens_on_loopback_only(user_train_run):
    """``rl train`` on one machine: Ray's GCS, raylet, agents, every actor and the vLLM engine, sampled every half
    second for the whole run, listen on 127.0.0.1 and nowhere else."""
    run = user_train_run
    assert run.returncode == 0, run.console[-3000:]
    names = {name for name, _, _ in run.listening}
    assert {"gcs_server", "raylet"} <= names and any("Worker" in n for n in names), run.listening  # it saw the run
    assert [s for s in run.listening if not _is_loopback(s[1])] == [], "listening outside loopback"


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
