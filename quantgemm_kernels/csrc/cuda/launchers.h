// cuda/launchers.h: declarations of every CUDA launcher and the CUDA quantizers.
// Plain C++ with CUDA runtime types only: no torch header, so .cu files stay torch-free.
#pragma once
#include <cuda_runtime.h>
#include "../gemm.h"

#define QG_CUDA_KERNEL(name, wfmt, afmt) void name(const GemmProblem& p, cudaStream_t stream);
#include "kernels.def"
#undef QG_CUDA_KERNEL

// cuda/quantize.cu: one thread per value, one warp per block, as ggml-cuda's quantize_q8_1.
void cuda_quantize_q4_0(const float* x, block_q4_0* y, int64_t rows, int64_t K, cudaStream_t stream);
void cuda_quantize_q8_0(const float* x, block_q8_0* y, int64_t rows, int64_t K, cudaStream_t stream);
void cuda_quantize_q8_1(const float* x, block_q8_1* y, int64_t rows, int64_t K, int sum_mode, cudaStream_t stream);
void cuda_dequantize(const void* x, int fmt, float* y, int64_t rows, int64_t K, cudaStream_t stream);
