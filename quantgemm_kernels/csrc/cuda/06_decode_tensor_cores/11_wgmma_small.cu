// cuda/06_decode_tensor_cores/11_wgmma_small.cu (chapter 6): the weights as the wgmma's M, read
// by the tensor cores from registers; the tokens as its N (8, 16, 32 or 64), seventh wgmma step.
//
// What it teaches: putting the small dimension where the instruction lets it be small. The wgmma
// steps before this one give the tokens the wgmma's M, which is 64 at least, and have a producer
// warpgroup unpack every weight block into int8 in shared memory for the tensor cores to read.
// With 8 or 16 tokens most of the tensor cores' work is padding, and the unpacking (a shared-memory
// write and read of 32 bytes per block and row, by 128 producer threads) is as large as all the
// rest: the sixth step takes 35 us at N = 16 where streaming the weights once takes 11 (Q4_0,
// 4096 x 14336, H100). Here the weight rows are the wgmma's M (64 per consumer warpgroup) and the
// tokens its N, rounded up to 8, 16, 32 or 64; and the A operand of wgmma may come from registers:
// each consumer thread reads the raw Q4_0 or Q8_0 bytes of its two rows from the stage (as the TMA
// box wrote them, 18 or 34 bytes a block), turns them into the fragment in registers (Q4_0: a 32-bit
// word of nibbles is the fragment's words for k and k + 16), and the wgmma reads them there. The
// producer is one thread that only issues copies: the weights' box and the first NT tokens of the
// activation unit, per K step, on one mbarrier.
// The fragment (CUTLASS's ALayout_64x32 for 8-bit types): lane (g, t) of warp w holds in register
// i the 4 values k = 4t + 16 (i / 2) .. + 3 of row 16 w + g + 8 (i % 2). A Q4_0 block's byte j has
// k = j in its low nibble and k = j + 16 in its high one, so the word of bytes 4t .. 4t + 3 gives
// registers 0 and 2 (1 and 3 for row g + 8); Q8_0's words at bytes 4t and 16 + 4t are them as they are.
// The arithmetic is the sixth step's (the offset 2^19 planted by a wgmma of -128 constants, the
// int32 result read as a subnormal, two FMAs per result and block, the same splits and order), so
// every output bit is the sixth step's (a test checks it); the accumulator's layout is transposed
// (a thread holds 2 rows x NT / 4 tokens instead of 2 tokens x 32 rows).
// Measured (H100, cold, graph-replayed calls, llama.cpp and cuBLAS in the same run;
// bench_results/nvidia-h100-80gb-hbm3/2026-11-27/small-sweep-082729.json), Q4_0, M = 4096,
// K = 14336, median us: N = 8 23.0 against llama.cpp's 34.8, the sixth step's 35.6 and cuBLAS fp16's
// 43.6; N = 16 24.8 / 38.8 / 35.6; N = 32 29.2 / 47.4 / 35.9; N = 64 41.4 / 62.6 / 36.4 (two sets in
// flight only: the sixth step stays faster from N = 48). At N <= 4 the decode kernel is faster
// (21.2 against 22.9 at N = 4).
// Where the time goes (Nsight Compute, Q4_0, 4096 x 14336; small-ncu-n16.txt, and the stall counts
// per issued instruction in small-ncu-stalls.txt): one CTA per SM (shared memory), 2.2 warps per
// scheduler issuing 0.4 instructions a cycle, DRAM at about 42 % of its peak. Per issued instruction
// at N = 8 a warp waits 2.15 cycles on the long scoreboard, 0.7 on wgmma_wait and 0.5 on the tensor
// cores. The consumers issue no global loads, so the long scoreboard is most plausibly the stage
// mbarriers' try_wait: the weights reach the stages more slowly than memory could send them. Next:
// find what bounds the box copies per SM (128 rows of 144 bytes, 8064 bytes apart, per K step).
// Kept: the K step's raw words and scales read at its start, and each block's pairs read before
// the wait for its wgmma (the wgmma fences are compiler barriers: a load beside its block's wgmma
// waits out its latency there): 30.9 -> 29.2 us at N = 32, 25.3 -> 24.9 at N = 16.
// Tried and lost: the weight box's L2 promotion at 256 bytes, 64 bytes or none instead of 128
// (within 0.5 us at N = 8, 16, 32 on 4096 x 14336 and 14336 x 4096, Q4_0 and Q8_0). CTAs of 64
// rows (one consumer warpgroup and a producer warp, 160 threads, 108 KB of stages, __maxnreg__(200))
// meant to run two per SM, each with its own copies in flight: Nsight Compute still found one per
// SM (its block limits for registers and shared memory both 1; 4.9 warps per SM), and N = 16 took
// 29.7 us against 24.8 (small-64rows-083801.json, the same splits, every bit the same: its tests
// passed).
// Grid: x = ceil(M / 128), z = the fifth step's splits (gemm.h's wgmma_splits); 384 threads: two
// consumer warpgroups (rows 0..63, 64..127 of the tile, setmaxnreg 232) and a producer warpgroup
// (setmaxnreg 40) of which one thread issues the copies. N > 64, or rows whose
// K steps are not 16-byte aligned (K / 32 not a multiple of 8: no TMA box), go to the sixth step.
#include "wgmma_ws.cuh"

namespace gpu {
namespace wg {
namespace {
constexpr int SM_CONSUMERS = 256, SM_THREADS = SM_CONSUMERS + 128;  // two consumer warpgroups, a producer
constexpr int SMEM_BUDGET = 220 * 1024;                             // for the stages; the H100's limit is 227 KB a CTA

// d (64 x NT int32, NT / 2 registers per thread) = A (64 x 32 int8, 4 registers) * B (NT x 32 int8,
// shared memory) [+ d if SCALE_D].
template <int SCALE_D>
__device__ __forceinline__ void wgmma_rs(int (&d)[4], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8 "
        "{%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, %8, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}
template <int SCALE_D>
__device__ __forceinline__ void wgmma_rs(int (&d)[8], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}
template <int SCALE_D>
__device__ __forceinline__ void wgmma_rs(int (&d)[16], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
          "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}
template <int SCALE_D>
__device__ __forceinline__ void wgmma_rs(int (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
          "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]),
          "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]),
          "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}

template <class WF, int NT>
struct SmallStage {
    static constexpr int B = (int)sizeof(typename WF::block);
    static constexpr int RAW_ROW = KB * B;  // bytes of a row's K step as stored (144 or 272)
    uint8_t a[KB][NT * QK];                 // the first NT tokens of each block of the unit (core-matrix order)
    float2 ad[KB][NT];                      // their (d_a 2^64, c)
    uint8_t w[BM][RAW_ROW];                 // the weights' K step, as the TMA box wrote it
};
template <class WF, int NT>
constexpr int SMALL_STAGES =
    SMEM_BUDGET / (int)sizeof(SmallStage<WF, NT>) < 8 ? SMEM_BUDGET / (int)sizeof(SmallStage<WF, NT>) : 8;
template <class WF, int NT>
struct SmallSmem {
    SmallStage<WF, NT> st[SMALL_STAGES<WF, NT>];
    uint8_t ones[NT * QK];  // -128 everywhere: B of the offset's wgmma
    uint64_t full[SMALL_STAGES<WF, NT>], empty[SMALL_STAGES<WF, NT>];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The 32-bit word at byte base + 4t of a stage row (16-byte aligned). base is known at compile time
// (the loops over blocks are unrolled); base % 4 is 2 where a block's quants start on an odd 16-bit
// boundary (every other Q4_0 and Q8_0 block): two 16-bit loads then.
__device__ __forceinline__ uint32_t raw_word(const uint8_t* row, int base, int t) {
    if (base % 4 == 0) return *(const uint32_t*)(row + base + 4 * t);
    const uint16_t* h = (const uint16_t*)(row + base + 4 * t);
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

// The end of a K step: blocks KB - SETS .. KB - 1 are pending; scale each once its group is done
// (KB - 1 - b groups may still run). wgmma_wait takes the count at compile time, hence the recursion.
template <int SETS, int J = 0, class Load, class Scale, class Stage_>
__device__ __forceinline__ void wait_and_scale_tail(Load& load_da, Scale& scale, const Stage_& cur) {
    if constexpr (J < SETS) {
        const auto p = load_da(cur, KB - SETS + J);
        wgmma_wait<SETS - 1 - J>();
        scale(KB - SETS + J, p);
        wait_and_scale_tail<SETS, J + 1>(load_da, scale, cur);
    }
}
template <int NT>
struct Pairs {  // a thread's (d_a 2^64, c) pairs of one block: tokens 8j + 2t and 8j + 2t + 1, j < NT / 8
    float4 v[NT / 8];
};
#endif

template <class WF, int NT, bool SPLIT>
__global__ void __launch_bounds__(SM_THREADS, 1)
    wgmma_small_kernel(const uint8_t* __restrict__ ws, const __grid_constant__ CUtensorMap wmap, float* __restrict__ C,
                       int64_t split_plane, int N, int M, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using St = SmallStage<WF, NT>;
    constexpr int STAGES = SMALL_STAGES<WF, NT>;
    constexpr int B = St::B;
    extern __shared__ __align__(1024) int4 smem_raw[];
    SmallSmem<WF, NT>& sm = *(SmallSmem<WF, NT>*)smem_raw;
    const int steps = K / QK / KB;  // the launcher sends only K / 32 % 8 == 0 here
    const int s_begin = SPLIT ? (int)((int64_t)steps * blockIdx.z / gridDim.z) : 0;
    const int s_end = SPLIT ? (int)((int64_t)steps * (blockIdx.z + 1) / gridDim.z) : steps;
    const int m0 = blockIdx.x * BM;
    const int tid = threadIdx.x;

    for (int i = tid; i < NT * QK / 16; i += SM_THREADS)
        ((uint4*)sm.ones)[i] = make_uint4(0x80808080u, 0x80808080u, 0x80808080u, 0x80808080u);
    if (tid == 0)
        for (int i = 0; i < STAGES; i++) {
            bar_init(&sm.full[i], 1);              // the producer's expect_tx, then the copies' bytes
            bar_init(&sm.empty[i], SM_CONSUMERS);  // every consumer thread, after its last read
        }
    fence_proxy_async();  // the barriers' init, the ones: seen by the async proxy
    __syncthreads();

    if (tid >= SM_CONSUMERS) {  // ---- producer warpgroup: one thread issues every copy
        set_max_regs_dec<40>();
        if (tid != SM_CONSUMERS) return;
        constexpr int W_BYTES = BM * St::RAW_ROW, A_BYTES = KB * NT * (QK + (int)sizeof(float2));
        auto copy_w = [&](int s) {
            const int i = (s - s_begin) % STAGES;
            bar_expect(&sm.full[i], W_BYTES + A_BYTES);
            tma_copy_2d(&sm.st[i].w[0][0], &wmap, s * St::RAW_ROW / 2, m0, &sm.full[i]);
        };
        auto copy_a = [&](int s) {  // the first NT tokens of each block: NT / 8 row groups, NT pairs
            const int i = (s - s_begin) % STAGES;
            const uint8_t* unit = ws + (int64_t)s * QG_WGMMA_UNIT_BYTES;
#pragma unroll
            for (int b = 0; b < KB; b++) {
                bulk_copy(&sm.st[i].a[b][0], unit + b * BN * QK, NT * QK, &sm.full[i]);
                bulk_copy(&sm.st[i].ad[b][0], unit + KB * BN * QK + b * BN * (int)sizeof(float2),
                          NT * (int)sizeof(float2), &sm.full[i]);
            }
        };
        // Launched with PDL, the CTA may start while the quantizer still runs: the first stages'
        // weights are requested before the wait, their activations after it.
        const int pro = min(STAGES, s_end - s_begin);
        for (int k = 0; k < pro; k++) copy_w(s_begin + k);
        grid_dependency_wait();
        for (int k = 0; k < pro; k++) copy_a(s_begin + k);
        for (int s = s_begin + pro; s < s_end; s++) {
            const int i = (s - s_begin) % STAGES, round = (s - s_begin) / STAGES;
            bar_wait(&sm.empty[i], (round - 1) & 1);  // the consumers are done with step s - STAGES
            copy_w(s);
            copy_a(s);
        }
        return;
    }

    // ---- consumer warpgroups: rows 64 wg + 16 (warp % 4) + g and + 8 of the tile
    set_max_regs_inc<232>();  // 128 x 40 + 256 x 232 <= 65536
    const int lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int r0 = 64 * (warp / 4) + 16 * (warp % 4) + g;
    const uint64_t ones_desc = smem_desc(sm.ones);
    const uint32_t ones_a[4] = {0x80808080u, 0x80808080u, 0x80808080u, 0x80808080u};
    constexpr float DW = WF::offset == 8 ? DW_SCALE / 16 : DW_SCALE;  // Q4_0: the mma sums 16 (q - 8) a
    float acc[NT / 2] = {};
    // SETS blocks in flight: a set's A registers, weight scales and result live from its block's
    // issue to its scaling, and the wgmma of block b runs while blocks b - SETS + 1 .. b - 1 are
    // issued or scaled. A K step's 8 blocks all in flight where the results are small (NT <= 16).
    constexpr int SETS = NT <= 16 ? 8 : NT == 32 ? 4 : 2;
    int D[SETS][NT / 2];
    uint32_t A[SETS][4];
    float dw[SETS][2];
    // [excerpt: small_fragment]
    // A K step's raw words and weight scales, read at its start: the loads are in flight together
    // (the wgmma fences below are compiler barriers: a load written beside its block's wgmma
    // waits out its latency there, block after block).
    constexpr int RW = WF::offset == 8 ? 2 : 4;  // words per block: Q4_0 a word per row, Q8_0 two
    uint32_t raw[KB][RW];
    fp16_bits raw_d[KB][2];
    auto load_raw = [&](const St& cur) {
        const uint8_t* row0 = &cur.w[r0][0];
        const uint8_t* row1 = &cur.w[r0 + 8][0];
#pragma unroll
        for (int b = 0; b < KB; b++) {
            raw[b][0] = raw_word(row0, b * B + 2, t), raw[b][1] = raw_word(row1, b * B + 2, t);
            if constexpr (RW == 4) raw[b][2] = raw_word(row0, b * B + 18, t), raw[b][3] = raw_word(row1, b * B + 18, t);
            raw_d[b][0] = *(const fp16_bits*)(row0 + b * B);
            raw_d[b][1] = *(const fp16_bits*)(row1 + b * B);
        }
    };
    auto issue = [&](const St& cur, int b) {
        uint32_t (&a)[4] = A[b % SETS];
        if constexpr (WF::offset == 8) {  // Q4_0: the word of bytes 4t .. 4t + 3 of each row
            a[0] = q4_0_signed_lo(raw[b][0]), a[1] = q4_0_signed_lo(raw[b][1]);
            a[2] = q4_0_signed_hi(raw[b][0]), a[3] = q4_0_signed_hi(raw[b][1]);
        } else {  // Q8_0: the words at bytes 4t and 16 + 4t
            a[0] = raw[b][0], a[1] = raw[b][1], a[2] = raw[b][2], a[3] = raw[b][3];
        }
        dw[b % SETS][0] = scale_to_float(raw_d[b][0]) * DW;
        dw[b % SETS][1] = scale_to_float(raw_d[b][1]) * DW;
        wgmma_fence();  // the A registers were written, and earlier reads of this set come first
        wgmma_rs<0>(D[b % SETS], ones_a, ones_desc);  // 2^19 everywhere
        wgmma_rs<1>(D[b % SETS], a, smem_desc(&cur.a[b][0]));
        wgmma_commit();
    };
    // [end excerpt: small_fragment]
    // The tokens' (d_a 2^64, c) of block b: read before the wait for its wgmma.
    auto load_da = [&](const St& cur, int b) {
        Pairs<NT> p;
#pragma unroll
        for (int j = 0; j < NT / 8; j++) p.v[j] = *(const float4*)&cur.ad[b][8 * j + 2 * t];  // tokens 8j + 2t, + 1
        return p;
    };
    // d[4j + q]: row r0 + 8 (q / 2), token 8j + 2t + q % 2: x = d_a sumi 2^-85, then d_w x.
    auto scale = [&](int b, const Pairs<NT>& p) {
        int (&d)[NT / 2] = D[b % SETS];
        fence_regs(d);
#pragma unroll
        for (int j = 0; j < NT / 8; j++) {
            const float4 da = p.v[j];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float dax = q % 2 ? da.z : da.x, c = q % 2 ? da.w : da.y;
                const float x = fma_rn(dax, __int_as_float(d[4 * j + q]), c);
                acc[4 * j + q] = fma_rn(dw[b % SETS][q / 2], x, acc[4 * j + q]);
            }
        }
    };
    // The pipeline drains at the end of each K step (see wgmma_ws.cuh: ptxas serializes wgmmas
    // whose results are in flight across a loop's back edge).
    for (int s = s_begin; s < s_end; s++) {
        const int i = (s - s_begin) % STAGES, round = (s - s_begin) / STAGES;
        const St& cur = sm.st[i];
        bar_wait(&sm.full[i], round & 1);
        load_raw(cur);
#pragma unroll
        for (int b = 0; b < KB; b++) {
            if (b >= SETS) {  // block b - SETS's set is needed again: SETS groups pending, the oldest must be done
                const Pairs<NT> p = load_da(cur, b - SETS);
                wgmma_wait<SETS - 1>();
                scale(b - SETS, p);
            }
            issue(cur, b);
        }
        wait_and_scale_tail<SETS>(load_da, scale, cur);
        bar_arrive(&sm.empty[i]);  // every thread: an arrival releases the arriving thread's reads
    }
    // acc[4j + q]: token 8j + 2t + q % 2, row m0 + r0 + 8 (q / 2)
    float* out = SPLIT ? C + blockIdx.z * split_plane : C;
#pragma unroll
    for (int j = 0; j < NT / 8; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int n = 8 * j + 2 * t + q % 2, m = m0 + r0 + 8 * (q / 2);
            if (n < N && m < M) out[(int64_t)n * M + m] = acc[4 * j + q];
        }
#endif
}

template <class WF, int NT>
void launch_small(const GemmProblem& p, cudaStream_t stream, int splits, float* out) {
    const size_t smem = sizeof(SmallSmem<WF, NT>);
    const int64_t plane = (int64_t)p.N * p.M;
    wgmma_prepare_and_launch<WF>(p, stream, [&](dim3 grid, const uint8_t* ws, const CUtensorMap& wmap, float*, int N) {
        grid.z = splits;
        // SPLIT is a template argument of the kernel: the same launch for either instance
        auto launch = [&](auto kernel) {
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
            launch_maybe_pdl(kernel, grid, dim3(SM_THREADS), smem, stream, true, ws, wmap, out, plane, N, p.M, p.K);
        };
        if (splits > 1)
            launch(wgmma_small_kernel<WF, NT, true>);
        else
            launch(wgmma_small_kernel<WF, NT, false>);
    });
}
}  // namespace
}  // namespace wg

template <class WF>
void gemm_q8_1_wgmma_small(const GemmProblem& p, cudaStream_t stream) {
    if (p.N > 64) {  // the fifth step, as the sixth does
        gemm_q8_1_wgmma_splitk<WF, 2>(p, stream);
        return;
    }
    if ((p.K / QK) % wg::KB != 0) {  // no TMA box for the rows: the sixth step
        gemm_q8_1_wgmma_splitk<WF, 1>(p, stream);
        return;
    }
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int splits = wgmma_splits(p.N, p.M, p.K, sms);  // the sixth step's: the same sums, in the same order
    float* out = splits > 1 ? (float*)((uint8_t*)p.workspace + splitk_offset(p.N, p.K)) : p.C;
    if (p.N <= 8)
        wg::launch_small<WF, 8>(p, stream, splits, out);
    else if (p.N <= 16)
        wg::launch_small<WF, 16>(p, stream, splits, out);
    else if (p.N <= 32)
        wg::launch_small<WF, 32>(p, stream, splits, out);
    else
        wg::launch_small<WF, 64>(p, stream, splits, out);
    if (splits > 1) splitk_sum(out, p.C, (int64_t)p.N * p.M, splits, stream);
}
}  // namespace gpu

void cuda_q4_0_q8_1_wgmma_small(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_wgmma_small<gpu::w_q4_0>(p, stream);
}

void cuda_q8_0_q8_1_wgmma_small(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_wgmma_small<gpu::w_q8_0>(p, stream);
}
