// cuda/06_decode_tensor_cores/wgmma.cuh (chapter 6): what the two Hopper steps share (6_wgmma.cu,
// the third step, and 7_wgmma_ws.cu, the fourth). Both multiply 128 weight rows by 128 tokens per
// CTA with wgmma.mma_async m64n128k32 s8 (sm_90a), two warpgroups of 64 tokens each, from one shared-memory
// layout per K step of 8 blocks (Stage): the activation quants and (d_a 2^64, c) as
// wgmma_quantize_act_kernel wrote them to the workspace, the weights as int8 in the same core-matrix
// layout, and their scales. The numbers (the subnormal offset, the scaled constants) are explained
// at the top of 6_wgmma.cu; the steps differ in who copies and unpacks, and when.
//
// The activation quantizer, measured (Nsight Compute, H200, Q4_0, N = 512, K = 14336). Its first
// version was the mma steps' quantizer moved to this layout: a warp per block and token, a value
// per lane, a 32-lane reduction, two float divisions per lane and a 64-bit division to find each
// value's token and block. It took 51 us and 42.9 million warp instructions beside the GEMM
// kernel's 173 us: a fifth of the call, against a floor of about 9 us (29 MB of float32 read and
// 9 MB of units written at the copy bandwidth), unseen while the profiler pointed at the GEMM
// kernel only. The version below: 12 us and 5.9 million warp instructions; a call of the third
// step went from 0.2245 to 0.1879 ms, of the fourth from 0.224 to 0.1867 (quick benchmark runs).
#pragma once
#include <cuda.h>  // CUtensorMap (the types only: the encoder comes from the driver at run time)

#include <stdexcept>
#include <string>

#include "mma.cuh"

namespace gpu {
namespace wg {
constexpr int BM = 128;                   // weight rows per CTA: the wgmma's N
constexpr int BN = QG_WGMMA_TILE_TOKENS;  // tokens per CTA (128): 2 warpgroups x the wgmma's M = 64
constexpr int KB = 8;                     // blocks per K step
constexpr int CORE = 128;                 // bytes of a core matrix: 8 rows x 16 bytes
constexpr int LBO = CORE;                 // descriptor: bytes between the two core matrices of a row group (k)
constexpr int SBO = 2 * CORE;             // descriptor: bytes between row groups of 8 (m or n)
constexpr int WD_T = 36;                  // floats per lane column t in a block's weight scales (32 + 4: banks)
constexpr int WD_PITCH = 4 * WD_T;        // floats per block of weight scales
constexpr float DA_SCALE = 0x1p64f;       // d_a's factor: d_a 2^64 <= 2^80
constexpr float C_SCALE = -0x1p-130f;     // c = -2^19 2^-149 (d_a 2^64): exact, normal (>= 2^-90)
constexpr float DW_SCALE = 0x1p85f;       // 2^149 / 2^64: d_w 2^85 x (d_a sumi 2^-85) = d_w d_a sumi
static_assert(QG_WGMMA_UNIT_BYTES == KB * BN * QK + KB * BN * 8, "gemm.h's workspace unit is one K step of a tile");

// Byte offset of row r, k half h (k 0..15 or 16..31) of a block's core-matrix tile.
__host__ __device__ constexpr int core_offset(int r, int h) { return (r / 8) * SBO + h * LBO + (r % 8) * 16; }

namespace {
// ---- The activations, quantized into the layout of the kernels' shared memory: per tile of BN
// tokens and K step, one unit of QG_WGMMA_UNIT_BYTES = the quants a[KB][BN * 32] in core-matrix
// order, then per block and token the pair (d_a 2^64, c). A K step of a tile is then one bulk copy.
// Tokens past N and blocks past K are zeros (scale 0: they add nothing).
// A CTA quantizes one K step (8 blocks) of 8 tokens: warp b takes block b, lane 4 u + p takes
// values 8p .. 8p + 7 of token u (two 16-byte loads), and the 4 lanes of a token reduce with 2
// shuffles. A warp's quants are then the 8 rows of the block's two core matrices, one contiguous
// 256-byte run of the unit, written 8 bytes per lane, instead of a warp per block and token with a
// byte per lane, a 32-lane reduction and 64-bit index arithmetic per value.
// The roundings are quantize_q8_1_lane's, value by value, so the bytes are the same.
// sum_mode Q8_1_S_SUM_X: MMQ's own quantizer instead (quantize_mmq_lane's roundings, d_fp16 as MMQ
// keeps d).
__global__ void __launch_bounds__(256) wgmma_quantize_act_kernel(const float* __restrict__ x, uint8_t* __restrict__ ws,
                                                                 int N, int K, int steps, int sum_mode, bool d_fp16) {
    allow_dependent_launch();  // a kernel launched with PDL may start: it waits for our writes itself
    const int lane = threadIdx.x % 32, b = threadIdx.x / 32, p = lane % 4;
    const int64_t n = (int64_t)blockIdx.x * 8 + lane / 4;  // this lane's token; CTAs cover the tiles exactly
    const int64_t tile = n / BN;
    const int nl = (int)(n % BN);
    for (int s = blockIdx.y; s < steps; s += gridDim.y) {
        const int k = (s * KB + b) * QK + 8 * p;
        float v[8] = {};
        if (n < N && k < K) {                                    // the same for a token's 4 lanes: K % 32 == 0
            const float4* src = (const float4*)(x + n * K + k);  // gemm() refuses A off a 16-byte boundary
            const float4 lo = __ldg(src), hi = __ldg(src + 1);
            v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
        }
        float amax = 0.0f;
        bool finite = true;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            amax = fmaxf(amax, fabsf(v[j]));
            finite = finite && isfinite(v[j]);
        }
        amax = fmaxf(amax, __shfl_xor_sync(QG_FULL_MASK, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(QG_FULL_MASK, amax, 2));
        const bool nonfinite = (__ballot_sync(QG_FULL_MASK, !finite) >> (lane & ~3)) & 0xFu;
        const bool mmq = sum_mode == Q8_1_S_SUM_X;
        const float d_inv = amax == 0.0f ? 0.0f : __fdividef(127.0f, amax);  // MMQ's (quantize_mmq_lane)
        const float d = mmq ? (amax == 0.0f ? 0.0f : __fdividef(1.0f, d_inv)) : __fdiv_rn(amax, 127.0f);
        const float id = mmq ? d_inv : inverse_scale(d);
        uint32_t w[2] = {0, 0};
#pragma unroll
        for (int j = 0; j < 8; j++) w[j / 4] |= (uint32_t)((int)roundf(__fmul_rn(v[j], id)) & 0xFF) << (8 * (j % 4));
        if (nonfinite) w[0] = w[1] = 0;  // as quantize_q8_1_lane: a NaN scale, zero quants
        uint8_t* unit = ws + (tile * steps + s) * QG_WGMMA_UNIT_BYTES;
        *(uint2*)&unit[b * BN * QK + core_offset(nl, p / 2) + 8 * (p % 2)] = make_uint2(w[0], w[1]);
        if (p == 0) {
            const float dk = nonfinite          ? __int_as_float(0x7FC00000)
                             : (!mmq || d_fp16) ? scale_to_float(fp32_to_fp16(d))
                                                : d;
            const float da = dk * DA_SCALE;
            ((float2*)(unit + KB * BN * QK))[b * BN + nl] = make_float2(da, da * C_SCALE);
        }
    }
}
}  // namespace

struct Stage {               // one K step in shared memory
    uint8_t a[KB][BN * QK];  // activation quants, per block BN / 8 row groups of 2 core matrices
    float2 ad[KB][BN];       // (d_a 2^64, c) [block][token]: with a, one unit of the workspace
    uint8_t w[KB][BM * QK];  // weights as int8 (Q4_0: 16 (q - 8)), the layout of a
    float wd[KB][WD_PITCH];  // weight scales x DW_SCALE (Q4_0: / 16), in wd_slot order
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
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

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
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
          "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]),
          "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]),
          "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]),
          "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]),
          "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]),
          "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]),
          "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(a), "l"(b), "n"(SCALE_D));
}

// After wgmma_wait: the compiler must not read d before the wait (it does not know the asm wrote it).
template <int R>
__device__ __forceinline__ void fence_regs(int (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+r"(d[i])::"memory");
}

// The same for a 2-D box of a tensor map: the box at element (x, y), written densely.
__device__ __forceinline__ void tma_copy_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
            "r"((uint32_t)__cvta_generic_to_shared(dst)),
        "l"((uint64_t)map), "r"(x), "r"(y), "r"((uint32_t)__cvta_generic_to_shared(bar))
        : "memory");
}
#endif

// Generic-proxy writes to shared memory (st.shared) made visible to the async proxy (wgmma, TMA).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

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

// acc += the scales of block b x d (a warpgroup's wgmma result read as subnormals): x = d_a sumi
// 2^-85 per token, then d_w x. Lane (g, t) of warp w holds tokens tok = 16 (w % 4) + g (+8) of its
// warpgroup's 64 (tok here counts from the CTA's first token) and weight rows 8j + 2t (+1); a
// wgmma of N = 8 NJ columns (weight rows 8 J0 ..) gives it d[4j + q] for rows 8 (J0 + j) + 2t + (q & 1)
// and token tok + 8 (q >> 1). The scales are loaded first (load_scales), so that a kernel can read
// them before it waits for the wgmma.
template <int NJ>
struct Scales {
    float dw[2 * NJ];  // the weight rows' d_w 2^85
    float2 da0, da1;   // (d_a 2^64, c) of the 2 tokens
};
template <int J0, int NJ>
__device__ __forceinline__ Scales<NJ> load_scales(const Stage& cur, int b, int t, int tok) {
    Scales<NJ> sc;
#pragma unroll
    for (int i = 0; i < NJ / 2; i++) *(float4*)&sc.dw[4 * i] = *(const float4*)&cur.wd[b][t * WD_T + 2 * J0 + 4 * i];
    sc.da0 = cur.ad[b][tok];
    sc.da1 = cur.ad[b][tok + 8];
    return sc;
}
template <int J0, int NJ>
__device__ __forceinline__ void apply_scales(float (&acc)[64], const int (&d)[4 * NJ], const Scales<NJ>& sc) {
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const float2 da = q < 2 ? sc.da0 : sc.da1;
            const float x = fma_rn(da.x, __int_as_float(d[4 * j + q]), da.y);  // d_a sumi 2^-85
            acc[4 * (J0 + j) + q] = fma_rn(sc.dw[2 * j + (q & 1)], x, acc[4 * (J0 + j) + q]);
        }
}
// The whole block of an m64n128 wgmma.
__device__ __forceinline__ void scale_block(float (&acc)[64], const Stage& cur, int b, const int (&d)[64], int t,
                                            int tok) {
    apply_scales<0, 16>(acc, d, load_scales<0, 16>(cur, b, t, tok));
}

// acc[4j + q]: token n0 + tok (+8), weight row m0 + 8j + 2t (+1): rows 2t, 2t + 1 are adjacent in C [N, M].
__device__ __forceinline__ void store_acc(float* C, const float (&acc)[64], int n0, int m0, int tok, int t, int N,
                                          int M) {
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = n0 + tok + 8 * h, m = m0 + 8 * j + 2 * t;
            if (n >= N) continue;
            float* out = C + (int64_t)n * M + m;
            if (m + 1 < M && M % 2 == 0)
                *(float2*)out = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            else {
                if (m < M) out[0] = acc[4 * j + 2 * h];
                if (m + 1 < M) out[1] = acc[4 * j + 2 * h + 1];
            }
        }
}

// ---- Host side.
// cuTensorMapEncodeTiled, from the driver through the runtime (no link to libcuda).
using PFN_encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline PFN_encode tensor_map_encoder() {
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

// What a wgmma launcher does before its kernel: refuse builds without sm_90a code and GPUs other
// than 9.0, quantize p.A into the workspace's units, and (when rows' K steps are 16-byte aligned:
// nb % KB == 0) encode the weights as a 2-D tensor of 16-bit elements [M][nb * B / 2] whose box is
// a K step of BM rows. Then launch(ws, wmap, C, N) runs per slice of at most 65535 token tiles
// (gridDim.y), with the slice's workspace, output and token count.
template <class WF, class Launch>
void wgmma_prepare_and_launch(const GemmProblem& p, cudaStream_t stream, Launch launch) {
#if !defined(QG_HAS_SM90A)
    throw std::runtime_error(
        "the wgmma kernels need code for sm_90a, and this build has none: build on a "
        "compute capability 9.0 GPU with TORCH_CUDA_ARCH_LIST unset, or set it to 9.0a");
#endif
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (major != 9 || minor != 0)
        throw std::runtime_error("the wgmma kernels run on compute capability 9.0 (Hopper) only, this GPU is " +
                                 std::to_string(major) + "." + std::to_string(minor));
    constexpr int B = (int)sizeof(typename WF::block);
    const int nb = p.K / QK, steps = (nb + KB - 1) / KB, tiles = (p.N + BN - 1) / BN;
    uint8_t* ws = (uint8_t*)p.workspace;
    const dim3 qgrid((unsigned)tiles * (BN / 8), (unsigned)std::min(steps, 65535));
    wgmma_quantize_act_kernel<<<qgrid, 256, 0, stream>>>((const float*)p.A, ws, p.N, p.K, steps, p.q8_1_sum_mode,
                                                         WF::offset == 8);  // Q4_0: MMQ keeps d in fp16
    CUtensorMap wmap{};
    if (nb % KB == 0) {
        static PFN_encode encode = tensor_map_encoder();
        const cuuint64_t dims[2] = {(cuuint64_t)nb * B / 2, (cuuint64_t)p.M};
        const cuuint64_t strides[1] = {(cuuint64_t)nb * B};
        const cuuint32_t box[2] = {KB * B / 2, BM}, estrides[2] = {1, 1};
        const CUresult r = encode(&wmap, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(p.W), dims, strides, box,
                                  estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) throw std::runtime_error("cuTensorMapEncodeTiled failed: " + std::to_string((int)r));
    }
    for (int t0 = 0; t0 < tiles; t0 += 65535) {  // gridDim.y is capped at 65535
        const dim3 grid((p.M + BM - 1) / BM, std::min(65535, tiles - t0));
        launch(grid, ws + (int64_t)t0 * steps * QG_WGMMA_UNIT_BYTES, wmap, p.C + (int64_t)t0 * BN * p.M, p.N - t0 * BN);
    }
}
}  // namespace wg
}  // namespace gpu
