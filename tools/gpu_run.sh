#!/usr/bin/env bash
# tools/gpu_run.sh OUT: what an NVIDIA GPU machine runs for the repository, in one go.
#
#   1. the test suite (CUDA tests included)            -> OUT/pytest_gpu.log
#   2. compute-sanitizer over every CUDA kernel        -> OUT/sanitize.log
#   3. the benchmark sweep (llama.cpp + tutorial shapes)-> OUT/bench/*.csv|json
#   4. the notebooks, executed in place: the outputs the book publishes (tools/gpu_publish.sh, which
#      also sets up the notebook stack from .whl/ and llama.cpp's ggml from .ggml/)
#
# The GPU image has torch; the notebook stack travels as wheels (../shared/tools/device-wheels.sh)
# and llama.cpp's ggml as a standalone build (tools/build_ggml.sh; tools/gpu_publish.sh says how). Steps continue after a
# failure so one run records everything; the exit status is the number of failed steps.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: tools/gpu_run.sh OUT_DIR}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
failed=0
step() { echo "== $*"; }

step "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
step "tests"
$PY -m pytest -q tests > "$OUT/pytest_gpu.log" 2>&1 || failed=$((failed + 1))
tail -3 "$OUT/pytest_gpu.log"

step "compute-sanitizer"
SANITIZE_LOGS="$OUT/sanitize_logs" PYTHON=$PY tools/sanitize.sh > "$OUT/sanitize.log" 2>&1 || failed=$((failed + 1))
tail -8 "$OUT/sanitize.log"

step "benchmarks"
$PY -m quantgemm_kernels.bench --device cuda --shapes llama,tutorial --out "$OUT/bench" > "$OUT/bench.log" 2>&1 \
  || failed=$((failed + 1))
tail -5 "$OUT/bench.log"

step "notebooks"
tools/gpu_publish.sh "$OUT/notebooks" notebooks/*.ipynb > "$OUT/notebooks.log" 2>&1 || failed=$((failed + 1))
grep -v "^\s*$" "$OUT/notebooks.log" | tail -15
echo "== done: $failed failed step(s)"
exit $failed
