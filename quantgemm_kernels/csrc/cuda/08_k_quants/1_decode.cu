// cuda/08_k_quants/1_decode.cu (chapter 8): decode with K-quant weights, Q4_K and Q6_K times Q8_1
// activations, the pairing llama.cpp's CUDA backend uses for them (MMVQ, ggml-cuda/vecdotq.cuh's
// vec_dot_q4_K_q8_1 and vec_dot_q6_K_q8_1), streamed as chapter 6's decode step streams Q4_0.
//
// What it teaches: a K-quant super-block (256 values) against Q8_1's 32-value blocks, and that a
// GEMV's speed is the number of weight bytes in flight, which the code must guarantee rather than
// hope for. The activations are quantized once per call to Q8_1 (chapter 6's quantizer, common.cuh:
// the reference's bytes, or ggml-cuda's in the sum_x mode) into an image laid out for this kernel:
// per token and super-block the 256 quants (16-byte aligned, so a lane reads 16 of them with one
// load), the 8 blocks' d_a as floats and the 8 integer sums of their quants (Q4_K's min term).
// Per super-block, with u the Q8_1 quants and d_a their scale (block b):
//   Q4_K  d_w * sum_b d_a,b sc_b (q . u)_b  -  dmin_w * sum_b d_a,b m_b sum(u_b)
//   Q6_K  d_w * sum_t d_a,b(t) sc_t ((q - 32) . u)_t          t = sub-block of 16, b(t) = t / 2
// sum(u_b) is the integer sum of the activation quants (MMVQ's choice: it does not read Q8_1's s, so
// the min term is exact in integers). Every product inside is an integer; floats only scale them.
//
// The weight stream, chapter 6's (decode.cuh) adapted to super-blocks:
//  * A warp step is SB super-blocks (8 or 16) of R rows. The warp copies their bytes with cp.async,
//    16 bytes per lane and instruction, consecutive lanes on consecutive 16 bytes (whole 128-byte
//    lines), into its own ring of STAGES step buffers in shared memory; STAGES - 1 steps stay in
//    flight while it computes on the oldest. Q4_K blocks are 144 B = 9 x 16 B, so every block starts
//    16-byte aligned (rows are); a Q6_K block is 210 B, only 2-byte aligned, so the warp copies the
//    16-byte aligned cover of its SB x 210 bytes (the last vector of W, where W ends inside it, by
//    plain 16-bit loads: kq_copy_tail) and each lane finds its block at an even offset in shared memory.
//  * Then 8 lanes per super-block (4 super-blocks at a time, SB / 4 times per step), 16 bytes each
//    from shared memory: Q4_K lane e takes qs bytes 32c + 16h .. + 15 (c = e / 2, h = e % 2): 16
//    values of sub-block 2c (low nibbles) and 16 of 2c + 1 (high), against 16 activation quants of
//    each (two 16-byte loads per token); the min term is a whole sub-block's, so the h = 0 lane adds
//    it. Q6_K lane e takes ql bytes 64h + 32k + 16j and the qh bytes of the same 16 positions (h = e / 4,
//    k = (e / 2) % 2, j = e % 2): values 32k + l and 32(k + 2) + l of half h, l = 16j .. 16j + 15, two
//    sub-blocks of 16 with their int8 scales.
//  * Weights are unpacked once per step and used for T tokens; activation loads are shared by R rows.
//  * The grid fills the GPU: ceil(M / R) row groups over at most (SMs x CTAs per SM) CTAs of 8 warps,
//    warp w of the grid owning groups w, w + (all warps), ...
//  * Programmatic dependent launch (sm_90): the kernel starts while the quantizer runs, issues its
//    first weight copies, then waits for the activations (grid_dependency_wait).
// Why. The first version (measured on an H100: kquant-decode-214114.json) loaded each lane's 4 to 8
// weight bytes straight into registers, 2 rows per warp, 4 warps per CTA: 512 CTAs of 128 threads,
// ~15.5 warps per SM, at most ~420 B (Q6_K) or ~580 B (Q4_K) per warp and step in flight: 6 to 9 KB per
// SM where Little's law on an H100 (~3 TB/s x ~0.7 us over 132 SMs) asks for ~18-26 KB. And at one
// token ptxas scheduled the second row's loads after the first row's arithmetic (its SASS: 4 to 6
// dependent load rounds per step, against one at T = 2), so Q6_K took 90 us at N = 1 and 47 at N = 2.
// cp.async copies have no register consumer: all of a step's bytes are requested before any arithmetic,
// whatever the scheduler does. Bytes in flight per SM = warps per SM x (STAGES - 1) x R x SB x block
// bytes. One token (R = 1, SB = 16, STAGES = 2; ptxas -v, sm_90a: 53 registers (Q4_K), 56 (Q6_K),
// capped at 64 by __launch_bounds__(256, 4); shared memory 36 KB (Q4_K), 53 KB (Q6_K) per CTA): 4 CTAs
// per SM, M = 4096 gives 512 CTAs, 0.97 of one wave of 528, 31 warps per SM, 71 KB (Q4_K) or 104 KB
// (Q6_K) in flight per SM. T > 1 (R = 2, SB = 8, STAGES = 3; at most 128 registers): 2 CTAs per SM,
// 256 CTAs, 0.97 waves, 15.5 warps per SM, 71 KB (Q4_K) or 104 KB (Q6_K) in flight. The one-token
// step is long (SB = 16) because the SM's instruction issue is the next limit: ~530 instructions per
// 2304-byte Q4_K step (~4.3 B per instruction) against HBM's ~11.5 B per cycle and SM.
// Measured on an H100 (bench_results/.../2026-11-26/kquant-decode-222444.json: CUPTI, weights cold,
// M = 4096, K = 14336, the activation quantizer included; llama.cpp's mul_mat on the same bytes):
// Q4_K 20.5 us at N = 1 (llama.cpp 19.4), ahead of it from N = 2 to 8 (37.2 against 48.6 at N = 8);
// Q6_K 30.6 (27.4), ahead at N = 4 and 8. In that run tools/k_quants_cuda/variants.sh's memcheck
// reported the copy of W's last vector (cp.async with a src-size below 16) as a read past W;
// kq_copy_tail replaced it after the run and has not yet run on a GPU.
// What it still lacks: the activations are read from global memory (L1 and L2) by every warp, as
// MMVQ does, not staged in shared memory as chapter 6's decode step does (that is what grows with T);
// no split of K across warps, so a matrix of few rows (M < ~4000) leaves SMs idle; for N > 8 it makes
// passes of up to 8 tokens and reads W once per pass (prefill wants tensor cores: MMQ).
// Needs sm_80 (cp.async); K a multiple of 256 (the binding checks that W is whole super-blocks and
// that A has the same K) and W 16-byte aligned (the binding checks the base pointer).
#include <algorithm>

#include "../w_q8_1.cuh"

namespace gpu {
namespace {
constexpr int KQ_WARPS = 8;  // warps per CTA
constexpr int KQ_THREADS = 32 * KQ_WARPS;
constexpr int KQ_LANES = 8;          // lanes per super-block: a warp computes on 4 at a time
constexpr int KQ_MAX_T = 8;          // tokens per pass (accumulators in registers)
constexpr int Q8_PER_K = QK_K / QK;  // Q8_1 blocks per super-block: 8

// The activation image: token t, super-block sb at img[t * nbk + sb].
struct alignas(16) kq_act_sb {
    int8_t qs[QK_K];     // the 8 Q8_1 blocks' quants, back to back
    float d[Q8_PER_K];   // their scales d_a (the fp16 value, widened)
    int usum[Q8_PER_K];  // sum of each block's 32 quants
};
static_assert(sizeof(kq_act_sb) == 320, "256 quants + 8 scales + 8 sums");
static_assert(sizeof(kq_act_sb) <= QG_DECODE_UNIT_VECS * 16 + QG_DECODE_UNIT_DS * 8,
              "gemm.h's act_workspace_bytes holds N * K/256 of them");

// The lane arithmetic runs on the host too (tools/k_quants_cuda/variants.cu checks it on the CPU).
#ifdef __CUDA_ARCH__
#define KQ_UNROLL _Pragma("unroll")
#else
#define KQ_UNROLL  // (a host compiler would warn about an unknown pragma)
#endif
QG_HD int kq_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
#endif
}
QG_HD float kq_half(fp16_bits h) {
#ifdef __CUDA_ARCH__
    return scale_to_float(h);
#else
    return fp16_to_fp32(h);
#endif
}
// 16 bytes from a 2-byte aligned address as 4 words: 5 aligned words, shifted by 0 or 16 bits.
QG_HD void kq_load16_b2(const uint8_t* p, int* v) {
    const uint32_t* w = (const uint32_t*)((uintptr_t)p & ~(uintptr_t)3);
    const int sh = 8 * (int)((uintptr_t)p & 3);
    KQ_UNROLL
    for (int i = 0; i < 4; i++) {
#ifdef __CUDA_ARCH__
        v[i] = (int)__funnelshift_r(w[i], w[i + 1], sh);
#else
        v[i] = (int)(uint32_t)((((uint64_t)w[i + 1] << 32) | w[i]) >> sh);
#endif
    }
}
QG_HD void kq_load16(const void* p, int* v) {  // 16-byte aligned
    const int4 x = *(const int4*)p;
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    v[3] = x.w;
}

// ---------------------------------------------------------------- Q4_K
// Lane e (0..7) of a super-block: c = e / 2 (64-value chunk: sub-blocks 2c, 2c + 1), h = e % 2.
struct kq_q4_k {
    using block = block_q4_k;
    static constexpr int BYTES = 144;
    struct Weights {
        int q[2][4];      // qs bytes 32c + 16h ..: [0] low nibbles (sub-block 2c), [1] high (2c + 1)
        int sc[2], m[2];  // the two sub-blocks' 6-bit scales and mins
        float d, dmin;    // dmin is 0 for the h = 1 lane: the min term is added once per sub-block
        // b: the super-block in shared memory, 16-byte aligned
        QG_HD void load(const uint8_t* b, int e) {
            const int c = e / 2, h = e % 2;
            int v[4];
            kq_load16(b + 16 + 32 * c + 16 * h, v);
            KQ_UNROLL
            for (int j = 0; j < 4; j++) {  // unpacked once, used for T tokens
                q[0][j] = v[j] & 0x0F0F0F0F;
                q[1][j] = (v[j] >> 4) & 0x0F0F0F0F;
            }
            const uint4 hd = *(const uint4*)b;  // d | dmin | the 12 scale bytes
            d = kq_half((fp16_bits)(hd.x & 0xFFFF));
            dmin = h == 0 ? kq_half((fp16_bits)(hd.x >> 16)) : 0.0f;
            // The 12 scale bytes as six 16-bit pairs s[0..5]: pair c holds sub-blocks 2c and 2c + 1
            // side by side, so one 16-bit mask extracts both (get_scale_min_k4 for j = 2c, 2c + 1).
            // Lane c needs a = s[c % 2], b = s[c % 2 + 2], x = s[c % 2 + 4]: without a branch (the 4
            // values of c share a warp) and without indexing a register array.
            const int sh = 16 * (c % 2);
            const uint32_t a = (hd.y >> sh) & 0xFFFF, bb = (hd.z >> sh) & 0xFFFF, x = (hd.w >> sh) & 0xFFFF;
            const bool lo = c < 2;  // sub-blocks 0-3: low 6 bits of bytes 0-3 (scales) and 4-7 (mins);
                                    // 4-7: a nibble of bytes 8-11, the top 2 bits of bytes 0-3 / 4-7
            const uint32_t scp = lo ? a & 0x3F3F : (x & 0x0F0F) | ((a & 0xC0C0) >> 2);
            const uint32_t mp = lo ? bb & 0x3F3F : ((x >> 4) & 0x0F0F) | ((bb & 0xC0C0) >> 2);
            sc[0] = scp & 0xFF;
            sc[1] = scp >> 8;
            m[0] = mp & 0xFF;
            m[1] = mp >> 8;
        }
    };
    struct Acts {     // one token's activations for this lane
        int u[2][4];  // 16 quants of Q8_1 block 2c, then of 2c + 1 (positions 16h ..)
        float da[2];  // their blocks' d_a
        int usum[2];  // their blocks' sums of quants (whole blocks)
        QG_HD void load(const kq_act_sb* a, int e) {
            const int c = e / 2, h = e % 2;
            kq_load16(a->qs + 32 * (2 * c) + 16 * h, u[0]);
            kq_load16(a->qs + 32 * (2 * c + 1) + 16 * h, u[1]);
            const float2 dd = *(const float2*)(a->d + 2 * c);
            const int2 us = *(const int2*)(a->usum + 2 * c);
            da[0] = dd.x;
            da[1] = dd.y;
            usum[0] = us.x;
            usum[1] = us.y;
        }
    };
    QG_HD static float dot(const Weights& w, const Acts& a) {
        float sum_d = 0.0f, sum_m = 0.0f;
        KQ_UNROLL
        for (int i = 0; i < 2; i++) {  // i = 0: low nibbles (sub-block 2c), 1: high (2c + 1)
            int sumi = 0;
            KQ_UNROLL
            for (int j = 0; j < 4; j++) sumi = kq_dp4a(w.q[i][j], a.u[i][j], sumi);
            sum_d += a.da[i] * (float)(sumi * w.sc[i]);
            sum_m += a.da[i] * (float)(a.usum[i] * w.m[i]);
        }
        return w.d * sum_d - w.dmin * sum_m;
    }
};

// ---------------------------------------------------------------- Q6_K
// Lane e (0..7) of a super-block: half h = e / 4, k = (e / 2) % 2, j = e % 2: values 32k + l (low
// nibbles of ql, bits 2k of qh) and 32(k + 2) + l (high nibbles, bits 2k + 4) of half h, l = 16j ..
// 16j + 15; sub-blocks of 16 t = 8h + 2k + j and t + 4; Q8_1 blocks 4h + k and 4h + k + 2.
// q - 32 per byte: q ^ 32 is q - 32 as a 6-bit two's complement number; copying its bit 5 to bits 6
// and 7 (times 6: 0x20 -> 0xC0, no carry between bytes) makes it a signed byte.
QG_HD int kq_minus32(int q) {
    const int y = q ^ 0x20202020;
    return y | ((y & 0x20202020) * 6);
}
struct kq_q6_k {
    using block = block_q6_k;
    static constexpr int BYTES = 210;
    struct Weights {
        int q[2][4];  // q - 32 per byte: [0] values 32k + l, [1] values 32(k + 2) + l
        int sc[2];
        float d;
        // b: the super-block in shared memory, 2-byte aligned
        QG_HD void load(const uint8_t* b, int e) {
            const int h = e / 4, k = (e / 2) % 2, j = e % 2;
            int ql[4], qh[4];
            kq_load16_b2(b + 64 * h + 32 * k + 16 * j, ql);
            kq_load16_b2(b + 128 + 32 * h + 16 * j, qh);
            KQ_UNROLL
            for (int i = 0; i < 4; i++) {
                const int hi = qh[i] >> (2 * k);  // bits 2k at bit 0, bits 2k + 4 at bit 4 of each byte
                q[0][i] = kq_minus32((ql[i] & 0x0F0F0F0F) | ((hi << 4) & 0x30303030));
                q[1][i] = kq_minus32(((ql[i] >> 4) & 0x0F0F0F0F) | (hi & 0x30303030));
            }
            const int8_t* scales = (const int8_t*)(b + 192);
            sc[0] = scales[8 * h + 2 * k + j];
            sc[1] = scales[8 * h + 2 * k + j + 4];  // 64 values on
            d = kq_half(*(const fp16_bits*)(b + 208));
        }
    };
    struct Acts {
        int u[2][4];  // 16 quants of Q8_1 block 4h + k, then of 4h + k + 2 (positions 16j ..)
        float da[2];
        QG_HD void load(const kq_act_sb* a, int e) {
            const int h = e / 4, k = (e / 2) % 2, j = e % 2;
            KQ_UNROLL
            for (int i = 0; i < 2; i++) {
                kq_load16(a->qs + 32 * (4 * h + k + 2 * i) + 16 * j, u[i]);
                da[i] = a->d[4 * h + k + 2 * i];
            }
        }
    };
    QG_HD static float dot(const Weights& w, const Acts& a) {
        float sum = 0.0f;
        KQ_UNROLL
        for (int i = 0; i < 2; i++) {
            int sumi = 0;
            KQ_UNROLL
            for (int j = 0; j < 4; j++) sumi = kq_dp4a(w.q[i][j], a.u[i][j], sumi);
            sum += a.da[i] * (float)(sumi * w.sc[i]);
        }
        return w.d * sum;
    }
};

// 16-byte vectors per row in a step buffer: SB blocks, plus one where blocks are not 16-byte aligned
// (Q6_K: the cover of SB x 210 bytes starting at an even offset 0..14 of a vector).
template <class KQ, int SB>
__host__ __device__ constexpr int kq_step_vecs() {
    return KQ::BYTES % 16 == 0 ? SB * KQ::BYTES / 16 : (14 + SB * KQ::BYTES + 15) / 16;
}
template <class KQ, int R, int SB, int STAGES>
__host__ __device__ constexpr size_t kq_smem_bytes() {
    return (size_t)KQ_WARPS * STAGES * R * kq_step_vecs<KQ, SB>() * 16;
}

// The last vector of W where W ends inside it (Q6_K's 210-byte blocks: `bytes` is even, 2..14): those
// bytes by 16-bit loads, the rest of the 16 shared bytes zeroed. cp.async with a source size below
// 16 (its src-size operand) copies only those bytes, but compute-sanitizer's memcheck reported it on an H100 as a
// 16-byte read past the end of W (M = 1, K = 256: 210 bytes); plain loads read nothing past it.
// Ordered with the cp.async copies of the same buffer by the loop's __syncwarp()s, like them.
__device__ __forceinline__ void kq_copy_tail(int4* smem, const uint8_t* gmem, int bytes) {
    const uint16_t* h = (const uint16_t*)gmem;  // 16-byte aligned: a vector of W's cover
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t lo = 4 * k < bytes ? h[2 * k] : 0u, hi = 4 * k + 2 < bytes ? h[2 * k + 1] : 0u;
        w[k] = lo | hi << 16;
    }
    *smem = make_int4((int)w[0], (int)w[1], (int)w[2], (int)w[3]);
}

// The activations: float32 A [N, K] to the image (kq_act_sb [N, K/256]) in the workspace, 8 threads
// per Q8_1 block, with chapter 6's quantizer (quantize_q8_1_group8: the reference's bytes, or
// ggml-cuda's in the sum_x mode). The thread count (8 per block, 8 blocks per super-block) is a
// multiple of 64, so a warp is wholly inside or past the end.
__global__ void kq_quantize_kernel(const float* __restrict__ A, kq_act_sb* __restrict__ img, int64_t blocks,
                                   int sum_mode) {
    allow_dependent_launch();  // the decode kernel may start now: it waits for our results itself
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i - threadIdx.x % 32 >= blocks * 8) return;  // the whole warp is past the end
    const int64_t blk = i / 8;
    const int g = (int)(i % 8);
    fp16_bits d16, s16;
    int usum;
    const float4 x = ((const float4*)(A + blk * QK))[g];  // rows of K % 256 == 0 floats: 16-byte aligned
    const int w = quantize_q8_1_group8(x, sum_mode, d16, s16, usum);
    kq_act_sb* sb = img + blk / Q8_PER_K;  // token-major: block blk of the [N, K/32] grid
    const int b = (int)(blk % Q8_PER_K);
    ((int*)(sb->qs + 32 * b))[g] = w;
    if (g == 0) {
        sb->d[b] = scale_to_float(d16);
        sb->usum[b] = usum;
    }
}

// ---------------------------------------------------------------- the kernel
// T tokens (act: their image rows, nbk super-blocks each) times W (M rows of nbk KQ blocks, w_bytes in
// all); C [T, M]. R rows per warp (a group), SB super-blocks per warp step (a multiple of 4: the warp
// computes on 4 at a time, SB / 4 times per step), STAGES step buffers per warp.
// At most 64 registers where R = 1 (4 CTAs, 32 warps per SM: M = 4096 rows in one wave), 128 otherwise.
template <class KQ, int T, int R, int SB, int STAGES>
__global__ void __launch_bounds__(KQ_THREADS, R == 1 ? 4 : 2)
    kq_decode_kernel(const kq_act_sb* __restrict__ act, const uint8_t* __restrict__ W, size_t w_bytes,
                     float* __restrict__ C, int M, int nbk) {
    static_assert(SB % (32 / KQ_LANES) == 0, "a step is whole groups of 4 super-blocks");
    constexpr int B = KQ::BYTES;
    constexpr int VECS = kq_step_vecs<KQ, SB>();  // per row of a step buffer
    extern __shared__ int4 kq_smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int4* ring = kq_smem + warp * STAGES * R * VECS;  // this warp's STAGES step buffers
    const int warps_total = gridDim.x * KQ_WARPS;
    const int warp_global = blockIdx.x * KQ_WARPS + warp;
    const int groups = (M + R - 1) / R;
    const int steps = (nbk + SB - 1) / SB;  // per row
    const int groups_mine = warp_global < groups ? (groups - 1 - warp_global) / warps_total + 1 : 0;
    const int items = groups_mine * steps;  // item i: group warp_global + (i / steps) * warps_total, step i % steps

    // Row r of group g (rows past M read row M - 1 and are not written); byte offset of step st in W.
    auto row_of = [&](int g, int r) { return min(g * R + r, M - 1); };
    auto step_start = [&](int row, int st) { return ((size_t)row * nbk + (size_t)st * SB) * B; };

    // Items are issued in order, i = 0, 1, ...: item i goes to buffer i % STAGES, per row the 16-byte
    // vectors covering its (up to) SB blocks, lane l copying vectors l, l + 32, ... One commit group per
    // item, empty past the end, so that wait_group<STAGES - 1> always means "the oldest item has landed".
    int next = 0, next_g = warp_global, next_st = 0;  // the next item to issue, its group and step
    auto issue = [&]() {
        if (next < items) {
            const int nsb = min(SB, nbk - next_st * SB);
            int4* dst = ring + (next % STAGES) * R * VECS;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const size_t start = step_start(row_of(next_g, r), next_st), a0 = start & ~(size_t)15;
                const int n = (int)((start - a0 + (size_t)nsb * B + 15) / 16);  // vectors needed
                // bytes of the last vector: 16, except at the end of W (where a Q6_K matrix may end mid-vector)
                const int last = (int)min((size_t)16, w_bytes - (a0 + 16 * (size_t)(n - 1)));
                const uint8_t* src = W + a0;
#pragma unroll
                for (int v = 0; v < (VECS + 31) / 32; v++) {
                    const int c = lane + 32 * v;
                    if (c < n) {
                        if (c == n - 1 && last < 16)
                            kq_copy_tail(dst + r * VECS + c, src + 16 * c, last);
                        else
                            cp_async16(dst + r * VECS + c, src + 16 * c);  // common.cuh
                    }
                }
            }
            if (++next_st == steps) next_st = 0, next_g += warps_total;
        }
        next++;
        cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) issue();  // in flight while the quantizer finishes
    grid_dependency_wait();                        // the activations are the quantizer's (PDL)

    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.0f;
    const int jl = lane / KQ_LANES, e = lane % KQ_LANES;  // this lane's super-block (of 4) and lane in it

    int g = warp_global, st = 0;  // item i's group and step
    for (int i = 0; i < items; i++) {
        issue();                      // item i + STAGES - 1, into the buffer computed on in iteration i - 1
        cp_async_wait<STAGES - 1>();  // this lane's copies of item i have landed...
        __syncwarp();                 // ...and every other lane's
        const uint8_t* buf = (const uint8_t*)(ring + (i % STAGES) * R * VECS);
        int off[R];  // where each row's bytes start in its buffer (0 for Q4_K)
#pragma unroll
        for (int r = 0; r < R; r++) off[r] = r * VECS * 16 + (int)(step_start(row_of(g, r), st) & 15);
#pragma unroll
        for (int u = 0; u < SB / 4; u++) {
            const int j = 4 * u + jl, sb = st * SB + j;  // super-block j of the step
            if (sb < nbk) {
                typename KQ::Weights w[R];
#pragma unroll
                for (int r = 0; r < R; r++) w[r].load(buf + off[r] + j * B, e);
#pragma unroll
                for (int t = 0; t < T; t++) {
                    typename KQ::Acts a;
                    a.load(act + (size_t)t * nbk + sb, e);  // loaded once, used for R rows
#pragma unroll
                    for (int r = 0; r < R; r++) acc[r][t] += KQ::dot(w[r], a);
                }
            }
        }
        if (st == steps - 1) {  // the group's rows are done: butterfly sum (fixed order), lane 0 writes
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int t = 0; t < T; t++) {
                    float v = acc[r][t];
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(QG_FULL_MASK, v, o);
                    if (lane == 0 && g * R + r < M) C[(int64_t)t * M + g * R + r] = v;
                    acc[r][t] = 0.0f;
                }
        }
        if (++st == steps) st = 0, g += warps_total;
        __syncwarp();  // every lane is done with buffer i % STAGES before it is refilled
    }
}

// ---------------------------------------------------------------- launchers
int kq_sms() {  // looked up once per device
    static int sms[64] = {};
    int dev = 0;
    cudaGetDevice(&dev);
    if (sms[dev % 64] == 0) cudaDeviceGetAttribute(&sms[dev % 64], cudaDevAttrMultiProcessorCount, dev);
    return sms[dev % 64];
}
int kq_major() {
    static int major[64] = {};
    int dev = 0;
    cudaGetDevice(&dev);
    if (major[dev % 64] == 0) cudaDeviceGetAttribute(&major[dev % 64], cudaDevAttrComputeCapabilityMajor, dev);
    return major[dev % 64];
}

// The quantizer: A [N, K] to the image at img (N * K/256 entries).
void kq_quantize(const float* A, kq_act_sb* img, int N, int K, int sum_mode, cudaStream_t stream) {
    const int64_t blocks = (int64_t)N * (K / QK);
    kq_quantize_kernel<<<(unsigned)((blocks * 8 + 127) / 128), 128, 0, stream>>>(A, img, blocks, sum_mode);
}

// One pass of T tokens: the grid covers the row groups, at most as many CTAs as fit on the GPU at once.
template <class KQ, int T, int R, int SB, int STAGES>
void kq_launch(const kq_act_sb* act, const typename KQ::block* W, float* C, int M, int nbk, cudaStream_t stream) {
    auto kernel = kq_decode_kernel<KQ, T, R, SB, STAGES>;
    constexpr size_t smem = kq_smem_bytes<KQ, R, SB, STAGES>();
    int dev = 0;
    cudaGetDevice(&dev);
    static int per_sm_cache[64] = {};  // CTAs per SM, by device
    int& per_sm = per_sm_cache[dev % 64];
    if (per_sm == 0) {
        if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, KQ_THREADS, smem);
        per_sm = std::max(per_sm, 1);
    }
    const int groups = (M + R - 1) / R;
    const int ctas = std::max(1, std::min((groups + KQ_WARPS - 1) / KQ_WARPS, kq_sms() * per_sm));
    const size_t w_bytes = (size_t)M * nbk * sizeof(typename KQ::block);
    launch_maybe_pdl(kernel, dim3(ctas), dim3(KQ_THREADS), smem, stream, kq_major() >= 9, act, (const uint8_t*)W,
                     w_bytes, C, M, nbk);
}

// (R rows per warp, SB super-blocks per step, STAGES) by tokens per pass. tools/k_quants_cuda/variants.cu
// times the alternatives: on an H100 (kq-variants-2222.log) one token ran faster with R = 2, SB = 8,
// STAGES = 3 than with this choice (Q4_K 18.9 against 20.3 us cold, Q6_K 27.9 against 29.9).
// Big steps: the fixed cost of a step (issuing its copies, waiting, the rows' offsets; ~100 instructions)
// is paid once per SB super-blocks.
// With SB = 4 a one-token Q4_K step issued ~300 instructions for 576 bytes, and an SM that issues at
// most 4 a cycle cannot then keep up with HBM's ~11.5 bytes per cycle and SM. One token: a row per
// warp (4096 warps at M = 4096, 31 per SM), SB = 16 (2304 or 3360 bytes a step), 1 step in flight
// while it computes on another (31 x 2304 = 71 KB of Q4_K in flight per SM). More tokens: 2 rows per
// warp share each activation load (the loads grow with T, the weight bytes do not), 2048 warps,
// SB = 8 and 2 steps in flight (Q6_K: 79.5 KB of shared memory per CTA, 2 CTAs per SM).
template <class KQ>
void kq_launch_tokens(int T, const kq_act_sb* act, const typename KQ::block* W, float* C, int M, int nbk,
                      cudaStream_t stream) {
    switch (T) {
        case 1: kq_launch<KQ, 1, 1, 16, 2>(act, W, C, M, nbk, stream); break;
        case 2: kq_launch<KQ, 2, 2, 8, 3>(act, W, C, M, nbk, stream); break;
        case 3: kq_launch<KQ, 3, 2, 8, 3>(act, W, C, M, nbk, stream); break;
        case 4: kq_launch<KQ, 4, 2, 8, 3>(act, W, C, M, nbk, stream); break;
        case 5: kq_launch<KQ, 5, 2, 8, 3>(act, W, C, M, nbk, stream); break;
        case 6: kq_launch<KQ, 6, 2, 8, 3>(act, W, C, M, nbk, stream); break;
        case 7: kq_launch<KQ, 7, 2, 8, 3>(act, W, C, M, nbk, stream); break;
        default: kq_launch<KQ, 8, 2, 8, 3>(act, W, C, M, nbk, stream); break;
    }
}

// p.A float32 [N, K], p.W KQ blocks [M, K/256], p.workspace at least N * K/256 kq_act_sb (gemm.h's
// act_workspace_bytes: 344 bytes per token and 256 values, more than the 320 needed).
template <class KQ>
void gemm_kq_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    const int nbk = p.K / QK_K;
    kq_act_sb* img = (kq_act_sb*)p.workspace;
    kq_quantize((const float*)p.A, img, p.N, p.K, p.q8_1_sum_mode, stream);
    for (int n0 = 0; n0 < p.N; n0 += KQ_MAX_T)
        kq_launch_tokens<KQ>(std::min(KQ_MAX_T, p.N - n0), img + (int64_t)n0 * nbk, (const typename KQ::block*)p.W,
                             p.C + (int64_t)n0 * p.M, p.M, nbk, stream);
}
}  // namespace
}  // namespace gpu

void cuda_q4_k_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_kq_q8_1_decode<gpu::kq_q4_k>(p, stream);
}

void cuda_q6_k_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_kq_q8_1_decode<gpu::kq_q6_k>(p, stream);
}
