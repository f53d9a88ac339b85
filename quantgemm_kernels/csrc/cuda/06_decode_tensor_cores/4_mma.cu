// cuda/06_decode_tensor_cores/4_mma.cu (chapter 6): int8 tensor cores for prefill (many tokens),
// second step: weights unpacked once per CTA, fragments by ldmatrix.
//
// What it teaches: the staging turns each Q4_0 block into its 32 int8 values 16 * (q - 8)
// (mma.cuh's signed nibbles) in a [row][k] tile of shared memory, once per CTA; Q8_0 blocks are
// copied as they are (dropping the scale's two bytes). Fragments then come by ldmatrix: one
// ldmatrix.x4 is an mma's A (rows g, g + 8, k halves 0 and 16). Per block and warp (64 x 32
// outputs, 16 mma): 4 + 2 ldmatrix, 2 LDS.128 + 4 LDS.64, 8 FMUL. The kernel, its cp.async staging
// by every thread and its scales: mma_tile.cuh; the weight layout (Unpacked): mma_unpacked.cuh.
// Why it is faster: the first step (3_mma_regstage.cu) cut nibbles at every fragment load, in each
// of the 4 warps that share a row, spent 14 instructions per mma in its inner loop, 8 of them the
// scaling FMAs, and staged the weights through the registers of half the threads. Here the
// unpacking leaves the inner loop and every thread shares the copies.
// What it still lacks: the instructions that feed the tensor cores from registers (ldmatrix, scale
// loads) and the two scaling FMAs per result and block still share the issue slots with the mma,
// which waits for them; the cp.async address registers tie the copies to the threads. Hopper's
// wgmma reads both operands from shared memory, asynchronously, and TMA copies need no thread
// (6_wgmma.cu).
//
// Tuning log (Q4_0, N = 512, K = 14336; "quick": one benchmark run, not a bench_results/ record):
//  * Shared memory serves 128 B per clock, in passes: a conflict-free 32-lane load of 4 B is 1
//    pass (even when 8 lanes share an address), of 8 B 2, of 16 B 4, an ldmatrix.x4 4. Per block
//    and warp this step makes 40, as many as the first: unpacked weights add 8, copying only d_a
//    and computing c = -12582912 d_a with one FMUL (exact) takes them back; loading the (d, c)
//    pairs would have cost 48.
//  * SASS (cuobjdump -sass): a K step of 8 blocks is about 1520 instructions per warp, 11.9 per mma
//    with the copies; the first step spent 14.1 per mma in its inner loop alone, plus its copy
//    loop and its weight stores.
//  * Nsight Compute, H100: 21.4 million shared-memory wavefronts against the first step's 26.0
//    million (its staging's bank conflicts are gone), 271 us against 298 us at the profiler's
//    locked clock; the benchmark, at the GPU's own clock, 0.244 ms against 0.269 ms.
//  * 5_mma_packed.cu (weights kept packed: 32 passes instead of 40, the 2 logic operations per word
//    back in the loop), H200: 0.271 ms against 0.246 for this step and 0.272 for the first:
//    instructions, not passes, are what this kernel runs short of.
//  * Lost (H100, quick): 16 warps of 32 x 32 outputs (4 per scheduler, 128 registers each) hide
//    latency better but reuse each fragment half as often, 40% more passes per mma: 0.270 ms.
//    Unpacking in the middle of a K step, behind the other warps' FMAs, with the copies at blocks
//    0, 1 and 2: 0.253 ms.
//
// W8A8 (cuda_q8_0_q8_1_mma, below): the same kernel with WF = w_q8_0: 8 blocks are 272 B = 17 x 16
// B, the quants need no unpacking and there is no compensation.
// Chapter 7, Q4_1 (cuda_q4_1_q8_1_mma): WF = w_q4_1, 8 blocks are 160 B = 10 x 16 B; the nibbles are
// unpacked as they are (0..15: no offset, and a plain int8 for the mma), and the min adds m_w s_a per
// block and result, one more FMA, with s the activation block's sum (MMQ's, in the sum_x mode).
// Chapter 8, Q4_K (cuda_q4_k_q8_1_mma): WF = w_q4_k, a K step is one super-block (144 B = 9 x 16 B;
// each half row copies the header chunk and its 4 nibble chunks), whose 8 blocks of 32 are Q4_1
// blocks with scale d sc_j and min -dmin m_j: unpacked at staging (mma.cuh), then Q4_1's K loop.
// Outside the sum_x mode the scales are exact in float32 and s = d_a sum(q_a) (the reference's and
// MMVQ's min term); in it, llama.cpp's MMQ exactly (load_tiles_q4_K, vec_dot_q8_1_q8_1_mma): d sc_j
// and dmin m_j rounded to fp16, s = MMQ's sum of x. Shared memory as Q4_1: 188.5 KB per CTA.
// Chapter 8, Q6_K (cuda_q6_k_q8_1_mma): WF = w_q6_k, a K step is one 210-byte super-block, which starts
// at an even offset of a 16-byte chunk: each half row copies the 10 chunks that cover its half of it
// (mma.cuh), and its 8 blocks of 32 are unpacked to int8 q - 32 and stored as Q8_0's quants. Each block
// has two scales d sc_t, one per 16 values, so the K loop runs two mmas of k = 16 per k32 fragment pair
// and scales each sum by its own (mma_tile.cuh). As for Q8_0 there is no sum_x mode: Q6_K has no min
// term, so s is never read, and MMQ's Q6_K path keeps the activations' d in float32 (its D4 layout),
// whose c = -12582912 d_a the magic-number conversion would round. Shared memory: 200.25 KB per CTA.
// Grid: mma_tile.cuh's.
#include "mma_unpacked.cuh"  // Unpacked, the weights' layout in the tile, and mma_tile.cuh


void cuda_q4_0_q8_1_mma(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma<gpu::w_q4_0, gpu::Unpacked>(p, stream);
}

void cuda_q8_0_q8_1_mma(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma<gpu::w_q8_0, gpu::Unpacked>(p, stream);
}

void cuda_q4_1_q8_1_mma(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma<gpu::w_q4_1, gpu::Unpacked>(p, stream);
}

// Chapter 8: the sum_x mode is MMQ's arithmetic throughout (its activation pairs, its fp16 scale
// products), a second instance of the kernel.
void cuda_q4_k_q8_1_mma(const GemmProblem& p, cudaStream_t stream) {
    if (p.q8_1_sum_mode == Q8_1_S_SUM_X)
        gpu::gemm_q8_1_mma<gpu::w_q4_k<true>, gpu::Unpacked>(p, stream);
    else
        gpu::gemm_q8_1_mma<gpu::w_q4_k<false>, gpu::Unpacked>(p, stream);
}

// Chapter 8: the reference's activation bytes only (no sum_x mode: see the top of this file).
void cuda_q6_k_q8_1_mma(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma<gpu::w_q6_k, gpu::Unpacked>(p, stream);
}
