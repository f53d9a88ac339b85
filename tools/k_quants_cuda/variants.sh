#!/usr/bin/env bash
# tools/k_quants_cuda/variants.sh: build and run tools/k_quants_cuda/variants.cu (chapter 8's K-quant decode
# kernels, 08_k_quants/1_decode.cu) on a machine with an NVIDIA GPU and the CUDA toolkit; no torch needed.
#
#   OUT=/some/dir bash tools/k_quants_cuda/variants.sh        (from anywhere; about 1-2 minutes)
#
# 1. nvcc -O3 -std=c++17 -arch=sm_90a (ptxas -v: registers and spills of every kernel in the log),
# 2. compute-sanitizer memcheck over `variants check` (the launchers and every configuration, small ragged shapes),
# 3. `variants`: the CPU check of the lane arithmetic, resources, correctness (NMSE <= 1e-8 against float64) and
#    the timing table (cold and warm, M = 4096, K = 14336, N = 1, 2, 4, 8; the first version and chapter 6's
#    Q4_0 decode step beside it).
# Everything goes to $OUT/kq-variants.log; the exit status is 0 when every part passed.
set -u -o pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
LOG="$OUT/kq-variants.log"
: >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }
NV=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
BIN=${TMPDIR:-/tmp}/kq_variants
status=0

rev=$(git rev-parse --short HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null || rev="$rev (dirty)"; } || rev=no-git
say "# $rev, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >>"$LOG" 2>&1
"$NV" --version | tail -1 >>"$LOG"

t0=$SECONDS
timeout 300 "$NV" -O3 -std=c++17 -arch=sm_90a -Xptxas -v -I quantgemm_kernels/csrc -I quantgemm_kernels/csrc/cuda \
    -I tools/k_quants_cuda tools/k_quants_cuda/variants.cu -o "$BIN" >"$OUT/ptxas.tmp" 2>&1
rc=$?
# one line per kernel: name, registers, spills (the K-quant kernels and the quantizer)
grep -E "Compiling entry|registers|spill" "$OUT/ptxas.tmp" | paste - - - | grep -E "kq_|quantize_rows" |
    sed -E "s/.*entry function '([^']*)'.* ([0-9]+) bytes spill stores.*(Used [0-9]+ registers).*/\1: \3, \2 B spilled/" |
    sed -E 's/^_ZN3gpu.*_variants_cu_[0-9a-f]{8}[0-9]+/ /' |
    sed -E 's/INS[01]_7(kq_q[46]_k)ELi([0-9])E(Li([0-9])ELi([0-9])E)?E[^:]*:/<\1 T\2 R\4 S\5>:/; s/(quantize[a-z_0-9]*kernel)E[^:]*:/\1:/' >>"$LOG"
grep -iE "warning|error" "$OUT/ptxas.tmp" >>"$LOG"
rm -f "$OUT/ptxas.tmp"
say "build rc=$rc $((SECONDS - t0)) s"
[ $rc -eq 0 ] || exit 1

t0=$SECONDS
if [ -x "$SAN" ] || command -v "$SAN" >/dev/null 2>&1; then
    echo "=== compute-sanitizer memcheck: variants check" >>"$LOG"
    timeout 150 "$SAN" --tool memcheck --error-exitcode 1 --print-limit 20 "$BIN" check >>"$LOG" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    say "memcheck rc=$rc $((SECONDS - t0)) s: $(grep -E 'ERROR SUMMARY' "$LOG" | tail -1) | $(grep -E '^check:' "$LOG" | tail -1)"
else
    say "memcheck SKIPPED: compute-sanitizer not found"
fi

t0=$SECONDS
echo "=== variants" >>"$LOG"
timeout 150 "$BIN" >>"$LOG" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
say "variants rc=$rc $((SECONDS - t0)) s: $(grep -E '^variants:' "$LOG" | tail -1)"
grep -E "^(FAIL|cpu|check prod|# copy)" "$LOG"
exit $status
