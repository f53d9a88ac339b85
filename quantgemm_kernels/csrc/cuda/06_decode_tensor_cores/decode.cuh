// cuda/06_decode_tensor_cores/decode.cuh (chapter 6): the weight stream both decode steps share
// (1_decode_fused.cu, 2_decode.cu). Few tokens (N <= 8 per pass), so the GEMM is a matrix-vector
// product that reads every weight byte once and does about 3.6 operations per byte (2 per weight,
// 18 bytes per 32 weights): all that matters is streaming W at the speed of HBM. decode_kernel is a
// template on how a CTA gets the activations into its shared memory (Acts: stage() in the kernel,
// prepare() on the host before the launches, PDL whether the launch may overlap the kernel before
// it); each step file defines its Acts and its launchers.
//
// What the kernel does, against chapter 4's tiled kernels and llama.cpp's mul_mat_vec_q (MMVQ):
//  * 16-byte loads of raw weight bytes. A Q4_0 block is 18 B, so no block is 16-byte aligned,
//    but 8 blocks are 144 B = 9 x 16 B: when a row holds a multiple of 8 blocks (K % 256 == 0,
//    every LLM layer), each run of 8 blocks (a "unit") starts 16-byte aligned and a lane loads it
//    with 9 128-bit loads, then cuts the blocks out of registers at compile-time byte offsets
//    (funnel shifts). MMVQ reads the same bytes with 16-bit loads (get_int_b2), 8x the load
//    instructions, and the number of bytes in flight per SM is what sets a GEMV's bandwidth.
//    Q8_0 is the same with 8 x 34 B = 17 x 16 B. Rows with K % 256 != 0 take a per-block path
//    with 16-bit loads (correct everywhere, fast where it matters).
//  * A layout for shared memory that keeps 32 lanes on 32 banks. Lane u works on unit u, so
//    lanes read activation blocks 8 blocks (256 B) apart: without padding, all 32 lanes would
//    hit the same bank. One 16-byte pad per unit shifts each lane by 4 banks (a 128-bit read is
//    served 8 lanes at a time: 8 x 4 banks, no conflict); the (d, s) pairs get one pad per unit.
//  * Coalesced loads, staged per warp. If each lane loaded its own 144-byte unit, one warp
//    instruction would touch 32 addresses 144 B apart (36 cache lines: the L1 serves it in many
//    passes while HBM waits). Instead a warp copies a step of 32 units (4608 B) as 9 cp.async
//    instructions of 512 consecutive bytes straight into its own ring of shared-memory buffers,
//    and each lane then takes its unit from there. Two or three steps per warp are in flight
//    while it computes on the oldest.
//  * Warp w of the grid owns rows w, w + (all warps), ... (Q4_0 and Q8_0 at 3 tokens or more:
//    groups of 4 rows, 8 lanes per row, decode_rows_per_step); weights unpacked once per block and
//    reused for every token; a butterfly shuffle per row sums the 32 lanes (fixed order:
//    deterministic); a grid of at most 2 CTAs per SM, so the activations are staged a few
//    hundred times rather than once per row.
// The formula per block is MMVQ's: d_w * (d_a * sumi - 8 * s_a) with s_a from the Q8_1 block.
// Passes: N is cut into passes of T <= 8 tokens (T a template parameter: the accumulators stay in
// registers); K is cut into chunks when T tokens of Q8_1 would not fit in shared memory (later
// chunks add to C, in order: still deterministic).
//
// Shared memory: the T tokens' activations (quants, 17 vectors per unit; (d, s) pairs) and one
// ring of 1 to 3 steps per warp (decode_plan.h: the layout, ring depth and K chunk of each launch,
// and what changes on GPUs with less shared memory than Hopper's). Registers: Q4_0 at most 128 per
// thread, so that 2 CTAs share an SM.
// Grid: min(ceil(G / 8), SMs x min(CTAs that fit per SM, 2)) CTAs of 256 threads (8 warps), G the
// row groups (M, or M / 4 rounded up), one launch per pass of T tokens and K chunk.
// Measured: with each lane loading its own unit, the profiler showed the L1 busy while HBM idled
// at a third of its bandwidth (hence the staging). Ring depth: 3 steps per warp for Q4_0's long
// rows at 3 and 4 tokens, 2 otherwise (Q8_0's steps are twice as large, more tokens need the shared
// memory for their activations, and at one token 2 steps let 2 CTAs share an SM: 16 warps and 16
// steps in flight instead of 8 warps and 24, which measured faster; packed short rows give a warp
// one or a few steps, so there too 2 CTAs of 2 steps beat 1 CTA of 3). At 2 tokens the long rows
// took 3 steps until an H200 measured 2 (2 CTAs per SM, as at one token) faster: Q4_0 4096 x 14336
// N = 2 14.50 / 14.53 -> 13.38 / 13.39 us, N = 10 (a pass of 8, then one of 2) 41.01 / 40.96 ->
// 39.76 / 39.86, other N within 0.3 % (one machine, builds run in turn, weights cold; bench_results/
// nvidia-h200/2026-11-29/decode-stages-ab.txt). The H100 did not run that comparison; there a second
// token cost 0.2 us with 3 steps (decode-sweep-003235.json), against 2.1 on the H200.
// Tried and lost in the same run: 4 steps at 3 and 4 tokens (one CTA of 219 KB at K = 14336, 32
// steps of the SM in flight instead of 24): N = 3 15.79 / 15.81 -> 16.61 / 16.61 us, N = 4 18.27 /
// 18.30 -> 19.33 / 19.33. More weight bytes in flight did not pay here either.
// The ring on a 128-byte boundary (DecodeSmem): it used to start right after the activations, at
// K = 14336 and an odd number of tokens 64 bytes past a boundary, so that every 512-byte copy of a
// warp straddled five lines of shared memory instead of four. Nsight Compute had shown Q8_0 4096 x
// 14336 at one token making 1.8x as many L2 tag requests as at two tokens for the same DRAM bytes
// (ncu-decode-q8_0-4096x14336-n1.txt and -n2.txt), and one token slower than two. Aligned (H200,
// one machine, two builds run new / old / new / old, weights cold; bench_results/nvidia-h200/
// 2026-11-29/decode-align-ab.txt): Q8_0 4096 x 14336 N = 1 21.22 / 21.54 -> 17.82 / 17.76 us, N = 3
// 20.59 / 20.99 -> 19.26 / 19.20, N = 5 41.95 / 42.11 -> 39.20 / 39.01; Q4_0 N = 1 12.90 / 12.91 ->
// 12.26 / 12.35; even token counts and K = 4096 (already aligned) unchanged.
// The activations' own barrier (sm_90): the CTA's activation copies were one more cp.async group,
// and since a thread's groups complete in order, waiting for them (then __syncthreads) was waiting
// for every weight step the CTA had issued: each warp started when the CTA's slowest first step
// had landed. As two bulk copies per token on an mbarrier (2_decode.cu), a warp starts when its
// own step and the activations are in. H100, weights cold, one machine, two builds
// (bench_results/nvidia-h100-80gb-hbm3/2026-11-28/decode-bulkacts-ab.txt, with 2 stages for packed
// rows): Q4_0 4096 x 4096 N = 1 7.10 -> 6.88 us, N = 2 8.58 -> 7.78, N = 4 10.64 -> 9.60; 14336 x
// 4096 N = 3 19.07 -> 16.19; 4096 x 14336 N = 3 17.09 -> 16.51; Q8_0 0.2 to 4 %; elsewhere within
// 0.3 %. Filling every ring slot before the activations as well was slower where a warp has more
// than one step (Q8_0 4096 x 4096 N = 4 13.03 against 10.64, Q4_0 4096 x 14336 N = 5 22.55 against
// 20.60).
// Tried and lost: packed rows as half-units, two lanes per unit (lane j < 16 blocks 0-3 of unit j,
// lane j + 16 blocks 4-7, from 8-byte loads), 16 units a step, so that a 4096-row layer gives 4096
// warp steps instead of 2048, with up to 4 CTAs per SM (at most 64 registers: small spills from 2
// tokens on) or 3. Correct (tests, memcheck, racecheck on an H100) but slower from 2 tokens on
// (Q4_0 4096 x 4096 N = 4 10.9 / 11.0 against 9.6 us, 1024 x 4096 N = 8 8.5 / 8.6 against 8.0;
// Q8_0 14336 x 4096 N = 8 39.9 / 40.0 against 35.7) and no faster at one token (4096 x 4096 6.75
// to 7.3 in each build): twice the CTAs also copy the activations twice as often
// (bench_results/nvidia-h100-80gb-hbm3/2026-11-28/decode-halfunits-ab.txt).
// Tried and lost: packed rows reading the activations in place, from the quantizer's image in L2
// through L1 (the image has shared memory's layout, and a packed launch covers whole rows), as
// MMVQ reads them, instead of the bulk copies and their barrier; the shared memory left is then the
// ring alone. Correct (decode tests, memcheck, racecheck on an H200) but slower at every cell, 10 to
// 40 %: Q4_0 4096 x 4096 N = 2 7.07 / 7.12 -> 8.61 / 8.61 us, 1024 x 4096 N = 1 4.00 / 3.97 -> 4.64
// / 4.64, Q8_0 4096 x 4096 N = 4 9.70 / 9.76 -> 12.96 / 12.96 (bench_results/nvidia-h200/2026-11-29/
// decode-globalacts-ab.txt). ptxas gives the packed kernels 122 to 255 registers (72 to 216
// before), with spills from 2 tokens: it hoists the global loads of a unit's 8 blocks and T tokens.
// Packed short rows (H100, weights cold, calls replayed from a CUDA graph; bench_results/
// nvidia-h100-80gb-hbm3/2026-11-27/crossover-064418.json before, packed-065600.json after): Q4_0
// 14336 x 4096 at N = 4: 32.0 -> 24.4 us, N = 5: 33.7 -> 25.0; 4096 x 4096 at N = 5: 13.2 -> 11.2;
// Q8_0 14336 x 4096 at N = 4: 33.6 -> 26.3; 4096 x 14336 (not packed) unchanged.
// The prologue's order (H100, Q4_0 4096 x 14336, weights cold, the decode kernel's own duration at
// N = 1 / N = 4): one step per warp issued, then the activations, then the loop (this code): 13.8 /
// 19.6 us. Filling every ring slot before the activations: 14.9 / 21.1 us: the activation copies
// queue behind twice the weight bytes, and no warp starts before they land. Activations first, then
// every slot: 14.4 / 18.6 us. Activations with plain loads instead of cp.async (so that their wait
// is not a wait for the weight steps too): slower at every N (17.2 against 17.0 us per call at N = 1).
// Tried and lost (H100, Q4_0 4096 x 14336, decode-l2pf-carve-tl.txt in the same records folder):
// a bulk L2 prefetch (cp.async.bulk.prefetch.L2) of each warp's next 1 to 6 weight steps beyond its
// ring, issued by lane 0, slower at every distance (one token: 15.4 -> 16.2 to 17.9 us per call);
// the quantizer's shared-memory carveout set to the decode kernel's, no change. A kernel that only
// reads these weights takes 12.1 us on the H100 (read-ceiling-h100.txt), this kernel 14.3.
// Tried and lost (H200, four builds run in turn twice, weights cold, N = 1 to 8 on the three Llama-3-8B
// shapes; bench_results/nvidia-h200/2026-11-29/decode-dp2-lb-ab.txt): a block's 8 dp4a per token as two
// chains of 4 (the same integers), and the 3-stage instances (one CTA per SM) freed of the 128-register
// cap that 2 CTAs per SM need (ptxas then gives them 108 and 130): every cell within 0.98 to 1.04 of
// before, geometric means 1.003 and 1.000. Each token past the first costs the long rows 1 to 2.6 us
// here, and neither the dp4a chain nor the register cap is what it pays for.
// Needs sm_80 (cp.async); the registry's min_sm makes gemm() refuse older GPUs with a clear error.
#pragma once
#include <algorithm>
#include <type_traits>

#include "../w_q8_1.cuh"
#include "decode_plan.h"

namespace gpu {
namespace {
using decode_plan::DecodeSmem;
using decode_plan::ds_pitch;
constexpr int DEC_WARPS = decode_plan::WARPS;
constexpr int DEC_THREADS = DEC_WARPS * 32;
constexpr int UNIT = decode_plan::UNIT;    // blocks per unit
constexpr int MAX_T = decode_plan::MAX_T;  // tokens per pass
// [excerpt: smem_layout]
constexpr int A_UNIT_VECS = UNIT * QK / 16 + 1;  // int4 per unit of activation quants: 16 + 1 pad
constexpr int A_UNIT_DS = UNIT + 1;              // float2 (d, s) per unit: 8 + 1 pad
static_assert(A_UNIT_VECS == QG_DECODE_UNIT_VECS && A_UNIT_DS == QG_DECODE_UNIT_DS,
              "gemm.h sizes the workspace with the same layout");
// [end excerpt: smem_layout]

// Activation block `kb` of token t in shared memory: its 32 quants as 8 words, and (d, s).
struct ActSmem {
    int4* qs;    // [T][nu][A_UNIT_VECS]
    float2* ds;  // [T][ds_pitch(nu)]: unit u's pairs at u * A_UNIT_DS
    int nu;      // units per row chunk
    __device__ __forceinline__ void load(int t, int kb, int* a, float2& dsv) const {
        const int u = kb / UNIT, i = kb % UNIT;
        const int4* p = qs + ((size_t)t * nu + u) * A_UNIT_VECS + 2 * i;
        const int4 lo = p[0], hi = p[1];
        a[0] = lo.x;
        a[1] = lo.y;
        a[2] = lo.z;
        a[3] = lo.w;
        a[4] = hi.x;
        a[5] = hi.y;
        a[6] = hi.z;
        a[7] = hi.w;
        dsv = ds[(size_t)t * ds_pitch(nu) + u * A_UNIT_DS + i];
    }
};

// One weight block (quants as words v, scale d_w) against T tokens' activation block kb.
template <class WF, int T>
__device__ __forceinline__ void block_times_tokens(const int* v, float d_w, float m_w, const ActSmem& act, int kb,
                                                   float* acc) {
    int lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; i++) WF::words(v, i, lo[i], hi[i]);  // unpacked once, used T times
#pragma unroll
    for (int t = 0; t < T; t++) {
        int a[8];
        float2 ds;
        act.load(t, kb, a, ds);
        int sumi = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            sumi = __dp4a(lo[i], a[i], sumi);
            sumi = __dp4a(hi[i], a[i + 4], sumi);
        }
        acc[t] += block_result<WF>(d_w, ds.x, ds.y, sumi, m_w);
    }
}

template <class WF>
struct Unit {  // 8 consecutive weight blocks of one row, as raw 32-bit words
    static constexpr int BYTES = UNIT * (int)sizeof(typename WF::block);  // 144 (Q4_0), 160 (Q4_1), 272 (Q8_0)
    static constexpr int VECS = BYTES / 16;                               // 9 or 17
    static_assert(BYTES % 16 == 0, "8 blocks are a whole number of 16-byte vectors");
    uint32_t w[VECS * 4 + 1];  // +1: word_at may read one word past the last block's end

    __device__ __forceinline__ void load_shared(const uint4* v) {
#pragma unroll
        for (int i = 0; i < VECS; i++) {
            const uint4 x = v[i];
            w[4 * i] = x.x;
            w[4 * i + 1] = x.y;
            w[4 * i + 2] = x.z;
            w[4 * i + 3] = x.w;
        }
        w[VECS * 4] = 0;
    }
    // [excerpt: unit_words]
    // Block i of the unit: scale (fp16 bits at byte B*i) and quants (from byte B*i + 2) as words.
    __device__ __forceinline__ void block(int i, int* v, float& d) const {
        constexpr int B = (int)sizeof(typename WF::block);
        const int off = B * i;
        d = scale_to_float((fp16_bits)(w[off >> 2] >> (8 * (off & 3))));
#pragma unroll
        for (int j = 0; j < WF::qs_words; j++) v[j] = word_at(w, off + 2 + 4 * j);
        // [end excerpt: unit_words]
    }
    // Q4_1 (chapter 7): d and m, then the quants from byte B*i + 4. B = 20: every block 4-byte aligned.
    __device__ __forceinline__ void block(int i, int* v, float& d, float& m) const {
        constexpr int B = (int)sizeof(typename WF::block);
        const int off = B * i;  // a multiple of 4
        const uint32_t dm = w[off >> 2];
        d = scale_to_float((fp16_bits)(dm & 0xFFFF));
        m = scale_to_float((fp16_bits)(dm >> 16));
#pragma unroll
        for (int j = 0; j < WF::qs_words; j++) v[j] = (int)w[(off >> 2) + 1 + j];
    }
};

template <class WF>
constexpr decode_plan::DecodeFormat decode_format() {
    return {Unit<WF>::VECS, std::is_same<WF, w_q4_0>::value, std::is_same<WF, w_q8_0>::value};
}

// Where a launch finds its tokens' activations: float32 rows A[t * K ...] (1_decode_fused.cu
// quantizes them in every CTA), or the workspace image of 2_decode.cu's quantizer, token t's units
// at qs[t * nu_total ...] and pairs at ds[t * ds_pitch(nu_total)]. Each step reads its own fields.
struct ActSource {
    const float* A;    // float32 rows (1_decode_fused.cu)
    const int4* qs;    // image: quants, A_UNIT_VECS per unit (2_decode.cu)
    const float2* ds;  // image: (d, s) pairs
    int nu_total;      // image: units per token row (the whole K)
};

template <class WF, int T, class Acts, bool PACKED, int RG, int STAGES>
// Q4_0: 2 CTAs per SM (at most 128 registers); Q8_0 units are twice as wide and need more.
__global__ void __launch_bounds__(DEC_THREADS, sizeof(typename WF::block) < 32 ? 2 : 1)  // 4-bit: 2 CTAs/SM
    decode_kernel(ActSource src, const typename WF::block* __restrict__ W, float* __restrict__ C, int M, int K,
                  int nb_total, int kb0, int nb, bool accumulate) {
    // This launch: T tokens (src), blocks [kb0, kb0 + nb) of every weight row (rows are nb_total
    // blocks long), C rows [0 .. T) (M floats each), added to C if accumulate.
    // Warp w of the grid owns rows w, w + (all warps), ...; a row is read in steps of 32 units.
    constexpr int VECS = Unit<WF>::VECS;  // 16-byte vectors per unit: 9 (Q4_0), 17 (Q8_0)
    constexpr int STEP_VECS = 32 * VECS;  // one step: 32 units, one per lane
    extern __shared__ __align__(128) int4 smem[];
    const int nu = (nb + UNIT - 1) / UNIT;
    const DecodeSmem lay(T, nu, VECS, STAGES);
    char* base = (char*)smem;
    const ActSmem act{(int4*)(base + lay.act_qs), (float2*)(base + lay.act_ds), nu};
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    uint4* ring = (uint4*)(base + lay.stage) + warp * STAGES * STEP_VECS;  // this warp's STAGES steps
    const int warps_total = gridDim.x * DEC_WARPS;
    const int warp_global = blockIdx.x * DEC_WARPS + warp;
    const bool units = nb_total % UNIT == 0 && kb0 % UNIT == 0;  // every unit 16-byte aligned
    // Short rows (PACKED: units, a whole row in the launch, nu a divisor of 32, i.e. K = 256, 512,
    // ..., 4096): a step holds R = 32 / nu consecutive rows, which are consecutive in memory, lane u
    // on unit u % nu of row u / nu, instead of one row with 32 - nu lanes idle. A group is the R
    // rows of one step. A template parameter (the launcher checks the condition), so that the other
    // shapes run code with no trace of it: as a runtime flag it cost long rows up to 14 % at 2 to
    // 8 tokens (H100, 4096 x 14336, 24.1 against 21.1 us at N = 4).
    constexpr bool packed = PACKED;
    // Long rows (not PACKED), RG rows per step: lanes [32/RG * j, 32/RG * (j + 1)) take 32/RG
    // consecutive units of the group's row j, so that a warp's 128-bit activation loads touch 32/RG
    // distinct units (RG = 1: 32, four wavefronts; RG = 4: 8, one) instead of 32.
    constexpr int LSEG = 32 / RG;         // lanes per row, long rows
    const int R = packed ? 32 / nu : RG;  // rows per group
    const int seg = packed ? nu : LSEG;   // lanes summed into one row
    const int steps_per_row = packed ? 1 : (nu + LSEG - 1) / LSEG;
    const int groups = (M + R - 1) / R;
    const int groups_mine = warp_global < groups ? (groups - 1 - warp_global) / warps_total + 1 : 0;
    const int items = groups_mine * steps_per_row;  // item i: group warp_global + (i / steps) * warps_total

    // Item i (a step: 32 units of one row, or the R rows of a packed group) goes to ring slot
    // i % STAGES with cp.async: the warp copies 512 consecutive bytes per instruction (coalesced)
    // straight into shared memory, where lane u later finds its unit's VECS vectors back to back.
    // STAGES - 1 items stay in flight while the warp computes on the oldest; one commit group per
    // item, empty past the end, so that wait_group<STAGES - 1> always means "the oldest item has
    // landed".
    // [excerpt: issue]
    auto issue = [&](int i) {
        if (units && i < items) {
            const int g = warp_global + (i / steps_per_row) * warps_total, st = i % steps_per_row;
            const int r = g * R;  // the group's first row
            const uint4* src = (const uint4*)(W + (int64_t)r * nb_total + kb0) + (int64_t)st * LSEG * VECS;
            uint4* dst = ring + (i % STAGES) * STEP_VECS;
            if (packed || RG == 1) {
                const int count = (packed ? min(R, M - r) * nu : min(32, nu - 32 * st)) * VECS;
#pragma unroll
                for (int v = 0; v < VECS; v++)
                    if (lane + 32 * v < count) cp_async16(dst + lane + 32 * v, src + lane + 32 * v);
            } else {  // RG runs, one per row, of min(LSEG, nu - LSEG * st) units
                const int run = min(LSEG, nu - LSEG * st) * VECS, rows = min(RG, M - r);
#pragma unroll
                for (int v = 0; v < VECS; v++) {
                    const int e = lane + 32 * v, j = e / (LSEG * VECS), o = e % (LSEG * VECS);
                    if (j < rows && o < run)
                        cp_async16(dst + e, src + (int64_t)j * nb_total * sizeof(typename WF::block) / 16 + o);
                }
            }
        }
        cp_async_commit();
        // [end excerpt: issue]
    };
#pragma unroll
    // [excerpt: pipeline]
    for (int i = 0; i < STAGES - 1; i++) issue(i);  // in flight while the activations arrive
    uint64_t* act_bar = (uint64_t*)(base + lay.bar);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) bar_init(act_bar, 1), bar_init_fence();
    __syncthreads();
#endif
    Acts::template stage<T>(src, act, K, kb0, nb, nu, act_bar);  // the activations: the step's own part
    __syncthreads();
    // [end excerpt: pipeline]

    float acc[T];
#pragma unroll
    for (int t = 0; t < T; t++) acc[t] = 0.0f;
    // [excerpt: finish_row]
    // Butterfly sum over each aligned segment of `width` lanes (the whole warp, or the nu lanes of one
    // row of a packed step; fixed order), the segment's first lane writes row r0 + its segment.
    auto finish_rows = [&](int r0, int width) {
#pragma unroll
        for (int t = 0; t < T; t++) {
            for (int off = width / 2; off > 0; off >>= 1) acc[t] += __shfl_xor_sync(QG_FULL_MASK, acc[t], off);
            const int r = r0 + lane / width;
            if (lane % width == 0 && r < M) {
                float* c = C + (int64_t)t * M + r;
                *c = accumulate ? *c + acc[t] : acc[t];
            }
            acc[t] = 0.0f;
            // [end excerpt: finish_row]
        }
    };

    if (!units) {  // rows not 16-byte aligned in units: block by block, 16-bit loads
        for (int row = warp_global; row < M; row += warps_total) {
            const typename WF::block* w_row = W + (int64_t)row * nb_total + kb0;
            for (int kb = lane; kb < nb; kb += 32) {
                int v[WF::qs_words];
#pragma unroll
                for (int j = 0; j < WF::qs_words; j++) v[j] = load_int_b2(w_row[kb].qs, j);
                float m_w = 0.0f;
                if constexpr (has_min<WF>) m_w = scale_to_float(w_row[kb].m);
                block_times_tokens<WF, T>(v, scale_to_float(w_row[kb].d), m_w, act, kb, acc);
            }
            finish_rows(row, 32);
        }
        return;
    }

    // [excerpt: consume]
    for (int i = 0; i < items; i++) {
        issue(i + STAGES - 1);        // into the slot computed on in iteration i - 1
        cp_async_wait<STAGES - 1>();  // this lane's copies of item i have landed...
        __syncwarp();                 // ...and every other lane's
        const int st = i % steps_per_row, g = warp_global + (i / steps_per_row) * warps_total;
        const int u = packed ? lane % nu : LSEG * st + lane % LSEG;  // this lane's unit of its row
        if (packed ? g * R + lane / nu < M : u < nu && g * R + lane / LSEG < M) {
            Unit<WF> cur;
            cur.load_shared(ring + (i % STAGES) * STEP_VECS + lane * VECS);
            // [end excerpt: consume]
#pragma unroll
            for (int b = 0; b < UNIT; b++) {
                int v[WF::qs_words];
                float d_w, m_w = 0.0f;
                if constexpr (has_min<WF>)
                    cur.block(b, v, d_w, m_w);
                else
                    cur.block(b, v, d_w);
                block_times_tokens<WF, T>(v, d_w, m_w, act, UNIT * u + b, acc);
            }
        }
        if (st == steps_per_row - 1) finish_rows(g * R, seg);
        __syncwarp();  // every lane is done with slot i % STAGES before it is refilled
    }
}

// ---------------------------------------------------------------- launchers
struct DeviceInfo {
    int sms = 0, smem_optin = 0, major = 0;
};
const DeviceInfo& device_info() {  // looked up once per device, not per call
    static DeviceInfo info[64];
    int dev = 0;
    cudaGetDevice(&dev);
    DeviceInfo& d = info[dev % 64];
    if (d.sms == 0) {
        cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev);
    }
    return d;
}

// The kernel instance of a layout with `stages` ring stages: the depth the layout prefers
// (decode_plan::decode_stages) or the one that fits a GPU of 99 KB per CTA (decode_stages_small).
template <class WF, int T, class Acts, bool PACKED, int RG>
auto decode_instance(int stages) {
    constexpr int PREF = decode_plan::decode_stages(T, Unit<WF>::VECS, PACKED, RG);
    constexpr int SMALL = decode_plan::decode_stages_small(T, Unit<WF>::VECS, PACKED, RG);
    return stages == PREF ? decode_kernel<WF, T, Acts, PACKED, RG, PREF>
                          : decode_kernel<WF, T, Acts, PACKED, RG, SMALL>;
}

template <class WF, int T, class Acts>
void launch_pass(const ActSource& src, const typename WF::block* W, float* C, int M, int K, int nb_total, int kb0,
                 int nb, bool accumulate, cudaStream_t stream) {
    const int nu = (nb + UNIT - 1) / UNIT;
    const DeviceInfo& dev_info = device_info();
    // The layout (packed short rows, or 1 or 4 rows a step), the ring's depth and the shared memory
    // (decode_plan.h); it throws where the GPU's shared memory cannot hold even the smallest ring.
    const decode_plan::DecodeLaunch plan = decode_plan::decode_launch(
        decode_format<WF>(), T, M, nb_total, kb0, nb, dev_info.sms, decode_plan::planned_smem(dev_info.smem_optin));
    constexpr int RG = decode_plan::decode_rows_per_step(decode_format<WF>(), T);
    // Q4_0's rows of 16 units at 2 tokens in fours: the one layout whose rows per step differ from RG
    constexpr int RG_Q4 = std::is_same<WF, w_q4_0>::value && T >= 2 && T <= 4 ? 4 : RG;
    const bool alt = !plan.packed && plan.rg != RG;  // only Q4_0 at 2 tokens (decode_rows_of_16_in_fours)
    auto kernel = plan.packed ? decode_instance<WF, T, Acts, true, 1>(plan.stages)
                  : alt       ? decode_instance<WF, T, Acts, false, RG_Q4>(plan.stages)
                              : decode_instance<WF, T, Acts, false, RG>(plan.stages);
    const size_t smem = plan.smem;
    if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    int dev = 0;
    cudaGetDevice(&dev);
    // CTAs per SM, by device, units per row, layout and ring depth (one kernel instance each): a grid-size hint
    static int per_sm_cache[8][256][3][3] = {};
    int& per_sm = per_sm_cache[dev % 8][nu % 256][plan.packed ? 0 : alt ? 1 : 2][(plan.stages - 1) % 3];
    if (per_sm == 0) {
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, DEC_THREADS, smem);
        per_sm = std::max(per_sm, 1);
    }
    // A few CTAs per SM, their warps looping over rows: enough warps to keep HBM busy, few enough
    // CTAs that the activations are not copied (or quantized) again for every 8 rows.
    const int groups = (M + plan.rg - 1) / plan.rg;                // a warp's rows per pass (packed rows: at least)
    const int ctas_needed = (groups + DEC_WARPS - 1) / DEC_WARPS;  // one group per warp
    const int ctas = std::max(1, std::min(ctas_needed, dev_info.sms * std::min(per_sm, 2)));
    // [excerpt: pdl_launch]
    const bool pdl = Acts::PDL && dev_info.major >= 9;  // PDL: sm_90 and later
    launch_maybe_pdl(kernel, dim3(ctas), dim3(DEC_THREADS), smem, stream, pdl, src, W, C, M, K, nb_total, kb0, nb,
                     accumulate);
    // [end excerpt: pdl_launch]
}
template <class WF, class Acts>
void launch_tokens(int T, const ActSource& src, const typename WF::block* W, float* C, int M, int K, int nb_total,
                   int kb0, int nb, bool accumulate, cudaStream_t stream) {
    switch (T) {
        case 1: launch_pass<WF, 1, Acts>(src, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 2: launch_pass<WF, 2, Acts>(src, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 3: launch_pass<WF, 3, Acts>(src, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 4: launch_pass<WF, 4, Acts>(src, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 5: launch_pass<WF, 5, Acts>(src, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 6: launch_pass<WF, 6, Acts>(src, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 7: launch_pass<WF, 7, Acts>(src, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        default: launch_pass<WF, 8, Acts>(src, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
    }
}
}  // namespace

// A is float32 [N, K] (p.A); W is WF blocks [M, K/32]; p.workspace holds what Acts::prepare
// writes there (gemm.h: act_workspace_bytes), 2_decode.cu's activation image.
template <class WF, class Acts>
void gemm_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    const int nb_total = p.K / QK, nu_total = (nb_total + UNIT - 1) / UNIT;
    // K chunk of a pass of T tokens (decode_plan::decode_chunk_blocks): as many whole units as fit in
    // shared memory beside that pass's weight ring.
    const int smem_optin = decode_plan::planned_smem(device_info().smem_optin);
    auto chunk_for = [&](int T) {
        return decode_plan::decode_chunk_blocks(decode_format<WF>(), T, nb_total, smem_optin);
    };
    const float* A = (const float*)p.A;
    int4* img_qs = (int4*)p.workspace;
    float2* img_ds = (float2*)(img_qs + (size_t)p.N * nu_total * A_UNIT_VECS);
    Acts::prepare(p, img_qs, img_ds, nb_total, nu_total, stream);
    for (int n0 = 0; n0 < p.N; n0 += MAX_T) {
        const int T = std::min(MAX_T, p.N - n0), chunk = chunk_for(T);
        const ActSource src{A + (int64_t)n0 * p.K, img_qs + (size_t)n0 * nu_total * A_UNIT_VECS,
                            img_ds + (size_t)n0 * ds_pitch(nu_total), nu_total};
        for (int kb0 = 0; kb0 < nb_total; kb0 += chunk)
            launch_tokens<WF, Acts>(T, src, (const typename WF::block*)p.W, p.C + (int64_t)n0 * p.M, p.M, p.K, nb_total,
                                    kb0, std::min(chunk, nb_total - kb0), kb0 > 0, stream);
    }
}

}  // namespace gpu
