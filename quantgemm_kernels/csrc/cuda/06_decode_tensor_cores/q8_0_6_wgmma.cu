// cuda/06_decode_tensor_cores/q8_0_6_wgmma.cu (chapter 6, W8A8): Hopper's warpgroup mma (wgmma, sm_90a) with Q8_0 weights.
//
// The kernel is gpu::gemm_q8_1_wgmma in 06_decode_tensor_cores/6_wgmma.cu, instantiated there for w_q8_0: the
// quants need no unpacking (|sumi| <= 32 * 128 * 127 still keeps 2^19 + sumi positive).
#include "../w_q8_1.cuh"

void cuda_q8_0_q8_1_wgmma(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_wgmma<gpu::w_q8_0>(p, stream); }
