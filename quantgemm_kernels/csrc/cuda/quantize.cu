// cuda/quantize.cu: llama.cpp's quantizers on the GPU, byte for byte the CPU reference's.
//
// One thread per value and one warp per 32-value block, the layout of ggml-cuda's quantize_q8_1:
// the block's max and sum are warp reductions (butterfly shuffles), no shared memory. nvcc fuses
// a*b+c into one FMA by default, which rounds differently from the C reference; the roundings
// that matter are therefore spelled out with __fmul_rn / __fadd_rn / __fdiv_rn.
#include "common.cuh"

namespace {
constexpr unsigned FULL = QG_FULL_MASK;

// Each thread: value i of the flat input. Threads past the end still take part in the shuffles
// (total is a multiple of 32, so whole warps are either all in or all out).
__global__ void quantize_q4_0_kernel(const float* __restrict__ x, block_q4_0* __restrict__ y, int64_t total) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i - (threadIdx.x % 32) >= total) return;  // whole warp past the end
    const int lane = threadIdx.x % 32;
    const float v = x[i];
    // the signed value of largest |v|, first lane on ties (the C loop's strict '<')
    float best_abs = fabsf(v), best = v;
    int best_lane = lane;
    for (int off = 16; off > 0; off >>= 1) {
        const float oa = __shfl_xor_sync(FULL, best_abs, off);
        const float ov = __shfl_xor_sync(FULL, best, off);
        const int ol = __shfl_xor_sync(FULL, best_lane, off);
        if (oa > best_abs || (oa == best_abs && ol < best_lane)) {
            best_abs = oa;
            best = ov;
            best_lane = ol;
        }
    }
    if (best_abs == 0.0f) best = 0.0f;  // C keeps its initial +0.0 when every |x| is 0 (even -0.0)
    const float d = best / -8.0f;
    const float id = inverse_scale(d);
    const float t = __fadd_rn(__fmul_rn(v, id), 8.5f);
    const int q = min(15, (int)t);
    const int q_hi = __shfl_down_sync(FULL, q, 16);  // lane j gets element j+16
    block_q4_0* b = y + i / 32;
    if (lane < 16) b->qs[lane] = (uint8_t)(q | (q_hi << 4));
    if (lane == 0) b->d = fp32_to_fp16(d);
}

// The first lane holding the block's min (or max): equal values can differ only as -0.0 and +0.0,
// and the C loop's strict comparisons keep the first of them.
template <bool MIN>
__device__ __forceinline__ float warp_extreme_first(float v, int lane) {
    int best_lane = lane;
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(FULL, v, off);
        const int ol = __shfl_xor_sync(FULL, best_lane, off);
        const bool better = MIN ? ov < v : ov > v;
        if (better || (ov == v && ol < best_lane)) {
            v = ov;
            best_lane = ol;
        }
    }
    return v;
}

__global__ void quantize_q4_1_kernel(const float* __restrict__ x, block_q4_1* __restrict__ y, int64_t total) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i - (threadIdx.x % 32) >= total) return;
    const int lane = threadIdx.x % 32;
    const float v = x[i];
    const float vmin = warp_extreme_first<true>(v, lane), vmax = warp_extreme_first<false>(v, lane);
    const float d = __fdiv_rn(__fsub_rn(vmax, vmin), 15.0f);
    const float id = inverse_scale(d);
    const float t = __fadd_rn(__fmul_rn(__fsub_rn(v, vmin), id), 0.5f);
    const int q = min(15, (int)t);
    const int q_hi = __shfl_down_sync(FULL, q, 16);  // lane j gets element j+16
    block_q4_1* b = y + i / 32;
    if (lane < 16) b->qs[lane] = (uint8_t)(q | (q_hi << 4));
    if (lane == 0) {
        b->d = fp32_to_fp16(d);
        b->m = fp32_to_fp16(vmin);
    }
}

__global__ void quantize_q8_0_kernel(const float* __restrict__ x, block_q8_0* __restrict__ y, int64_t total) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i - (threadIdx.x % 32) >= total) return;
    const int lane = threadIdx.x % 32;
    const float v = x[i];
    const float amax = warp_max(fabsf(v));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = inverse_scale(d);
    block_q8_0* b = y + i / 32;
    b->qs[lane] = (int8_t)roundf(__fmul_rn(v, id));
    if (lane == 0) b->d = fp32_to_fp16(d);
}

__global__ void quantize_q8_1_kernel(const float* __restrict__ x, block_q8_1* __restrict__ y, int64_t total,
                                     int sum_mode) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i - (threadIdx.x % 32) >= total) return;
    const int lane = threadIdx.x % 32;
    const float v = x[i];
    const float amax = warp_max(fabsf(v));
    const float d = __fdiv_rn(amax, 127.0f);
    block_q8_1* b = y + i / 32;
    int8_t q;
    float s;
    if (sum_mode == Q8_1_S_D_SUM_Q) {  // quantize_row_q8_1_ref: q = round(x * (1/d)), s = d * sum(q)
        const float id = inverse_scale(d);
        q = (int8_t)roundf(__fmul_rn(v, id));
        s = __fmul_rn((float)warp_sum((int)q), d);
    } else {  // ggml-cuda quantize_q8_1: q = round(x / d), s = sum(x)
        q = amax == 0.0f ? 0 : (int8_t)roundf(__fdiv_rn(v, d));
        s = warp_sum(v);
    }
    b->qs[lane] = q;
    if (lane == 0) {
        b->d = fp32_to_fp16(d);
        b->s = fp32_to_fp16(s);
    }
}

__global__ void dequantize_kernel(const uint8_t* __restrict__ x, int fmt, float* __restrict__ y, int64_t total) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int64_t ib = i / 32;
    const int j = (int)(i % 32);
    float v;
    if (fmt == QG_Q4_0) {
        const block_q4_0* b = (const block_q4_0*)x + ib;
        const int q = j < 16 ? (b->qs[j] & 0x0F) : (b->qs[j - 16] >> 4);
        v = (float)(q - 8) * fp16_to_fp32(b->d);
    } else if (fmt == QG_Q4_1) {
        const block_q4_1* b = (const block_q4_1*)x + ib;
        const int q = j < 16 ? (b->qs[j] & 0x0F) : (b->qs[j - 16] >> 4);
        v = __fadd_rn(__fmul_rn((float)q, fp16_to_fp32(b->d)), fp16_to_fp32(b->m));  // no FMA, as the C code
    } else if (fmt == QG_Q8_0) {
        const block_q8_0* b = (const block_q8_0*)x + ib;
        v = (float)b->qs[j] * fp16_to_fp32(b->d);
    } else {
        const block_q8_1* b = (const block_q8_1*)x + ib;
        v = (float)b->qs[j] * fp16_to_fp32(b->d);
    }
    y[i] = v;
}

constexpr int THREADS = 256;
inline unsigned blocks_for(int64_t total) { return (unsigned)((total + THREADS - 1) / THREADS); }
}  // namespace

void cuda_quantize_q4_0(const float* x, block_q4_0* y, int64_t rows, int64_t K, int /*mode*/, cudaStream_t stream) {
    const int64_t total = rows * K;
    quantize_q4_0_kernel<<<blocks_for(total), THREADS, 0, stream>>>(x, y, total);
}
void cuda_quantize_q4_1(const float* x, block_q4_1* y, int64_t rows, int64_t K, int /*mode*/, cudaStream_t stream) {
    const int64_t total = rows * K;
    quantize_q4_1_kernel<<<blocks_for(total), THREADS, 0, stream>>>(x, y, total);
}
void cuda_quantize_q8_0(const float* x, block_q8_0* y, int64_t rows, int64_t K, int /*mode*/, cudaStream_t stream) {
    const int64_t total = rows * K;
    quantize_q8_0_kernel<<<blocks_for(total), THREADS, 0, stream>>>(x, y, total);
}
void cuda_quantize_q8_1(const float* x, block_q8_1* y, int64_t rows, int64_t K, int sum_mode, cudaStream_t stream) {
    const int64_t total = rows * K;
    quantize_q8_1_kernel<<<blocks_for(total), THREADS, 0, stream>>>(x, y, total, sum_mode);
}
void cuda_dequantize(const void* x, int fmt, float* y, int64_t rows, int64_t K, cudaStream_t stream) {
    const int64_t total = rows * K;
    dequantize_kernel<<<blocks_for(total), THREADS, 0, stream>>>((const uint8_t*)x, fmt, y, total);
}
