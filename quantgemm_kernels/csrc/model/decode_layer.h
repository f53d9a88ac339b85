// decode_layer.h: one Llama layer for one token (chapter 7's decode step), torch-free.
//
// What the model's torch code does per layer in a dozen to twenty operator calls, here in one:
//
//     h = rms_norm(x) * attn_norm
//     q | k | v = h @ Wqkv^T                 the course's GEMM kernels, activations quantized first
//     q, k = rope(q), rope(k)                 adjacent pairs (GGUF's layout), the position's cos/sin
//     k, v -> the cache at pos                cache [n_kv_heads, capacity, head_dim], float32
//     a = softmax(q k^T / sqrt(D)) v          each query head over positions 0 .. pos of its KV head
//     x += a @ Wo^T
//     h = rms_norm(x) * ffn_norm
//     x += (silu(h @ Wgate^T) * (h @ Wup^T)) @ Wdown^T
//
// Why it exists: a decode step of a small model (SmolLM2-135M: 30 layers of 576 features) is a few
// hundred tiny operations, and on a CPU each operator call through torch costs microseconds of
// dispatch, as much as the arithmetic it starts. The GEMMs are the package's kernels, called as
// the binding calls them (same quantizer, same kernel, same split of M over threads): the same
// bytes and bits as quantgemm_kernels.linear. The rest follows ggml's CPU arithmetic where it
// differs from torch's: RMSNorm's sum of squares and softmax's sum in double (ggml_float).
#pragma once

#include <cstdint>
#include <functional>

#include "../gemm.h"

// One linear layer: weights in their format's blocks [M, K], the CPU kernel that reads them, the
// activation format that kernel takes and the Q8_1 sum mode its quantizer uses (api.pick_kernel's
// choice and api._SUM_MODE, passed down by the model).
struct DecodeLinear {
    const void* W;
    int64_t M, K;
    CpuGemmFn fn;
    QgFormat afmt;
    int sum_mode;
};

struct DecodeLayer {
    int64_t dim, n_heads, n_kv_heads, head_dim, n_rot, ffn_dim;
    float eps;
    const float* attn_norm;  // [dim]
    const float* ffn_norm;   // [dim]
    // Q, K, V: one fused weight or three; their outputs, back to back, are q | k | v. Gate and up
    // likewise (one or two).
    const DecodeLinear* qkv;
    int n_qkv;
    DecodeLinear o;
    const DecodeLinear* gate_up;
    int n_gate_up;
    DecodeLinear down;
    float* k_cache;  // [n_kv_heads, capacity, head_dim]
    float* v_cache;
    int64_t capacity, pos;
    const float* cos;  // [n_rot / 2], the angles of position pos (the binding offsets the tables)
    const float* sin;
};

// f(begin, end) over chunks of [begin, end) of at least `grain`, on the binding's threads.
using DecodeParallelFor = std::function<void(int64_t, int64_t, int64_t, const std::function<void(int64_t, int64_t)>&)>;

// x [dim] in place. `threads` is what the binding's parallel_for runs on (it sizes the GEMM chunks).
void decode_layer_cpu(const DecodeLayer& L, float* x, const DecodeParallelFor& pfor, int threads);

// ggml's rms_norm then the weight: y = x / sqrt(sum(x^2) / dim + eps) * w, one row of dim floats.
void rms_norm_row_cpu(const float* x, const float* w, float* y, int64_t dim, float eps);

// The rows of M per chunk that the binding's GEMMs use (gemm_cpu and decode_layer_cpu): whole
// multiples of 8 columns, at least 2^17 multiply-adds per chunk (waking a thread costs microseconds,
// as much as a small layer's whole product: a 576 x 576 layer at N = 1 is 2 chunks).
inline int64_t cpu_gemm_grain(int64_t N, int64_t M, int64_t K, int threads) {
    const int64_t min_rows = ((int64_t(1) << 17) / (N * K > 0 ? N * K : 1) + 7) / 8 * 8;
    int64_t g = (M / (8 * (threads > 0 ? threads : 1))) / 8 * 8;
    if (g < 8) g = 8;
    return g > min_rows ? g : min_rows;
}
