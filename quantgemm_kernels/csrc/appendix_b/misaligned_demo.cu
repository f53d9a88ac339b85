// appendix_b/misaligned_demo.cu: what a 32-bit load of Q4_0 quants does, and what it costs
// to avoid it.
//
// Every kernel here computes the same thing, one thread per Q4_0 block: the sum of the block's 32
// dequantized values, d * (sum of the 32 nibbles - 8 * 32). The work per block is tiny (eight
// __dp4a with 0x01010101 add up the nibbles), so the time is the time to read 18 bytes per block:
// the kernels differ only in HOW the 16 quant bytes reach the registers.
//
//   mode 0  naive       *(const int*)(qs + 4 i)   qs sits at byte 2 of an 18-byte block, so block
//                                                 0's quants start at address base + 2: a 32-bit
//                                                 load there breaks the natural-alignment rule of
//                                                 global loads and the kernel dies with
//                                                 cudaErrorMisalignedAddress ("misaligned address").
//   mode 1  two halves  load_int_b2 (formats.h)    two 16-bit loads + shift/or: legal at any even
//                                                 address. llama.cpp's get_int_b2. THE FIX.
//   mode 2  bytes       four 8-bit loads per word  legal anywhere (llama.cpp's get_int_b1).
//   mode 3  repacked    one 32-bit load per word   the quants copied into their own array, 16 bytes
//                                                 per block, and the scales into another: the same
//                                                 18 bytes per block, now 4-byte aligned.
//   mode 4  repacked    one 128-bit load per block the same array read as int4 (16-byte aligned).
//
// Appendix B times modes 1-4 against each other (same bytes, different load instructions) and
// runs mode 0 in a child process: the error is sticky, it poisons the CUDA context for the rest
// of the process, so the notebook must never launch it itself.
#include <cuda_fp16.h>

#include "../formats.h"
#include "misaligned_demo.h"

namespace {

// Sum of the eight nibbles of each of the four bytes of w, accumulated into acc.
__device__ __forceinline__ int add_nibbles(int w, int acc) {
    acc = __dp4a(w & 0x0F0F0F0F, 0x01010101, acc);          // low nibbles
    return __dp4a((w >> 4) & 0x0F0F0F0F, 0x01010101, acc);  // high nibbles
}

__device__ __forceinline__ float block_sum(fp16_bits d, int nibble_sum) {
    return __half2float(__ushort_as_half(d)) * (float)(nibble_sum - 8 * QK);
}

template <int MODE>
__global__ void block_sums_kernel(const block_q4_0* __restrict__ x, float* __restrict__ y, int64_t nb) {
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x) {
        const uint8_t* qs = x[b].qs;
        int s = 0;
#pragma unroll
        for (int i = 0; i < QK / 8; i++) {  // 4 words of 4 bytes
            int w;
            if (MODE == QG_MIS_NAIVE_B4) {
                w = ((const int*)qs)[i];  // THE BUG: qs is only 2-byte aligned
            } else if (MODE == QG_MIS_B2) {
                w = load_int_b2(qs, i);
            } else {  // QG_MIS_B1
                w = (int)((uint32_t)qs[4 * i] | ((uint32_t)qs[4 * i + 1] << 8) | ((uint32_t)qs[4 * i + 2] << 16) |
                          ((uint32_t)qs[4 * i + 3] << 24));
            }
            s = add_nibbles(w, s);
        }
        y[b] = block_sum(x[b].d, s);
    }
}

template <int MODE>
__global__ void block_sums_repacked_kernel(const uint16_t* __restrict__ d, const uint8_t* __restrict__ qs,
                                           float* __restrict__ y, int64_t nb) {
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x) {
        int s = 0;
        if (MODE == QG_MIS_REPACKED_B16) {
            const int4 v = ((const int4*)qs)[b];  // block b's 16 quant bytes at 16 b: aligned
            s = add_nibbles(v.w, add_nibbles(v.z, add_nibbles(v.y, add_nibbles(v.x, s))));
        } else {
#pragma unroll
            for (int i = 0; i < QK / 8; i++) s = add_nibbles(load_int_b4(qs + 16 * b, i), s);
        }
        y[b] = block_sum(d[b], s);
    }
}

dim3 grid_for(int64_t nb, int threads) {
    const int64_t blocks = (nb + threads - 1) / threads;
    return dim3((unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)));  // grid-stride beyond 2^28 blocks
}

}  // namespace

void cuda_misaligned_block_sums(const void* blocks, const uint16_t* scales, const uint8_t* quants, float* y, int64_t nb,
                                int mode, cudaStream_t stream) {
    if (nb == 0) return;
    constexpr int threads = 256;
    const dim3 grid = grid_for(nb, threads);
    const block_q4_0* x = (const block_q4_0*)blocks;
    switch (mode) {
        case QG_MIS_NAIVE_B4: block_sums_kernel<QG_MIS_NAIVE_B4><<<grid, threads, 0, stream>>>(x, y, nb); break;
        case QG_MIS_B2: block_sums_kernel<QG_MIS_B2><<<grid, threads, 0, stream>>>(x, y, nb); break;
        case QG_MIS_B1: block_sums_kernel<QG_MIS_B1><<<grid, threads, 0, stream>>>(x, y, nb); break;
        case QG_MIS_REPACKED_B4:
            block_sums_repacked_kernel<QG_MIS_REPACKED_B4><<<grid, threads, 0, stream>>>(scales, quants, y, nb);
            break;
        default:
            block_sums_repacked_kernel<QG_MIS_REPACKED_B16><<<grid, threads, 0, stream>>>(scales, quants, y, nb);
            break;
    }
}
