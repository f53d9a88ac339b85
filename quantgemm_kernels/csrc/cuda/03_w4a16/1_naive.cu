// cuda/03_w4a16/1_naive.cu (chapter 3, W4A16): one thread per output, weights dequantized on the fly.
//
// What it teaches: 01_fp32/1_naive.cu with W stored as Q4_0 blocks. Inside the dot product every weight
// is rebuilt as (q - 8) * d from its nibble and its block's fp16 scale, then multiplied with a
// float activation. Nothing else changes: same grid, same loops, same float accumulation.
// Why it can be faster: W takes 18 bytes per 32 weights instead of 128, 7.1x less memory to read.
// What it still lacks: everything 01_fp32/1_naive.cu lacks. The 32 threads of a warp take 32 neighbouring
// m, so at each step they read 32 different rows of W (uncoalesced: a 32-byte sector fetched to
// use 1 byte), A is a broadcast, and nothing is reused: every weight is dequantized once per
// token, N times in all, and re-read from cache each time.
//
// Grid: x = ceil(M / 128) blocks of 128 threads (one per m), y = min(N, 65535), looping over n.
#include "../common.cuh"

__global__ void q4_0_f32_naive_kernel(const float* __restrict__ A, const block_q4_0* __restrict__ W,
                                      float* __restrict__ C, int N, int M, int K) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    const int nb = K / QK;                             // blocks per row
    for (int n = blockIdx.y; n < N; n += gridDim.y) {  // gridDim.y is capped at 65535
        const float* a = A + (int64_t)n * K;           // row n of A: K floats
        const block_q4_0* w = W + (int64_t)m * nb;     // row m of W: nb blocks
        float acc = 0.0f;
        for (int kb = 0; kb < nb; kb++) {
            const float d = scale_to_float(w[kb].d);
            const float* ak = a + kb * QK;  // the 32 activations block kb multiplies
            for (int j = 0; j < QK / 2; j++) {
                const int q = w[kb].qs[j];  // byte j: element j in the low nibble, element j + 16 in the high
                acc += (float)((q & 0x0F) - 8) * d * ak[j];
                acc += (float)((q >> 4) - 8) * d * ak[j + QK / 2];
            }
        }
        C[(int64_t)n * M + m] = acc;
    }
}

void cuda_q4_0_f32_naive(const GemmProblem& p, cudaStream_t stream) {
    const dim3 block(128);
    const dim3 grid((p.M + block.x - 1) / block.x, p.N < 65535 ? p.N : 65535);
    q4_0_f32_naive_kernel<<<grid, block, 0, stream>>>((const float*)p.A, (const block_q4_0*)p.W, p.C, p.N, p.M, p.K);
}
