// cuda/06_decode_tensor_cores/wgmma_ws.cuh (chapter 6): the warp-specialized wgmma kernel, shared by
// the fourth step (7_wgmma_ws.cu: one CTA per tile, the whole K) and the fifth (8_wgmma_splitk.cu:
// the K steps of a tile split over gridDim.z CTAs, whose partial sums a second kernel adds). The
// kernel is described at the top of 7_wgmma_ws.cu; with gridDim.z = 1 CTA z = 0 takes every K step
// and writes C, and the two steps compute the same bits. The sixth step (9_wgmma_narrow.cu) runs it
// with one consumer warpgroup (CW = 1): 64 tokens per tile, for N <= 64.
#pragma once
#include "wgmma.cuh"

namespace gpu {
namespace wg {
namespace {
// CW consumer warpgroups (2: tokens 0..63 and 64..127 of the tile; 1: tokens 0..63), then the producer
template <int CW>
constexpr int CONSUMERS = 128 * CW;
template <int CW>
constexpr int THREADS = CONSUMERS<CW> + 128;
constexpr int STAGES = 2;
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
constexpr bool PDL = true;  // programmatic dependent launch: start while the quantizer finishes

static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * CONSUMERS<2> <= 65536 / THREADS<2> / 8 * 8 * THREADS<2>,
              "setmaxnreg can only move the registers the CTA got at launch");
// With one consumer warpgroup (256 threads) every thread may keep up to 255 registers from the
// launch: no setmaxnreg.
// The producer thread of a row unpacks a K step in PARTS parts (fewer live registers per part:
// Q8_0's 4 blocks of 34 bytes would not fit the producer's 40 registers).
template <class WF>
constexpr int PARTS = sizeof(typename WF::block) > 18 ? 4 : 2;

template <class WF>
using Raw = RawPart<WF, KB, PARTS<WF>>;

template <class WF>
struct Smem {
    static constexpr int RAW_ROW = KB * Raw<WF>::B;  // bytes of a row's K step as stored (144 or 272)
    Stage st[STAGES];
    uint8_t raw[STAGES][BM][RAW_ROW];  // the weights' K step, as the TMA box wrote it
    uint8_t ones[BM * QK];             // -128 everywhere: the offset's wgmma
    // acts: the stage's activation copy landed; raw: the raw weights of a step landed (counted in
    // bytes); full: the producer unpacked the stage's weights; empty: the consumers are done with it
    uint64_t acts[STAGES], raw_in[STAGES], full[STAGES], empty[STAGES];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int REGS>
__device__ __forceinline__ void set_max_regs_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void set_max_regs_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
#endif

template <class WF, bool SPLIT, int CW>
__global__ void __launch_bounds__(THREADS<CW>, 1)
    wgmma_ws_kernel(const uint8_t* __restrict__ ws, const __grid_constant__ CUtensorMap wmap,
                    const typename WF::block* __restrict__ W, float* __restrict__ C, int64_t split_plane, int N, int M,
                    int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) int4 smem_raw[];
    Smem<WF>& sm = *(Smem<WF>*)smem_raw;
    const int nb = K / QK;
    const int steps = (nb + KB - 1) / KB;
    // [excerpt: split_range]
    // This CTA's K steps: split z of gridDim.z takes steps s_begin .. s_end - 1 and writes its sums
    // to plane z of C. Stages and barrier phases count from s_begin. (SPLIT = false: the fourth
    // step, one CTA per tile, all of K, written to C.)
    const int s_begin = SPLIT ? (int)((int64_t)steps * blockIdx.z / gridDim.z) : 0;
    const int s_end = SPLIT ? (int)((int64_t)steps * (blockIdx.z + 1) / gridDim.z) : steps;
    // [end excerpt: split_range]
    const bool aligned = nb % KB == 0;  // rows' K steps start 16-byte aligned: TMA box, else 16-bit loads
    const int m0 = blockIdx.x * BM;
    const int tid = threadIdx.x;

    for (int i = tid; i < BM * QK / 16; i += THREADS<CW>)
        ((uint4*)sm.ones)[i] = make_uint4(0x80808080u, 0x80808080u, 0x80808080u, 0x80808080u);
    if (tid == 0)
        for (int i = 0; i < STAGES; i++) {
            bar_init(&sm.acts[i], 1);  // the producer's expect_tx, then the copy's bytes
            bar_init(&sm.raw_in[i], 1);
            bar_init(&sm.full[i], 128);             // every producer thread, after its row
            bar_init(&sm.empty[i], CONSUMERS<CW>);  // every consumer thread, after its last read
        }
    fence_proxy_async();  // the barriers' init, the ones: seen by the async proxy
    __syncthreads();

    if (tid >= CONSUMERS<CW>) {  // ---- producer warpgroup
        if constexpr (CW == 2) set_max_regs_dec<PRODUCER_REGS>();
        const int r = tid - CONSUMERS<CW>;                                      // this thread's weight row
        const typename WF::block* wrow = W + (int64_t)min(m0 + r, M - 1) * nb;  // rows past M repeat the last
        const uint8_t* units = ws + (int64_t)blockIdx.y * steps * QG_WGMMA_UNIT_BYTES;
        // The raw weights of step s + 1 are copied while step s is unpacked (their buffer's last
        // reader, the unpacking of step s - 1, is done: named barrier 1 of the producer's 128
        // threads); the activations go straight into the stage, once the consumers have freed it,
        // and the consumers wait for them themselves.
        auto copy_raw = [&](int s) {
            const int i = (s - s_begin) % STAGES;
            bar_expect(&sm.raw_in[i], BM * Smem<WF>::RAW_ROW);
            tma_copy_2d(&sm.raw[i][0][0], &wmap, s * Smem<WF>::RAW_ROW / 2, m0, &sm.raw_in[i]);
        };
        // [excerpt: narrow_copy]
        // The activations of step s into stage st: the whole unit (128 tokens), or with one consumer
        // warpgroup the first 64 tokens of each block (the first half of its quants and of its pairs).
        auto copy_acts = [&](Stage& st, int s, uint64_t* bar) {
            const uint8_t* unit = units + (int64_t)s * QG_WGMMA_UNIT_BYTES;
            if constexpr (CW == 2) {
                bar_expect(bar, QG_WGMMA_UNIT_BYTES);
                bulk_copy(&st.a[0][0], unit, QG_WGMMA_UNIT_BYTES, bar);
            } else {
                bar_expect(bar, KB * 64 * (QK + (int)sizeof(float2)));
#pragma unroll
                for (int b = 0; b < KB; b++) {
                    bulk_copy(&st.a[b][0], unit + b * BN * QK, 64 * QK, bar);
                    bulk_copy(&st.ad[b][0], unit + KB * BN * QK + b * BN * (int)sizeof(float2),
                              64 * (int)sizeof(float2), bar);
                }
            }
        };
        // [end excerpt: narrow_copy]
        if (r == 0 && aligned) copy_raw(s_begin);
        // [excerpt: producer_loop]
        for (int s = s_begin; s < s_end; s++) {
            const int i = (s - s_begin) % STAGES, round = (s - s_begin) / STAGES;
            Stage& st = sm.st[i];
            if (r == 0 && aligned && s + 1 < s_end) copy_raw(s + 1);
            if (s - s_begin >= STAGES)
                bar_wait(&sm.empty[i], (round - 1) & 1);  // the consumers are done with step s - STAGES
            if (r == 0) {
                // Launched with PDL, the CTA may start while the quantizer still runs: the barriers,
                // the first weight copies and (for s = 0) nothing else came before this wait.
                if (s == s_begin) grid_dependency_wait();
                copy_acts(st, s, &sm.acts[i]);
            }
            if (aligned) bar_wait(&sm.raw_in[i], round & 1);
            auto chunk = [&](int part, int c) {
                return ((const uint4*)&sm.raw[i][r][0])[Raw<WF>::first_chunk(part) + c];
            };
            auto store = [&](int b, float d, const uint32_t* q) { store_block<WF>(st, r, b, d, q); };
#pragma unroll
            for (int part = 0; part < PARTS<WF>; part++)
                mma_unpack_weights<WF, KB, PARTS<WF>>(chunk, wrow, part, s, nb, aligned, store);
            fence_proxy_async();
            bar_arrive(&sm.full[i]);
            asm volatile("bar.sync 1, 128;\n" ::: "memory");  // every producer thread is done with raw[i]
        }
        // [end excerpt: producer_loop]
        return;
    }

    // ---- consumer warpgroups
    if constexpr (CW == 2) set_max_regs_inc<CONSUMER_REGS>();
    const int lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int wg = warp / 4;                        // warpgroup: tokens 64 wg ..
    const int tok = 64 * wg + 16 * (warp % 4) + g;  // this thread's tokens: tok and tok + 8
    const uint64_t ones_desc = smem_desc(sm.ones);
    float acc[64] = {};
    // Two accumulator sets: block b's wgmma runs while block b - 1 is scaled (as in the third step),
    // and the other warpgroup's wgmma runs meanwhile too.
    // A block is scaled in two halves of its rows (16 weight scales in registers instead of 32).
    constexpr int SETS = 2;
    int D[SETS][64];
    auto issue = [&](const Stage& cur, int b) {
        wgmma_fence();                                   // earlier reads of this set come first
        wgmma_s8<0>(D[b % SETS], ones_desc, ones_desc);  // 2^19 everywhere
        wgmma_s8<1>(D[b % SETS], smem_desc(&cur.a[b][64 * wg * QK]), smem_desc(&cur.w[b][0]));
        wgmma_commit();
    };
    auto scale = [&](const Stage& cur, int b) {  // after the wait for block b's wgmma
        int (&d)[64] = D[b % SETS];
        fence_regs(d);
        apply_scales<0, 8>(acc, *(int (*)[32]) & d[0], load_scales<0, 8>(cur, b, t, tok));
        apply_scales<8, 8>(acc, *(int (*)[32]) & d[32], load_scales<8, 8>(cur, b, t, tok));
    };

    // With two sets the pipeline drains at the end of each K step: ptxas keeps wgmmas asynchronous
    // only while no wgmma whose results are read by other instructions is in flight across a loop's
    // back edge (else it serializes them all, warning C7514).
    // [excerpt: consumer_loop]
    for (int s = s_begin; s < s_end; s++) {
        const int i = (s - s_begin) % STAGES, round = (s - s_begin) / STAGES;
        const Stage& cur = sm.st[i];
        bar_wait(&sm.full[i], round & 1);
        bar_wait(&sm.acts[i], round & 1);
#pragma unroll
        for (int b = 0; b < KB; b++) {
            issue(cur, b);
            if (b > 0) {  // block b - 1 is done once at most one group (block b) is pending
                wgmma_wait<SETS - 1>();
                scale(cur, b - 1);
            }
        }
        wgmma_wait<0>();
        scale(cur, KB - 1);
        // This thread's last read of the stage. Every thread arrives: an arrival releases the
        // arriving thread's own reads only (one lane per warp after __syncwarp would leave the other
        // lanes' reads unordered against the producer's next writes).
        bar_arrive(&sm.empty[i]);
    }
    // [end excerpt: consumer_loop]
    store_acc(SPLIT ? C + blockIdx.z * split_plane : C, acc, blockIdx.y * BN, m0, tok, t, N, M);
#endif
}

// Launch the kernel for p over `splits` CTAs per tile (grid.z; 1 unless SPLIT); `out` is p.C
// without SPLIT, else `splits` planes of p.N x p.M partial sums. CW = 1 (one consumer warpgroup)
// takes tokens 0..63 of a tile only: N <= 64.
template <class WF, bool SPLIT, int CW = 2>
void launch_wgmma_ws(const GemmProblem& p, cudaStream_t stream, int splits, float* out) {
    static_assert(CW == 1 || CW == 2, "one or two consumer warpgroups");
    if (CW == 1 && p.N > 64) throw std::logic_error("the one-warpgroup wgmma kernel takes at most 64 tokens");
    const size_t smem = sizeof(Smem<WF>);
    cudaFuncSetAttribute(wgmma_ws_kernel<WF, SPLIT, CW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const int64_t plane = (int64_t)p.N * p.M;
    wgmma_prepare_and_launch<WF>(
        p, stream, [&](dim3 grid, const uint8_t* ws, const CUtensorMap& wmap, float* C, int N) {
            // Programmatic dependent launch: the CTAs start while the quantizer finishes (its CTAs allow it
            // at once); the producer waits for its writes before the first activation copy.
            grid.z = splits;
            float* o = out + (C - p.C);  // this launch's tiles (gridDim.y is capped: tiles go in launches)
            launch_maybe_pdl(wgmma_ws_kernel<WF, SPLIT, CW>, grid, dim3(THREADS<CW>), smem, stream, PDL, ws, wmap,
                             (const typename WF::block*)p.W, o, plane, N, p.M, p.K);
        });
}
}  // namespace (each file that includes this has its own kernel and launcher: nothing shared across files)
}  // namespace wg

template <class WF>
void gemm_q8_1_wgmma_ws(const GemmProblem& p, cudaStream_t stream);  // the fourth step (7_wgmma_ws.cu)
// the fifth (8_wgmma_splitk.cu); with CW = 1, the sixth's kernel for N <= 64 (9_wgmma_narrow.cu)
template <class WF, int CW = 2>
void gemm_q8_1_wgmma_splitk(const GemmProblem& p, cudaStream_t stream);
}  // namespace gpu
