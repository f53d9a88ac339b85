// cuda/04_w4a8/q8_0_1_naive.cu (chapter 4, W8A8): one thread per output, an integer dot per block, Q8_0 weights.
//
// The kernel is gpu::gemm_q8_1_naive in 04_w4a8/1_naive.cu, instantiated there for w_q8_0.
// A block pair is 32 signed products with no compensation: d_w * d_a * sumi (w_q8_1.cuh, w_q8_0).
// Each weight block is 34 bytes instead of 18: W8A8 reads almost twice the weight memory of W4A8.
#include "../w_q8_1.cuh"

void cuda_q8_0_q8_1_naive(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_naive<gpu::w_q8_0>(p, stream);
}
