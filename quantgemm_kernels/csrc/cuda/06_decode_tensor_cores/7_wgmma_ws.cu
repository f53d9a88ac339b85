// cuda/06_decode_tensor_cores/7_wgmma_ws.cu (chapter 6): the wgmma step with specialized
// warpgroups, fourth step.
//
// What it teaches: warp specialization, as in CUTLASS's and FlashAttention-3's Hopper kernels. The
// jobs go to different warps:
//  * a producer warpgroup (warps 8-11): one thread starts the copies on the TMA engine (the raw
//    weights of step s + 1 while step s is unpacked; the activations straight into a stage once the
//    consumers have freed it), and each thread unpacks one weight row of the step into the stage,
//    fences (fence.proxy.async: the tensor cores read what st.shared wrote) and arrives on the
//    stage's `full` barrier;
//  * two consumer warpgroups (64 tokens each) wait for `full` and for the activations, issue wgmma
//    and scale; each of their threads arrives on the stage's `empty` barrier after its last read
//    of it, and the producer waits for `empty` before it refills the stage.
// The launch uses programmatic dependent launch: the CTAs start while the activation quantizer
// finishes, and the producer waits for its writes before the first activation copy.
// Why it is faster: the third step (6_wgmma.cu) runs every K step of 8 blocks in lockstep: all 256
// threads wait for the copies, unpack Q4_0 into the other stage, fence, and meet at
// __syncthreads; the wgmma pipeline drains there (the last block of a step is scaled with no wgmma
// running) and fills again (the first block's wgmma runs with no scaling beside it). Here the
// producer's unpacking and copies overlap the consumers' wgmmas and scaling from other warps, and
// the two consumer warpgroups no longer meet at a block-wide barrier.
// What it still lacks: the consumers' scale loads (LDS.128 right after each wgmma wait) keep the
// shared-memory pipe busy: they are what to shrink next.
//
// Registers: the consumers hold 64 accumulators and two sets of 64 wgmma results; the producer
// needs few. The CTA gets 168 per thread at launch (384 threads); setmaxnreg moves them: the
// producer gives back to 40, the consumers take 232 (40 x 128 + 232 x 256 = 168 x 384). In 232
// the two sets fit only when a block is scaled in two halves of its rows (ptxas spills in the
// loop otherwise).
// Shared memory: two stages of 8 blocks (activations, weights as int8, scales) plus two raw weight
// steps as stored: 193 KB for Q4_0, 225 KB for Q8_0: no room for a third stage.
// The arithmetic, and so every output bit, is the third step's (a test checks it against the mma step).
//
// Tuning log (H200, quick benchmark runs, Q4_0, N = 512, K = 14336, ms; the third step took
// 0.225-0.226 in the same runs, which came before the quantizer's rewrite in wgmma.cuh):
//    the third step (lockstep, copies on the TMA engine)                          0.225
//    a producer warpgroup, one accumulator set                                    0.217-0.220
//    two sets, a block scaled in two halves of its rows                           0.218
//    the same, every consumer thread arriving on empty (racecheck-clean: kept)    0.224
//    two sets without the halves: ptxas spills in the loop (232 registers)        0.254
//    a block as two m64n64 halves, pipelined in the registers of one set          0.232-0.235
//    the scales loaded before the wait for the wgmma                              0.222
//  * The pipeline cannot run across K steps: with a wgmma in flight over the loop's back edge while
//    other instructions read another one's results, ptxas makes every wgmma synchronous (warning
//    C7514, a WARPGROUP.DEPBAR after each), so the consumers still drain once per step of 8 blocks.
//  * Waits for the tensor cores: 26% of the stall samples in the third step (H100), 4.5% here
//    (H200). What remains is the scaling: its shared-memory loads right after the wait 25%, issue
//    20%, dispatch 13%, with 54% of the issue slots busy.
//  * After the quantizer's rewrite: 0.224 -> 0.1867; launched with PDL 0.1861 (K = 4096: 0.0571 ->
//    0.0564). Nsight Compute then: the L1/shared-memory pipe 83% busy, issue slots 51%, a shared
//    load 4.8 wavefronts on average: the scales' 16-byte loads (36 floats per thread and block).
//  * Lost: one arrival on empty per consumer warpgroup, after a named barrier of its 128 threads,
//    instead of 256 arrivals: 2% slower (0.1899 against 0.1867), and racecheck still reported
//    hazards.
//
// W8A8 (cuda_q8_0_q8_1_wgmma_ws, below): the same kernel with WF = w_q8_0: its producer copies the
// int8 quants into the core-matrix layout instead of unpacking nibbles.
// Grid: 6_wgmma.cu's, 384 threads (2 consumer warpgroups, 1 producer). The kernel itself is in
// wgmma_ws.cuh, which the fifth step (8_wgmma_splitk.cu) shares.
#include "wgmma_ws.cuh"

namespace gpu {
template <class WF>
void gemm_q8_1_wgmma_ws(const GemmProblem& p, cudaStream_t stream) {
    wg::launch_wgmma_ws<WF, false>(p, stream, 1, p.C);  // one CTA per tile takes the whole K
}

template void gemm_q8_1_wgmma_ws<w_q4_0>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_wgmma_ws<w_q8_0>(const GemmProblem&, cudaStream_t);
}  // namespace gpu

void cuda_q4_0_q8_1_wgmma_ws(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_wgmma_ws<gpu::w_q4_0>(p, stream);
}

void cuda_q8_0_q8_1_wgmma_ws(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_wgmma_ws<gpu::w_q8_0>(p, stream);
}
