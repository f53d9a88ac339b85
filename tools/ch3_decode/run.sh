#!/usr/bin/env bash
# tools/ch3_decode/run.sh: what produced bench_results/<gpu>/<date>/ch3-*.{json,txt,log} (chapter 3's
# decode step), on a GPU machine, OUT=<folder> NS=1,2,3,4,8 tools/ch3_decode/run.sh:
# compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over the harness's ragged shapes, the
# harness's variant table (variants.log), the chapter-3 kernel tests, torch's fp16 GEMV forms
# (torch_gemv.py), quantgemm_kernels.measure (ours, llama.cpp, cuBLAS fp16; cold and warm) and an
# Nsight Compute summary (ncu.txt). .whl/ holds the wheels, .ggml/ llama.cpp's ggml (tools/gpu_publish.sh).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:?}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 
NV=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
export QUANTGEMM_CACHE=${QUANTGEMM_CACHE:-/tmp/qgc}
( python3 -c "from quantgemm_kernels._build import load_extension as l; l()" > /tmp/build.log 2>&1; echo "extension build rc=$?" >> /tmp/build.log ) &
BPID=$!
t0=$SECONDS
$NV -O3 -std=c++17 -arch=sm_90a -Xptxas -v -I quantgemm_kernels/csrc -I quantgemm_kernels/csrc/cuda tools/ch3_decode/variants.cu -o /tmp/variants > /tmp/ptxas.log 2>&1 || echo "harness build failed"
echo "harness built in $((SECONDS - t0)) s"
wait $BPID; tail -1 /tmp/build.log
for tool in memcheck racecheck initcheck synccheck; do
  compute-sanitizer --tool $tool --error-exitcode 1 /tmp/variants check > /tmp/san.log 2>&1; echo "sanitizer $tool rc=$? $(grep -E SUMMARY /tmp/san.log | head -1)" | tee -a $OUT/san.log; cat /tmp/san.log >> $OUT/san.log
done
timeout 150 /tmp/variants > $OUT/variants.log 2>&1; echo "variants rc=$?"; grep -v "^check R" $OUT/variants.log
python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py -k "q4_0_f32 or registry or step_file or sum_x" > $OUT/pytest.log 2>&1; echo "pytest rc=$?"; tail -2 $OUT/pytest.log
python3 tools/ch3_decode/torch_gemv.py > $OUT/torch_gemv.log 2>&1; echo "torch_gemv rc=$?"; grep "^N=" $OUT/torch_gemv.log
if [ -z "${QUANTGEMM_GGML_LIB:-}" ]; then  # else: llama.cpp's CUDA ggml is already there
  rm -rf /tmp/ggml && mkdir -p /tmp/ggml/x /tmp/ggml/lib && tar xJf .ggml/ggml-libs-cuda-sm90.tar.xz -C /tmp/ggml/x && find /tmp/ggml/x -name 'libggml*.so*' -exec cp -a {} /tmp/ggml/lib/ \; && cp .ggml/ggml-build.json /tmp/ggml/
  export QUANTGEMM_GGML_LIB=/tmp/ggml/lib
fi
python3 -m quantgemm_kernels.measure --formats q4_0 --shapes down --n ${NS:-1,2,4,8} --kernels cuda_q4_0_f32_decode,cuda_q4_0_f32_tiled,cuda_q4_0_q8_1_decode --name ch3-decode --out $OUT --allow-busy > $OUT/measure.log 2>&1; echo "measure rc=$?"
grep -v "graph warmup" $OUT/measure.log | grep -A7 "^Q4_0" | tail -7
command -v ncu >/dev/null && timeout 60 ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:q4_0_f32_decode --launch-skip 2 --launch-count 2 /tmp/variants prof > $OUT/ncu.txt 2>&1; echo "ncu rc=$?"
