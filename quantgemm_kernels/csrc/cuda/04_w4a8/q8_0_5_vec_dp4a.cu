// cuda/04_w4a8/q8_0_5_vec_dp4a.cu (chapter 4, W8A8): tiles + __dp4a + the widest legal loads, with Q8_0 weights.
//
// The kernel is gpu::gemm_q8_1_vec_dp4a in 04_w4a8/5_vec_dp4a.cu, instantiated there for w_q8_0.
// A weight block is two 16-byte vectors (Q4_0: one), the row pitch 9 vectors (odd), staged by all
// 32 lanes (Q4_0: 16); no compensation.
#include "../w_q8_1.cuh"

void cuda_q8_0_q8_1_vec_dp4a(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_vec_dp4a<gpu::w_q8_0>(p, stream);
}
