// cuda/01_fp32/1_naive.cu (chapter 1): one thread per output C[n, m].
// Threads of a warp take neighbouring m, so they read 32 different rows of W at the same k:
// the loads of W are not coalesced, the loads of A are a broadcast. The baseline to beat.
#include "../launchers.h"

__global__ void f32_naive_kernel(const float* __restrict__ A, const float* __restrict__ W, float* __restrict__ C, int N,
                                 int M, int K) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    for (int n = blockIdx.y; n < N; n += gridDim.y) {  // gridDim.y is capped at 65535
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc += A[(int64_t)n * K + k] * W[(int64_t)m * K + k];
        C[(int64_t)n * M + m] = acc;
    }
}

void cuda_f32_f32_naive(const GemmProblem& p, cudaStream_t stream) {
    const dim3 block(128);
    const dim3 grid((p.M + block.x - 1) / block.x, p.N < 65535 ? p.N : 65535);
    f32_naive_kernel<<<grid, block, 0, stream>>>((const float*)p.A, (const float*)p.W, p.C, p.N, p.M, p.K);
}
