// model/decode_layer.cu (chapter 7): the kernels around the GEMMs of one Llama layer for
// one token, on the GPU. decode_layer.h has the layer's arithmetic; the binding (decode_layer's
// CUDA implementation in bindings.cpp) launches, per layer:
//
//     add_rms_norm   h = rms_norm(x) * attn_norm                      1 CTA
//     the Q/K/V GEMM(s)                                               the decode kernels (chapter 6/7)
//     attention      RoPE of q and k, k and v into the cache at pos,  1 CTA per query head
//                    softmax(q k^T / sqrt(D)) v over positions 0..pos
//     the output GEMM
//     add_rms_norm   x += that; h = rms_norm(x) * ffn_norm            1 CTA
//     the gate/up GEMM(s), silu_mul, the down GEMM
//     add            x += that
//
// nine to eleven launches where the torch step makes about twenty (each norm, RoPE, the cache
// writes, the two batched matmuls, scale, mask, softmax, SiLU, the products and sums: one each).
// Inside a CUDA graph a launch costs little host time, but every kernel still starts, runs its
// few blocks and drains before the next: fewer, fuller kernels are the point.
//
// pos is read on the device (a CUDA graph replays the same launches for every position). Attention
// has no span: it reads positions 0..pos. A pos outside [0, capacity) cannot raise from inside a
// graph; the kernel then touches no memory and writes NaN, which reaches the logits.
//
// Numerics: sums of squares in double (ggml's CPU rms_norm does; the CPU implementation too);
// softmax online over chunks of QG_ATTN_CHUNK positions (running maximum and sum, the accumulator
// rescaled per chunk), so any context length fits in a fixed shared-memory footprint.
#include <cmath>
#include <cstdint>

#include "../cuda/launchers.h"

namespace {

constexpr int NORM_THREADS = 256, ATTN_THREADS = 256, QG_ATTN_CHUNK = 1024;

template <class T>
__device__ T block_sum(T v, T* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    __syncthreads();  // red may still be read by an earlier reduction
    if (lane == 0) red[warp] = v;
    __syncthreads();
    T s = 0;
    for (int w = 0; w < warps; w++) s += red[w];  // every thread, the same order: the same value
    return s;
}

__device__ float block_max(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < warps; w++) m = fmaxf(m, red[w]);
    return m;
}

// x += delta (when given), then y = x / sqrt(mean(x^2) + eps) * w. One CTA.
__global__ void add_rms_norm_kernel(float* __restrict__ x, const float* __restrict__ delta, const float* __restrict__ w,
                                    float* __restrict__ y, int dim, float eps) {
    __shared__ double red[32];
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = x[i];
        if (delta != nullptr) {
            v += delta[i];
            x[i] = v;
        }
        ss += (double)(v * v);
    }
    ss = block_sum(ss, red);
    const float mean = (float)(ss / (double)dim);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) y[i] = (x[i] * scale) * w[i];  // this thread's own x[i]
}

__global__ void add_kernel(float* __restrict__ x, const float* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

// gu = [gate | up] (2 * ffn floats): gate[i] = silu(gate[i]) * up[i].
__global__ void silu_mul_kernel(float* __restrict__ gu, int ffn) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < ffn) {
        const float g = gu[i];
        gu[i] = g / (1.0f + expf(-g)) * gu[ffn + i];
    }
}

// One CTA per query head h of KV head g = h / (H / Hkv). qkv: [q (H*D) | k (Hkv*D) | v (Hkv*D)].
// A warp reads whole cache rows (lane l holds dimensions l, l + 32, ...: coalesced), ATTN_UNROLL
// rows at a time, every load unconditional (rows past the chunk clamped to pos, dimensions past D
// to D - 1 with a zero weight) so that the compiler issues them together: at a few hundred
// positions the kernel waits on the memory's latency, not its bandwidth. What this replaced, on the
// H100 at 140 positions: a thread per position reading its row alone, 22.7 us per layer; warps
// over rows with the loads behind per-row branches (the compiler then waits on each), 17.3 us,
// linear in the positions.
constexpr int ATTN_UNROLL = 8;

template <int R>  // dimensions per lane: head_dim <= 32 R
__global__ void attention_kernel(const float* __restrict__ qkv, float* __restrict__ kc, float* __restrict__ vc,
                                 const float* __restrict__ cos, const float* __restrict__ sin,
                                 const int64_t* __restrict__ pos_p, float* __restrict__ out, int H, int Hkv, int D,
                                 int n_rot, int64_t capacity, float scale) {
    extern __shared__ float smem[];
    float* q = smem;                   // [D]  this head's query, rotated
    float* sc = q + D;                 // [QG_ATTN_CHUNK] scores, then weights, of a chunk of positions
    float* part = sc + QG_ATTN_CHUNK;  // [warps * D] each warp's share of the output
    __shared__ float red[32];
    const int h = blockIdx.x, group = H / Hkv, g = h / group, t = threadIdx.x;
    const int lane = t % 32, warp = t / 32, warps = blockDim.x / 32;
    const int64_t pos = *pos_p;
    if (pos < 0 || pos >= capacity) {  // nothing read or written: NaN says so (see the header)
        for (int i = t; i < D; i += blockDim.x) out[(int64_t)h * D + i] = NAN;
        return;
    }
    const float* qh = qkv + (int64_t)h * D;
    const float* kh = qkv + (int64_t)H * D + (int64_t)g * D;
    const float* vh = qkv + (int64_t)(H + Hkv) * D + (int64_t)g * D;
    const float* cs = cos + pos * (n_rot / 2);
    const float* sn = sin + pos * (n_rot / 2);
    float* krows = kc + (int64_t)g * capacity * D;
    float* vrows = vc + (int64_t)g * capacity * D;
    // RoPE, and this position's key and value into the cache. Every head of the KV group writes
    // the same bits there (the same arithmetic on the same inputs), then reads the row back after
    // the barrier: whichever CTA's write lands, the value is the same.
    for (int i = t; i < D; i += blockDim.x) {
        float qv = qh[i], kv = kh[i];
        if (i < n_rot) {  // pairs (2j, 2j+1), rotated by angle j
            const int j = i / 2, e = 2 * j;
            const float c = cs[j], s = sn[j];
            qv = (i & 1) ? qh[e] * s + qh[e + 1] * c : qh[e] * c - qh[e + 1] * s;
            kv = (i & 1) ? kh[e] * s + kh[e + 1] * c : kh[e] * c - kh[e + 1] * s;
        }
        q[i] = qv;
        krows[pos * D + i] = kv;
        vrows[pos * D + i] = vh[i];
    }
    __syncthreads();
    int dl[R];  // this lane's dimensions, clamped into the row
    float qr[R], acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int d = lane + 32 * r;
        dl[r] = d < D ? d : D - 1;
        qr[r] = d < D ? q[d] : 0.0f;
        acc[r] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t c0 = 0; c0 <= pos; c0 += QG_ATTN_CHUNK) {
        const int n = (int)(pos + 1 - c0 < QG_ATTN_CHUNK ? pos + 1 - c0 : QG_ATTN_CHUNK);
        // scores: warp w takes rows w*U .. w*U+U-1 of the chunk, then (w + warps)*U ...
        float cmax = -INFINITY;
        for (int i0 = warp * ATTN_UNROLL; i0 < n; i0 += warps * ATTN_UNROLL) {
            float p[ATTN_UNROLL];
#pragma unroll
            for (int u = 0; u < ATTN_UNROLL; u++) {
                const float* kr = krows + (i0 + u < n ? c0 + i0 + u : pos) * D;
                float a = 0.0f;
#pragma unroll
                for (int r = 0; r < R; r++) a += qr[r] * kr[dl[r]];
                p[u] = a;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
#pragma unroll
                for (int u = 0; u < ATTN_UNROLL; u++) p[u] += __shfl_xor_sync(0xffffffffu, p[u], o);
#pragma unroll
            for (int u = 0; u < ATTN_UNROLL; u++)
                if (i0 + u < n) {
                    const float v = p[u] * scale;
                    if (lane == 0) sc[i0 + u] = v;
                    cmax = fmaxf(cmax, v);
                }
        }
        cmax = block_max(cmax, red);                                   // its __syncthreads also orders the writes of sc
        const float m_new = fmaxf(m, cmax), factor = expf(m - m_new);  // exp(-inf) = 0 on the first chunk
        float csum = 0.0f;
        for (int i = t; i < n; i += blockDim.x) {
            sc[i] = expf(sc[i] - m_new);
            csum += sc[i];
        }
        csum = block_sum(csum, red);  // and the writes of the weights before the reads below
        l = l * factor + csum;
        m = m_new;
        // weighted sum of the value rows, the same split of rows as the scores
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] *= factor;
        for (int i0 = warp * ATTN_UNROLL; i0 < n; i0 += warps * ATTN_UNROLL) {
#pragma unroll
            for (int u = 0; u < ATTN_UNROLL; u++) {
                const bool in = i0 + u < n;
                const float w = in ? sc[i0 + u] : 0.0f;
                const float* vr = vrows + (in ? c0 + i0 + u : pos) * D;
#pragma unroll
                for (int r = 0; r < R; r++) acc[r] += w * vr[dl[r]];
            }
        }
        __syncthreads();  // sc is rewritten by the next chunk
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int d = lane + 32 * r;
        if (d < D) part[warp * D + d] = acc[r];
    }
    __syncthreads();
    for (int d = t; d < D; d += blockDim.x) {
        float s = 0.0f;
        for (int w = 0; w < warps; w++) s += part[w * D + d];
        out[(int64_t)h * D + d] = s / l;
    }
}

constexpr int ATTN_MAX_R = 8;  // head_dim up to 256

}  // namespace

void cuda_decode_add_rms_norm(float* x, const float* delta, const float* w, float* y, int dim, float eps,
                              cudaStream_t stream) {
    add_rms_norm_kernel<<<1, NORM_THREADS, 0, stream>>>(x, delta, w, y, dim, eps);
}

void cuda_decode_add(float* x, const float* y, int n, cudaStream_t stream) {
    add_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}

void cuda_decode_silu_mul(float* gu, int ffn, cudaStream_t stream) {
    silu_mul_kernel<<<(ffn + 255) / 256, 256, 0, stream>>>(gu, ffn);
}

void cuda_decode_attention(const float* qkv, float* k_cache, float* v_cache, const float* cos, const float* sin,
                           const int64_t* pos, float* out, int n_heads, int n_kv_heads, int head_dim, int n_rot,
                           int64_t capacity, cudaStream_t stream) {
    const size_t smem = (size_t)(head_dim + QG_ATTN_CHUNK + ATTN_THREADS / 32 * head_dim) * sizeof(float);
    const float scale = 1.0f / sqrtf((float)head_dim);
    auto launch = [&](auto kernel) {
        kernel<<<n_heads, ATTN_THREADS, smem, stream>>>(qkv, k_cache, v_cache, cos, sin, pos, out, n_heads, n_kv_heads,
                                                        head_dim, n_rot, capacity, scale);
    };
    switch ((head_dim + 31) / 32) {  // the binding refuses head_dim > 32 * ATTN_MAX_R
        case 1: launch(attention_kernel<1>); break;
        case 2: launch(attention_kernel<2>); break;
        case 3: launch(attention_kernel<3>); break;
        case 4: launch(attention_kernel<4>); break;
        case 5: launch(attention_kernel<5>); break;
        case 6: launch(attention_kernel<6>); break;
        case 7: launch(attention_kernel<7>); break;
        default: launch(attention_kernel<8>); break;
    }
}

int cuda_decode_max_head_dim() { return 32 * ATTN_MAX_R; }
