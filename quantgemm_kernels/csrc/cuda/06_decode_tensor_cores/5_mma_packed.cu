// cuda/06_decode_tensor_cores/5_mma_packed.cu (chapter 6): the mma's second step with one choice reversed, kept to
// be measured against it. The Q4_0 weights stay packed in shared memory (16 bytes per block and
// row) and every fragment read unpacks them (two logic operations per word, as in the first step,
// 06_decode_tensor_cores/3_mma_regstage.cu): half the shared-memory passes for the weights, and the logic back in
// the inner loop, in each of the 4 warps that share a row. Everything else is the second step's.
//
// The kernel is gpu::gemm_q8_1_mma<w_q4_0, KEEP_PACKED = true> in 06_decode_tensor_cores/4_mma.cu.
#include "../w_q8_1.cuh"

void cuda_q4_0_q8_1_mma_packed(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma<gpu::w_q4_0, true>(p, stream);
}
