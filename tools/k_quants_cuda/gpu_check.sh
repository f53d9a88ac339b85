#!/usr/bin/env bash
# tools/k_quants_cuda/gpu_check.sh: the GPU check of chapter 8's CUDA kernels (cuda_q4_k_q8_1_decode,
# cuda_q6_k_q8_1_decode: 08_k_quants/1_decode.cu; cuda_q4_k_q8_1_mma, cuda_q6_k_q8_1_mma:
# 06_decode_tensor_cores/4_mma.cu with WF = w_q4_k, w_q6_k), on a machine with an NVIDIA GPU (sm_80 or
# newer), torch and nvcc, the extension built.
# (tools/k_quants_cuda/variants.sh is the decode kernels' standalone harness: configurations, event times.)
#
#   OUT=/some/dir tools/k_quants_cuda/gpu_check.sh        (repository root as the working directory)
#
# 1. checks that the extension is built (not timed)                         -> $OUT/build.log
# then, at the same time (none of them times anything):
# 2. the tests that name the K-quant formats (pytest -k "q4_k or q6_k" over tests/test_kernels.py and
#    tests/test_tensor_cores.py: ragged shapes and awkward values against the numpy reference, LLM
#    sizes, multi-tile shapes, NaN rows, the MMQ mode's accuracy, and the sum_x mode against
#    llama.cpp's MMVQ and MMQ (NMSE <= 1e-9) where a ggml CUDA backend is found, QUANTGEMM_GGML_LIB)
#                                                                           -> $OUT/pytest.log
# 3. compute-sanitizer memcheck and racecheck over tools/sanitize_driver.py kernels --only q4_k,q6_k
#    (SANITIZE_SHAPES, K x 8; the default mode, checked against the reference; both mma steps, the
#    Q6_K one with W's last super-block ending inside its last 16-byte chunk), and both tools over
#    the same shapes with the Q4_K mma step in the sum_x mode (its second instance, MMQ's arithmetic;
#    checked loosely against the default mode; the Q6_K mma step has no sum_x mode)
#                                                                           -> $OUT/sanitize.log
# 4. then alone, python -m quantgemm_kernels.measure: Q4_K and Q6_K, M = 4096, K = 14336 (--shapes
#    down), N = 1 to 512, weights cold (rotated copies over 4x the L2) and warm, the decode kernels
#    and the mma steps against llama.cpp's mul_mat (where its CUDA backend is found) and cuBLAS in the
#    same run, medians with their spread             -> $OUT/measure.log, $OUT/kquant-*.json
# and $OUT/summary.log, one line per part (the measured medians too). Exit status 0 when every part
# passed. After the build check: at most 5 minutes (130 s for parts 2 and 3, 150 s for part 4).
set -u -o pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
PY=${PYTHON:-python3}
SAN=${COMPUTE_SANITIZER:-compute-sanitizer}
FILTER="q4_k or q6_k"  # pytest -k
ONLY=q4_k,q6_k         # sanitize_driver --only
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
say() { echo "$*" | tee -a "$OUT/summary.log"; }
: >"$OUT/summary.log"

t0=$SECONDS
"$PY" -c "import quantgemm_kernels as qk, torch; assert qk.cuda_kernels_built(), 'CUDA kernels not built'; \
assert 'cuda_q4_k_q8_1_mma' in qk.KERNELS and 'cuda_q6_k_q8_1_mma' in qk.KERNELS; \
print(torch.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability(), 'built')" \
    >"$OUT/build.log" 2>&1 || { say "build FAIL (see build.log)"; exit 1; }
say "build ok $((SECONDS - t0)) s: $(tail -1 "$OUT/build.log")"
start=$SECONDS
tmp=$(mktemp -d)

# ---- 2 and 3 together
timeout 130 "$PY" -m pytest -q -p no:cacheprovider -rs tests/test_kernels.py tests/test_tensor_cores.py \
    -k "$FILTER" >"$OUT/pytest.log" 2>&1 &
echo $! >"$tmp/pytest.pid"

# the sum_x mode's instance (w_q4_k<true>) on the driver's shapes: finite, and near the default mode
# (they differ by the meaning of s and MMQ's quantizer, NMSE ~1e-4; a wrong tile is ~1). Q4_K only:
# the Q6_K mma step has no sum_x mode (4_mma.cu says why); the driver's run covers its one instance.
cat >"$tmp/sum_x.py" <<'PYEOF'
import sys

import torch

import quantgemm_kernels as qk
from quantgemm_kernels import reference as R
from quantgemm_kernels.testing import SANITIZE_SHAPES, quantize_weights, shape_for

k, bad = qk.KERNELS["cuda_q4_k_q8_1_mma"], 0
for M, N, K in (shape_for(k, *s) for s in SANITIZE_SHAPES):
    g = torch.Generator().manual_seed(M + N + K)
    A, W = torch.randn(N, K, generator=g).cuda(), torch.randn(M, K, generator=g).cuda()
    Wq = quantize_weights(W, "q4_k")
    C = qk.gemm(A, Wq, k.name, q8_1_sum="sum_x").cpu().double().numpy()
    C_default = qk.gemm(A, Wq, k.name).cpu().double().numpy()
    err = R.nmse(C, C_default)
    ok = err <= 1e-2
    bad += not ok
    print(f"{'ok ' if ok else 'BAD'} sum_x M={M} N={N} K={K}: NMSE against the default mode {err:.3g}", flush=True)
torch.cuda.synchronize()
print(f"driver: {len(SANITIZE_SHAPES)} sum_x shapes, {bad} wrong results", flush=True)
sys.exit(1 if bad else 0)
PYEOF

runs="memcheck racecheck memcheck-sum_x racecheck-sum_x"
if command -v "$SAN" >/dev/null 2>&1; then
    for run in $runs; do
        tool=${run%%-*}
        if [ "$run" = "$tool" ]; then cmd=(tools/sanitize_driver.py kernels --only "$ONLY"); else cmd=("$tmp/sum_x.py"); fi
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 130 "$SAN" --tool "$tool" --error-exitcode 1 --print-limit 20 \
            "$PY" "${cmd[@]}" >"$tmp/$run.log" 2>&1 &
        echo $! >"$tmp/$run.pid"
    done
fi

wait "$(cat "$tmp/pytest.pid")"
rc=$?
[ $rc -eq 0 ] || status=1
llama=$(grep -E "^SKIPPED \[[0-9]+\] .*no ggml CUDA backend" "$OUT/pytest.log" | grep -oE "^SKIPPED \[[0-9]+\]" |
    tr -dc '0-9\n' | awk '{s += $1} END {print s + 0}')
say "pytest rc=$rc $((SECONDS - start)) s: $(tail -1 "$OUT/pytest.log") (llama.cpp comparisons skipped: $llama)"

: >"$OUT/sanitize.log"
if command -v "$SAN" >/dev/null 2>&1; then
    for run in $runs; do
        wait "$(cat "$tmp/$run.pid")"
        rc=$?
        [ $rc -eq 0 ] || status=1
        { echo "=== $run rc=$rc"; cat "$tmp/$run.log"; } >>"$OUT/sanitize.log"
        say "$run rc=$rc: $(grep -E "(ERROR|RACECHECK) SUMMARY" "$tmp/$run.log" | tail -1 | sed 's/^=* *//') |" \
            "$(grep -E '^driver:' "$tmp/$run.log" | tail -1)"
    done
else
    say "sanitize SKIPPED: $SAN not found"
fi
say "tests and sanitizers $((SECONDS - start)) s"
rm -rf "$tmp"

# ---- 4 alone: the GPU is quiet now
t0=$SECONDS
ggml=$("$PY" -c "from quantgemm_kernels import llamacpp; print(int(bool(llamacpp.available()['cuda_backend'])))" 2>/dev/null)
[ "$ggml" = 1 ] && ggml_flag= || ggml_flag=--no-ggml
# --allow-busy: the host may still be loaded by the parts above; the record keeps its load average
timeout 150 "$PY" -m quantgemm_kernels.measure --formats q4_k,q6_k --shapes down --n 1,2,4,8,16,64,256,512 \
    --kernels 'cuda_{w}_q8_1_decode,cuda_{w}_q8_1_mma' --name kquant --out "$OUT" --allow-busy $ggml_flag \
    >"$OUT/measure.log" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
record=$(ls "$OUT" | grep -E '^kquant-.*\.json$' | tail -1)
say "measure rc=$rc $((SECONDS - t0)) s, llama.cpp ${ggml_flag:+not }compared (measure.log, ${record:-no record})"
if [ -n "$record" ]; then
    "$PY" - "$OUT/$record" <<'PYEOF' | tee -a "$OUT/summary.log"
import json
import sys

rec = json.load(open(sys.argv[1]))
print(f"  {rec['header']['machine']}; errors {rec['header'].get('errors')}; cold median us (NMSE vs float ref / vs llama.cpp):")
for r in rec["rows"]:
    if r["regime"] == "cold":
        nm = "/".join("-" if r.get(c) is None else f"{r[c]:.2g}" for c in ("nmse_vs_ref", "nmse_vs_llamacpp"))
        med = "-" if r.get("median_us") is None else f"{r['median_us']:.1f}"
        print(f"  {r['side']:28s} N={r['N']:<4d} {med:>9s} us  {nm}  {r['status']}")
PYEOF
fi
say "after the build check: $((SECONDS - start)) s"
exit $status
