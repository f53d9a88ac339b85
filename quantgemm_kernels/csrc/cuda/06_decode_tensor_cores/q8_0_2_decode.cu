// cuda/06_decode_tensor_cores/q8_0_2_decode.cu (chapter 6, W8A8): the decode kernel (N <= 8 per pass), 16-byte weight loads, activations quantized once and copied by every CTA, with Q8_0 weights.
//
// The kernel is gpu::gemm_q8_1_decode in 06_decode_tensor_cores/2_decode.cu, instantiated there for w_q8_0:
// 8 blocks are 272 B = 17 x 16 B, the quants need no unpacking and there is no compensation.
#include "../w_q8_1.cuh"

void cuda_q8_0_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_decode<gpu::w_q8_0, false>(p, stream);
}
