// cuda/06_decode_tensor_cores/q8_0_7_wgmma_ws.cu (chapter 6, W8A8): the wgmma step with specialized warpgroups, Q8_0 weights.
//
// The kernel is gpu::gemm_q8_1_wgmma_ws in 06_decode_tensor_cores/7_wgmma_ws.cu, instantiated there for w_q8_0: its
// producer copies the int8 quants into the core-matrix layout instead of unpacking nibbles.
#include "../w_q8_1.cuh"

void cuda_q8_0_q8_1_wgmma_ws(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_wgmma_ws<gpu::w_q8_0>(p, stream); }
