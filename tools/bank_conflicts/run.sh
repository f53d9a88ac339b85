#!/usr/bin/env bash
# tools/bank_conflicts/run.sh: what produced bench_results/<gpu>/<date>/bank-conflicts-*.json, on a
# GPU machine with nvcc and Nsight Compute: OUT=<folder> tools/bank_conflicts/run.sh
# Chapter 1's tiled kernel as it is (shared tiles [32][33]) and with the padding removed ([32][32]):
# shared-memory instructions in the SASS (cuobjdump), times (CUDA events, tiled.cu) and Nsight Compute's shared-memory counters for one call at
# N = M = K = 2048 (the second of two), then record.py turns it all into one JSON record, OUT/bank-conflicts.json.
set -u -o pipefail
OUT=${OUT:?}
cd "$(dirname "$0")/../.."
NV=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
ARCH=${ARCH:-sm_90a}
STEP=quantgemm_kernels/csrc/cuda/01_fp32/2_tiled.cu
TMP=$(mktemp -d)
cp "$STEP" "$TMP/pad1.cu"
sed 's/TILE + 1\]/TILE + 0]/' "$STEP" > "$TMP/pad0.cu"
[ "$(diff "$TMP/pad1.cu" "$TMP/pad0.cu" | grep -c '^[<>]')" = 4 ] || { echo "the padding is not where run.sh expects it"; exit 1; }
METRICS=l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,gpu__time_duration.sum
for pad in 1 0; do
  $NV -O3 -std=c++17 -arch=$ARCH -I quantgemm_kernels/csrc/cuda/01_fp32 -I quantgemm_kernels/csrc/cuda \
      -DSTEP_FILE="\"$TMP/pad$pad.cu\"" tools/bank_conflicts/tiled.cu -o "$TMP/tiled$pad" || exit 1
  cuobjdump -sass "$TMP/tiled$pad" | grep -oE '\b(LDS|STS)(\.[A-Z0-9]+)*' | sort | uniq -c > "$TMP/bank-sass-pad$pad.txt"
  "$TMP/tiled$pad" time > "$TMP/bank-time-pad$pad.txt" 2>&1; echo "pad $pad time rc=$?"; cat "$TMP/bank-time-pad$pad.txt"
  ncu --metrics $METRICS --launch-skip 2 --launch-count 1 --csv "$TMP/tiled$pad" prof > "$TMP/bank-ncu-pad$pad.csv" 2>&1
  echo "pad $pad ncu rc=$?"
done
python3 tools/bank_conflicts/record.py "$TMP" "$OUT" "ncu --metrics $METRICS --launch-skip 2 --launch-count 1 --csv tiled prof"
