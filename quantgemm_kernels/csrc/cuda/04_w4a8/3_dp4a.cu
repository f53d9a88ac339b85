// cuda/04_w4a8/3_dp4a.cu (chapter 4, W4A8): the naive kernel with __dp4a, four products per instruction.
//
// What it teaches: __dp4a(a, b, c) treats two 32-bit ints as four int8 each and returns
// c + a0*b0 + a1*b1 + a2*b2 + a3*b3 (sm_61 and later). A Q8_1 block is 8 such words as stored. A
// Q4_0 block is 4 words of nibbles: word i holds elements 4i..4i+3 (low nibbles) and 4i+16..4i+19
// (high nibbles), so masking it once and shifting it once gives two words of four bytes in 0..15
// that pair with Q8_1 words i and i + 4 (w_q8_1.cuh: words), as llama.cpp's
// vec_dot_q4_0_q8_1_impl does. A block pair is 8 __dp4a instead of 32 multiply-adds.
// The words are loaded with the alignment each block allows: Q8_1 quants (byte 4 of 36) as one
// 32-bit load, Q4_0 quants (byte 2 of 18) as two 16-bit loads (load_int_b2): a plain 32-bit load
// there faults with "misaligned address". Everything else is 04_w4a8/1_naive.cu: diff the files.
// Why it is faster: 8 __dp4a per block pair instead of 32 integer multiply-adds (4x fewer), and
// fewer load instructions. Per block pair and thread, the quants take (the scales, 16-bit each,
// are read as before; tests/test_dp4a_loads.py derives the counts from the block layouts and
// counts them in the compiled PTX):
//   quants   bytes  naive (bytes)   here                         loads
//   Q8_1     32     32 x 8-bit      8 x 32-bit (byte 4 of 36)    32 -> 8   (4x fewer)
//   Q4_0     16     16 x 8-bit      8 x 16-bit (byte 2 of 18)    16 -> 8   (2x fewer)
//   Q8_0     32     32 x 8-bit      16 x 16-bit (byte 2 of 34)   32 -> 16  (2x fewer)
// What it still lacks: the naive memory pattern (32 rows of W per warp, no reuse); tiles fix it in
// 04_w4a8/4_tiled_dp4a.cu.
//
// W8A8 (cuda_q8_0_q8_1_dp4a, below): the same template with WF = w_q8_0. The 8 weight words are
// used as loaded (two 16-bit loads each: Q8_0 quants sit at byte 2 of a 34-byte block), no nibble
// masks; no compensation.
// Grid: x = ceil(M / 128) blocks of 128 threads (one per m), y = min(N, 65535), looping over n.
#include "../w_q8_1.cuh"

namespace gpu {

template <class WF>
__global__ void q8_1_dp4a_kernel(const block_q8_1* __restrict__ A, const typename WF::block* __restrict__ W,
                                 float* __restrict__ C, int N, int M, int K) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    const int nb = K / QK;                                  // blocks per row, of A and of W
    for (int n = blockIdx.y; n < N; n += gridDim.y) {       // gridDim.y is capped at 65535
        const block_q8_1* a = A + (int64_t)n * nb;          // row n of A
        const typename WF::block* w = W + (int64_t)m * nb;  // row m of W
        float acc = 0.0f;
        for (int kb = 0; kb < nb; kb++) {
            int v[WF::qs_words];  // the weight quants as words: two 16-bit loads each (2-byte aligned)
#pragma unroll
            for (int k = 0; k < WF::qs_words; k++) v[k] = load_int_b2(w[kb].qs, k);
            int sumi = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int lo, hi;
                WF::words(v, i, lo, hi);                                // weight elements 4i..4i+3 and 4i+16..4i+19
                sumi = __dp4a(lo, load_int_b4(a[kb].qs, i), sumi);      // x activation elements 4i..4i+3
                sumi = __dp4a(hi, load_int_b4(a[kb].qs, i + 4), sumi);  // x activation elements 4i+16..4i+19
            }
            acc += block_result<WF>(scale_to_float(w[kb].d), scale_to_float(a[kb].d), scale_to_float(a[kb].s), sumi);
        }
        C[(int64_t)n * M + m] = acc;
    }
}

template <class WF>
void gemm_q8_1_dp4a(const GemmProblem& p, cudaStream_t stream) {
    const dim3 block(128);
    const dim3 grid((p.M + block.x - 1) / block.x, p.N < 65535 ? p.N : 65535);
    q8_1_dp4a_kernel<WF>
        <<<grid, block, 0, stream>>>((const block_q8_1*)p.A, (const typename WF::block*)p.W, p.C, p.N, p.M, p.K);
}

template void gemm_q8_1_dp4a<w_q4_0>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_dp4a<w_q8_0>(const GemmProblem&, cudaStream_t);

}  // namespace gpu

void cuda_q4_0_q8_1_dp4a(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_dp4a<gpu::w_q4_0>(p, stream); }

void cuda_q8_0_q8_1_dp4a(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_dp4a<gpu::w_q8_0>(p, stream); }
