#!/usr/bin/env bash
# tools/sanitize.sh: NVIDIA compute-sanitizer over every CUDA kernel in quantgemm_kernels.KERNELS.
#
#   tools/sanitize.sh                      (on a machine with a CUDA GPU and compute-sanitizer)
#   PYTHON=.venv/bin/python tools/sanitize.sh
#   SANITIZE_LOGS=_build/san tools/sanitize.sh  keep the logs there (default: a new temporary folder)
#
# Four tools, each over `python tools/sanitize_driver.py kernels` (every CUDA kernel on the ragged
# shapes of testing.SANITIZE_SHAPES, the CUDA quantizers, appendix B's loads, appendix C's
# conv1d + SiLU kernel):
#   memcheck   out-of-bounds and misaligned global/shared accesses, bad frees
#   racecheck  shared-memory data races (a missing __syncthreads)
#   initcheck  reads of global memory nobody wrote
#   synccheck  illegal barriers (__syncthreads in divergent code)
# then two self-tests with planted bugs, which must be reported: a misaligned 32-bit load
# (memcheck) and a read of uninitialised memory (initcheck). A sanitizer that reports nothing on
# them would make every "0 errors" above worthless.
# One summary line per run; exit status 0 only when every tool is clean and both self-tests fire.
set -u -o pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
SAN=${COMPUTE_SANITIZER:-compute-sanitizer}
LOGS=${SANITIZE_LOGS:-$(mktemp -d -t sanitize.XXXXXX)}
mkdir -p "$LOGS"

# PyTorch's caching allocator carves tensors out of large cudaMalloc blocks, so an access past the
# end of a tensor usually lands in memory that is still "allocated" and memcheck sees nothing
# (pytorch/pytorch#45294). With caching off, every tensor is its own cudaMalloc.
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
# Expandable segments have raised false "Invalid __global__ write" reports: keep the default allocator.
unset PYTORCH_CUDA_ALLOC_CONF
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! command -v "$SAN" >/dev/null 2>&1; then
    echo "sanitize.sh: $SAN not found (it ships with the CUDA toolkit: <cuda>/bin/compute-sanitizer)" >&2
    exit 2
fi
# Build outside the sanitizer: compiling is host work, and the first build takes a minute.
"$PY" tools/sanitize_driver.py build || exit 2

status=0
summary() {  # the sanitizer's own summary line of a log, without its "=========" prefix
    grep -E "(ERROR|RACECHECK|SYNCCHECK|INITCHECK) SUMMARY" "$1" | head -1 | sed 's/^=* *//'
}

for tool in memcheck racecheck initcheck synccheck; do
    t0=$SECONDS
    "$SAN" --tool "$tool" --error-exitcode 1 --print-limit 20 \
        "$PY" tools/sanitize_driver.py kernels >"$LOGS/$tool.log" 2>&1
    rc=$?
    calls=$(grep -E "^driver:" "$LOGS/$tool.log" | tail -1)
    if [ $rc -eq 0 ]; then verdict=PASS; else verdict=FAIL; status=1; fi
    printf '%-10s %s  rc=%d  %s | %s | %ds  log: %s\n' "$tool" "$verdict" "$rc" \
        "$(summary "$LOGS/$tool.log")" "${calls:-driver did not finish}" $((SECONDS - t0)) "$LOGS/$tool.log"
done

# Self-tests: the run must FAIL, and the log must name the planted bug.
self_test() {  # tool, driver command, pattern the report must contain
    local tool=$1 cmd=$2 pattern=$3 t0=$SECONDS rc
    "$SAN" --tool "$tool" --error-exitcode 1 --print-limit 5 \
        "$PY" tools/sanitize_driver.py "$cmd" >"$LOGS/self-$cmd.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && grep -q "$pattern" "$LOGS/self-$cmd.log"; then
        verdict="PASS (planted bug reported)"
    else
        verdict="FAIL (planted bug NOT reported)"; status=1
    fi
    printf '%-10s self-test %-19s %s  rc=%d  %s | %ds  log: %s\n' "$tool" "$cmd" "$verdict" "$rc" \
        "$(summary "$LOGS/self-$cmd.log")" $((SECONDS - t0)) "$LOGS/self-$cmd.log"
}
self_test memcheck planted-misaligned "misaligned"
self_test initcheck planted-uninit "Uninitialized __global__ memory read"

if [ $status -eq 0 ]; then echo "sanitize.sh: all clean"; else echo "sanitize.sh: FAILED (see the logs above)"; fi
exit $status
