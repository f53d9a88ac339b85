// cuda/04_w4a8/q8_0_2_tiled.cu (chapter 4, W8A8): shared-memory tiles of blocks, with Q8_0 weights.
//
// The kernel is gpu::gemm_q8_1_tiled in 04_w4a8/2_tiled.cu, instantiated there for w_q8_0.
// The weight tile row holds 32 signed quant bytes (36-byte pitch: 9 words, odd, no bank conflicts)
// instead of 16 bytes of nibbles; no compensation.
#include "../w_q8_1.cuh"

void cuda_q8_0_q8_1_tiled(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_tiled<gpu::w_q8_0>(p, stream);
}
