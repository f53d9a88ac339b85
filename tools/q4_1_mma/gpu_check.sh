#!/usr/bin/env bash
# tools/q4_1_mma/gpu_check.sh: the GPU check of the Q4_1 prefill kernel (cuda_q4_1_q8_1_mma, chapter
# 7: 06_decode_tensor_cores/4_mma.cu with WF = w_q4_1), on a machine with an NVIDIA GPU (sm_80 or
# newer), torch and nvcc.
#
#   OUT=/some/dir tools/q4_1_mma/gpu_check.sh        (repository root as the working directory)
#
# 1. builds the extension (outside the timed part)                          -> $OUT/build.log
# 2. the CUDA tests of the kernel (pytest -k q4_1_q8_1_mma: ragged shapes, awkward values,
#    multi-tile shapes, LLM sizes against the decode kernel, NaN rows, the sum_x mode against
#    llama.cpp's MMQ where a ggml CUDA backend is found), its compile check, and the tiny model's
#    CUDA forward with Q4_1 weights (its prompt now goes through the mma step) -> $OUT/pytest.log
# 3. compute-sanitizer memcheck, racecheck, initcheck, synccheck over
#    tools/sanitize_driver.py kernels --only q4_1_q8_1_mma (SANITIZE_SHAPES), the four at once
#                                                                           -> $OUT/sanitize.log
# 4. python -m quantgemm_kernels.measure: Q4_1, M = 4096, K = 14336, N = 1, 8, 64, 512, weights cold
#    and warm, ours (decode to N = 64, mma) against llama.cpp's mul_mat where its CUDA backend is
#    found (QUANTGEMM_GGML_LIB); no cuBLAS                -> $OUT/measure.log, $OUT/q4_1-mma-*.json
# and $OUT/summary.log, one line per part. Exit status 0 when every part passed.
# After the build: at most 4 minutes (the three parts' timeouts add to 235 s), typically less.
set -u -o pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
PY=${PYTHON:-python3}
SAN=${COMPUTE_SANITIZER:-compute-sanitizer}
KERNEL=q4_1_q8_1_mma
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
say() { echo "$*" | tee -a "$OUT/summary.log"; }
: >"$OUT/summary.log"

t0=$SECONDS
"$PY" -c "import quantgemm_kernels as qk, torch; assert qk.cuda_kernels_built(), 'CUDA kernels not built'; \
print(torch.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability(), 'built')" \
    >"$OUT/build.log" 2>&1 || { say "build FAIL (see build.log)"; exit 1; }
say "build ok $((SECONDS - t0)) s: $(tail -1 "$OUT/build.log")"
start=$SECONDS

t0=$SECONDS
timeout 80 "$PY" -m pytest -q -p no:cacheprovider -rs tests/test_kernels.py tests/test_tensor_cores.py \
    tests/test_linear.py tests/test_model.py \
    -k "$KERNEL or q4_1_too or gpu_choice or (test_cuda_forward and q4_1)" >"$OUT/pytest.log" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
say "pytest rc=$rc $((SECONDS - t0)) s: $(tail -1 "$OUT/pytest.log")"

t0=$SECONDS
: >"$OUT/sanitize.log"
if command -v "$SAN" >/dev/null 2>&1; then
    tmp=$(mktemp -d)
    for tool in memcheck racecheck initcheck synccheck; do
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 70 "$SAN" --tool "$tool" --error-exitcode 1 --print-limit 20 \
            "$PY" tools/sanitize_driver.py kernels --only "$KERNEL" >"$tmp/$tool.log" 2>&1 &
        echo $! >"$tmp/$tool.pid"
    done
    for tool in memcheck racecheck initcheck synccheck; do
        wait "$(cat "$tmp/$tool.pid")"
        rc=$?
        [ $rc -eq 0 ] || status=1
        { echo "=== $tool rc=$rc"; cat "$tmp/$tool.log"; } >>"$OUT/sanitize.log"
        say "$tool rc=$rc: $(grep -E "(ERROR|RACECHECK|INITCHECK|SYNCCHECK) SUMMARY" "$tmp/$tool.log" | tail -1 |
            sed 's/^=* *//') | $(grep -E '^driver:' "$tmp/$tool.log" | tail -1)"
    done
    rm -rf "$tmp"
else
    say "sanitize SKIPPED: $SAN not found"
fi
say "sanitize $((SECONDS - t0)) s"

t0=$SECONDS
ggml=$("$PY" -c "from quantgemm_kernels import llamacpp; print(int(bool(llamacpp.available()['cuda_backend'])))" 2>/dev/null)
[ "$ggml" = 1 ] && ggml_flag= || ggml_flag=--no-ggml
# --allow-busy: the host may still be loaded by the parts above; the record keeps its load average
timeout 85 "$PY" -m quantgemm_kernels.measure --formats q4_1 --shapes 4096x14336 --n 1,8,64,512 \
    --kernels 'cuda_{w}_q8_1_decode,cuda_{w}_q8_1_mma' --no-cublas $ggml_flag --allow-busy --min-calls 24 \
    --out "$OUT" --name q4_1-mma >"$OUT/measure.log" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
say "measure rc=$rc $((SECONDS - t0)) s, llama.cpp ${ggml_flag:+not }compared (measure.log, $(ls "$OUT" | grep -E '^q4_1-mma-.*\.json$' | tail -1))"
say "after the build: $((SECONDS - start)) s"
exit $status
