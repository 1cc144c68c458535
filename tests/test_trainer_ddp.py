"""Two trainer workers on gloo train data-parallel and match one worker on the whole batch."""

import pytest
import ray
from rl.trainer.worker import TrainerSpec, TrainerWorker
from synthetic import make_groups

from rl.actors import form_process_group

pytestmark = pytest.mark.integration  # starts real Ray or vLLM


@pytest.mark.parametrize("split", ["interleaved", "one-rank-empty"])
def test_two_gloo_workers_equal_one_worker(ray_session, tiny_model_dir, split):
    spec = TrainerSpec(model=tiny_model_dir, lr=1e-2, micro_batch_size=3)
    groups = make_groups(6)

    single = TrainerWorker(spec)
    single.train_step(groups)
    expected = single.parameter_checksum()
    initial = TrainerWorker(spec).parameter_checksum()

    actor = ray.remote(num_cpus=1)(TrainerWorker)
    workers = [actor.remote(spec, rank, 2) for rank in range(2)]
    form_process_group(workers)  # meets on rank 0's node address, as multi-node runs do
    # uneven micro-batch counts are fine (one all-reduce per step), and so is a rank with nothing on its first step
    shards = [groups[0::2], groups[1::2]] if split == "interleaved" else [groups, []]
    ray.get([w.train_step.remote(shard) for w, shard in zip(workers, shards, strict=True)])
    sums = ray.get([w.parameter_checksum.remote() for w in workers])
    ray.get([w.shutdown.remote() for w in workers])
    for w in workers:
        ray.kill(w)

    assert sums[0] == sums[1]  # ranks stay identical
    assert abs(expected - initial) > 1e-3  # the step really moved the weights
    assert abs(sums[0] - expected) < 1e-4 * max(1.0, abs(expected))  # and moved them like one worker would
