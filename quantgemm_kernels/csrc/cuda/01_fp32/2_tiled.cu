// cuda/01_fp32/2_tiled.cu (chapter 1): shared-memory tiles, the classic blocked GEMM.
// A 32x32 thread block computes a 32x32 tile of C. For each step of TILE along K it stages a
// TILE x TILE tile of A and of W in shared memory with coalesced loads (consecutive threads read
// consecutive k), then every thread reads TILE values of each from shared memory. Each value
// loaded from global memory is reused TILE times instead of once.
#include "../launchers.h"

namespace {
constexpr int TILE = 32;

__global__ void f32_tiled_kernel(const float* __restrict__ A, const float* __restrict__ W, float* __restrict__ C, int N,
                                 int M, int K) {
    __shared__ float As[TILE][TILE + 1];  // +1: rows land in different banks when read by column
    __shared__ float Ws[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int m0 = blockIdx.x * TILE;
    for (int n0 = blockIdx.y * TILE; n0 < N; n0 += gridDim.y * TILE) {  // gridDim.y is capped
        const int n = n0 + ty, m = m0 + tx;                             // the output this thread owns
        float acc = 0.0f;
        for (int k0 = 0; k0 < K; k0 += TILE) {  // K is a multiple of 32 = TILE: no K edge
            // thread (ty, tx) loads A[n0+ty, k0+tx] and W[m0+ty, k0+tx]: coalesced along k
            As[ty][tx] = (n0 + ty < N) ? A[(int64_t)(n0 + ty) * K + k0 + tx] : 0.0f;
            Ws[ty][tx] = (m0 + ty < M) ? W[(int64_t)(m0 + ty) * K + k0 + tx] : 0.0f;
            __syncthreads();
            for (int k = 0; k < TILE; k++) acc += As[ty][k] * Ws[tx][k];
            __syncthreads();  // before the next iteration overwrites the tiles
        }
        if (n < N && m < M) C[(int64_t)n * M + m] = acc;
    }
}
}  // namespace

void cuda_f32_f32_tiled(const GemmProblem& p, cudaStream_t stream) {
    const dim3 block(TILE, TILE);
    const int nblocks = (p.N + TILE - 1) / TILE;
    const dim3 grid((p.M + TILE - 1) / TILE, nblocks < 65535 ? nblocks : 65535);
    f32_tiled_kernel<<<grid, block, 0, stream>>>((const float*)p.A, (const float*)p.W, p.C, p.N, p.M, p.K);
}
