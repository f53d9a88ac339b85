// cuda/q4_0_q8_1_wgmma.cu (chapter 6): Hopper's warpgroup mma (wgmma, sm_90a) for prefill, third step.
//
// The second step (q4_0_q8_1_mma.cu) issues one instruction every 2.2 cycles per scheduler, and 64%
// of them are the two scaling FMAs per result and block; the rest feed the tensor cores from
// registers (ldmatrix, scale loads) and wait for them. wgmma (sm_90a) changes the feeding:
//  * One instruction per warpgroup (4 warps, 128 threads) multiplies a 64 x 32 tile of A by a
//    32 x 128 tile of B, both read by the tensor cores straight from shared memory through two
//    64-bit descriptors: no ldmatrix, no fragment registers. Here A is 64 tokens (the activation
//    quants) and B is 128 weight rows, so a thread's 64 int32 results are 2 tokens x 32 rows: the
//    activation scale of a result is one of 2 registers, the weight scale one of 32 (8 LDS.128).
//  * It is asynchronous: the warpgroup issues block b + 1 and scales block b while it runs (two
//    sets of 64 accumulator registers), and the tensor cores stay busy through the scaling.
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
// Staging: the copies left the threads. The second step's cp.async from every thread held address
// registers that later instructions had to wait for (Nsight Compute: a wgmma fence and FMAs stalled
// on them, 19% of the samples). Here one thread starts each K step's copies on the TMA engine and
// an mbarrier counts their bytes:
//  * the activations are quantized into the kernel's own layout (wgmma_quantize_act_kernel): per
//    tile of 128 tokens and K step, one 40 KB unit = this K step's shared memory image (quants in
//    core-matrix order, then (d_a 2^64, c) per block and token): one bulk copy;
//  * the weights' K step (128 rows x 144 or 272 bytes, row stride nb * B) is one 2-D box of a tensor
//    map built at launch (cp.async.bulk.tensor; 128 one-row bulk copies measured 0.252 ms against
//    0.220: a bulk copy takes uniform operands, so per-thread rows were issued one at a time).
// The threads still unpack Q4_0 to int8 16 (q - 8) once per CTA (mma.cuh), then fence.proxy.async
// makes their st.shared visible to the tensor cores, and one barrier per step hands the stage over.
// Weights whose rows are not 16-byte aligned (K % 256 != 0) are read with 16-bit loads instead.
//
// Measured on an H100 (n = 512, k = 14336, quick bench): per-thread cp.async 0.300 ms; bulk copies
// 0.252; TMA box for the weights 0.220; two accumulator sets 0.2185 (the second step: 0.243).
#include <cuda.h>  // CUtensorMap (the types only: the encoder comes from the driver at run time)

#include <stdexcept>
#include <string>

#include "mma.cuh"

namespace gpu {
namespace {
constexpr int BM = 128;                // weight rows per CTA: the wgmma's N
constexpr int BN = QG_WGMMA_TILE_TOKENS;  // tokens per CTA (128): 2 warpgroups x the wgmma's M = 64
constexpr int KB = 8;                  // blocks per K step
constexpr int THREADS = 256;           // 2 warpgroups
constexpr int PARTS = THREADS / BM;    // threads that unpack one weight row
constexpr int CORE = 128;              // bytes of a core matrix: 8 rows x 16 bytes
constexpr int LBO = CORE;              // descriptor: bytes between the two core matrices of a row group (k)
constexpr int SBO = 2 * CORE;          // descriptor: bytes between row groups of 8 (m or n)
constexpr int WD_T = 36;               // floats per lane column t in a block's weight scales (32 + 4: banks)
constexpr int WD_PITCH = 4 * WD_T;     // floats per block of weight scales
constexpr float DA_SCALE = 0x1p64f;    // d_a's factor: d_a 2^64 <= 2^80
constexpr float C_SCALE = -0x1p-130f;  // c = -2^19 2^-149 (d_a 2^64): exact, normal (>= 2^-90)
constexpr float DW_SCALE = 0x1p85f;    // 2^149 / 2^64: d_w 2^85 x (d_a sumi 2^-85) = d_w d_a sumi
static_assert(QG_WGMMA_UNIT_BYTES == KB * BN * QK + KB * BN * 8, "gemm.h's workspace unit is one K step of a tile");

template <class WF>
using Raw = RawPart<WF, KB, PARTS>;

// Byte offset of row r, k half h (k 0..15 or 16..31) of a block's core-matrix tile.
__host__ __device__ constexpr int core_offset(int r, int h) { return (r / 8) * SBO + h * LBO + (r % 8) * 16; }

// ---- The activations, quantized into the layout of the kernel's shared memory: per tile of BN
// tokens and K step, one unit of QG_WGMMA_UNIT_BYTES = the quants a[KB][BN * 32] in core-matrix
// order, then per block and token the pair (d_a 2^64, c). A K step of a tile is then one bulk copy.
// Tokens past N and blocks past K are zeros (scale 0: they add nothing).
__global__ void wgmma_quantize_act_kernel(const float* __restrict__ x, uint8_t* __restrict__ ws, int N, int K,
                                          int steps, int64_t total) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;  // over [tiles * BN][steps * KB * 32]
    if (i - (threadIdx.x % 32) >= total) return;                      // whole warps in or out
    const int64_t kp = (int64_t)steps * KB * QK;
    const int n = (int)(i / kp), k = (int)(i % kp);
    const int tile = n / BN, nl = n % BN, s = k / (KB * QK), b = (k / QK) % KB, lane = k % QK;
    uint8_t* unit = ws + ((int64_t)tile * steps + s) * QG_WGMMA_UNIT_BYTES;
    int q = 0;
    float d = 0.0f;
    if (n < N && k < K) {  // warp-uniform: a warp is one block of one token
        fp16_bits d16, s16;
        q = quantize_q8_1_lane(x[(int64_t)n * K + k], d16, s16);
        d = scale_to_float(d16);
        (void)s16;  // the signed formula needs no s
    }
    unit[b * BN * QK + core_offset(nl, lane / 16) + lane % 16] = (uint8_t)(int8_t)q;
    if (lane == 0) {
        const float da = d * DA_SCALE;
        ((float2*)(unit + KB * BN * QK))[b * BN + nl] = make_float2(da, da * C_SCALE);
    }
}

struct Stage {                   // one K step in shared memory
    uint8_t a[KB][BN * QK];      // activation quants, per block BN / 8 row groups of 2 core matrices
    float2 ad[KB][BN];           // (d_a 2^64, c) [block][token]: with a, one unit of the workspace
    uint8_t w[KB][BM * QK];      // weights as int8 (Q4_0: 16 (q - 8)), the layout of a
    float wd[KB][WD_PITCH];      // weight scales x DW_SCALE (Q4_0: / 16), in wd_slot order
};

// A thread of the warpgroup holds columns n = 8j + 2t + e (j < 16, e < 2) of the 128: their scales
// sit at t WD_T + 2j + e, so a thread reads its 32 as 8 float4 and the 4 values of t hit other banks.
__device__ __forceinline__ int wd_slot(int n) { return ((n % 8) / 2) * WD_T + (n / 8) * 2 + n % 2; }

// 64-bit shared-memory matrix descriptor, no swizzle: address, LBO, SBO, each in 16-byte units.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(LBO >> 4) << 16) | ((uint64_t)(SBO >> 4) << 32);
}

__device__ __forceinline__ float fma_rn(float a, float b, float c) {  // subnormals kept, whatever -ftz says
    float r;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// d (64 x 128 int32, 64 registers per thread) = A (64 x 32 int8) * B (32 x 128 int8) [+ d if SCALE_D].
template <int SCALE_D>
__device__ __forceinline__ void wgmma_s8(int (&d)[64], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
          "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
          "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
          "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(a), "l"(b), "n"(SCALE_D));
}

// After wgmma_wait: the compiler must not read d before the wait (it does not know the asm wrote it).
__device__ __forceinline__ void fence_regs(int (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+r"(d[i])::"memory");
}

// Bulk copies (the TMA engine, no per-thread copy instructions in the loop): `bytes` (a multiple of
// 16, both addresses 16-byte aligned) from global to shared memory, counted on an mbarrier.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, int bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes),
                 "r"((uint32_t)__cvta_generic_to_shared(bar)) : "memory");
}
// The same for a 2-D box of a tensor map: the box at element (x, y), written densely.
__device__ __forceinline__ void tma_copy_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"((uint32_t)__cvta_generic_to_shared(dst)), "l"((uint64_t)map), "r"(x), "r"(y),
                 "r"((uint32_t)__cvta_generic_to_shared(bar)) : "memory");
}
__device__ __forceinline__ void bar_init(uint64_t* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)) : "memory");
}
__device__ __forceinline__ void bar_expect(uint64_t* bar, int bytes) {  // the one arrival of a phase
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 ::"r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* bar, int parity) {
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n}\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(parity) : "memory");
}
#endif

// One block of a weight row into the stage: its values as int8 (two 16-byte core-matrix rows) and its scale.
template <class WF>
__device__ __forceinline__ void store_block(Stage& st, int r, int b, float d, const uint32_t* q) {
    uint4* lo = (uint4*)&st.w[b][core_offset(r, 0)];
    uint4* hi = (uint4*)&st.w[b][core_offset(r, 1)];
    if constexpr (WF::offset == 8) {  // Q4_0: word j's low nibbles are k = 4j.., its high ones 16 + 4j..
        *lo = make_uint4(q4_0_signed_lo(q[0]), q4_0_signed_lo(q[1]), q4_0_signed_lo(q[2]), q4_0_signed_lo(q[3]));
        *hi = make_uint4(q4_0_signed_hi(q[0]), q4_0_signed_hi(q[1]), q4_0_signed_hi(q[2]), q4_0_signed_hi(q[3]));
        st.wd[b][wd_slot(r)] = d * (DW_SCALE / 16);  // exact: the mma sums 16 (q - 8) a
    } else {
        *lo = make_uint4(q[0], q[1], q[2], q[3]);
        *hi = make_uint4(q[4], q[5], q[6], q[7]);
        st.wd[b][wd_slot(r)] = d * DW_SCALE;
    }
}

template <class WF>
__global__ void __launch_bounds__(THREADS, 1)
wgmma_kernel(const uint8_t* __restrict__ ws, const __grid_constant__ CUtensorMap wmap,
             const typename WF::block* __restrict__ W, float* __restrict__ C, int N, int M, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using RP = Raw<WF>;
    constexpr int RAW_ROW = KB * RP::B;  // bytes of a row's K step as stored (144 or 272: 16-byte multiples)
    extern __shared__ __align__(1024) int4 smem_raw[];
    Stage* stages = (Stage*)smem_raw;                          // [2]
    uint8_t* ones = (uint8_t*)(stages + 2);                    // BM x 32 bytes of -128
    uint8_t(*raw)[RAW_ROW] = (uint8_t(*)[RAW_ROW])(ones + BM * QK);  // [BM][RAW_ROW]: a K step as stored
    uint64_t* bar = (uint64_t*)(raw + BM);
    const int nb = K / QK;
    const int steps = (nb + KB - 1) / KB;
    const bool aligned = nb % KB == 0;  // rows' K steps start 16-byte aligned: bulk copies, else 16-bit loads
    const int m0 = blockIdx.x * BM;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int wg = warp / 4;                         // warpgroup: tokens 64 wg ..
    const int tok = 64 * wg + 16 * (warp % 4) + g;   // this thread's tokens: tok and tok + 8
    const uint8_t* units = ws + (int64_t)blockIdx.y * steps * QG_WGMMA_UNIT_BYTES;  // this tile's K steps

    const int wr = tid % BM, wp = tid / BM;  // thread tid unpacks part wp of row wr
    const typename WF::block* wrow = W + (int64_t)min(m0 + wr, M - 1) * nb;  // rows past M repeat the last
    auto load_step = [&](int s) {  // issued by every thread, counted on one barrier phase per step
        Stage& st = stages[s & 1];
        if (tid == 0) {  // the weights: one box of BM rows x a K step (16-bit elements), rows past M zeros
            bar_expect(bar, QG_WGMMA_UNIT_BYTES + (aligned ? BM * RAW_ROW : 0));
            bulk_copy(&st.a[0][0], units + (int64_t)s * QG_WGMMA_UNIT_BYTES, QG_WGMMA_UNIT_BYTES, bar);
            if (aligned) tma_copy_2d(&raw[0][0], &wmap, s * RAW_ROW / 2, m0, bar);
        }
    };
    auto unpack_step = [&](int s) {  // after the step's copies landed; then fence: the tensor cores read what st.shared wrote
        Stage& st = stages[s & 1];
        mma_unpack_weights<WF, KB, PARTS>(
            [&](int part, int c) { return ((const uint4*)&raw[wr][0])[RP::first_chunk(part) + c]; }, wrow, wp, s, nb,
            aligned, [&](int b, float d, const uint32_t* q) { store_block<WF>(st, wr, b, d, q); });
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    };

    for (int i = tid; i < BM * QK / 16; i += THREADS) ((uint4*)ones)[i] = make_uint4(0x80808080u, 0x80808080u,
                                                                                       0x80808080u, 0x80808080u);
    if (tid == 0) bar_init(bar);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the barrier's init, the ones: seen by the async proxy
    __syncthreads();
    load_step(0);
    bar_wait(bar, 0);
    unpack_step(0);
    __syncthreads();

    const uint64_t ones_desc = smem_desc(ones);
    float acc[64] = {};
#ifndef QG_WGMMA_SETS
#define QG_WGMMA_SETS 2
#endif
    // Accumulator sets: 2 overlap block b's scaling with block b + 1's wgmma (1: wait for each; H100,
    // n = 512, k = 14336: 0.221 -> 0.2185 ms). -DQG_WGMMA_SETS=1 in QUANTGEMM_NVCC_FLAGS builds the other.
    constexpr int SETS = QG_WGMMA_SETS;
    int D[SETS][64];

    // acc += the scales of block b x D: x = d_a sumi 2^-85 per token, then d_w x.
    auto scale = [&](const Stage& cur, int b, int (&d)[64]) {
        float dw[32];  // the 32 weight rows of this thread, (d_a 2^64, c) of its 2 tokens
#pragma unroll
        for (int i = 0; i < 8; i++) *(float4*)&dw[4 * i] = *(const float4*)&cur.wd[b][t * WD_T + 4 * i];
        const float2 da0 = cur.ad[b][tok], da1 = cur.ad[b][tok + 8];
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) {  // d[4j + q]: token tok (+8 for q >= 2), row 8j + 2t (+1 for odd q)
                const float2 da = q < 2 ? da0 : da1;
                const float x = fma_rn(da.x, __int_as_float(d[4 * j + q]), da.y);  // d_a sumi 2^-85
                acc[4 * j + q] = fma_rn(dw[2 * j + (q & 1)], x, acc[4 * j + q]);
            }
    };

    for (int s = 0; s < steps; s++) {
        const Stage& cur = stages[s & 1];
        const bool next = s + 1 < steps;
        if (next) load_step(s + 1);  // the other stage and the raw rows are free (barrier below)
#pragma unroll
        for (int b = 0; b < KB; b++) {
            wgmma_fence();  // earlier reads of this set come first
            wgmma_s8<0>(D[b % SETS], ones_desc, ones_desc);  // 2^19 everywhere
            wgmma_s8<1>(D[b % SETS], smem_desc(&cur.a[b][64 * wg * QK]), smem_desc(&cur.w[b][0]));
            wgmma_commit();
            if (SETS == 1) {
                wgmma_wait<0>();
                fence_regs(D[0]);
                scale(cur, b, D[0]);
            } else if (b > 0) {  // block b - 1 is done once at most one group (block b) is pending
                wgmma_wait<SETS - 1>();
                fence_regs(D[(b - 1) % SETS]);
                scale(cur, b - 1, D[(b - 1) % SETS]);
            }
        }
        if (SETS > 1) {
            wgmma_wait<0>();
            fence_regs(D[(KB - 1) % SETS]);
            scale(cur, KB - 1, D[(KB - 1) % SETS]);
        }
        if (next) {
            bar_wait(bar, (s + 1) & 1);
            unpack_step(s + 1);
        }
        __syncthreads();  // every warpgroup is done with cur (wait<0>), the next stage is complete
    }

    // acc[4j + q]: token tok (+8), weight row 8j + 2t (+1): rows 2t, 2t + 1 are adjacent in C [N, M].
    const int n0 = blockIdx.y * BN;
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = n0 + tok + 8 * h, m = m0 + 8 * j + 2 * t;
            if (n >= N) continue;
            float* out = C + (int64_t)n * M + m;
            if (m + 1 < M && M % 2 == 0) *(float2*)out = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            else {
                if (m < M) out[0] = acc[4 * j + 2 * h];
                if (m + 1 < M) out[1] = acc[4 * j + 2 * h + 1];
            }
        }
#endif
}
}  // namespace

// cuTensorMapEncodeTiled, from the driver through the runtime (no link to libcuda).
using PFN_encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
PFN_encode tensor_map_encoder() {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || fn == nullptr || q != cudaDriverEntryPointSuccess)
        throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12 or newer)");
    return (PFN_encode)fn;
}

template <class WF>
void gemm_q8_1_wgmma(const GemmProblem& p, cudaStream_t stream) {
#if !defined(QG_HAS_SM90A)
    throw std::runtime_error("the wgmma kernels need code for sm_90a, and this build has none: build on a "
                             "compute capability 9.0 GPU with TORCH_CUDA_ARCH_LIST unset, or set it to 9.0a");
#endif
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (major != 9 || minor != 0)
        throw std::runtime_error("the wgmma kernels run on compute capability 9.0 (Hopper) only, this GPU is " +
                                 std::to_string(major) + "." + std::to_string(minor));
    const int nb = p.K / QK, steps = (nb + KB - 1) / KB, tiles = (p.N + BN - 1) / BN;
    uint8_t* ws = (uint8_t*)p.workspace;
    const int64_t total = (int64_t)tiles * BN * steps * KB * QK;
    wgmma_quantize_act_kernel<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>((const float*)p.A, ws, p.N, p.K,
                                                                                   steps, total);
    // The weights as a 2-D tensor of 16-bit elements [M][nb * B / 2] (rows' strides must be 16-byte
    // multiples: nb % 8 == 0; else the kernel reads them with 16-bit loads and the map is unused).
    CUtensorMap wmap{};
    if (nb % KB == 0) {
        static PFN_encode encode = tensor_map_encoder();
        const cuuint64_t dims[2] = {(cuuint64_t)nb * Raw<WF>::B / 2, (cuuint64_t)p.M};
        const cuuint64_t strides[1] = {(cuuint64_t)nb * Raw<WF>::B};
        const cuuint32_t box[2] = {KB * Raw<WF>::B / 2, BM}, estrides[2] = {1, 1};
        const CUresult r = encode(&wmap, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(p.W), dims, strides, box,
                                  estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) throw std::runtime_error("cuTensorMapEncodeTiled failed: " + std::to_string((int)r));
    }
    const size_t smem = 2 * sizeof(Stage) + BM * QK + (size_t)BM * KB * Raw<WF>::B + 16;
    cudaFuncSetAttribute(wgmma_kernel<WF>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    for (int t0 = 0; t0 < tiles; t0 += 65535) {  // gridDim.y is capped at 65535
        const int n0 = t0 * BN;
        const dim3 grid((p.M + BM - 1) / BM, std::min(65535, tiles - t0));
        wgmma_kernel<WF><<<grid, THREADS, smem, stream>>>(ws + (int64_t)t0 * steps * QG_WGMMA_UNIT_BYTES, wmap,
                                                          (const typename WF::block*)p.W, p.C + (int64_t)n0 * p.M,
                                                          p.N - n0, p.M, p.K);
    }
}

template void gemm_q8_1_wgmma<w_q4_0>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_wgmma<w_q8_0>(const GemmProblem&, cudaStream_t);

}  // namespace gpu

void cuda_q4_0_q8_1_wgmma(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_wgmma<gpu::w_q4_0>(p, stream); }
