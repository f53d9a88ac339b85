// Chapter 3 exercise, CUDA: the same block dot product as ch3_nibbles.cpp, called by every lane of
// a warp that computes one output (lanes take the row's blocks in turn, then a warp reduction).
#include "cuda_run.cuh"
#include "formats.h"

// [show]
// One Q4_0 block times 32 float activations x[0..31]: return the sum over j of value_j * x[j],
// where value_j = (nibble_j - 8) * d. Byte b->qs[j] (j < 16) holds element j in its low nibble and
// element j + 16 in its high nibble; fp16_to_fp32(b->d) is the scale d as a float.
// (The same function as on the CPU: here every lane of a warp calls it on its own blocks.)
QG_HD float dot_q4_0_block(const block_q4_0* b, const float* x) {
    // @BODY@
}
// [/show]

// One warp per output C[n][m]; blockDim = (32, 4): four outputs per thread block.
__global__ void w4a16_warp(const float* A, const block_q4_0* W, float* C, int M, int N, int K) {
    const int lane = threadIdx.x, m = blockIdx.x * 4 + threadIdx.y, n = blockIdx.y, nb = K / QK;
    if (m >= M) return;
    float acc = 0.0f;
    for (int b = lane; b < nb; b += 32) acc += dot_q4_0_block(&W[(int64_t)m * nb + b], &A[(int64_t)n * K + b * QK]);
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) C[(int64_t)n * M + m] = acc;
}

extern "C" int qgex_run(const void* const* in, void* const* out, const int64_t* dims, char* err, int err_len) {
    const int M = (int)dims[0], N = (int)dims[1], K = (int)dims[2];
    DevBuf A, W, C;
    QGEX_UPLOAD(A, in[0], sizeof(float) * N * K);
    QGEX_UPLOAD(W, in[1], sizeof(block_q4_0) * M * (K / QK));
    QGEX_UPLOAD(C, out[0], sizeof(float) * N * M);
    w4a16_warp<<<dim3((M + 3) / 4, N), dim3(32, 4)>>>((const float*)A.p, (const block_q4_0*)W.p, (float*)C.p, M, N, K);
    QGEX_FINISH_LAUNCH("w4a16_warp");
    QGEX_CHECK(cudaMemcpy(out[0], C.p, sizeof(float) * N * M, cudaMemcpyDeviceToHost));
    return 0;
}
