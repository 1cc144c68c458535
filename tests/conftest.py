"""Session-wide fixtures: one Ray instance, one tiny model, one warm vLLM engine for all tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

SHM = Path("/dev/shm")
LEAKABLE = ("psm_", "sem.mp-")  # Python's shared memory and semaphores: what a killed process can leave behind
_SHM_BEFORE = pytest.StashKey[set]()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and SHM.is_dir():  # the controller, not an xdist worker
        config.stash[_SHM_BEFORE] = {p.name for p in SHM.iterdir()}


def pytest_unconfigure(config: pytest.Config) -> None:
    """Once every test has ended, unlink the shared memory and semaphores the tests' killed processes left in
    /dev/shm (the SIGKILL resume test, engine cores under SIGTERM): none is open any more; 160 MB each run otherwise."""
    before = config.stash.get(_SHM_BEFORE, None)
    if before is None:
        return
    left = [p for p in SHM.iterdir() if p.name.startswith(LEAKABLE) and p.name not in before and not _open(p.name)]
    for path in left:
        path.unlink(missing_ok=True)
    if left:
        print(f"\nremoved {len(left)} shared-memory file(s) left in /dev/shm by killed test processes")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with integration tests first, the longest first (``integration(seconds=...)``, about how long a file
    takes on 2 cores), each file's tests in their order: the xdist workers take whole files in collection order
    (``--no-loadscope-reorder``), so the minutes-long ones start early and the quick ones fill in after them."""
    weight: dict[object, float] = {}
    for item in items:
        marker = item.get_closest_marker("integration")
        if marker is not None:
            weight[item.path] = max(weight.get(item.path, 0.0), 1.0 + marker.kwargs.get("seconds", 0.0))
    items.sort(key=lambda item: -weight.get(item.path, 0.0))


def _open(name: str) -> bool:
    """Whether a live process holds /dev/shm/NAME open or mapped."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(name in os.readlink(fd) for fd in (proc / "fd").iterdir()) or name in (proc / "maps").read_text():
                return True
        except OSError:  # the process ended, or is not ours to read
            continue
    return False


@pytest.fixture(scope="session")
def tiny_model_dir() -> str:
    """The offline tiny arithmetic policy (built once, then cached on disk)."""
    from rl.models import resolve_model

    return resolve_model("builtin:arith-tiny")


@pytest.fixture(scope="session")
def tiny_reward_model(tiny_model_dir, tmp_path_factory) -> str:
    """A one-label sequence-classification model on the tiny model's body and tokenizer (a seeded random head: its
    scores mean nothing, but they differ between texts); no reward model is reachable offline."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out = tmp_path_factory.mktemp("tiny-reward-model")
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def encode(tiny_model_dir):
    """Text -> token ids with the tiny model's tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    return lambda text: tok(text)["input_ids"]


@pytest.fixture(scope="session")
def user_train_run(tiny_model_dir, tmp_path_factory):
    """One ``rl train`` run as a user runs it, watched (tests/user_run.py); the console and loopback tests read it.
    Under pytest-xdist the workers share it through their session's common temporary folder."""
    from user_run import run_once, run_rl_train

    if os.environ.get("PYTEST_XDIST_WORKER"):
        return run_once(tmp_path_factory.getbasetemp().parent)
    return run_rl_train(tmp_path_factory.mktemp("user-run"))


@pytest.fixture(scope="session")
def ray_session():
    import ray

    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)  # not a `ray start` cluster
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def warm_engine(ray_session, tiny_model_dir):
    """The session's one real RolloutWorker actor with a vLLM engine on the tiny model; tests take it as
    ``rollout_worker``."""
    from rl.rollout.engine import EngineSpec
    from rl.rollout.worker import remote_rollout_worker

    worker = remote_rollout_worker(num_cpus=1).remote(EngineSpec(model=tiny_model_dir, max_model_len=128))
    ray_session.get(worker.stats.remote(), timeout=900)
    yield worker
    ray_session.get(worker.shutdown.remote())
    ray_session.kill(worker)


@pytest.fixture
def rollout_worker(warm_engine, tiny_model_dir):
    """The warm engine, on the tiny model's base weights as version 0 whatever the test before it loaded (a test may
    load trained weights and stop before it restores them; the next one must not sample from them)."""
    import ray
    from small_runs import base_weights

    ray.get(warm_engine.load_weights.remote(base_weights(tiny_model_dir), 0))
    return warm_engine
