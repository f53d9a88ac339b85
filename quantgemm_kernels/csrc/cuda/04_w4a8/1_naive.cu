// cuda/04_w4a8/1_naive.cu (chapter 4, W4A8): one thread per output, an integer dot per block.
//
// What it teaches: the activations are quantized too (Q8_1, by gemm() before the launch), so the
// 32 products of a block pair are integer work, sumi = sum_j q_w,j * q_a,j with the raw nibbles
// (0..15), exact in int32; the scales enter once per block, d_w * (d_a * sumi - 8 * s_a), the
// compensation (w_q8_1.cuh). Same grid and loops as 03_w4a16/1_naive.cu: diff the two files.
// Why it can be faster: A is read as 36 bytes per 32 values instead of 128, and the float work
// per block drops from 32 multiply-adds plus 32 dequantizations to a few operations; integer
// multiply-adds replace them.
// What it still lacks: the memory pattern of the naive kernels (a warp reads 32 different rows of
// W, byte by byte; nothing is reused across threads), and one integer multiply-add per product
// where the hardware can do four (__dp4a, 04_w4a8/3_dp4a.cu).
//
// W8A8 (cuda_q8_0_q8_1_naive, below): the same template with WF = w_q8_0. A block pair is 32 signed
// products with no compensation: d_w * d_a * sumi (w_q8_1.cuh, w_q8_0). Each weight block is 34
// bytes instead of 18: W8A8 reads almost twice the weight memory of W4A8.
// Grid: x = ceil(M / 128) blocks of 128 threads (one per m), y = min(N, 65535), looping over n.
#include "../w_q8_1.cuh"

namespace gpu {

template <class WF>
__global__ void q8_1_naive_kernel(const block_q8_1* __restrict__ A, const typename WF::block* __restrict__ W,
                                  float* __restrict__ C, int N, int M, int K) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    const int nb = K / QK;                                  // blocks per row, of A and of W
    for (int n = blockIdx.y; n < N; n += gridDim.y) {       // gridDim.y is capped at 65535
        const block_q8_1* a = A + (int64_t)n * nb;          // row n of A
        const typename WF::block* w = W + (int64_t)m * nb;  // row m of W
        float acc = 0.0f;
        // [excerpt: block_loop]
        for (int kb = 0; kb < nb; kb++) {
            int sumi = 0;
#pragma unroll
            for (int j = 0; j < QK / 2; j++) {
                int lo, hi;
                WF::pair(w[kb].qs, j, lo, hi);  // weight elements j and j + 16
                sumi += lo * a[kb].qs[j] + hi * a[kb].qs[j + QK / 2];
            }
            acc += block_result<WF>(scale_to_float(w[kb].d), scale_to_float(a[kb].d), scale_to_float(a[kb].s),
                                    // [end excerpt: block_loop]
                                    sumi);
        }
        C[(int64_t)n * M + m] = acc;
    }
}

template <class WF>
void gemm_q8_1_naive(const GemmProblem& p, cudaStream_t stream) {
    const dim3 block(128);
    const dim3 grid((p.M + block.x - 1) / block.x, p.N < 65535 ? p.N : 65535);
    q8_1_naive_kernel<WF>
        <<<grid, block, 0, stream>>>((const block_q8_1*)p.A, (const typename WF::block*)p.W, p.C, p.N, p.M, p.K);
}

template void gemm_q8_1_naive<w_q4_0>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_naive<w_q8_0>(const GemmProblem&, cudaStream_t);

}  // namespace gpu

void cuda_q4_0_q8_1_naive(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_naive<gpu::w_q4_0>(p, stream); }

void cuda_q8_0_q8_1_naive(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_naive<gpu::w_q8_0>(p, stream); }
