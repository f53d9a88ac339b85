// Chapter 6 exercise, CUDA: a decode GEMV with one warp per output row, as the chapter's decode
// kernel (decode.cuh) works through a row, without its shared-memory staging and with float
// activations instead of Q8_1: lanes split the row's blocks, a butterfly reduction adds the lanes'
// sums and lane 0 writes the output (decode.cuh's finish_row).
#include "cuda_run.cuh"
#include "formats.h"

// Given: one Q4_0 block times 32 float activations (chapter 3's exercise).
__device__ __forceinline__ float dot_q4_0_block(const block_q4_0* b, const float* x) {
    float sum = 0.0f;
    for (int j = 0; j < QK / 2; j++) sum += ((b->qs[j] & 0x0F) - 8) * x[j] + ((b->qs[j] >> 4) - 8) * x[j + QK / 2];
    return sum * fp16_to_fp32(b->d);
}

// [show]
// One warp computes y[m], the dot product of weight row m (nb Q4_0 blocks, W[m * nb + b]) with
// the activations x (32 floats per block: block b meets x[32 b .. 32 b + 31]). Lane `lane` (0..31)
// adds dot_q4_0_block over the blocks b = lane, lane + 32, lane + 64, ...; then the warp adds
// its 32 partial sums with __shfl_xor_sync(0xffffffff, value, offset), and lane 0 writes y[m].
__device__ void warp_row_dot(const block_q4_0* W, const float* x, float* y, int m, int nb, int lane) {
    // @BODY@
}
// [/show]

// Warp threadIdx.y of thread block blockIdx.x takes row m; blockIdx.y is the token n.
__global__ void decode_warp(const float* A, const block_q4_0* W, float* C, int M, int K) {
    const int m = blockIdx.x * 4 + threadIdx.y, n = blockIdx.y;
    if (m >= M) return;
    warp_row_dot(W, A + (int64_t)n * K, C + (int64_t)n * M, m, K / QK, threadIdx.x);
}

extern "C" int qgex_run(const void* const* in, void* const* out, const int64_t* dims, char* err, int err_len) {
    const int M = (int)dims[0], N = (int)dims[1], K = (int)dims[2];
    DevBuf A, W, C;
    QGEX_UPLOAD(A, in[0], sizeof(float) * N * K);
    QGEX_UPLOAD(W, in[1], sizeof(block_q4_0) * M * (K / QK));
    QGEX_UPLOAD(C, out[0], sizeof(float) * N * M);
    decode_warp<<<dim3((M + 3) / 4, N), dim3(32, 4)>>>((const float*)A.p, (const block_q4_0*)W.p, (float*)C.p, M, K);
    QGEX_FINISH_LAUNCH("decode_warp");
    QGEX_CHECK(cudaMemcpy(out[0], C.p, sizeof(float) * N * M, cudaMemcpyDeviceToHost));
    return 0;
}
