#!/usr/bin/env bash
# tools/k_quants_cuda/gpu_check.sh: the GPU check of chapter 8's CUDA kernels (cuda_q4_k_q8_1_decode,
# cuda_q6_k_q8_1_decode, 08_k_quants/1_decode.cu), on a machine with an NVIDIA GPU, torch and nvcc.
#
#   OUT=/some/dir tools/k_quants_cuda/gpu_check.sh        (repository root as the working directory)
#
# 1. builds the extension (outside the timed part),
# 2. the CUDA tests that name the K-quant kernels (pytest -k q4_k or q6_k) -> $OUT/pytest.log
# 3. compute-sanitizer memcheck, racecheck, initcheck over tools/sanitize_driver.py kernels
#    --only q4_k,q6_k (SANITIZE_SHAPES, K x 8) -> $OUT/sanitize.log
# 4. a timing at M = 4096, K = 14336, N = 1, 2, 4, 8, weights cold (rotated over copies filling
#    4x the L2), CUDA events, median of 20, with HBM bandwidth -> $OUT/timing.log
# and $OUT/summary.log (one line per part). Exit status 0 when every part passed.
set -u -o pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
PY=${PYTHON:-python3}
SAN=${COMPUTE_SANITIZER:-compute-sanitizer}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
say() { echo "$*" | tee -a "$OUT/summary.log"; }
: >"$OUT/summary.log"

t0=$SECONDS
"$PY" -c "import quantgemm_kernels as qk, torch; assert qk.cuda_kernels_built(), 'CUDA kernels not built'; \
print(torch.__version__, torch.cuda.get_device_name(), 'built')" >"$OUT/build.log" 2>&1 \
    || { say "build FAIL (see build.log)"; exit 1; }
say "build ok $((SECONDS - t0)) s: $(tail -1 "$OUT/build.log")"

t0=$SECONDS
timeout 180 "$PY" -m pytest -q -p no:cacheprovider tests/test_kernels.py tests/test_tensor_cores.py \
    tests/test_properties.py tests/test_linear.py tests/test_bench.py -k "q4_k or q6_k" >"$OUT/pytest.log" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
say "pytest rc=$rc $((SECONDS - t0)) s: $(tail -1 "$OUT/pytest.log")"

t0=$SECONDS
: >"$OUT/sanitize.log"
if command -v "$SAN" >/dev/null 2>&1; then
    for tool in memcheck racecheck initcheck; do
        echo "=== $tool" >>"$OUT/sanitize.log"
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 "$SAN" --tool "$tool" --error-exitcode 1 --print-limit 20 \
            "$PY" tools/sanitize_driver.py kernels --only q4_k,q6_k >>"$OUT/sanitize.log" 2>&1
        rc=$?
        [ $rc -eq 0 ] || status=1
        say "$tool rc=$rc: $(grep -E "(ERROR|RACECHECK|INITCHECK) SUMMARY" "$OUT/sanitize.log" | tail -1 | sed 's/^=* *//') | $(grep -E '^driver:' "$OUT/sanitize.log" | tail -1)"
    done
else
    say "sanitize SKIPPED: $SAN not found"
fi
say "sanitize $((SECONDS - t0)) s"

t0=$SECONDS
timeout 120 "$PY" - >"$OUT/timing.log" 2>&1 <<'PYEOF'
import statistics

import torch

import quantgemm_kernels as qk
from quantgemm_kernels.testing import quantize_weights

M, K = 4096, 14336
props = torch.cuda.get_device_properties(0)
l2 = getattr(props, "L2_cache_size", 50 * 2**20)
print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  L2 {l2 / 2**20:.0f} MiB  M={M} K={K}")
W = torch.randn(M, K, generator=torch.Generator().manual_seed(0))
for name in ("cuda_q4_k_q8_1_decode", "cuda_q6_k_q8_1_decode", "cuda_q4_0_q8_1_decode"):
    k = qk.KERNELS[name]
    Wq = quantize_weights(W.cuda(), k.wfmt) if k.wfmt.endswith("_k") else qk.quantize(W.cuda(), k.wfmt)
    copies = [Wq] + [Wq.clone() for _ in range(max(1, -(-4 * l2 // Wq.numel())))]  # cold: > 4x L2 rotated
    for N in (1, 2, 4, 8):
        A = torch.randn(N, K, device="cuda")
        for i in range(3):
            qk.gemm(A, copies[i % len(copies)], name)
        op = torch.ops.quantgemm.gemm
        times = []
        for i in range(20):
            w = copies[(i + 1) % len(copies)]
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            op(A, w, name, 0)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e-3)
        t = statistics.median(times)
        gbs = Wq.numel() / t / 1e9
        print(f"{name:26s} N={N}  {t * 1e6:8.1f} us  weights {Wq.numel() / 2**20:6.1f} MiB  {gbs:7.0f} GB/s (weights only)")
PYEOF
rc=$?
[ $rc -eq 0 ] || status=1
say "timing rc=$rc $((SECONDS - t0)) s (timing.log; Q4_0 decode as the baseline; includes the activation quantizer)"
exit $status
