// cuda/04_w4a8/q8_0_4_tiled_dp4a.cu (chapter 4, W8A8): shared-memory tiles of blocks + __dp4a, with Q8_0 weights.
//
// The kernel is gpu::gemm_q8_1_tiled_dp4a in 04_w4a8/4_tiled_dp4a.cu, instantiated there for w_q8_0.
// The weight tile row is 8 words (9 with the bank padding) used as they are; no compensation.
#include "../w_q8_1.cuh"

void cuda_q8_0_q8_1_tiled_dp4a(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_tiled_dp4a<gpu::w_q8_0>(p, stream);
}
