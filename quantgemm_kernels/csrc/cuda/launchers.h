// cuda/launchers.h: declarations of every CUDA launcher and the CUDA quantizers.
// Plain C++ with CUDA runtime types only: no torch header, so .cu files stay torch-free.
#pragma once
#include <cuda_runtime.h>
#include "../gemm.h"

#define QG_CUDA_KERNEL(name, wfmt, afmt, sum_x) void name(const GemmProblem& p, cudaStream_t stream);
#include "kernels.def"
#undef QG_CUDA_KERNEL

// cuda/quantize.cu: one thread per value, one warp per block, as ggml-cuda's quantize_q8_1. One
// quantizer per QG_FORMAT row of formats.def (`mode` as for the CPU quantizers, gemm.h; none for
// the QG_FORMAT_CPU_ONLY rows) and one dequantizer that switches on the format.
#define QG_FORMAT(name, id, block, qk) \
    void cuda_quantize_##name(const float* x, block* y, int64_t rows, int64_t K, int mode, cudaStream_t stream);
#define QG_FORMAT_CPU_ONLY(name, id, block, qk)
#include "../formats.def"
#undef QG_FORMAT_CPU_ONLY
#undef QG_FORMAT
void cuda_dequantize(const void* x, int fmt, float* y, int64_t rows, int64_t K, cudaStream_t stream);

// model/decode_layer.cu: the kernels around the GEMMs of decode_layer's CUDA implementation
// (one Llama layer for one token; bindings.cpp launches them in order).
void cuda_decode_add_rms_norm(float* x, const float* delta, const float* w, float* y, int dim, float eps,
                              cudaStream_t stream);
void cuda_decode_add(float* x, const float* y, int n, cudaStream_t stream);
void cuda_decode_silu_mul(float* gu, int ffn, cudaStream_t stream);
void cuda_decode_attention(const float* qkv, float* k_cache, float* v_cache, const float* cos, const float* sin,
                           const int64_t* pos, float* out, int n_heads, int n_kv_heads, int head_dim, int n_rot,
                           int64_t capacity, cudaStream_t stream);
int cuda_decode_max_head_dim();
