// cuda/q4_0_q8_1_wgmma.cu (chapter 6): Hopper's warpgroup mma (wgmma) for prefill, third step.
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
// Staging is the second step's (mma.cuh): cp.async by all 256 threads into a double-buffered
// K step of 8 blocks, Q4_0 unpacked once per CTA to int8 16 (q - 8), one barrier per step. Only
// the layout differs: wgmma reads 8 x 16-byte "core matrices" (8 rows, 16 consecutive k), each
// 128 contiguous bytes; a block's tile of R rows is R / 8 pairs of them (k 0..15, k 16..31).
// Generic-proxy writes (cp.async, st.shared) are made visible to the tensor cores' async proxy by
// fence.proxy.async before the barrier.
#include <stdexcept>
#include <string>

#include "mma.cuh"

namespace gpu {
namespace {
constexpr int BM = 128;                // weight rows per CTA: the wgmma's N
constexpr int BN = 128;                // tokens per CTA: 2 warpgroups x the wgmma's M = 64
constexpr int KB = 8;                  // blocks per K step
constexpr int THREADS = 256;           // 2 warpgroups
constexpr int PARTS = THREADS / BM;    // threads that stage one weight row
constexpr int CORE = 128;              // bytes of a core matrix: 8 rows x 16 bytes
constexpr int LBO = CORE;              // descriptor: bytes between the two core matrices of a row group (k)
constexpr int SBO = 2 * CORE;          // descriptor: bytes between row groups of 8 (m or n)
constexpr int WD_T = 36;               // floats per lane column t in a block's weight scales (32 + 4: banks)
constexpr int WD_PITCH = 4 * WD_T;     // floats per block of weight scales
constexpr int AD_PITCH = BN + 4;       // floats per block of activation scales; +4: copies hit 8 bank groups
constexpr float DA_SCALE = 0x1p64f;    // d_a's factor: d_a 2^64 <= 2^80
constexpr float C_SCALE = -0x1p-130f;  // c = -2^19 2^-149 (d_a 2^64): exact, normal (>= 2^-90)
constexpr float DW_SCALE = 0x1p85f;    // 2^149 / 2^64: d_w 2^85 x (d_a sumi 2^-85) = d_w d_a sumi

template <class WF>
using Raw = RawPart<WF, KB, PARTS>;
#define QG_WGMMA_SETS_MAX 2

struct Tile {                         // one K step in shared memory
    uint8_t a[KB][BN * QK];           // activation quants, per block BN / 8 row groups of 2 core matrices
    uint8_t w[KB][BM * QK];           // weights as int8 (Q4_0: 16 (q - 8)), the same layout
    float wd[KB][WD_PITCH];           // weight scales x DW_SCALE (Q4_0: / 16), in wd_slot order
    float ad[KB][AD_PITCH];           // activation scales d [block][token]
};

// Byte offset of row r, k half h (k 0..15 or 16..31) of a block's core-matrix tile.
__host__ __device__ constexpr int core_offset(int r, int h) { return (r / 8) * SBO + h * LBO + (r % 8) * 16; }

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
#endif

// One block of a weight row into the tile: its values as int8 (two 16-byte core-matrix rows) and its scale.
template <class WF>
__device__ __forceinline__ void store_block(Tile& tile, int r, int b, float d, const uint32_t* q) {
    uint4* lo = (uint4*)&tile.w[b][core_offset(r, 0)];
    uint4* hi = (uint4*)&tile.w[b][core_offset(r, 1)];
    if constexpr (WF::offset == 8) {  // Q4_0: word j's low nibbles are k = 4j.., its high ones 16 + 4j..
        *lo = make_uint4(q4_0_signed_lo(q[0]), q4_0_signed_lo(q[1]), q4_0_signed_lo(q[2]), q4_0_signed_lo(q[3]));
        *hi = make_uint4(q4_0_signed_hi(q[0]), q4_0_signed_hi(q[1]), q4_0_signed_hi(q[2]), q4_0_signed_hi(q[3]));
        tile.wd[b][wd_slot(r)] = d * (DW_SCALE / 16);  // exact: the mma sums 16 (q - 8) a
    } else {
        *lo = make_uint4(q[0], q[1], q[2], q[3]);
        *hi = make_uint4(q[4], q[5], q[6], q[7]);
        tile.wd[b][wd_slot(r)] = d * DW_SCALE;
    }
}

template <class WF>
__global__ void __launch_bounds__(THREADS, 1)
wgmma_kernel(const int8_t* __restrict__ aq, const float2* __restrict__ ads, const typename WF::block* __restrict__ W,
             float* __restrict__ C, int N, int M, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using RP = Raw<WF>;
    extern __shared__ __align__(1024) int4 smem_raw[];
    Tile* tiles = (Tile*)smem_raw;                                              // [2]
    uint8_t* ones = (uint8_t*)(tiles + 2);                                      // BM x 32 bytes of -128
    uint4(*raw)[RP::CHUNKS][BM] = (uint4(*)[RP::CHUNKS][BM])(ones + BM * QK);  // [PARTS][CHUNKS][BM]
    const int nb = K / QK;
    const int steps = (nb + KB - 1) / KB;
    const bool aligned = nb % KB == 0;  // weight rows' K steps start 16-byte aligned: cp.async
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int wg = warp / 4;                         // warpgroup: tokens 64 wg ..
    const int tok = 64 * wg + 16 * (warp % 4) + g;   // this thread's tokens: tok and tok + 8

    const int wr = tid % BM, wp = tid / BM;  // staging: thread tid copies and unpacks part wp of row wr
    const typename WF::block* wrow = W + (int64_t)min(m0 + wr, M - 1) * nb;  // rows past M repeat the last
    auto copy_weights = [&](int s) {
        if (aligned) mma_copy_weights<WF, KB, PARTS, BM>(raw, wrow, wr, wp, s);
    };
    auto copy_quants = [&](Tile& tile, int s) {  // chunk j of a token: block j / 2, k half j % 2
        mma_copy_act_quants<THREADS, BN>(aq, s, nb, K, n0, N, tid,
                                         [&](int r, int j) { return &tile.a[j / 2][core_offset(r, j % 2)]; });
    };
    auto copy_scales = [&](Tile& tile, int s) {
        mma_copy_act_scales<THREADS, BN, KB>(&tile.ad[0][0], AD_PITCH, ads, s, nb, n0, N, tid);
    };
    auto unpack_step = [&](Tile& tile, int s) {  // then fence: the tensor cores read what st.shared wrote
        mma_unpack_weights<WF, KB, PARTS, BM>(raw, wrow, wr, wp, s, nb, aligned, [&](int b, float d, const uint32_t* q) {
            store_block<WF>(tile, wr, b, d, q);
        });
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    };

    for (int i = tid; i < BM * QK / 16; i += THREADS) ((uint4*)ones)[i] = make_uint4(~0u / 255 * 0x80, ~0u / 255 * 0x80,
                                                                                       ~0u / 255 * 0x80, ~0u / 255 * 0x80);
    copy_weights(0);
    copy_quants(tiles[0], 0);
    copy_scales(tiles[0], 0);
    cp_async_wait_all();
    unpack_step(tiles[0], 0);
    __syncthreads();

    const uint64_t ones_a = smem_desc(ones), ones_b = smem_desc(ones);
    float acc[64] = {};
    int D[QG_WGMMA_SETS_MAX][64];  // accumulator sets: block b in D[b % sets]

    // Block b's scales, loaded before the wgmma wait so that their latency hides behind it: the 32
    // weight-row scales of this thread's columns, d_a 2^64 and c of its two tokens.
    struct Scales { float dw[32], da[2], c[2]; };
    auto load_scales = [&](const Tile& cur, int b, Scales& sc) {
#pragma unroll
        for (int i = 0; i < 8; i++) *(float4*)&sc.dw[4 * i] = *(const float4*)&cur.wd[b][t * WD_T + 4 * i];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            sc.da[h] = cur.ad[b][tok + 8 * h] * DA_SCALE;
            sc.c[h] = sc.da[h] * C_SCALE;
        }
    };
    // acc += scales x D: x = d_a sumi 2^-85 per token, then d_w x.
    auto scale = [&](const Scales& sc, int (&d)[64]) {
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) {  // d[4j + q]: token tok (+8 for q >= 2), row 8j + 2t (+1 for odd q)
                const float x = fma_rn(sc.da[q >> 1], __int_as_float(d[4 * j + q]), sc.c[q >> 1]);
                acc[4 * j + q] = fma_rn(sc.dw[2 * j + (q & 1)], x, acc[4 * j + q]);
            }
    };

#ifndef QG_WGMMA_LATE
#define QG_WGMMA_LATE 0
#endif
#ifndef QG_WGMMA_SETS
#define QG_WGMMA_SETS 2
#endif
    for (int s = 0; s < steps; s++) {
        const Tile& cur = tiles[s & 1];
        Tile& nxt = tiles[(s + 1) & 1];
        const bool next = s + 1 < steps;
        Scales sc;
#pragma unroll
        for (int b = 0; b < KB; b++) {
            if (QG_WGMMA_SETS == 1) load_scales(cur, b, sc);
            else if (b > 0 && !QG_WGMMA_LATE) load_scales(cur, b - 1, sc);
            wgmma_fence();  // this set's earlier reads (block b - 2's scaling) come first
            wgmma_s8<0>(D[b % QG_WGMMA_SETS], ones_a, ones_b);  // 2^19 everywhere
            wgmma_s8<1>(D[b % QG_WGMMA_SETS], smem_desc(&cur.a[b][64 * wg * QK]), smem_desc(&cur.w[b][0]));
            wgmma_commit();
            if (next) {  // the next step's copies, in flight while the tensor cores work. Issued after
                // the wgmma: a copy reads its address registers late, and the wgmma fence would wait for that.
                if (b == 0) copy_weights(s + 1);
                if (b == 2) copy_quants(nxt, s + 1);
                if (b == 4) copy_scales(nxt, s + 1);
            }
            if (QG_WGMMA_SETS == 1) {
                wgmma_wait<0>();
                fence_regs(D[0]);
                scale(sc, D[0]);
            } else if (b > 0) {  // block b - 1 is done once at most one group (block b) is pending
                wgmma_wait<1>();
                fence_regs(D[(b - 1) % QG_WGMMA_SETS]);
                if (QG_WGMMA_LATE) load_scales(cur, b - 1, sc);
                scale(sc, D[(b - 1) % QG_WGMMA_SETS]);
            }
        }
        if (QG_WGMMA_SETS == 2) {
            load_scales(cur, KB - 1, sc);
            wgmma_wait<0>();
            fence_regs(D[(KB - 1) % QG_WGMMA_SETS]);
            scale(sc, D[(KB - 1) % QG_WGMMA_SETS]);
        }
        if (next) {
            cp_async_wait_all();
            unpack_step(nxt, s + 1);
        }
        __syncthreads();  // every warpgroup is done with cur (wait<0>), nxt is complete
    }

    // acc[4j + q]: token tok (+8), weight row 8j + 2t (+1): rows 2t, 2t + 1 are adjacent in C [N, M].
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
    int8_t* aq;
    float2* ads;
    mma_quantize_acts(p, stream, aq, ads);
    const size_t smem = 2 * sizeof(Tile) + BM * QK + (size_t)BM * PARTS * Raw<WF>::CHUNKS * 16;
    cudaFuncSetAttribute(wgmma_kernel<WF>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    mma_launch_slices<BN>(p, aq, ads, [&](const int8_t* aq_n, const float2* ads_n, float* C_n, int n) {
        const dim3 grid((p.M + BM - 1) / BM, (n + BN - 1) / BN);
        wgmma_kernel<WF><<<grid, THREADS, smem, stream>>>(aq_n, ads_n, (const typename WF::block*)p.W, C_n, n, p.M, p.K);
    });
}

template void gemm_q8_1_wgmma<w_q4_0>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_wgmma<w_q8_0>(const GemmProblem&, cudaStream_t);

}  // namespace gpu

void cuda_q4_0_q8_1_wgmma(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_wgmma<gpu::w_q4_0>(p, stream); }
