"""``rl bench dp-balance`` once, on the tiny model: 2 FSDP2 ranks train the same long-tail batch split both ways."""

import json
import subprocess
import sys

import pytest

from rl.algorithm.balance import balanced_shards, round_robin_shards, shard_tokens
from rl.bench.dp_balance import BalanceBenchOptions, long_tail_batch

pytestmark = pytest.mark.integration  # starts Ray and two trainer actors


def test_dp_balance_bench_on_the_tiny_model(tiny_model_dir, tmp_path):
    from transformers import AutoConfig

    args = ["bench", "dp-balance", "arith_tiny", "--steps", "1", "--seeds", "3", "--groups", "4", "--max-len", "64"]
    done = subprocess.run(
        [sys.executable, "-m", "rl.cli", *args, "--out", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    saved = json.loads((tmp_path / "bench_dp_balance.json").read_text())
    records = {r["mode"]: r for r in saved["records"]}
    assert sorted(records) == ["balanced", "round-robin"] and len(saved["records"]) == 2  # one step, warm-up left out
    # the ranks trained the tokens of the batch the options describe (seed 3, step 0), split as each mode splits it
    opts = BalanceBenchOptions(steps=1, seeds=[3], groups=4, max_len=64)
    batch = long_tail_batch(opts, AutoConfig.from_pretrained(tiny_model_dir).vocab_size, 3 * 1000 + 0)
    assert records["round-robin"]["rank_tokens"] == shard_tokens(round_robin_shards(batch, 2))
    assert records["balanced"]["rank_tokens"] == shard_tokens(balanced_shards(batch, 2))
    for r in records.values():
        assert len(r["rank_s"]) == 2 and all(s > 0 for s in r["rank_s"]) and r["step_s"] >= max(r["rank_s"])
    table = (tmp_path / "bench_dp_balance.md").read_text()
    assert "| round-robin |" in table and "| balanced |" in table and "1.00x" in table
