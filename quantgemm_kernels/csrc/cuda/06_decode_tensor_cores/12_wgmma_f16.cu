// cuda/06_decode_tensor_cores/12_wgmma_f16.cu (chapter 6): fp16 tensor cores with the weights
// dequantized to fp16 in registers, from 16 tokens to prefill; eighth wgmma step.
//
// What it teaches: the int8 steps pay for their per-block scales in instructions as well as in
// tensor-core time. Every 32 values of K they need a fresh int32 result, a second wgmma that plants
// the offset, and two FMAs per result to scale it (d_w d_a) into the float accumulator: for one
// block of a 64 x 128 tile (2 x 64 cycles of an H100 SM's tensor cores at the datasheet's int8
// rate, 4,096 multiply-adds a cycle) the warpgroup's 4 warps issue 512 FMA instructions, 128 cycles
// of the SM's four schedulers. Both pipes are full at half the int8 rate, the fp16 rate, before
// any load, barrier or address arithmetic. So the fifth and sixth steps reach 1.6 to 1.8x
// llama.cpp at N = 256..512, not cuBLAS fp16 (185.3 us against its 81.3 at N = 512, Q4_0,
// 4096 x 14336, H100: small-sweep-082729.json). Here
// the scale goes into the weights: each weight is d (q - 8) (Q8_0: d q) as an fp16, the
// activations are rounded to fp16, and one accumulator runs through the whole of K (wgmma
// m64nNk16, f32 += f16 x f16, N = 16, 32, 64, 128 or 256 tokens per CTA: gemm.h's f16_tile_tokens).
// The weights are unpacked in registers, once per tile of tokens, as a register-sourced A operand
// (the weight rows are the wgmma's M, as in the seventh step): a Q4_0 row's 4 values of a k16 step
// come from two 16-bit loads, a byte permute, and per register one mask and OR (one lop3: the half
// with bits 0x6400 | q is 1024 + q), one subtraction (- 1032: q - 8, exact) and one multiplication
// by d (rounded once to fp16, as llama.cpp's dequantization to fp16 rounds): some 20 instructions
// per thread and k16 step, against 64 cycles of fp16 tensor work per warpgroup at 128 tokens. The
// tokens are the wgmma's N, from shared memory in fp16 with the 128-byte swizzle the TMA writes; a
// small kernel rounds the float32 activations to fp16 first.
// The numbers are not the int8 path's: the activations are fp16 (11 significant bits) instead of
// Q8_1 (8 bits and a scale per 32), and the weights d (q - 8) rounded to fp16; the output is, to
// float32 summation, fp16(A) x fp16(dequantize(W)). llama.cpp's cuBLAS path
// (ggml_cuda_mul_mat_cublas, where MMQ does not run: on Hopper Q4_0 and Q8_0 always take MMQ)
// rounds both operands the same way but sums in fp16 (CUBLAS_COMPUTE_16F); here the sums are
// float32. reference.gemm(..., afmt="f16") is the product; tests compare with it. Values past
// fp16's range (|x| > 65504) become inf there and here alike.
// Shapes: K / 32 a multiple of 8 gives the weights a TMA box (128 rows x 8 blocks, as in the
// seventh step); otherwise the consumer threads read their words from global memory (slower, for
// completeness: no LLM has such rows). Ragged M and N: the boxes' out-of-range parts are zeros.
// Measured (H200, cold, graph-replayed calls, llama.cpp and cuBLAS in the same run;
// bench_results/nvidia-h200/2026-11-27/f16-sweep-103141.json), Q4_0, M = 4096, K = 14336, median
// us: N = 24 24.8 against llama.cpp's 41.4 and the seventh step's 27.1; N = 64 28.1 / 60.6 (the
// sixth step 35.8); N = 512 103.9 / 299.2, cuBLAS fp16 81.2; N = 2048 414.5 / 1313.5, cuBLAS 304.2.
// NMSE against the float product about 7e-8, against the int8 path's 3e-5. In that record the
// seventh step is as fast or faster at N <= 16 (at N <= 8 by 8 to 13 %); since the loop change
// below, this step is ahead from N = 5 (Q4_0) and 8 (Q8_0) on an H100, and pick_kernel takes it from
// there (api.WGMMA_F16_MIN_N).
// Where the rest goes (estimates, not profiled): the conversion to fp16 (4NK bytes read, 2NK
// written) is about a tenth of a call at N >= 512 at the copy bandwidth, and each activation tile
// leaves L2 once per 128 weight rows: 1.9 GB at N = 2048, some 5 TB/s over the GEMM's time.
// Fewer instructions per step (H100, same machine, one build after the other, the outputs equal bit
// for bit: f16-counters-161047.json against f16-nocounters-161148.json): at 16 tokens the loop
// spent about as many instructions on its own bookkeeping as on the dequantization (Nsight
// Compute: 176 warp instructions per k64 step, 24 % of them on the uniform datapath; the issue
// slots half busy, ncu-sass-f16-n16.txt). The rings' positions are now running counters (stage
// index and fill parity advanced per step) instead of divisions of the step number by the stage
// counts, the activation descriptor is the first stage's plus an offset, a block's place in the
// weight stage is a compile-time constant of the unrolled step, and the nibble mask and the fp16
// magic are one lop3. Q4_0 4096 x 14336: N = 16 24.5 -> 20.7 us, N = 32 25.6 -> 22.3, N = 64 29.5 ->
// 26.0, N = 2048 454.3 -> 421.3; 4096 x 4096 N = 16 12.1 -> 11.0; Q8_0 (no nibbles) 0 to 4 %.
// Tried and lost: clusters of two CTAs (weight rows m0 and m0 + 128) sharing each activation tile,
// each producer copying half the tokens into both CTAs (TMA .multicast::cluster), a stage released
// by the 8 consumer warps of both CTAs (mapa + mbarrier.arrive.release.cluster). Correct (the tests,
// memcheck, racecheck passed on an H200) but 1.4 to 2.5x slower with 128-token tiles, N = 128 to
// 2048: Q4_0 4096 x 14336 N = 512 255.6 us against 102.7 without clusters in the same run
// (f16-cluster1-104406.json, f16-cluster0-104431.json; the cause was not profiled). So halving the
// activations' L2 traffic this way did not pay; the code is not kept.
// Tried and lost: deeper weight rings where the token tile is small (Q4_0 8 stages at 16 tokens and
// 6 at 32, Q8_0 5 and 4, each with 4 activation stages per weight stage so that the producer could
// fill them), to keep more weight bytes in flight at N <= 32. Correct (tests, memcheck, racecheck
// on an H100) but slower: Q4_0 4096 x 14336 N = 16 28.3 us against 24.1, N = 32 28.4 against 26.2,
// 14336 x 4096 N = 16 24.9 against 21.8, while the unchanged 64-token tiles (N = 48) and the seventh
// step measured the same in both runs (bench_results/nvidia-h100-80gb-hbm3/2026-11-27/
// f16-ring-132506.json against f16-sweep-105102.json). So at these N the weight bytes in flight
// are not what bounds the step; the consumers' dequantization (the same work per weight at any N,
// by 8 warps per SM) is the next suspect, not profiled.
// Tried and lost: two CTAs per SM for Q4_0 on 16- and 32-token tiles, to double the consumer warps
// that dequantize (a producer warp instead of a warpgroup, no setmaxnreg, 100 KB of shared memory
// each, split K counting two CTAs per SM). At 2 x 288 threads ptxas serializes the wgmmas for want
// of registers (advisories C7511/C7512), and it is slower: Q4_0 4096 x 14336 N = 16 28.7 us against
// 24.1, N = 32 31.3 against 26.2 (H100, f16-2cta-133256.json against f16-sweep-105102.json; the
// 64-token tiles, N = 48, 29.0 in both). Correct (tests, memcheck, racecheck); not kept.
// Tried and lost: 16 blocks of K per weight stage instead of 8 (288-byte runs of each weight row
// per copy instead of 144, in case the short runs scattered over 128 rows kept DRAM from its
// bandwidth; 8 steps unrolled between drains where registers allow), with 2 or 3 stages. Correct
// (every tile width, split and unsplit, a last stage past K) but no faster: Q4_0 4096 x 14336
// N = 16 24.7 / 26.8 us against 24.2, N = 512 111.4 / 109.2 against 105.9 (H100, f16-kb16-v1-153241,
// f16-kb16-v2-153259 against f16-kb8-153224.json, one machine). Nsight Compute at N = 16
// (f16-ncu-n16.txt) finds neither DRAM (45 %) nor the issue slots (48 %) saturated; at N = 2048
// (fp16 A, f16-ncu-n2048-fp16a.txt) the tensor pipe is 71 % busy.
// Tried and lost: the split-K sum inside the kernel, the splits of a tile as one cluster (grid z =
// cluster z) adding up their partial tiles through distributed shared memory (mapa and
// ld.shared::cluster after a cluster barrier; split order, so the same bits as the sum kernel), to
// save the sum kernel (1.6 us of a 24 us call at N = 16: f16-kernel-durations.txt). Correct (tests,
// memcheck, racecheck on an H100) but slower where it mattered: with 4 splits (N <= 128 on the
// 4096-row shapes) Q4_0 4096 x 14336 N = 16 took 44.9 us against 24.2 and 4096 x 4096 20.5 against
// 12.1; with 2 splits (N = 256) no faster (25.2 against 25.4 on 4096 x 4096) (f16-csum-154228.json
// against f16-kb8-153224.json and f16-a16-131734.json). With one CTA per SM, clusters of 4 seem not to
// be placed all at once (the GPU's clusters per GPC were not queried).
// Two weight stages per loop iteration where the tile has 16 to 64 tokens (PAIR below): one drain of
// the wgmma pipeline per 8 steps instead of 4. H100, one machine, two builds: Q4_0 14336 x 4096
// N = 48 23.78 -> 22.78 us, N = 64 23.84 -> 22.98, elsewhere 0 to 2 %, Q8_0 unchanged
// (f16-pair-ab.txt). At 128 tokens ptxas could not pipeline the wgmmas of two stages (C7511) while
// the steps alternated between two accumulators (a wgmma chained on the accumulator of the step in
// flight had made ptxas serialize every wgmma, C7513, in an earlier form of the loop). With the loop
// of today one accumulator compiles without an advisory, which leaves 64 registers a thread free
// at 128 tokens, and those tiles take two stages too. H200, one machine, three builds run in turn
// twice (bench_results/nvidia-h200/2026-11-29/f16-acc1-ab.txt), weights cold: Q4_0 4096 x 14336
// N = 512 99.61 / 99.53 -> 97.57 / 97.65 us, N = 2048 395.39 / 396.25 -> 389.63 / 387.12; 14336 x 4096
// N = 512 115.47 / 115.09 -> 113.49 / 113.23; geometric mean over N >= 256 0.9905; Q8_0 within 1 %.
// Four stages per iteration (same run) no better: 0.9912 over N >= 256, 2 % slower at 16 tokens on
// 4096 x 4096.
// Tiles of 256 tokens (wgmma m64n256k16, 128 accumulator registers a thread, one weight stage per
// loop iteration) so that each dequantized weight fragment serves twice the tokens. H200, one
// machine, the two builds run in turn twice, weights cold (bench_results/nvidia-h200/2026-11-29/
// f16-nt256-ab.txt): Q4_0 4096 x 14336 N = 1024 194.98 / 195.10 -> 172.78 / 172.90 us, N = 4096
// 783.74 / 787.50 -> 683.90 / 686.16; 14336 x 4096 N = 512 113.34 / 113.76 -> 95.30 / 95.13; Q8_0
// 4096 x 14336 N = 2048 426.14 / 424.99 -> 363.93 / 363.45. Slower where the 256-token tiles are too
// few for the SMs and split K on short rows (4096 x 4096 N = 512: 32.61 / 32.53 -> 36.74 / 37.06, the
// split's sum pass); from 129 tokens where they cut the launch's waves (14336 x 4096 N = 256 57.63 /
// 57.65 -> 48.35 / 48.19, f16-nt256-le256.txt): gemm.h's f16_tile_tokens takes them where they paid.
// The last wave split over K (gemm.h's f16_plan; the TAIL launch below): CTAs run in waves of one per
// SM, and where a launch's last wave is less than half full its tiles run as `splits` CTAs each, over
// a range of K, the others whole; f16_tail_sum_kernel adds the split tiles' partial sums. With it
// Q8_0 at 256 tokens keeps 2 weight stages, so that 4 activation stages of 32 KB fit instead of 3
// (a weight stage feeds 4). H200, one machine, three builds run in turn twice, weights cold
// (bench_results/nvidia-h200/2026-11-29/f16-tail-ab.txt): Q4_0 14336 x 4096 N = 1024 (448 tiles: 3
// waves of 132, then 52 tiles as 104 CTAs) 190.78 / 190.97 -> 180.43 / 180.45 us, Q8_0 209.95 /
// 209.82 -> 194.24 / 194.43; Q8_0's other 256-token cells 1.5 to 3 % faster. The tile's mapping at
// run time in every launch (one kernel for all three) had cost 0.5 to 1.5 % at every other cell and
// 1.1 us at 16 tokens on 14336 x 4096: the whole and split launches compile as before. The tail's
// Q8_0 kernel with weights from global memory (no LLM's rows) spills 84 bytes (ptxas -v).
// Q8_0's 128-token tiles with 2 weight stages as well (9 activation stages of 16 KB instead of 7):
// H200, one machine, three builds run in turn twice, weights cold (f16-q128-ab.txt, same folder):
// 4096 x 4096 N = 96 17.31 / 17.31 -> 16.26 / 16.35 us, N = 128 18.88 / 18.91 -> 17.73 / 17.73,
// 4096 x 14336 N = 128 36.67 / 36.38 -> 35.52 / 35.58; Q4_0 (unchanged) within 0.7 %.
// Not built: stream-K's fractional split, which would also even out last waves more than half full
// (14336 x 4096 at 2048 and 4096 tokens: 6.8 and 13.6 waves run as 7 and 14).
// Tried and lost: rounding the float32 activations to fp16 inside the GEMM for tiles of up to 32
// tokens, instead of the conversion kernel before it (whose work the GEMM's first weight copies
// overlap: they go before grid_dependency_wait). Warps 1-3 of the producer warpgroup did it, 96
// arrivals on each full stage, the stores placed where the TMA's 128-byte swizzle puts them, then
// fence.proxy.async. Loading each stage's floats from global memory put an L2 round trip on every
// stage (Q4_0 4096 x 14336 N = 16 43.6 us against 21.0); copying them with the TMA into a staging
// buffer beside the stage was correct (tests, memcheck, racecheck on an H100) but no faster at 16
// tokens (Q8_0 4096 x 4096 13.06 / 12.99 against 13.30, Q4_0 14336 x 4096 20.13 / 20.06 against
// 18.98) and slower at 32 (Q4_0 4096 x 14336 25.47 / 25.57 against 22.24: the staging leaves room
// for 13 stages instead of 16) (bench_results/nvidia-h100-80gb-hbm3/2026-11-27/f16-convert-ab.txt).
// The producer keeps 40 registers (below); a first version of the converters asked for 48, and the
// test run hung, as the register arithmetic there predicts.
// Tried and lost: the splits' sum inside the GEMM on float32 activations, the last split of a tile
// to finish (an arrival counter per tile, zeroed by the conversion kernel) summing the tile's
// partials, to save the splitk_sum kernel (1.6 us at N = 16). Correct (tests, memcheck, racecheck on
// an H100) but each thread's outputs were summed one after another, a chain of dependent L2 loads
// in the tile's last CTA: Q4_0 4096 x 4096 N = 16 14.62 us against 10.88, N = 128 48.26 against
// 18.14 (f16-fixup-ab.txt). Batched loads would still add an atomic and an L2 round trip to that
// CTA's tail, about what the sum kernel costs; not tried.
// Tried and lost: every weight stage of a short split in flight at once (4 stages of room at 16 and
// 32 tokens; the 4096 x 4096 layers' splits have 4): slower (Q8_0 4096 x 4096 N = 16 14.69 us
// against 13.33), and the larger footprint alone cost the long rows 2-3 % (f16-ring4-ab.txt). As
// with the deeper rings above, the bytes in flight are not what these small calls wait for.
// Where a small call's time goes (H100, CUPTI per kernel, f16-timeline.txt): Q8_0 4096 x 4096
// N = 16, to_f16 1.2 us, the GEMM starting 1.5 us after it and lasting 10.3, splitk_sum 0.45 us
// after the GEMM's end and lasting 1.6: 13.9 us first start to last end. The GEMM starts about when
// to_f16 ends (1.1 to 2.3 us after it starts) in every variant tried: PDL or none, the conversion
// on 8 CTAs, to_f16 and splitk_sum asking for the GEMM's shared-memory carveout. The
// decode kernel, launched like the GEMM, also starts 1.06 us after its quantizer starts; its
// quantizer runs 2.3 us, so there the two overlap. A conversion kernel as short as that start
// costs its whole length; fp16 activations (no conversion) save 1.1 to 1.5 us a call.
// Tried and lost: to_f16 also prefetching into L2, through the GEMM's tensor map, the first 3 weight
// stages of every (weight tile, split), so that the weight stream would start with it. Issued by the
// threads of its first two CTAs, the 336 to 384 box prefetches kept it running some 35 us, and calls
// at small N took 3 to 4x as long (f16-l2pf-ab.txt). Spread over every SM it was not tried.
// The split-K sum launched with programmatic dependent launch, the GEMM's consumer threads allowing
// it once their K loop is done (allow_dependent_launch before the epilogue), so that the sum's launch
// overlaps the GEMM's stores and exit instead of following them (0.45 us, above). (Allowed at the
// GEMM's start it was no faster: 8_wgmma_splitk.cu's header.) H100, one machine, two builds, runs
// new / old / new / old (bench_results/nvidia-h100-80gb-hbm3/2026-11-28/f16-pdlsum-ab.txt): Q8_0
// 4096 x 4096 N = 16 13.25 / 13.31 -> 12.85 / 12.88 us, Q4_0 4096 x 4096 N = 16 10.85 -> 10.43 / 10.40,
// 4096 x 14336 N = 16 20.77 -> 20.26; the layers of 14336 rows, which need no split, unchanged.
// Where the time goes on an H200 (Nsight Compute, weights cold; bench_results/nvidia-h200/2026-11-29/
// ncu-f16-*.txt): at 16 tokens neither DRAM nor the issue slots are saturated (Q4_0 14336 x 4096:
// DRAM 38 % of peak, issue slots 40 %, 0.8 eligible warps per scheduler; Q8_0, twice the bytes, 60 %
// of DRAM); at 2048 tokens (fp16 activations) the tensor pipe is busy 78 % of the active cycles,
// where cuBLAS's kernel (256 x 128 tiles, one CTA per SM) keeps it 98 % busy.
// Tried and lost on an H200 (one machine per A/B, builds run in turn; same records folder): 256-byte
// L2 promotion on both tensor maps, no faster and Q8_0 3 to 5 % slower at 8 and 16 tokens
// (f16-l2promo-ab.txt); four consumer warpgroups at 16 tokens (640 threads, two pairs taking
// alternate K steps, pair 1's partial tile added through shared memory; 112 registers each, which
// ptxas finds too few at 32 tokens: C7512), 1.2 % slower over N <= 16, Q4_0 4096 x 14336 4-5 %
// slower (f16-cw4-ab.txt): more warps building fragments do not help, so their latency is not what
// bounds these calls; the second warpgroup draining half an interval after the first, so that one's
// drain falls while the other's wgmmas run, 3.6 % slower over N >= 128 and 4-13 % at 16 and 64
// tokens (f16-pingpong-ab.txt). Building the next stage's first fragments before the drain made
// ptxas serialize every wgmma (C7513: the fragments then cross the loop's back edge). And Q4_0's
// weight stages of 16 blocks again (288-byte runs per row, as Q8_0's 272 that reach 60 % of DRAM),
// with this loop: 9.5 % slower at 5 to 64 tokens (f16-kb16-ab.txt). What holds Q4_0 at 38 % of
// DRAM at 16 tokens is neither its consumers' latency nor the length of its runs.
// Grid: x = ceil(M / 128) weight tiles, y = ceil(N / NT) token tiles, z = splits of K (in steps of
// 8 blocks, when the tiles leave SMs idle); 384 threads: two consumer warpgroups (rows 0..63,
// 64..127 of the tile) and a producer warpgroup of which one thread issues the copies.
#include "wgmma_ws.cuh"

namespace gpu {
namespace f16g {
using namespace wg;  // the copies, barriers and wgmma helpers of the steps before
static_assert(BM == QG_F16_TILE, "gemm.h's f16_plan counts tiles of 128 weight rows");
constexpr int KA = 64;                 // K per activation stage: 128 bytes of fp16
constexpr int A_PER_W = KB * QK / KA;  // activation stages per weight stage (4)
static_assert(A_PER_W == 4, "a weight stage is four activation stages: the consumers unroll them");
constexpr int CONSUMERS = 256, THREADS = CONSUMERS + 128;  // two consumer warpgroups, a producer
constexpr int SMEM_BUDGET = 220 * 1024;                    // the H100 allows 227 KB a CTA

// NT tokens per CTA (the wgmma's N: 16, 32, 64, 128 or 256, gemm.h's f16_tile_tokens).
template <class WF, int NT>
struct Cfg {
    static constexpr int B = (int)sizeof(typename WF::block);
    static constexpr int RAW_ROW = KB * B;  // bytes of a row's weight stage (144 or 272)
    static constexpr int W_BYTES = BM * RAW_ROW;
    // Q8_0 at 128 and 256 tokens: 2 weight stages (2 x 34 KB), so that more activation stages fit
    // (9 instead of 7 at 128 tokens; 4 instead of 3 at 256, where a weight stage feeds 4)
    static constexpr int W_STAGES = B > 18 && NT >= 128 ? 2 : 3;
    static constexpr int ACT_BYTES = NT * KA * 2;  // one TMA box of NT tokens x 64 values, 128-byte swizzle
    static constexpr int A_FIT = (SMEM_BUDGET - W_STAGES * W_BYTES) / ACT_BYTES;
    static constexpr int A_STAGES = A_FIT < 16 ? A_FIT : 16;
    static_assert(A_STAGES >= 2, "at least two activation stages must fit beside the weights' stages");
};
template <class WF, int NT>
struct Smem {
    using CF = Cfg<WF, NT>;
    uint8_t act[CF::A_STAGES][CF::ACT_BYTES];  // first: stages 1024-byte aligned for the swizzle
    uint8_t w[CF::W_STAGES][CF::W_BYTES];
    uint64_t afull[CF::A_STAGES], aempty[CF::A_STAGES];
    uint64_t wfull[CF::W_STAGES], wempty[CF::W_STAGES];
};

namespace {
// float32 -> fp16 (round to nearest even), 4 values per thread: the activations for the TMA.
__global__ void to_f16_kernel(const float4* __restrict__ x, uint2* __restrict__ y, int64_t quads) {
    allow_dependent_launch();  // the GEMM launched with PDL waits for our writes itself
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < quads; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        y[i] = make_uint2(*(const uint32_t*)&lo, *(const uint32_t*)&hi);
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// d (64 x N float32, N / 2 registers per thread) += A (64 x 16 fp16, 4 registers) * B (N x 16 fp16,
// shared memory, K-major, 128-byte swizzle), N = 16, 32, 64, 128.
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_f16(float (&d)[8], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_f16(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_f16(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_f16(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}
template <int SCALE_D = 1>
__device__ __forceinline__ void wgmma_f16(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
        "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
        "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, "
        "%67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, "
        "%89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, "
        "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
        "%127}, "
        "{%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),
          "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]),
          "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]),
          "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]),
          "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]),
          "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
          "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]),
          "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
          "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(SCALE_D));
}
template <int R>
__device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// [excerpt: swizzle128_desc]
// Descriptor of an fp16 tile [rows][64] (128-byte rows, K-major) with the TMA's 128-byte swizzle:
// layout type 1 (bits 62-63), 8-row groups 1024 bytes apart (SBO; LBO unused); a k16 step within
// the row is the start address + 32 bytes (the swizzle applies to the address the hardware forms).
__device__ __forceinline__ uint64_t swizzle128_desc(const void* p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
// [end excerpt: swizzle128_desc]

__device__ __forceinline__ uint32_t ld16(const uint8_t* p) { return *(const uint16_t*)p; }

// [excerpt: f16_fragment]
// (v & 0x000F000F) | magic in one instruction: lop3 with the mask as its immediate and the magic
// 0x64006400 in a register (written as C, the mask and the OR become two instructions, since an
// instruction takes one immediate).
__device__ __forceinline__ uint32_t nibbles_or(uint32_t v, uint32_t magic) {
    uint32_t r;
    asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;\n" : "=r"(r) : "r"(v), "r"(magic));  // (a & b) | c
    return r;
}

// The fragment of a k16 step for one row (registers a[i] and a[i + 2] of the mma layout: k = 2t,
// 2t + 1 and 2t + 8, 2t + 9), from the block's bytes: fp16 pairs of d (q - offset).
// Q4_0: byte j holds k = j (low nibble) and j + 16 (high): the halfwords at 2t and 2t + 8 give both
// k16 steps of the block; permuted to bytes (2t, 2t + 8, 2t + 1, 2t + 9), a mask of nibbles 0 and 4
// (or 2 and 6, after a shift) puts two values in the two halves.
template <class WF>
__device__ __forceinline__ void block_fragment(const uint8_t* blk, int t, uint32_t (&lo)[2], uint32_t (&hi)[2],
                                               uint32_t magic) {
    const __half2 d2 = __half2half2(*(const __half*)blk);
    auto fix = [&](uint32_t bits, float off) {  // bits: two halves 1024 + u; returns d (u - off) each
        const __half2 v = __hsub2(*(const __half2*)&bits, __float2half2_rn(1024.0f + off));
        const __half2 w = __hmul2(v, d2);
        return *(const uint32_t*)&w;
    };
    if constexpr (WF::offset == 8) {
        const uint32_t x = __byte_perm(ld16(blk + 2 + 2 * t), ld16(blk + 2 + 2 * t + 8), 0x5140);
        lo[0] = fix(nibbles_or(x, magic), 8.0f);        // k = 2t, 2t + 1
        lo[1] = fix(nibbles_or(x >> 8, magic), 8.0f);   // k = 2t + 8, 2t + 9
        hi[0] = fix(nibbles_or(x >> 4, magic), 8.0f);   // k = 16 + 2t, ..
        hi[1] = fix(nibbles_or(x >> 12, magic), 8.0f);  // k = 24 + 2t, ..
    } else {                                            // Q8_0
        // signed bytes: (b ^ 0x80) | 0x6400 is 1024 + q + 128
        auto pair = [&](int j) { return fix(__byte_perm(ld16(blk + 2 + j), 0x64, 0x4140) ^ 0x00800080u, 128.0f); };
        lo[0] = pair(2 * t), lo[1] = pair(2 * t + 8), hi[0] = pair(16 + 2 * t), hi[1] = pair(24 + 2 * t);
    }
}
// [end excerpt: f16_fragment]
#endif

// A launch's tiles (gemm.h's f16_plan): WHOLE, one CTA per tile over the whole of K (grid x weight
// tiles, y token tiles); SPLIT, every tile split over K (grid z: the splits), each split writing a
// plane of N x M partial sums; TAIL, the tiles of the last wave split and the others whole: CTA
// b < whole computes tile b (weight tiles fastest) into C, the others take the split tiles,
// `splits` consecutive CTAs each (a tile's pieces run at the same time and share its activations in
// L2), each writing its partial tile [NT][BM] to P. The first two are the launches of before, kept
// as they compiled (the tail's runtime mapping in every launch cost 0.4 to 1.1 us at 16 tokens).
enum Mode { WHOLE, SPLIT, TAIL };
struct Tail {
    float* P;  // [split tile][split][NT][BM]
    int rows, splits, whole;
};

template <class WF, int NT, bool TMA_W, int MODE>
__global__ void __launch_bounds__(THREADS, 1)
    wgmma_f16_kernel(const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap wmap,
                     const uint8_t* __restrict__ W, float* __restrict__ C, int64_t split_plane, const Tail tail, int N,
                     int M, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using CF = Cfg<WF, NT>;
    constexpr int B = CF::B, WS = CF::W_STAGES, AS = CF::A_STAGES;
    extern __shared__ __align__(1024) int4 smem_raw[];
    Smem<WF, NT>& sm = *(Smem<WF, NT>*)smem_raw;
    const int nb = K / QK, wsteps = (nb + KB - 1) / KB, asteps = (nb + 1) / 2;
    // [excerpt: tail_mapping]
    // TAIL: piece >= 0 is a CTA of a split tile (gridDim.x < 2^31: the indices fit an int)
    const int piece = MODE == TAIL ? (int)blockIdx.x - tail.whole : -1;
    const int tile = MODE == TAIL ? (piece < 0 ? (int)blockIdx.x : tail.whole + piece / tail.splits) : 0;
    const int z = MODE == SPLIT ? (int)blockIdx.z : piece < 0 ? 0 : piece % tail.splits;
    const int nz = MODE == SPLIT ? (int)gridDim.z : piece < 0 ? 1 : tail.splits;
    const int w_begin = MODE != WHOLE ? (int)((int64_t)wsteps * z / nz) : 0;
    const int w_end = MODE != WHOLE ? (int)((int64_t)wsteps * (z + 1) / nz) : wsteps;
    const int a_begin = w_begin * A_PER_W, a_end = min(w_end * A_PER_W, asteps);
    const int m0 = MODE == TAIL ? tile % tail.rows * BM : blockIdx.x * BM;
    const int n0 = MODE == TAIL ? tile / tail.rows * NT : blockIdx.y * NT;
    // [end excerpt: tail_mapping]
    const int tid = threadIdx.x;

    if (tid == 0) {
        for (int i = 0; i < AS; i++) bar_init(&sm.afull[i], 1), bar_init(&sm.aempty[i], CONSUMERS);
        for (int i = 0; i < WS; i++) bar_init(&sm.wfull[i], 1), bar_init(&sm.wempty[i], CONSUMERS);
    }
    fence_proxy_async();
    __syncthreads();

    if (tid >= CONSUMERS) {  // ---- producer: one thread issues every copy
        // 40 and the consumers' 232 are tied: the launch gives each thread 168 registers (64K / 384,
        // rounded down to 8), and setmaxnreg.inc waits until the producer's decrease has freed what
        // it asks for: (168 - 40) x 128 = (232 - 168) x 256. A producer that keeps 48 leaves the
        // consumers waiting for ever.
        set_max_regs_dec<40>();
        if (tid != CONSUMERS) return;
        auto copy_w = [&](int w) {  // weight stage w (8 blocks of BM rows)
            const int k = w - w_begin, i = k % WS;
            if (k >= WS) bar_wait(&sm.wempty[i], ((k / WS) - 1) & 1);
            bar_expect(&sm.wfull[i], CF::W_BYTES);
            tma_copy_2d(&sm.w[i][0], &wmap, w * CF::RAW_ROW / 2, m0, &sm.wfull[i]);
        };
        // The weights do not depend on the conversion kernel: the first stages go before the wait.
        if constexpr (TMA_W)
            for (int w = w_begin; w < min(w_end, w_begin + WS); w++) copy_w(w);
        grid_dependency_wait();
        for (int a = a_begin; a < a_end; a++) {
            const int k = a - a_begin, i = k % AS;
            if (TMA_W && a % A_PER_W == 0 && a / A_PER_W >= w_begin + WS) copy_w(a / A_PER_W);
            if (k >= AS) bar_wait(&sm.aempty[i], ((k / AS) - 1) & 1);
            bar_expect(&sm.afull[i], CF::ACT_BYTES);
            tma_copy_2d(&sm.act[i][0], &xmap, a * KA, n0, &sm.afull[i]);
        }
        return;
    }

    // ---- consumers: rows r0 and r0 + 8 of the tile
    set_max_regs_inc<232>();
    const int lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int r0 = 64 * (warp / 4) + 16 * (warp % 4) + g;
    // One accumulator for the whole of K: every wgmma adds to it, the steps' wgmmas chained.
    float acc[NT / 2] = {};
    const int64_t row_bytes = (int64_t)nb * B;
    // The weights' rows: in the stage (TMA), or in global memory (rows past M read as row M - 1 and
    // zeroed below; blocks past K are zeros).
    const int gr0 = min(m0 + r0, M - 1), gr1 = min(m0 + r0 + 8, M - 1);
    const bool ok0 = m0 + r0 < M, ok1 = m0 + r0 + 8 < M;
    // Two steps' fragments: step k's wgmmas read set k % 2 while step k + 1's is built; the wait
    // for step k - 1's wgmmas (wgmma_wait<1>) comes before its set is written again.
    uint32_t f[2][4][4];
    // The rings' positions as running counters (stage index and the parity of its current fill),
    // not recomputed from the step number: divisions by the stage counts and the descriptors'
    // address arithmetic were a third of the loop's instructions at 16 tokens.
    const uint32_t magic = 0x64006400u;                      // in a register: nibbles_or's third operand
    const uint64_t adesc0 = swizzle128_desc(&sm.act[0][0]);  // stage i: + i * ACT_BYTES / 16
    int ai = 0, aph = 0, prev_ai = -1;  // this step's activation stage, its parity, the previous step's
    int wi = 0, wph = 0;                // this weight stage, its parity
    // Step H of the weight stage that starts at step a0 (a multiple of A_PER_W): blocks 2H, 2H + 1
    // of the stage, k16 halves 2j and 2j + 1 of each.
    auto step = [&](auto h_c, int a0) {
        constexpr int H = decltype(h_c)::value, SET = H % 2;  // steps alternate between the two sets
        const int a = a0 + H;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            uint32_t lo0[2], hi0[2], lo1[2], hi1[2];
            if constexpr (TMA_W) {
                const int lb = 2 * H + j;  // the block's place in the stage (a constant once unrolled)
                block_fragment<WF>(&sm.w[wi][r0 * CF::RAW_ROW + lb * B], t, lo0, hi0, magic);
                block_fragment<WF>(&sm.w[wi][(r0 + 8) * CF::RAW_ROW + lb * B], t, lo1, hi1, magic);
            } else if (const int blk = 2 * a + j; blk < nb) {  // global-memory weights
                block_fragment<WF>(W + gr0 * row_bytes + (int64_t)blk * B, t, lo0, hi0, magic);
                block_fragment<WF>(W + gr1 * row_bytes + (int64_t)blk * B, t, lo1, hi1, magic);
                if (!ok0) lo0[0] = lo0[1] = hi0[0] = hi0[1] = 0;
                if (!ok1) lo1[0] = lo1[1] = hi1[0] = hi1[1] = 0;
            } else {
                lo0[0] = lo0[1] = hi0[0] = hi0[1] = lo1[0] = lo1[1] = hi1[0] = hi1[1] = 0;
            }
            // the mma layout: a0 row g k 2t.., a1 row g + 8, a2 row g k 2t + 8.., a3 row g + 8
            uint32_t (&x)[4] = f[SET][2 * j];
            uint32_t (&y)[4] = f[SET][2 * j + 1];
            x[0] = lo0[0], x[1] = lo1[0], x[2] = lo0[1], x[3] = lo1[1];
            y[0] = hi0[0], y[1] = hi1[0], y[2] = hi0[1], y[3] = hi1[1];
        }
        if (TMA_W && (H == A_PER_W - 1 || a == a_end - 1))
            bar_arrive(&sm.wempty[wi]);  // this thread's reads of the weight stage are done
        bar_wait(&sm.afull[ai], aph);
        wgmma_fence();
        const uint32_t dlo = (uint32_t)adesc0 + (uint32_t)ai * (CF::ACT_BYTES >> 4), dhi = (uint32_t)(adesc0 >> 32);
#pragma unroll
        for (int h = 0; h < 4; h++)  // k 16h of 64: the start address + 32h bytes
            wgmma_f16(acc, f[SET][h], (uint64_t)dhi << 32 | (dlo + 2 * h));
        wgmma_commit();
        wgmma_wait<1>();  // the previous step's wgmmas are done: its activation stage is free
        if (prev_ai >= 0) bar_arrive(&sm.aempty[prev_ai]);
        prev_ai = ai;
        if (++ai == AS) ai = 0, aph ^= 1;
    };
    // PAIR weight stages (4 steps each) unrolled, drained at their end: ptxas serializes every wgmma
    // whose result is still in flight across a loop's back edge (see wgmma_ws.cuh). Between two
    // stages nothing waits: a stage's weights are in registers once its last step has built them.
    auto stage = [&](int a0) {
        if (TMA_W) bar_wait(&sm.wfull[wi], wph);
        step(std::integral_constant<int, 0>{}, a0);
        if (a0 + 1 < a_end) step(std::integral_constant<int, 1>{}, a0);
        if (a0 + 2 < a_end) step(std::integral_constant<int, 2>{}, a0);
        if (a0 + 3 < a_end) step(std::integral_constant<int, 3>{}, a0);
        if (++wi == WS) wi = 0, wph ^= 1;
    };
    // Two up to 128 tokens; one at 256 (128 accumulator registers: with two stages ptxas serializes
    // the wgmmas, C7512) and where the weights come from global memory (a spill).
    constexpr int PAIR = TMA_W && NT < 256 ? 2 : 1;
    for (int a0 = a_begin; a0 < a_end; a0 += PAIR * A_PER_W) {
        stage(a0);
#pragma unroll
        for (int q = 1; q < PAIR; q++)
            if (a0 + q * A_PER_W < a_end) stage(a0 + q * A_PER_W);
        wgmma_wait<0>();
    }
    wgmma_wait<0>();
    allow_dependent_launch();  // the split-K sum (PDL) may be scheduled: it waits for our stores itself
    fence_acc(acc);

    // acc[4j + q]: row m0 + r0 + 8 (q / 2), token n0 + 8j + 2t + q % 2
    if (MODE == TAIL && piece >= 0) {  // the whole partial tile (rows and tokens past the ends too)
        float* out = tail.P + (int64_t)piece * (NT * BM);
#pragma unroll
        for (int j = 0; j < NT / 8; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) out[(8 * j + 2 * t + q % 2) * BM + r0 + 8 * (q / 2)] = acc[4 * j + q];
        return;
    }
    float* out = MODE == SPLIT ? C + blockIdx.z * split_plane : C;
#pragma unroll
    for (int j = 0; j < NT / 8; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int n = n0 + 8 * j + 2 * t + q % 2, m = m0 + r0 + 8 * (q / 2);
            if (n < N && m < M) out[(int64_t)n * M + m] = acc[4 * j + q];
        }
#endif
}

// TAIL: C's split tiles = the sum of their partial tiles, in split order (z = 0, 1, ...: the bits do
// not depend on which CTA finished first), four floats per thread and loop; launched with PDL,
// waiting inside for the GEMM's writes. vec4: M % 4 == 0 and C 16-byte aligned.
template <int NT>
__global__ void __launch_bounds__(256) f16_tail_sum_kernel(const float4* __restrict__ P, float* __restrict__ C,
                                                           int items, int N, int M, Tail tail, bool vec4) {
    grid_dependency_wait();
    constexpr int TILE4 = NT * BM / 4, ROW4 = BM / 4;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < items; i += gridDim.x * blockDim.x) {
        const int st = i / TILE4, r = i % TILE4;  // the split tile, the float4 in it
        const float4* p = P + (int64_t)st * tail.splits * TILE4 + r;
        float4 s = p[0];
        for (int z = 1; z < tail.splits; z++) {
            const float4 v = p[(int64_t)z * TILE4];
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        const int tile = tail.whole + st;
        const int n = tile / tail.rows * NT + r / ROW4, m = tile % tail.rows * BM + 4 * (r % ROW4);
        if (n >= N || m >= M) continue;
        float* c = C + (int64_t)n * M + m;
        if (vec4) {
            *(float4*)c = s;
        } else {
            c[0] = s.x;
            if (m + 1 < M) c[1] = s.y;
            if (m + 2 < M) c[2] = s.z;
            if (m + 3 < M) c[3] = s.w;
        }
    }
}

template <class WF, int NT>
void launch_f16(const GemmProblem& p, cudaStream_t stream, const F16Plan& plan, int sms) {
    const int mode = plan.splits == 1 ? WHOLE : plan.whole == 0 ? SPLIT : TAIL;
    const int64_t tiles_n = (p.N + NT - 1) / NT;
    if (plan.tokens != NT || (mode != TAIL && tiles_n > 65535))  // gridDim.y
        throw std::runtime_error("cuda_q4_0_f16_wgmma / cuda_q8_0_f16_wgmma: N = " + std::to_string(p.N) +
                                 " needs more than 65535 tiles of " + std::to_string(NT) +
                                 " tokens; call it on at most " + std::to_string(65535 * NT) + " rows of A at a time");
    // the activations as fp16 [N][K]: the caller's (p.a_f16), or converted to the start of the
    // workspace (f16_workspace_bytes, gemm.h)
    uint16_t* x16 = p.a_f16 ? (uint16_t*)const_cast<void*>(p.A) : (uint16_t*)p.workspace;
    if (!p.a_f16) {
        const int64_t quads = (int64_t)p.N * p.K / 4;
        to_f16_kernel<<<(unsigned)std::min<int64_t>((quads + 255) / 256, (int64_t)sms * 16), 256, 0, stream>>>(
            (const float4*)p.A, (uint2*)x16, quads);
    }

    static wg::PFN_encode encode = wg::tensor_map_encoder();
    CUtensorMap xmap{}, wmap{};
    {
        const cuuint64_t dims[2] = {(cuuint64_t)p.K, (cuuint64_t)p.N}, strides[1] = {(cuuint64_t)p.K * 2};
        const cuuint32_t box[2] = {KA, NT}, estrides[2] = {1, 1};
        const CUresult r = encode(&xmap, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, x16, dims, strides, box, estrides,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) throw std::runtime_error("cuTensorMapEncodeTiled failed: " + std::to_string((int)r));
    }
    constexpr int B = Cfg<WF, NT>::B;
    const int nb = p.K / QK;
    const bool tma_w = nb % KB == 0;
    if (tma_w) {
        const cuuint64_t dims[2] = {(cuuint64_t)nb * B / 2, (cuuint64_t)p.M}, strides[1] = {(cuuint64_t)nb * B};
        const cuuint32_t box[2] = {KB * B / 2, BM}, estrides[2] = {1, 1};
        const CUresult r = encode(&wmap, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(p.W), dims, strides, box,
                                  estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) throw std::runtime_error("cuTensorMapEncodeTiled failed: " + std::to_string((int)r));
    }
    float* part = (float*)((uint8_t*)p.workspace + f16_splits_offset(p.N, p.K, p.a_f16));  // split partial sums
    const Tail tail{part, (int)((p.M + BM - 1) / BM), plan.splits, (int)plan.whole};
    const dim3 grid = mode == TAIL ? dim3((unsigned)plan.ctas()) : dim3(tail.rows, (unsigned)tiles_n, plan.splits);
    static_assert(sizeof(Smem<WF, NT>) <= 227 * 1024, "the stages exceed a Hopper CTA's shared memory");
    const size_t smem = sizeof(Smem<WF, NT>);
    const int64_t plane = (int64_t)p.N * p.M;
    auto go = [&](auto kernel) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        launch_maybe_pdl(kernel, grid, dim3(THREADS), smem, stream, true, xmap, wmap, (const uint8_t*)p.W,
                         mode == SPLIT ? part : p.C, plane, tail, p.N, p.M, p.K);
    };
    auto pick = [&](auto tma_c) {
        constexpr bool T = decltype(tma_c)::value;
        mode == WHOLE   ? go(wgmma_f16_kernel<WF, NT, T, WHOLE>)
        : mode == SPLIT ? go(wgmma_f16_kernel<WF, NT, T, SPLIT>)
                        : go(wgmma_f16_kernel<WF, NT, T, TAIL>);
    };
    tma_w ? pick(std::true_type{}) : pick(std::false_type{});
    if (mode == SPLIT) splitk_sum(part, p.C, plane, plan.splits, stream, true);  // PDL: see the header
    if (mode == TAIL) {  // the split tiles' sum, launched with PDL too
        const int items = (int)((plan.tiles - plan.whole) * NT * BM / 4);
        const bool vec4 = p.M % 4 == 0 && (uintptr_t)p.C % 16 == 0;
        launch_maybe_pdl(f16_tail_sum_kernel<NT>,
                         dim3((unsigned)std::min<int64_t>((items + 255) / 256, (int64_t)sms * 8)), dim3(256), 0, stream,
                         true, (const float4*)part, p.C, items, p.N, p.M, tail, vec4);
    }
}
template <class WF>
void gemm_f16(const GemmProblem& p, cudaStream_t stream) {
#if !defined(QG_HAS_SM90A)
    throw std::runtime_error(
        "the wgmma kernels need code for sm_90a, and this build has none: build on a "
        "compute capability 9.0 GPU with TORCH_CUDA_ARCH_LIST unset, or set it to 9.0a");
#endif
    int dev = 0, major = 0, minor = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (major != 9 || minor != 0)
        throw std::runtime_error("the wgmma kernels run on compute capability 9.0 (Hopper) only, this GPU is " +
                                 std::to_string(major) + "." + std::to_string(minor));
    const F16Plan plan = f16_plan(p.N, p.M, p.K, sms);  // the binding sized the workspace with it
    switch (plan.tokens) {                              // the wgmma's N for these tokens (gemm.h)
        case 16: launch_f16<WF, 16>(p, stream, plan, sms); break;
        case 32: launch_f16<WF, 32>(p, stream, plan, sms); break;
        case 64: launch_f16<WF, 64>(p, stream, plan, sms); break;
        case 128: launch_f16<WF, 128>(p, stream, plan, sms); break;
        default: launch_f16<WF, 256>(p, stream, plan, sms);
    }
}
}  // namespace
}  // namespace f16g
}  // namespace gpu

void cuda_q4_0_f16_wgmma(const GemmProblem& p, cudaStream_t stream) { gpu::f16g::gemm_f16<gpu::w_q4_0>(p, stream); }

void cuda_q8_0_f16_wgmma(const GemmProblem& p, cudaStream_t stream) { gpu::f16g::gemm_f16<gpu::w_q8_0>(p, stream); }
