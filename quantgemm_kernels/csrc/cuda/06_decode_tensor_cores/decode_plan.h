// cuda/06_decode_tensor_cores/decode_plan.h (chapter 6): how the decode kernel (decode.cuh) lays out
// one launch on a given GPU: which rows a warp step holds, how many steps a warp keeps in flight (its
// ring), the shared memory that takes, and how much of K one launch covers. Plain C++, no CUDA: the
// CPU build answers for any GPU too (the operator quantgemm::decode_plan), so that the tests check on
// any machine that no plan asks for more shared memory than the GPU allows per CTA: 227 KB on
// Hopper, 163 KB on an A100, 99 KB on sm_86, sm_89 and sm_120 (RTX 30x0, RTX 40x0 and L4, RTX 50x0).
//
// The rules were measured on Hopper, where everything fits; a GPU with less shared memory gets the
// same layout with fewer ring stages where the preferred ring does not fit (Q8_0's ring of 2 steps
// per warp is 136 KB, Q4_0's of 3 steps 108 KB), and shorter K chunks. One step in flight per warp
// still leaves 8 per SM: 36 KB of Q4_0 or 68 KB of Q8_0, against the ~5 KB an SM of an RTX 4090
// (1 TB/s over 128 SMs) needs in flight to cover ~600 ns of DRAM latency. Not measured on such a GPU.
#pragma once
#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "../../gemm.h"  // QG_DECODE_UNIT_VECS, QG_DECODE_UNIT_DS: the activations' layout in shared memory

#if defined(__CUDACC__)
#define QG_DECODE_HD __host__ __device__
#else
#define QG_DECODE_HD
#endif

namespace decode_plan {
constexpr int WARPS = 8;         // warps per CTA (256 threads)
constexpr int UNIT = 8;          // weight blocks per unit: 8 x 18 B = 144 B = 9 x 16 B (Q4_0)
constexpr int MAX_T = 8;         // tokens per pass
constexpr int RING_ALIGN = 128;  // the rings start on a 128-byte line (DecodeSmem)
// The least opt-in shared memory per CTA of a GPU the kernel runs on (sm_86, sm_89, sm_120: 99 KB).
// Each layout has a kernel instance with the ring depth it prefers and one with the depth that fits
// here (decode_stages_small); a GPU with less is refused with a clear error.
constexpr int SMEM_SMALLEST = 99 * 1024;

// A cap on the opt-in shared memory per CTA that the launcher plans for (0: none), set through the
// operator quantgemm::decode_smem_cap: a GPU with more shared memory then runs the plans of one with
// less (the tests run the 99 KB and 163 KB plans on an H100 or H200).
inline std::atomic<int>& smem_cap() {
    static std::atomic<int> cap{0};
    return cap;
}
inline int planned_smem(int smem_optin) {
    const int cap = smem_cap().load();
    return cap > 0 && cap < smem_optin ? cap : smem_optin;
}

// Shared memory per token and unit of 8 blocks: 17 vectors of quants (16 + a pad), 9 (d, s) pairs
constexpr int SMEM_PER_TOKEN_UNIT = QG_DECODE_UNIT_VECS * 16 + QG_DECODE_UNIT_DS * 8;  // 344 bytes

// [excerpt: ds_pitch]
// One token's (d, s) pairs take an even number of float2 (a whole number of 16-byte vectors), so
// that every token row, in the workspace and in shared memory, can be copied with cp.async.
QG_DECODE_HD constexpr int ds_pitch(int nu) { return (nu * QG_DECODE_UNIT_DS + 1) / 2 * 2; }
// [end excerpt: ds_pitch]

// Shared memory of one launch: activation quants | activation (d, s) | one ring of `stages` steps
// per warp | the activations' mbarrier. T tokens, nu units of 8 blocks per row, unit_vecs 16-byte
// vectors per weight unit (9 Q4_0, 10 Q4_1, 17 Q8_0), a step being 32 units.
// The weight ring starts on a 128-byte boundary: a warp's cp.async of 512 consecutive bytes then
// fills four whole 128-byte lines of shared memory, as its source is four whole lines of global
// memory. (The activations before it end wherever T, nu and the pads put them: at K = 14336 and an
// odd number of tokens, 64 bytes past a boundary.)
struct DecodeSmem {
    size_t act_qs, act_ds, stage, bar, total;  // byte offsets, 16-byte aligned (stage: 128)
    QG_DECODE_HD constexpr DecodeSmem(int T, int nu, int unit_vecs, int stages)
        : act_qs(0),
          act_ds((size_t)T * nu * QG_DECODE_UNIT_VECS * 16),
          stage((act_ds + (size_t)T * ds_pitch(nu) * 8 + RING_ALIGN - 1) / RING_ALIGN * RING_ALIGN),
          bar(stage + (size_t)WARPS * stages * 32 * unit_vecs * 16),  // the activations' mbarrier (sm_90)
          total(bar + 16) {}
};

// A weight format as the plan sees it.
struct DecodeFormat {
    int unit_vecs;  // 16-byte vectors per unit of 8 blocks
    bool q4_0, q8_0;
};

// Steps in flight per warp that the measurements chose (Hopper): 3 where the rows are long (Q4_0
// steps, 3 <= T <= 4, not packed), else 2. One and two tokens take 2: a CTA then needs 93 or 112 KB
// for K = 14336 and two CTAs fit on an SM, 16 warps and 16 steps in flight, where 3 stages would
// leave room for one CTA (8 warps, 24 steps). At K = 14336, from 3 tokens two CTAs no longer fit.
// Q4_0's rows of 16 units in fours (rg 4) at 2 tokens take 3 too: a warp's two steps both in flight.
QG_DECODE_HD constexpr int decode_stages(int T, int unit_vecs, bool packed, int rg = 1) {
    return ((T >= 3 && T <= 4) || (T == 2 && rg == 4)) && unit_vecs <= 9 && !packed ? 3 : 2;
}
// The most stages, up to decode_stages, whose CTA fits SMEM_SMALLEST with a K chunk of 2 units (the
// shortest gemm_q8_1_decode cuts); 1 if none does.
QG_DECODE_HD constexpr int decode_stages_small(int T, int unit_vecs, bool packed, int rg = 1) {
    int s = decode_stages(T, unit_vecs, packed, rg);
    while (s > 1 && DecodeSmem(T, 2, unit_vecs, s).total > (size_t)SMEM_SMALLEST) s--;
    return s;
}

// Rows per warp step where rows are long (not packed): 4 for Q4_0 and Q8_0 at 3 to 8 tokens, else 1
// (see decode_kernel). Measured (H100, weights cold, graph-replayed calls; bench_results/
// nvidia-h100-80gb-hbm3/2026-11-27/decode-rows-tl.txt), Q4_0 4096 x 14336: N = 3 18.0 -> 17.1 us,
// N = 4 21.5 -> 20.0, N = 8 32.7 -> 29.2; at one token 4 rows per step was slower (15.3 -> 16.7:
// half as many warps have a row group of their own), as was 2 rows per step at one token; at
// 2 tokens 4 rows per step measured within 1 % (15.0 against 15.1). Q8_0 (twice the weight bytes
// per activation byte) measured 3 to 6 % slower with 4 rows at every N = 1-4 on that H100, in an
// older build (activations on cp.async, the ring off a 128-byte boundary at odd N); the kernel of
// today on an H200 (one machine, builds run in turn; bench_results/nvidia-h200/2026-11-29/
// decode-rows-q8-ab.txt), Q8_0 4096 x 14336: N = 4 22.40 / 22.32 -> 20.03 / 20.19 us, N = 6 47.12 /
// 47.39 -> 34.34 / 34.26, N = 8 44.08 / 44.16 -> 35.65 / 35.62, N = 3 level (19.20 / 19.18 against
// 19.22 / 19.17). So Q8_0 takes 4 rows from 3 tokens too; the H100 has not measured this build.
// From 2 tokens it was slower there (N = 2 18.35 / 18.37 -> 19.06 / 19.04 us, same record).
QG_DECODE_HD constexpr int decode_rows_per_step(DecodeFormat f, int T) { return (f.q4_0 || f.q8_0) && T >= 3 ? 4 : 1; }

// Rows of 16 units (K = 4096), which packed rows put two to a step, take the long rows' layout of 4
// rows per step instead (8 lanes a row, two steps per group of rows), so that a warp's activation
// loads touch 8 units instead of 16:
//  * Q8_0 from 4 tokens. H200, one machine, two builds run in turn, weights cold (bench_results/
//    nvidia-h200/2026-11-29/decode-packrg-ab.txt): Q8_0 4096 x 4096 N = 4 9.76 / 9.76 -> 8.96 / 8.99
//    us, N = 8 13.66 / 13.60 -> 11.65 / 11.59; 14336 x 4096 N = 4 21.84 / 21.79 -> 21.44 / 21.44, N = 8
//    35.02 / 34.98 -> 32.40 / 32.54. At 3 tokens it was slower on 14336 x 4096 (19.20 -> 20.19).
//  * Q4_0 at 2 to 4 tokens, with 3 ring stages (a warp's two steps both in flight), where the row
//    groups of four fill the SMs once: one group per warp, one CTA per SM, more than half the SMs busy
//    (M in (16 sms, 32 sms]: 4096 rows on a 132-SM GPU), and where that CTA fits the GPU's shared
//    memory. Packed, a warp has one step of two rows; in fours its 128-bit activation loads touch 8
//    units instead of 16. Same machine and method (decode-q4fours-ab.txt): 4096 x 4096 N = 2 7.15 /
//    7.14 -> 7.04 / 7.02 us, N = 3 8.03 / 8.03 -> 7.78 / 7.78, N = 4 8.99 / 9.02 -> 8.48 / 8.48; 14336 x
//    4096 (3584 groups: packed) unchanged. With fewer rows the grid shrinks with them: 1024 x 4096 (32
//    CTAs) N = 2 4.54 -> 5.50, N = 4 5.66 -> 6.94. Q4_0 in fours on every layer of rows of 16 units
//    (decode-packrg-ab.txt) gained on 4096 x 4096 at 3 and 4 tokens but lost on 14336 x 4096, and at
//    5 and 6 tokens on 4096 x 4096 (half the CTAs): not taken.
inline bool decode_rows_of_16_in_fours(DecodeFormat f, int T, int M, int sms, int smem_optin) {
    if (f.q8_0) return T >= 4;
    return f.q4_0 && T >= 2 && T <= 4 && M > 16 * sms && M <= 4 * WARPS * sms &&
           DecodeSmem(T, 16, f.unit_vecs, decode_stages(T, f.unit_vecs, false, 4)).total <= (size_t)smem_optin;
}

// One launch of the kernel: T tokens, blocks [kb0, kb0 + nb) of rows nb_total blocks long.
struct DecodeLaunch {
    bool packed;  // short rows, 32 / nu of them a step (K = 256, 512, ..., 4096 as one launch)
    int rg;       // rows per step where not packed (1 or 4)
    int stages;   // steps in flight per warp: decode_stages, or decode_stages_small where that does not fit
    size_t smem;  // bytes of shared memory per CTA
};
inline DecodeLaunch decode_launch(DecodeFormat f, int T, int M, int nb_total, int kb0, int nb, int sms,
                                  int smem_optin) {
    const int nu = (nb + UNIT - 1) / UNIT;
    // Whole rows of whole units: a packed step (or a group of four rows of 16 units) covers all of K.
    const bool whole = nb_total % UNIT == 0 && kb0 % UNIT == 0 && nb == nb_total;
    const bool fours = whole && nu == 16 && decode_rows_of_16_in_fours(f, T, M, sms, smem_optin);
    DecodeLaunch l{};
    l.packed = whole && nu < 32 && 32 % nu == 0 && !fours;
    l.rg = l.packed ? 1 : fours ? 4 : decode_rows_per_step(f, T);
    const int pref = decode_stages(T, f.unit_vecs, l.packed, l.rg);
    const bool fits = DecodeSmem(T, nu, f.unit_vecs, pref).total <= (size_t)smem_optin;
    l.stages = fits ? pref : decode_stages_small(T, f.unit_vecs, l.packed, l.rg);
    l.smem = DecodeSmem(T, nu, f.unit_vecs, l.stages).total;
    if (l.smem > (size_t)smem_optin)
        throw std::runtime_error("the decode kernel needs " + std::to_string(l.smem) + " bytes of shared memory per " +
                                 "CTA for " + std::to_string(T) + " tokens and " + std::to_string(nu) +
                                 " units; this GPU allows " + std::to_string(smem_optin));
    return l;
}

// Blocks of K per launch for a pass of T tokens: as many whole units as fit in shared memory beside
// the long rows' ring (the layout a chunk of K takes); an even number of units, so that every
// chunk's (d, s) pairs start 16-byte aligned. Sized for the pass's own T: sized for 8 tokens,
// Q4_1's larger ring split K = 14336 in two passes. A pass that covers K whole may take the packed
// or the four-row layout instead: decode_launch fits each launch's ring to the GPU (Q4_0's four-row
// layout only where its 3 stages fit, decode_rows_of_16_in_fours).
inline int decode_chunk_blocks(DecodeFormat f, int T, int nb_total, int smem_optin) {
    const int rg = decode_rows_per_step(f, T);
    int stages = decode_stages(T, f.unit_vecs, false, rg);
    if (DecodeSmem(T, 2, f.unit_vecs, stages).total > (size_t)smem_optin)
        stages = decode_stages_small(T, f.unit_vecs, false, rg);
    const long budget = (long)smem_optin - (long)DecodeSmem(0, 0, f.unit_vecs, stages).total - 16 - 8 * T -
                        RING_ALIGN;  // ds_pitch's rounding, the ring's alignment
    long units = budget / ((long)T * SMEM_PER_TOKEN_UNIT) / 2 * 2;
    if (units < 2) units = 2;  // decode_launch refuses what then does not fit
    return units * UNIT < (long)nb_total ? (int)(units * UNIT) : nb_total;
}
}  // namespace decode_plan
