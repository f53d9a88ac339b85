// cuda/06_decode_tensor_cores/6_wgmma.cu (chapter 6): Hopper's warpgroup mma (wgmma, sm_90a) for
// prefill, third step.
//
// What it teaches: wgmma changes how the tensor cores are fed.
//  * One instruction per warpgroup (4 warps, 128 threads) multiplies a 64 x 32 tile of A by a
//    32 x 128 tile of B, both read by the tensor cores straight from shared memory through two
//    64-bit descriptors: no ldmatrix, no fragment registers. Here A is 64 tokens (the activation
//    quants) and B is 128 weight rows, so a thread's 64 int32 results are 2 tokens x 32 rows: the
//    activation scale of a result is one of 2 registers, the weight scale one of 32 (8 LDS.128).
//  * It is asynchronous: the warpgroup issues block b + 1 and scales block b while it runs (two
//    sets of 64 accumulator registers), and the tensor cores stay busy through the scaling.
//  * The copies leave the threads: one thread starts each K step's copies on the TMA engine and an
//    mbarrier counts their bytes. The activations are quantized into the kernel's own layout
//    (wgmma_quantize_act_kernel): per tile of 128 tokens and K step, one 40 KB unit = this K step's
//    shared memory image (quants in core-matrix order, then (d_a 2^64, c) per block and token): one
//    bulk copy. The weights' K step (128 rows x 144 or 272 bytes, row stride nb * B) is one 2-D box
//    of a tensor map built at launch (cp.async.bulk.tensor: a bulk copy takes uniform operands, so
//    128 one-row copies would be issued one at a time). The threads still unpack Q4_0 to int8
//    16 (q - 8) once per CTA (mma.cuh), then fence.proxy.async makes their st.shared visible to the
//    tensor cores, and one barrier per step hands the stage over. Weights whose rows are not
//    16-byte aligned (K % 256 != 0) are read with 16-bit loads instead.
//
// The catch is the integer-to-float trick of mma.cuh. mma.sync reads its accumulator input from
// other registers than it writes, so the magic 0x4B400000 sits in one register for free. wgmma adds
// to its own output registers (or to zero), so the offset would have to be written back into 64
// registers per block: 64 more instructions per 128 FMAs. Instead the tensor cores add it: a first
// wgmma of two constant tiles (every byte -128) gives 32 * (-128)^2 = 2^19 in every result, without
// accumulating (scale-d = 0), and the block's wgmma adds sumi to it. 2^19 + sumi lies in
// [2^19 - 520192, 2^19 + 520192], positive and below 2^23, so its bits read as a float are the
// subnormal (2^19 + sumi) * 2^-149, exactly. The FMAs then run as before with scaled constants:
//   x   = fma(d_a 2^64, D, -d_a 2^64 2^-130)   = d_a sumi 2^-85, one rounding (was: d_a sumi)
//   acc = fma(d_w 2^85, x, acc)                 = the same product, the same rounding as step 2.
// d_a is an fp16 value (Q8_1's d) in [2^-24, 65504], so every term stays normal and the result is
// bit for bit that of cuda_q4_0_q8_1_mma (a test checks it). FP32 FMAs keep subnormals (no FTZ);
// fma_rn below says so in PTX, whatever flags the build adds.
//
// Why it is faster: the second step (4_mma.cu) spent most of its issue slots on the two scaling
// FMAs per result and block and on feeding the tensor cores from registers, and its cp.async
// address registers stalled later instructions; here the feeding is gone and the scaling overlaps
// the next block's wgmma.
// What it still lacks: every K step runs in lockstep: all 256 threads wait for the copies, unpack,
// fence and meet at __syncthreads, where the wgmma pipeline drains and fills again; specialized
// warpgroups remove that barrier (7_wgmma_ws.cu).
//
// Tuning log (H100 unless noted, Q4_0, N = 512, K = 14336; quick benchmark runs, not records):
//  * The second step spends 64% of its instructions on the two scaling FMAs per result and block,
//    a floor that no feeding of the tensor cores removes; this step removes the rest, and the waits.
//  * A first wgmma kernel with the second step's staging (per-thread cp.async) took 0.300 ms, slower
//    than the second step (0.243). Nsight Compute showed why: a cp.async reads its address registers
//    late, and the wgmma fence and the FMAs that reused those registers waited for it.
//  * The copies left the threads one change at a time: bulk copies, one per weight row, 0.252 ms (a
//    bulk copy takes uniform operands, so the 128 rows went out one at a time); one tensor-map box,
//    0.220; two accumulator sets, 0.2185.
//  * Nsight Compute then put 26% of the stall samples on waits for the tensor cores, with two warps
//    per scheduler to hide them: the lockstep at the end of each K step (7_wgmma_ws.cu).
//  * H200: the activation quantizer's rewrite (wgmma.cuh) took a call from 0.2245 to 0.1879 ms.
//
// Shared memory: two stages (wgmma.cuh's Stage), 128 x 32 bytes of -128 (the offset's wgmma), the
// raw weight box of a K step and an mbarrier.
// W8A8 (cuda_q8_0_q8_1_wgmma, below): the same kernel with WF = w_q8_0: the quants need no
// unpacking (|sumi| <= 32 * 128 * 127 still keeps 2^19 + sumi positive).
// Grid: x = ceil(M / 128), y = ceil(N / 128) (slices of at most 65535 token tiles); 256 threads
// (2 warpgroups of 64 tokens).
#include "wgmma.cuh"

namespace gpu {
namespace {
using namespace wg;
constexpr int THREADS = 256;         // 2 warpgroups
constexpr int PARTS = THREADS / BM;  // threads that unpack one weight row

template <class WF>
using Raw = RawPart<WF, KB, PARTS>;

template <class WF>
__global__ void __launch_bounds__(THREADS, 1)
    wgmma_kernel(const uint8_t* __restrict__ ws, const __grid_constant__ CUtensorMap wmap,
                 const typename WF::block* __restrict__ W, float* __restrict__ C, int N, int M, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using RP = Raw<WF>;
    constexpr int RAW_ROW = KB * RP::B;  // bytes of a row's K step as stored (144 or 272: 16-byte multiples)
    extern __shared__ __align__(1024) int4 smem_raw[];
    Stage* stages = (Stage*)smem_raw;                                  // [2]
    uint8_t* ones = (uint8_t*)(stages + 2);                            // BM x 32 bytes of -128
    uint8_t (*raw)[RAW_ROW] = (uint8_t (*)[RAW_ROW])(ones + BM * QK);  // [BM][RAW_ROW]: a K step as stored
    uint64_t* bar = (uint64_t*)(raw + BM);
    const int nb = K / QK;
    const int steps = (nb + KB - 1) / KB;
    const bool aligned = nb % KB == 0;  // rows' K steps start 16-byte aligned: bulk copies, else 16-bit loads
    const int m0 = blockIdx.x * BM;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int wg = warp / 4;                        // warpgroup: tokens 64 wg ..
    const int tok = 64 * wg + 16 * (warp % 4) + g;  // this thread's tokens: tok and tok + 8
    const uint8_t* units = ws + (int64_t)blockIdx.y * steps * QG_WGMMA_UNIT_BYTES;  // this tile's K steps

    const int wr = tid % BM, wp = tid / BM;                                  // thread tid unpacks part wp of row wr
    const typename WF::block* wrow = W + (int64_t)min(m0 + wr, M - 1) * nb;  // rows past M repeat the last
    // [excerpt: load_step]
    auto load_step = [&](int s) {  // issued by every thread, counted on one barrier phase per step
        Stage& st = stages[s & 1];
        if (tid == 0) {  // the weights: one box of BM rows x a K step (16-bit elements), rows past M zeros
            bar_expect(bar, QG_WGMMA_UNIT_BYTES + (aligned ? BM * RAW_ROW : 0));
            bulk_copy(&st.a[0][0], units + (int64_t)s * QG_WGMMA_UNIT_BYTES, QG_WGMMA_UNIT_BYTES, bar);
            if (aligned) tma_copy_2d(&raw[0][0], &wmap, s * RAW_ROW / 2, m0, bar);
        }
    };
    // [end excerpt: load_step]
    auto unpack_step =
        [&](int s) {  // after the step's copies landed; then fence: the tensor cores read what st.shared wrote
            Stage& st = stages[s & 1];
            mma_unpack_weights<WF, KB, PARTS>(
                [&](int part, int c) { return ((const uint4*)&raw[wr][0])[RP::first_chunk(part) + c]; }, wrow, wp, s,
                nb, aligned, [&](int b, float d, const uint32_t* q) { store_block<WF>(st, wr, b, d, q); });
            fence_proxy_async();
        };

    for (int i = tid; i < BM * QK / 16; i += THREADS)
        ((uint4*)ones)[i] = make_uint4(0x80808080u, 0x80808080u, 0x80808080u, 0x80808080u);
    if (tid == 0) bar_init(bar, 1);
    fence_proxy_async();  // the barrier's init, the ones: seen by the async proxy
    __syncthreads();
    load_step(0);
    bar_wait(bar, 0);
    unpack_step(0);
    __syncthreads();

    const uint64_t ones_desc = smem_desc(ones);
    float acc[64] = {};
    // Two accumulator sets: block b's scaling overlaps block b + 1's wgmma.
    constexpr int SETS = 2;
    int D[SETS][64];

    auto scale = [&](const Stage& cur, int b, int (&d)[64]) { scale_block(acc, cur, b, d, t, tok); };

    // [excerpt: k_loop]
    for (int s = 0; s < steps; s++) {
        const Stage& cur = stages[s & 1];
        const bool next = s + 1 < steps;
        if (next) load_step(s + 1);  // the other stage and the raw rows are free (barrier below)
#pragma unroll
        for (int b = 0; b < KB; b++) {
            wgmma_fence();                                   // earlier reads of this set come first
            wgmma_s8<0>(D[b % SETS], ones_desc, ones_desc);  // 2^19 everywhere
            wgmma_s8<1>(D[b % SETS], smem_desc(&cur.a[b][64 * wg * QK]), smem_desc(&cur.w[b][0]));
            wgmma_commit();
            if (b > 0) {  // block b - 1 is done once at most one group (block b) is pending
                wgmma_wait<SETS - 1>();
                fence_regs(D[(b - 1) % SETS]);
                scale(cur, b - 1, D[(b - 1) % SETS]);
            }
        }
        wgmma_wait<0>();
        fence_regs(D[(KB - 1) % SETS]);
        scale(cur, KB - 1, D[(KB - 1) % SETS]);
        if (next) {
            bar_wait(bar, (s + 1) & 1);
            unpack_step(s + 1);
        }
        __syncthreads();  // every warpgroup is done with cur (wait<0>), the next stage is complete
    }
    // [end excerpt: k_loop]

    store_acc(C, acc, blockIdx.y * BN, m0, tok, t, N, M);
#endif
}
}  // namespace

template <class WF>
void gemm_q8_1_wgmma(const GemmProblem& p, cudaStream_t stream) {
    const size_t smem = 2 * sizeof(Stage) + BM * QK + (size_t)BM * KB * Raw<WF>::B + 16;
    cudaFuncSetAttribute(wgmma_kernel<WF>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    wgmma_prepare_and_launch<WF>(
        p, stream, [&](dim3 grid, const uint8_t* ws, const CUtensorMap& wmap, float* C, int N) {
            wgmma_kernel<WF><<<grid, THREADS, smem, stream>>>(ws, wmap, (const typename WF::block*)p.W, C, N, p.M, p.K);
        });
}

template void gemm_q8_1_wgmma<w_q4_0>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_wgmma<w_q8_0>(const GemmProblem&, cudaStream_t);

}  // namespace gpu

void cuda_q4_0_q8_1_wgmma(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_wgmma<gpu::w_q4_0>(p, stream); }

void cuda_q8_0_q8_1_wgmma(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_wgmma<gpu::w_q8_0>(p, stream); }
