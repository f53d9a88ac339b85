// cuda/06_decode_tensor_cores/q8_0_4_mma.cu (chapter 6, W8A8): int8 tensor cores (mma.sync m16n8k32), 128 x 128 tiles, double-buffered, with Q8_0 weights.
//
// The kernel is gpu::gemm_q8_1_mma in 06_decode_tensor_cores/4_mma.cu, instantiated there for w_q8_0:
// 8 blocks are 272 B = 17 x 16 B, the quants need no unpacking and there is no compensation.
#include "../w_q8_1.cuh"

void cuda_q8_0_q8_1_mma(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_mma<gpu::w_q8_0, false>(p, stream); }
