"""The native (GPU) weight channel's protocol, with stand-in actors: pause, send, version, resume — in order.

vLLM's NCCL transfer itself needs GPUs with vLLM on them, which no machine here has; this checks Tailor's side.
"""

import asyncio

import pytest

from rl.loop.weight_channel import NativeWeightChannel, make_weight_channel


class Method:
    """A stand-in for a Ray actor method: ``.remote(...)`` records the call and returns an awaitable."""

    def __init__(self, log: list, name: str, fail: bool = False) -> None:
        self.log, self.name, self.fail = log, name, fail

    def remote(self, *args):
        self.log.append((self.name, *args))

        async def done():
            if self.fail:
                raise RuntimeError(f"{self.name} failed")
            return 0.01

        return done()


class Actor:
    def __init__(self, log: list, prefix: str, failing: str = "") -> None:
        for name in ("pause", "resume", "update_weight_version", "init_native_weight_sync", "send_native_weights"):
            setattr(self, name, Method(log, f"{prefix}.{name}", fail=name == failing))


def test_native_channel_pauses_sends_stamps_and_resumes():
    log: list = []
    workers = [Actor(log, "w0"), Actor(log, "w1")]
    trainer = Actor(log, "t")
    channel = make_weight_channel("nccl", [trainer], workers, interrupt=True)
    assert isinstance(channel, NativeWeightChannel)

    asyncio.run(channel.start())
    report = asyncio.run(channel.send(5))

    names = [entry[0] for entry in log]
    assert names[0] == "t.init_native_weight_sync" and log[0][1].args == ("nccl",) and log[0][2] == workers
    assert names[1:3] == ["w0.pause", "w1.pause"] and log[1][1] is True  # interrupt: pause with abort
    assert names[3] == "t.send_native_weights"
    assert names[4:6] == ["w0.update_weight_version", "w1.update_weight_version"] and log[4][1] == "5"
    assert names[6:] == ["w0.resume", "w1.resume"]
    assert report.version == 5 and report.seconds > 0


def test_engines_resume_even_when_the_send_fails():
    log: list = []
    workers = [Actor(log, "w0")]
    channel = make_weight_channel("nccl", [Actor(log, "t", failing="send_native_weights")], workers)
    with pytest.raises(RuntimeError, match="send_native_weights failed"):
        asyncio.run(channel.send(1))
    assert [e[0] for e in log] == ["w0.pause", "t.send_native_weights", "w0.resume"]


@pytest.mark.integration
def test_nccl_on_a_cluster_without_gpus_fails_before_any_actor(ray_session, tiny_model_dir, tmp_path):
    """On this machine preflight refuses it (tests/test_bad_input.py); a cluster's GPUs are known only once Ray is
    up: the session's Ray stands in for one, the inputs checked as a run with the CPU route would be."""
    from small_runs import small_run

    from rl.inputs.preflight import preflight
    from rl.loop.driver import Driver, RunFailed

    cfg = small_run(tmp_path, "nccl", "weight_sync.transport=nccl")
    inputs = preflight(small_run(tmp_path, "nccl", "weight_sync.transport=cpu"))
    driver = Driver(cfg, inputs)
    message = "weight_sync.transport=nccl needs GPUs, and this Ray cluster has none; use transport=cpu"
    with pytest.raises(RunFailed, match=f"^{message}$"):
        asyncio.run(driver.run())
    assert not hasattr(driver, "fleet")  # no actor was started: ``run`` sets the fleet only once it starts them
    run_dir = tmp_path / "nccl"
    assert not (run_dir / "config.yaml").exists() and not (run_dir / "metrics.jsonl").exists()  # nor a run begun
