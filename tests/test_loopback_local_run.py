"""A local run (no ``ray.address``) listens on loopback only; joining a cluster is left as Ray does it."""

import ipaddress
import json
import os
import subprocess
import sys

import pytest

from rl.config import load_config
from rl.inputs.preflight import BadInput, check_ray_address
from rl.loop.actors import LOOPBACK_ENV, start_ray


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


def test_ray_address_comes_from_the_environment_where_the_recipe_leaves_it_unset(monkeypatch):
    """``RAY_ADDRESS`` (``ray job submit`` sets it for its entrypoint) is the cluster to join, as a Ray program's
    ``ray.init()`` takes it; a recipe's or an override's ``ray.address`` comes first; without it, a local instance."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert load_config(None, []).ray.address is None
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    assert load_config(None, []).ray.address == "127.0.0.1:1"
    assert load_config(None, ["ray.address=auto"]).ray.address == "auto"
    with pytest.raises(BadInput) as refused:  # checked as a given address is, its source named: nothing answers there
        check_ray_address(load_config(None, []).ray.address)
    assert str(refused.value).startswith("ray.address '127.0.0.1:1' (from RAY_ADDRESS; unset it for a Ray instance")


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


RAY_FACTS = """
import json, os, psutil, ray
from ray._private import worker
from ray._private.authentication.authentication_utils import is_token_auth_enabled
from rl.loop.actors import start_ray
from rl.config import load_config
cfg = load_config(None, [])  # a local instance
os.environ["RAY_ADDRESS"] = "127.0.0.1:1"  # stands for a cluster `ray start` left, which a plain ray.init() joins
start_ray(cfg)
FLAGS = ("--disable-frontend", "--modules-to-load=UsageStatsHead")
heads = [psutil.Process(p.process.pid) for p in worker.global_worker.node.all_processes.get("dashboard", [])]
ports = {c.laddr.port for h in heads for c in h.net_connections("inet") if c.status == psutil.CONN_LISTEN}
print(json.dumps({
    "token_auth": is_token_auth_enabled(),
    "dashboard_url": worker.get_dashboard_url(),
    "head_flags": sorted(a for h in heads for a in h.cmdline() if a in FLAGS),
    "dashboard_port_open": 8265 in ports,
}))
ray.shutdown()
"""


@pytest.mark.integration
def test_a_local_ray_serves_no_dashboard_and_keeps_token_authentication():
    """``start_ray`` without ``ray.address``, in a user's environment (no ``RAY_AUTH_MODE``): Ray's token
    authentication is on, and no dashboard is served. Ray still starts its dashboard head process, but with only the
    usage-stats module and no web frontend: Ray knows no dashboard URL and nothing listens on the dashboard port.
    A cluster a plain ``ray.init()`` would join (one ``ray start`` left on the machine, here ``RAY_ADDRESS`` set
    after the config was made) is left alone: the run starts its own instance (joining refused the run's
    ``num_cpus`` with a traceback)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    done = subprocess.run([sys.executable, "-c", RAY_FACTS], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "token_auth": True,
        "dashboard_url": "",
        "head_flags": ["--disable-frontend", "--modules-to-load=UsageStatsHead"],
        "dashboard_port_open": False,
    }
