// cuda/06_decode_tensor_cores/10_mma_splitk.cu (chapter 6, used by chapters 7 and 8): the mma step
// (4_mma.cu) with the fifth wgmma step's split-K, for the GPUs and the formats that have no wgmma
// kernel: Ampere (sm_80 and later without wgmma) for Q4_0 and Q8_0, and Q4_1, Q4_K and Q6_K weights
// on any GPU from sm_80.
//
// What it teaches: the split-K of 8_wgmma_splitk.cu carries over unchanged to another kernel. The
// mma step gives each 128 x 128 tile of C to one CTA, which walks the whole of K: at M = 4096 and up
// to 128 tokens that is 32 CTAs on a GPU of 132 SMs, and the time of one CTA streaming 128 rows x K
// (Q4_1, K = 14336, H100: about 270 us whatever N up to 512; bench_results/nvidia-h100-80gb-hbm3/
// 2026-11-27/q4_1-crossover-000129.json). Here the K steps of a tile go to gridDim.z CTAs
// (gemm.h's wgmma_splits: as many as fill the SMs once, at most 8, each keeping at least 4 K
// steps), each writes its partial sums to a plane of the workspace, and splitk_sum adds the planes
// in a fixed order. One split (the tiles fill the GPU, or K is short) is the mma step's launch as it
// is, with the same bits.
// Why it is faster: with few tiles, up to 4x the CTAs at M = 4096, each with a quarter of the K
// steps; every weight byte is still read once, the activations once per tile and split.
// What it still lacks: the split is fixed per launch (llama.cpp's MMQ uses stream-K), the partials
// travel through global memory, and the mma step's own limits stay (4_mma.cu's header).
// The arithmetic: each split sums its blocks in the mma step's order; the planes are then added, so
// outputs differ from the mma step's by float32 rounding of the regrouped sum (a test bounds it).
// Shared memory and registers: the mma step's. Grid: x = ceil(M / 128), y = ceil(N / 128), z = splits;
// 256 threads; then splitk_sum over the N x M outputs.
#include "mma_unpacked.cuh"

void cuda_q4_0_q8_1_mma_splitk(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma<gpu::w_q4_0, gpu::Unpacked, true>(p, stream);
}

void cuda_q8_0_q8_1_mma_splitk(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma<gpu::w_q8_0, gpu::Unpacked, true>(p, stream);
}

void cuda_q4_1_q8_1_mma_splitk(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma<gpu::w_q4_1, gpu::Unpacked, true>(p, stream);
}

// As 4_mma.cu: the sum_x mode is MMQ's arithmetic, a second instance.
void cuda_q4_k_q8_1_mma_splitk(const GemmProblem& p, cudaStream_t stream) {
    if (p.q8_1_sum_mode == Q8_1_S_SUM_X)
        gpu::gemm_q8_1_mma<gpu::w_q4_k<true>, gpu::Unpacked, true>(p, stream);
    else
        gpu::gemm_q8_1_mma<gpu::w_q4_k<false>, gpu::Unpacked, true>(p, stream);
}

void cuda_q6_k_q8_1_mma_splitk(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma<gpu::w_q6_k, gpu::Unpacked, true>(p, stream);
}
