// cuda/04_w4a8/q8_0_3_dp4a.cu (chapter 4, W8A8): the naive kernel with __dp4a, with Q8_0 weights.
//
// The kernel is gpu::gemm_q8_1_dp4a in 04_w4a8/3_dp4a.cu, instantiated there for w_q8_0.
// The 8 weight words are used as loaded (two 16-bit loads each: Q8_0 quants sit at byte 2 of a
// 34-byte block), no nibble masks; no compensation.
#include "../w_q8_1.cuh"

void cuda_q8_0_q8_1_dp4a(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_dp4a<gpu::w_q8_0>(p, stream);
}
