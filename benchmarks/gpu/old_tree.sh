#!/usr/bin/env bash
# Make .gpu_old/tl: an older Tailor laid out as installed (rl/ with rollout/, trainer/, shaping/, kernels/, recipes/
# inside), for run_on_device.sh's `before` step to measure beside this tree on the same card in one call.
#
#   bash benchmarks/gpu/old_tree.sh [REV]   # default 66f2922, the code of the H200 run that measured 1.00x
#
# REV gets one fix it lacked: vLLM 0.26 merges an aborted stream's repeat of all earlier log-probs into the pending
# delta when the consumer lags (b9e198c), which ended every shaped pass of that code on an H200 on 2026-11-27.
# .gpu_old must be ignored (.git/info/exclude) for a device call to carry it.
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:-66f2922}
rm -rf .gpu_old && mkdir -p .gpu_old/tl
tmp=$(mktemp -d)
git archive "$rev" rl rollout trainer shaping kernels recipes | tar -x -C "$tmp"
cp -r "$tmp/rl" .gpu_old/tl/
for d in rollout trainer shaping kernels recipes; do cp -r "$tmp/$d" .gpu_old/tl/rl/; done
rm -rf "$tmp"
adapter=.gpu_old/tl/rl/rollout/vllm_adapter.py
line='        logprobs = completion.logprobs.logprobs'
grep -qF 'if completion.finish_reason == "abort":' "$adapter" || {
  grep -qxF "$line" "$adapter" || { echo "$adapter: no '$line' to patch" >&2; exit 1; }
  sed -i "s/^$line\$/&\n        if completion.finish_reason == \"abort\":\n            logprobs = logprobs[: len(completion.token_ids)]/" \
    "$adapter"
}
echo "made .gpu_old/tl from $rev"
