// cuda/06_decode_tensor_cores/1_decode_fused.cu (chapter 6): the previous step of the decode ladder, kept to be
// measured against the current one. Every CTA quantizes all the tokens' activations itself, from
// float32 in L2, into its shared memory before it streams its rows (no workspace, one kernel).
// At N = 1 that costs little; every further token adds K floats to read and quantize per CTA, and
// that work is not overlapped with the weight stream. The current step
// (06_decode_tensor_cores/2_decode.cu, cuda_q4_0_q8_1_decode) quantizes once, in a kernel of its own, and lets
// the decode kernel start early (programmatic dependent launch) and copy the result.
//
// The kernel is gpu::gemm_q8_1_decode<w_q4_0, FUSED = true> in 06_decode_tensor_cores/2_decode.cu.
#include "../w_q8_1.cuh"

void cuda_q4_0_q8_1_decode_fused(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_decode<gpu::w_q4_0, true>(p, stream);
}
