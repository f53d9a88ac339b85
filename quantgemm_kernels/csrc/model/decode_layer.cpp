// model/decode_layer.cpp (chapter 7): one Llama layer for one token, in one call.
// The arithmetic is in decode_layer.h's header comment; what this file decides:
//
//  * The GEMMs: the activation row quantized by the kernel's own quantizer (quantize.cpp), then
//    the kernel over chunks of M, the split of bindings.cpp's gemm_cpu (cpu_gemm_grain): the same
//    bits as torch.ops.quantgemm.gemm on the same inputs.
//  * Attention: one query head per task (pfor over heads); its scores over positions 0 .. pos,
//    softmax with the maximum subtracted and the sum of exponentials in double, as ggml's
//    soft_max; then the weighted sum of the value rows. Dot products of head_dim floats run as
//    8 partial sums (a vector's lanes), added in a fixed order: the result does not depend on the
//    threads.
//  * Scratch: per-thread buffers that grow to the largest layer and stay (no allocation per token).
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "decode_layer.h"

namespace {

// Quantizes one row of K floats to `f` (the kernel's activation format) into buf; returns buf.
const void* quantize_row(QgFormat f, const float* x, int64_t K, int mode, std::vector<uint8_t>& buf) {
    switch (f) {
#define QG_FORMAT(name, id, block, qk)                           \
    case id:                                                     \
        buf.resize((size_t)(K / qk) * sizeof(block));            \
        quantize_rows_##name(x, (block*)buf.data(), 1, K, mode); \
        return buf.data();
#include "../formats.def"
#undef QG_FORMAT
        default: throw std::runtime_error("decode_layer: an activation format without a CPU quantizer");
    }
}

// y[0 .. L.M) = x @ W^T for one token.
void linear(const DecodeLinear& L, const float* x, float* y, std::vector<uint8_t>& qbuf, const DecodeParallelFor& pfor,
            int threads) {
    const GemmProblem p{quantize_row(L.afmt, x, L.K, L.sum_mode, qbuf), L.W, y, 1, (int)L.M, (int)L.K};
    pfor(0, L.M, cpu_gemm_grain(1, L.M, L.K, threads), [&](int64_t m0, int64_t m1) { L.fn(p, (int)m0, (int)m1); });
}

// Outputs of parts back to back (fused weights are one part).
void linears(const DecodeLinear* parts, int n, const float* x, float* y, std::vector<uint8_t>& qbuf,
             const DecodeParallelFor& pfor, int threads) {
    for (int i = 0; i < n; i++) {
        linear(parts[i], x, y, qbuf, pfor, threads);
        y += parts[i].M;
    }
}

float dot(const float* a, const float* b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    for (; i < n; i++) acc[i % 8] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Rotates the first n_rot dimensions of each of `heads` rows of head_dim floats: pairs (2i, 2i+1).
void rope_rows(float* x, int64_t heads, int64_t head_dim, int64_t n_rot, const float* cos, const float* sin) {
    for (int64_t h = 0; h < heads; h++) {
        float* r = x + h * head_dim;
        for (int64_t i = 0; i < n_rot / 2; i++) {
            const float x0 = r[2 * i], x1 = r[2 * i + 1];
            r[2 * i] = x0 * cos[i] - x1 * sin[i];
            r[2 * i + 1] = x0 * sin[i] + x1 * cos[i];
        }
    }
}

}  // namespace

void rms_norm_row_cpu(const float* x, const float* w, float* y, int64_t dim, float eps) {
    double sum = 0.0;  // ggml_float, as ggml_compute_forward_rms_norm_f32
    for (int64_t i = 0; i < dim; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)dim);
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < dim; i++) y[i] = (x[i] * scale) * w[i];
}

// [excerpt: decode_layer]
void decode_layer_cpu(const DecodeLayer& L, float* x, const DecodeParallelFor& pfor, int threads) {
    const int64_t H = L.n_heads, Hkv = L.n_kv_heads, D = L.head_dim, S = L.pos + 1;
    const int64_t q_dim = H * D, kv_dim = Hkv * D;
    thread_local std::vector<float> h, qkv, att, out, gu;
    thread_local std::vector<uint8_t> qbuf;
    h.resize(L.dim);
    qkv.resize(q_dim + 2 * kv_dim);
    att.resize(q_dim);
    out.resize(L.dim);
    gu.resize(2 * L.ffn_dim);

    // attention block
    rms_norm_row_cpu(x, L.attn_norm, h.data(), L.dim, L.eps);
    linears(L.qkv, L.n_qkv, h.data(), qkv.data(), qbuf, pfor, threads);
    float* q = qkv.data();
    float* k = q + q_dim;
    const float* v = k + kv_dim;
    rope_rows(q, H, D, L.n_rot, L.cos, L.sin);
    rope_rows(k, Hkv, D, L.n_rot, L.cos, L.sin);
    for (int64_t g = 0; g < Hkv; g++) {
        std::memcpy(L.k_cache + (g * L.capacity + L.pos) * D, k + g * D, D * sizeof(float));
        std::memcpy(L.v_cache + (g * L.capacity + L.pos) * D, v + g * D, D * sizeof(float));
    }
    const float scale = 1.0f / std::sqrt((float)D);
    const int64_t group = H / Hkv;
    float* att_rows = att.data();  // the calling thread's buffer (a thread_local named in the lambda
                                   // would be the running thread's own)
    pfor(0, H, 1, [&](int64_t h0, int64_t h1) {
        std::vector<float> p(S);
        for (int64_t hd = h0; hd < h1; hd++) {
            const float* qh = q + hd * D;
            const float* kc = L.k_cache + (hd / group) * L.capacity * D;
            const float* vc = L.v_cache + (hd / group) * L.capacity * D;
            float mx = -INFINITY;
            for (int64_t s = 0; s < S; s++) {
                p[s] = dot(qh, kc + s * D, D) * scale;
                mx = p[s] > mx ? p[s] : mx;
            }
            double sum = 0.0;
            for (int64_t s = 0; s < S; s++) {
                p[s] = std::exp(p[s] - mx);
                sum += p[s];
            }
            const float inv = (float)(1.0 / sum);
            float* a = att_rows + hd * D;
            for (int64_t d = 0; d < D; d++) a[d] = 0.0f;
            for (int64_t s = 0; s < S; s++) {
                const float w = p[s] * inv;
                const float* vr = vc + s * D;
                for (int64_t d = 0; d < D; d++) a[d] += w * vr[d];
            }
        }
    });
    linear(L.o, att.data(), out.data(), qbuf, pfor, threads);
    for (int64_t i = 0; i < L.dim; i++) x[i] += out[i];

    // feed-forward block
    rms_norm_row_cpu(x, L.ffn_norm, h.data(), L.dim, L.eps);
    linears(L.gate_up, L.n_gate_up, h.data(), gu.data(), qbuf, pfor, threads);
    float* g = gu.data();
    const float* u = g + L.ffn_dim;
    for (int64_t i = 0; i < L.ffn_dim; i++) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    linear(L.down, g, out.data(), qbuf, pfor, threads);
    for (int64_t i = 0; i < L.dim; i++) x[i] += out[i];
}
// [end excerpt: decode_layer]
