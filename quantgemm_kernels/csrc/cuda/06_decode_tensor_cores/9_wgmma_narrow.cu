// cuda/06_decode_tensor_cores/9_wgmma_narrow.cu (chapter 6): the split-K wgmma step with 64-token
// tiles when there are at most 64 tokens, sixth step.
//
// What it teaches: not computing padding. The wgmma steps give a CTA 128 tokens, two consumer
// warpgroups of 64 (a wgmma's M is 64), whatever N is. With 16 tokens, 7/8 of the tensor-core work,
// of the scaling FMAs (the floor of these kernels: two per result and block) and of the
// shared-memory reads behind them are spent on zeros: the fifth step takes the same time at N = 1
// and N = 128. Here, for N <= 64, the CTA has one consumer warpgroup and copies only the first 64
// tokens of each activation unit (16 bulk copies per K step, one per block for the quants and one
// for the scale pairs, instead of one of the whole unit); the producer warpgroup and the weights
// are unchanged. For N > 64 it is the fifth step as it is.
// Why it is faster: per K step and CTA the consumers issue half the wgmmas (and half the constant
// offset wgmmas), half the scaling FMAs and half the scale loads, and the tensor cores read half
// the activation and offset tiles from shared memory; the producer's unpacking of the 128 weight
// rows stays. The split-K rule is the fifth step's (gemm.h's wgmma_splits).
// What it still lacks: below 64 tokens the one warpgroup still computes 64 (the wgmma's M); a tile
// of weights as the wgmma's M and tokens as its N (N = 8 .. 256 in steps of 8) would fit the batch,
// at the price of the other operand layout. The producer unpacks each weight row once per CTA and
// split: at N <= 64 that work is now as large as the consumers'.
// Measured (H100, Q4_0, M = 4096, K = 14336, cold; bench_results/nvidia-h100-80gb-hbm3/2026-11-27/):
// N = 16 in 36.2 us against the fifth step's 52.4, N = 64 in 37.3 against 53.5 (narrow-001014.json);
// Nsight Compute at N = 16 (narrow-1p-ncu-n16.txt): 2 warps per scheduler, 4.4 cycles per issued
// instruction, L1 64 % and SM 38 % busy: the kernel waits on latency, no pipe is full.
// Lost: two producer warpgroups beside the consumer (384 threads, setmaxnreg 96 / 232, each
// producer thread unpacking half the parts of its row): 39.9 us at N = 16 (narrow-001534.json), and
// 46.1 against 41.7 us under the profiler (narrow-2p-ncu-n16.txt).
// Registers: 256 threads and no setmaxnreg: every thread may keep up to 255 (the consumers need
// the fifth step's 232).
// The arithmetic: each output is the fifth step's (the same blocks, splits and order), bit for bit
// (a test checks it).
// Grid: the fifth step's for N <= 64 (x = ceil(M / 128), y = 1, z = splits), 256 threads (one
// consumer warpgroup, one producer); then splitk_sum where there is more than one split.
#include "wgmma_ws.cuh"

namespace gpu {
template <class WF>
void gemm_q8_1_wgmma_narrow(const GemmProblem& p, cudaStream_t stream) {
    // [excerpt: narrow_launch]
    if (p.N <= 64)
        gemm_q8_1_wgmma_splitk<WF, 1>(p, stream);  // one consumer warpgroup: tokens 0..63 of the tile
    else
        gemm_q8_1_wgmma_splitk<WF, 2>(p, stream);  // the fifth step
    // [end excerpt: narrow_launch]
}
}  // namespace gpu

void cuda_q4_0_q8_1_wgmma_narrow(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_wgmma_narrow<gpu::w_q4_0>(p, stream);
}

void cuda_q8_0_q8_1_wgmma_narrow(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_wgmma_narrow<gpu::w_q8_0>(p, stream);
}
