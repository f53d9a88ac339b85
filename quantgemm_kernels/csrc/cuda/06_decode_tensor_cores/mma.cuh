// cuda/06_decode_tensor_cores/mma.cuh (chapter 6): what the tensor-core steps share. The
// activations are quantized first (quantize_q8_1_lane: llama.cpp's Q8_1 bytes and scales) into a
// workspace laid out for the mma kernels: int8 quants [N][K] (16-byte copies) and float pairs (d, c
// = -MAGIC_F * d) [N][K/32]. llama.cpp's MMQ does the same with its own q8_1_mmq layout (d only,
// for Q4_0 and Q8_0 weights: s is not needed). Q4_1 weights (chapter 7) need s for their min term
// m_w * s_a: for them the pairs are (d, s) instead; Q4_K weights (chapter 8) too, with s = d * sum(q)
// unrounded outside the sum_x mode. Then mma_s8, one mma.sync.m16n8k32 on int8 (Q6_K weights,
// chapter 8: mma_s8_k16, two of k = 16 per block of 32, one per weight scale).
//
// Integer to float for free: the mma adds its int32 accumulator input to the product, and
// 0x4B400000 is the float 1.5 * 2^23. With that as the input, the result's bits are the float
// 12582912 + sumi exactly (|sumi| < 2^22): no I2F, which runs at a quarter of the FP32 rate.
// The offset is removed inside the scaling FMA: fmaf(d_a, 12582912 + sumi, c) with
// c = -12582912 * d_a (exact: 2 + 11 significant bits) is d_a * sumi rounded once, as if sumi
// had been converted first (block_dot below).
#pragma once
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "../w_q8_1.cuh"

namespace gpu {

constexpr uint32_t MMA_MAGIC = 0x4B400000u;  // 1.5 * 2^23 as float bits
constexpr float MMA_MAGIC_F = 12582912.0f;   // the same number as a float

namespace {
// MMQ's sum of a block's 32 floats (quantize_mmq_q8_1, the s it keeps for Q4_1 weights): 8 threads
// of 4 values each add theirs in order, then sum over the 8 by xor shuffles (4, 2, 1). Here lane j
// holds value j: lanes 4t gather their quad in that order and shuffle by 16, 8, 4; lane 0 has the
// result. The same additions in the same order, so the same float.
__device__ __forceinline__ float mmq_block_sum(float v) {
    float s = __fadd_rn(v, __shfl_down_sync(QG_FULL_MASK, v, 1));
    s = __fadd_rn(s, __shfl_down_sync(QG_FULL_MASK, v, 2));
    s = __fadd_rn(s, __shfl_down_sync(QG_FULL_MASK, v, 3));
#pragma unroll
    for (int off = 16; off >= 4; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(QG_FULL_MASK, s, off));
    return s;
}

// One warp per block; writes quants to qs [rows][K] and (d, -MMA_MAGIC_F * d) to ds [rows][K/32].
// sum_mode Q8_1_S_SUM_X: MMQ's own activation quantizer (quantize_mmq_lane), d_fp16 as it keeps d.
// With a float32 d (MMQ's for Q8_0 weights) c = -MMA_MAGIC_F * d needs 26 significant bits and is
// rounded, which costs up to d/2 per block result; the binding therefore offers the mode to the
// Q4_0 mma steps only (fp16 d). The wgmma steps scale by a power of two instead and take either.
// with_sum (Q4_1 weights): (d, s) instead, s as the mode's quantizer has it: d * sum(q) rounded to
// fp16 (the reference's), or MMQ's sum of x (mmq_block_sum) rounded to fp16, as MMQ keeps it for Q4_1.
__global__ void mma_quantize_act_kernel(const float* __restrict__ x, int8_t* __restrict__ qs, float2* __restrict__ ds,
                                        int64_t total, int sum_mode, bool d_fp16, bool with_sum) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i - (threadIdx.x % 32) >= total) return;  // whole warps in or out (total % 32 == 0)
    float d, s = 0.0f;
    if (sum_mode == Q8_1_S_SUM_X) {
        qs[i] = (int8_t)quantize_mmq_lane(x[i], d_fp16, d);
        if (with_sum) s = scale_to_float(fp32_to_fp16(mmq_block_sum(x[i])));  // the whole warp shuffles
    } else {
        fp16_bits d16, s16;
        qs[i] = (int8_t)quantize_q8_1_lane(x[i], d16, s16);
        d = scale_to_float(d16);
        s = scale_to_float(s16);  // read by Q4_1's min term only: the signed formula needs no s
    }
    if (threadIdx.x % 32 == 0) ds[i / 32] = make_float2(d, with_sum ? s : -MMA_MAGIC_F * d);
}

// Q4_K weights (chapter 8) outside the sum_x mode: the reference's bytes with (d, d * sum(q)), the
// product in float32, not rounded to fp16: the reference and MMVQ (reference.gemm_wk_aq8_1,
// vec_dot_q4_K_q8_1) take the K-quant min term from the integer sum of the quants, not from s.
// A template on the weight format, so that only the steps that read it instantiate it.
template <class WF>
__global__ void mma_quantize_act_sum_q_kernel(const float* __restrict__ x, int8_t* __restrict__ qs,
                                              float2* __restrict__ ds, int64_t total) {
    static_assert(is_k_quant<WF>, "the K-quants' min term");
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i - (threadIdx.x % 32) >= total) return;  // whole warps in or out (total % 32 == 0)
    fp16_bits d16, s16;
    const int q = quantize_q8_1_lane(x[i], d16, s16);  // a non-finite block: q = 0 and d = NaN
    qs[i] = (int8_t)q;
    const int sum = warp_sum(q);  // the whole warp shuffles
    const float d = scale_to_float(d16);
    if (threadIdx.x % 32 == 0) ds[i / 32] = make_float2(d, d * (float)sum);
}
}  // namespace

// Where the activations go in p.workspace (act_workspace_bytes in gemm.h): quants [N][K], then
// float pairs [N][K/32] from the next 16-byte boundary.
inline void mma_act_workspace(const GemmProblem& p, int8_t*& aq, float2*& ads) {
    aq = (int8_t*)p.workspace;
    ads = (float2*)(aq + (((int64_t)p.N * p.K + 15) / 16) * 16);
}

// p.A (float32 [N, K]) -> p.workspace: quants, then (d, c), or (d, s) with with_sum. d_fp16: how
// MMQ keeps d in p.q8_1_sum_mode's MMQ mode (Q4_0, Q4_1 and Q4_K weights: fp16; Q8_0: float32).
inline void mma_quantize_acts(const GemmProblem& p, cudaStream_t stream, int8_t*& aq, float2*& ads, bool d_fp16,
                              bool with_sum = false) {
    const int64_t total = (int64_t)p.N * p.K;
    mma_act_workspace(p, aq, ads);
    mma_quantize_act_kernel<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>((const float*)p.A, aq, ads, total,
                                                                                 p.q8_1_sum_mode, d_fp16, with_sum);
}

// The same with (d, d * sum(q)) pairs, for WF = Q4_K outside the sum_x mode.
template <class WF>
inline void mma_quantize_acts_sum_q(const GemmProblem& p, cudaStream_t stream, int8_t*& aq, float2*& ads) {
    const int64_t total = (int64_t)p.N * p.K;
    mma_act_workspace(p, aq, ads);
    mma_quantize_act_sum_q_kernel<WF>
        <<<(unsigned)((total + 255) / 256), 256, 0, stream>>>((const float*)p.A, aq, ads, total);
}

// C = P[0] + P[1] + ... + P[splits - 1] over planes of `plane` floats, in that order: the split-K
// steps' second kernel (8_wgmma_splitk.cu defines it; 10_mma_splitk.cu's launches use it too).
void splitk_sum(const float* P, float* C, int64_t plane, int splits, cudaStream_t stream, bool pdl = false);

// D = A (16 x 32, rows) * B (32 x 8, columns) + c in every element of the accumulator input.
// [excerpt: mma_s8]
__device__ __forceinline__ void mma_s8(int (&d)[4], const int (&a)[4], const int (&b)[2], int c) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c));
// [end excerpt: mma_s8]
#else
    __trap();  // the launchers refuse GPUs older than sm_80
#endif
}

// Q6_K (chapter 8): D = A (16 x 16) * B (16 x 8) + c, mma.sync.m16n8k16 on int8. Its fragments are
// the halves of mma_s8's: a0, a1 (rows g, g + 8 at k 4t..4t+3) and b0 (k 4t..4t+3) are k 0..15 of a
// block, a2, a3 and b1 are k 16..31. So the k32 fragments (ldmatrix) feed two of these unchanged, one
// per 16 values, and each sum comes out alone, to be scaled by its own sc_t.
__device__ __forceinline__ void mma_s8_k16(int (&d)[4], int a0, int a1, int b0, int c) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(c));
#else
    __trap();  // the launchers refuse GPUs older than sm_80
#endif
}

// Q4_0's signed nibbles: a nibble q moved to the top of its byte is the int8 16 * q, and flipping
// bit 7 makes it 16 * (q - 8). From quant word v (low nibbles: elements 4t..4t+3, high: 16+4t..):
// [excerpt: q4_0_signed]
__device__ __forceinline__ uint32_t q4_0_signed_lo(uint32_t v) { return ((v << 4) & 0xF0F0F0F0u) ^ 0x80808080u; }
__device__ __forceinline__ uint32_t q4_0_signed_hi(uint32_t v) { return (v & 0xF0F0F0F0u) ^ 0x80808080u; }
// [end excerpt: q4_0_signed]

// ldmatrix.x4: four 8 x 8 matrices of 16-bit elements (here: 8 rows x 16 int8) from shared memory.
// Lanes 8i..8i+7 give the row addresses of matrix i (16-byte aligned); lane l gets, in register i,
// the 4 bytes 4 (l % 4) .. 4 (l % 4) + 3 of matrix i's row l / 4: an mma fragment word.
__device__ __forceinline__ void ldsm_x4(int (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// The end of a warp's MT x NT tiles of mma results into C [N, M]: lane (g, t) holds rows (m)
// m0 + 16i + g (+8) and columns (n) n0 + 8j + 2t (+1); rows past M and columns past N are not written.
template <int MT, int NT>
__device__ __forceinline__ void mma_store_tiles(float* C, const float (&acc)[MT][NT][4], int m0, int n0, int g, int t,
                                                int M, int N) {
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int m = m0 + 16 * i + g + 8 * (r >> 1);
                const int n = n0 + 8 * j + 2 * t + (r & 1);
                if (m < M && n < N) C[(int64_t)n * M + m] = acc[i][j][r];
            }
}

// Launches launch(aq, ads, C, n) over slices of at most 65535 CTA columns of BN tokens each
// (gridDim.y is capped at 65535), with the pointers of the slice.
template <int BN, class Launch>
inline void mma_launch_slices(const GemmProblem& p, const int8_t* aq, const float2* ads, Launch launch) {
    constexpr int MAX_N = 65535 * BN;
    const int nb = p.K / QK;
    for (int n0 = 0; n0 < p.N; n0 += MAX_N)
        launch(aq + (int64_t)n0 * p.K, ads + (int64_t)n0 * nb, p.C + (int64_t)n0 * p.M, std::min(MAX_N, p.N - n0));
}

// ---- Weight staging of the tiled tensor-core steps (mma_tile.cuh, 6_wgmma.cu): a K step
// of KB blocks per weight row lands in shared memory as stored (mma: cp.async by the PARTS threads
// of a row into [PARTS][CHUNKS][BM]; wgmma: one TMA box [BM][KB * B]) and each of the PARTS threads
// unpacks its part of the row (KB / PARTS blocks), reading it through a chunk accessor.
//
// Part p of a row holds blocks p BPP .. (p + 1) BPP - 1: bytes [p BPP B, (p + 1) BPP B) of the step,
// as the 16-byte chunks that cover them.
template <class WF, int KB, int PARTS>
struct RawPart {
    static constexpr int B = (int)sizeof(typename WF::block);
    static constexpr int BPP = KB / PARTS;  // blocks per part
    __host__ __device__ static constexpr int first_chunk(int p) { return p * BPP * B / 16; }
    __host__ __device__ static constexpr int chunks(int p) { return ((p + 1) * BPP * B - 1) / 16 - first_chunk(p) + 1; }
    __host__ __device__ static constexpr int skew(int p) {
        return p * BPP * B - 16 * first_chunk(p);
    }  // first block's byte
    static constexpr int CHUNKS = chunks(0);
    static_assert(KB % PARTS == 0, "parts of whole blocks");
    static_assert(chunks(1) == CHUNKS && chunks(PARTS - 1) == CHUNKS, "every part copies as many chunks");
    static_assert(KB * B % 16 == 0, "a K step of a row is whole 16-byte chunks");
};

// Chapter 8, Q4_K: a K step of KB = 8 blocks is one super-block of the row, 144 B = 9 chunks: the
// header (d, dmin, the 12 bytes of packed scales and mins), then 8 chunks of nibbles. Part p
// (blocks p BPP .. (p + 1) BPP - 1, nibble bytes 64p .. 64p + 63 for PARTS = 2) copies the header
// and its own nibble chunks: 5 chunks, as a part of a Q4_0 step (whose middle chunk both copy).
template <bool MMQ, int KB, int PARTS>
struct RawPart<w_q4_k<MMQ>, KB, PARTS> {
    static constexpr int BPP = KB / PARTS;                   // blocks per part
    static constexpr int QS_CHUNKS = QK_K / 2 / 16 / PARTS;  // its nibble chunks
    static constexpr int CHUNKS = 1 + QS_CHUNKS;
    // chunk c of part p: the super-block's chunk 0 (the header), then the part's nibbles
    __host__ __device__ static constexpr int chunk(int p, int c) { return c == 0 ? 0 : 1 + p * QS_CHUNKS + (c - 1); }
    static_assert(KB * QK == QK_K, "a K step is one super-block");
    static_assert(QK_K / 2 % (16 * PARTS) == 0 && BPP % 2 == 0, "parts of whole chunks and whole 64-value groups");
};

// Chapter 8, Q6_K: a K step is one super-block of the row, 210 B = 13 x 16 + 2: super-blocks do not
// start on 16-byte boundaries but at an even offset o (0..14) of one, moving by 2 bytes from one to the
// next. Part p (PARTS = 2) is half p of the super-block, blocks 4p..4p+3 (values 128p..128p+127): it
// needs ql bytes 64p.., qh bytes 128 + 32p.., the 8 scales at 192 + 8p and d at 208. Counted from the
// 16-byte chunk that holds the super-block's first byte, for every o, those lie in chunks 4p..4p+4 (ql),
// 8 + 2p..10 + 2p (qh), 12 and 13 (scales, d): 10 chunks per part, 160 B copied for 105 used. The
// part's chunks, back to back, hold ql byte 64p + x at o + x, qh byte 128 + 32p + x at 80 + o + x,
// scale 8p + x at 128 + o + 8p + x and d at 144 + o (mma_unpack_q6_k_part). Chunk 13 of W's last
// super-block reaches past the end of W (by 14 - o bytes): load16_until copies it.
// llama.cpp's MMQ (load_tiles_q6_K) reads the 2-byte aligned words from global memory instead, two
// 16-bit loads each (get_int_b2); here every copy is a 16-byte cp.async, as for the other formats.
template <int KB, int PARTS>
struct RawPart<w_q6_k, KB, PARTS> {
    static constexpr int BPP = KB / PARTS;  // blocks per part: 4
    static constexpr int CHUNKS = 10;
    static constexpr int QH = 5, TAIL = 8;  // the part's chunks: ql from 0, qh from QH, scales and d from TAIL
    __host__ __device__ static constexpr int chunk(int p, int c) {
        return c < QH ? 4 * p + c : c < TAIL ? 8 + 2 * p + (c - QH) : 12 + (c - TAIL);
    }
    static_assert(KB * QK == QK_K && PARTS == 2, "a K step is one super-block, a part one half of it");
};

// The 16-byte chunk at src (16-byte aligned) up to end (2-byte aligned, past src) with 16-bit loads,
// zeros after: the last chunk of W's last Q6_K super-block, which a 16-byte copy would read past the
// allocation (compute-sanitizer memcheck reports it).
__device__ __forceinline__ uint4 load16_until(const void* src, const void* end) {
    const uint16_t* h = (const uint16_t*)src;
    const int n = (int)(((const char*)end - (const char*)src) / 2);
    uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (i < n) w[i / 2] |= (uint32_t)h[i] << (16 * (i % 2));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Part PART's CHUNKS chunks of 16 bytes (chunk(PART, c)) into words u[0 .. 4 CHUNKS - 1].
template <int CHUNKS, int PART, class Chunk>
__device__ __forceinline__ void load_part_words(Chunk& chunk, uint32_t* u) {
#pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        const uint4 v = chunk(PART, c);
        u[4 * c] = v.x;
        u[4 * c + 1] = v.y;
        u[4 * c + 2] = v.z;
        u[4 * c + 3] = v.w;
    }
}

// Q6_K (chapter 8), part PART of a row's super-block at byte offset o of its first chunk, copied as
// RawPart<w_q6_k> chunks: for each of its blocks j, store(j, d sc_2j, values, d sc_2j+1), values as 8
// words of int8 q - 32 (block j's 32 values in order), the second scale for its values 16..31. The
// products d sc are exact in float32 (11 x 8 significant bits).
// o is known at run time only, and indexing the words at o + constant would put them in local memory:
// instead the part's 160 bytes are moved down by o, as a shifter moves bits, by 8 bytes where o & 8,
// then 4 where o & 4 (a select per word each), then 2 where o & 2 (a funnel shift). After that every
// offset is a constant, as in the other formats' unpacking.
// Block j = 4 PART + i of the half: value l (0..31) has its low 4 bits in ql byte 32 (i & 1) + l of
// the half (the low nibble for i < 2, the high one for i >= 2) and its high 2 bits at bit 2i of qh byte
// l: word w (values 4w..4w+3) from one ql word and one qh word. q - 32 per byte: q + 0x60 is at most
// 0x9F (no carry into the next byte), and flipping bit 7 then gives q - 32 mod 256 (llama.cpp:
// __vsubss4(q, 0x20202020)).
template <class WF, int KB, int PARTS, int PART, class Chunk, class Store>
__device__ __forceinline__ void mma_unpack_q6_k_part(Chunk& chunk, Store& store, int o) {
    using RP = RawPart<WF, KB, PARTS>;
    constexpr int QL_W = 0, QH_W = 4 * RP::QH, SC_W = 4 * RP::TAIL + 2 * PART, D_W = 4 * RP::TAIL + 4;  // words
    uint32_t u[RP::CHUNKS * 4 + 1];
    load_part_words<RP::CHUNKS, PART>(chunk, u);
    u[RP::CHUNKS * 4] = 0;  // read by the shifter past the last byte used (d), never used
    const bool by8 = o & 8, by4 = o & 4;
    const unsigned by2 = 8 * (o & 2);                                           // bits: 0 or 16
    auto s8 = [&](int k) { return by8 ? u[k + 2] : u[k]; };                     // moved by 0 or 8 bytes
    auto s4 = [&](int k) { return by4 ? s8(k + 1) : s8(k); };                   // then by 0 or 4
    auto word = [&](int k) { return __funnelshift_r(s4(k), s4(k + 1), by2); };  // then by 0 or 2: word k at o
    const float d = scale_to_float((fp16_bits)(word(D_W) & 0xFFFFu));
    const uint32_t sc[2] = {word(SC_W), word(SC_W + 1)};  // the half's 8 int8 scales
    auto scale = [&](int t) { return d * (float)(int8_t)(sc[t / 4] >> (8 * (t % 4))); };
#pragma unroll
    for (int i = 0; i < RP::BPP; i++) {
        uint32_t v[WF::qs_words];
#pragma unroll
        for (int w = 0; w < WF::qs_words; w++) {
            const uint32_t lo = (word(QL_W + 8 * (i & 1) + w) >> (4 * (i / 2))) & 0x0F0F0F0Fu;
            const uint32_t hi = ((word(QH_W + w) >> (2 * i)) & 0x03030303u) << 4;
            v[w] = ((lo | hi) + 0x60606060u) ^ 0x80808080u;
        }
        store(PART * RP::BPP + i, scale(2 * i), v, scale(2 * i + 1));
    }
}

// Q4_K (chapter 8), part PART of a row's super-block, copied as RawPart<w_q4_k> chunks: for each of
// its blocks j, store(j, d sc_j, values, -dmin m_j), values as 8 words of int8 0..15. The 6-bit
// sc_j and m_j come out of the header's 12 bytes as get_scale_min_k4 (formats.h) packs them; the
// nibble bytes of a 64-value group hold block 2c in their low nibbles and block 2c + 1 in their high
// ones. With WF::mmq_scales both products are rounded to fp16, as MMQ's half2 product rounds them
// (exact products, one rounding each: the same halves). After unrolling j is a constant.
template <class WF, int KB, int PARTS, int PART, class Chunk, class Store>
__device__ __forceinline__ void mma_unpack_q4_k_part(Chunk& chunk, Store& store) {
    using RP = RawPart<WF, KB, PARTS>;
    uint32_t u[RP::CHUNKS * 4];  // u[0]: d | dmin, u[1..3]: scales[0..11], u[4..]: the part's nibbles
    load_part_words<RP::CHUNKS, PART>(chunk, u);
    const float d = scale_to_float((fp16_bits)(u[0] & 0xFFFFu)), dmin = scale_to_float((fp16_bits)(u[0] >> 16));
    auto sb = [&](int k) { return (u[1 + k / 4] >> (8 * (k % 4))) & 0xFFu; };  // scales[k]
    auto rounded = [](float x) { return WF::mmq_scales ? scale_to_float(fp32_to_fp16(x)) : x; };
#pragma unroll
    for (int i = 0; i < RP::BPP; i++) {
        const int j = PART * RP::BPP + i;  // the block, in the super-block and in the K step
        const uint32_t sc = j < 4 ? sb(j) & 63 : (sb(j + 4) & 0xF) | ((sb(j - 4) >> 6) << 4);
        const uint32_t m = j < 4 ? sb(j + 4) & 63 : (sb(j + 4) >> 4) | ((sb(j) >> 6) << 4);
        const uint32_t* g = u + 4 + 8 * (i / 2);  // the 32 nibble bytes of the block's 64-value group
        uint32_t v[WF::qs_words];
#pragma unroll
        for (int w = 0; w < WF::qs_words; w++) v[w] = (g[w] >> (4 * (j % 2))) & 0x0F0F0F0Fu;
        store(j, rounded(d * (float)sc), v, -rounded(dmin * (float)m));
    }
}

// Part PART of a row, copied as RawPart chunks (chunk(PART, c): its c-th 16 bytes): store(b, d, q)
// for each of its blocks (b: block in the step, d: scale, q: quant words), store(b, d, q, m) for a
// format with a min m (Q4_1: d, m, then the quants; Q4_K: mma_unpack_q4_k_part). After unrolling
// every offset is a constant.
template <class WF, int KB, int PARTS, int PART, class Chunk, class Store>
__device__ __forceinline__ void mma_unpack_part(Chunk& chunk, Store& store) {
    if constexpr (is_k_quant<WF>) {
        mma_unpack_q4_k_part<WF, KB, PARTS, PART>(chunk, store);
    } else {
        using RP = RawPart<WF, KB, PARTS>;
        uint32_t u[RP::CHUNKS * 4 + 1];
        load_part_words<RP::CHUNKS, PART>(chunk, u);
        u[RP::CHUNKS * 4] = 0;
        constexpr int QS = (int)offsetof(typename WF::block, qs);  // the quants' first byte: 2, Q4_1 4
        auto half_at = [&](int off) {
            return scale_to_float((fp16_bits)(u[off >> 2] >> (8 * (off & 3))));
        };  // off even
#pragma unroll
        for (int i = 0; i < RP::BPP; i++) {
            const int off = RP::skew(PART) + i * RP::B;  // the block's first byte (its fp16 scale; even)
            uint32_t q[WF::qs_words];
#pragma unroll
            for (int j = 0; j < WF::qs_words; j++) q[j] = (uint32_t)word_at(u, off + QS + 4 * j);
            if constexpr (has_min<WF>)
                store(PART * RP::BPP + i, half_at(off), q, half_at(off + 2));
            else
                store(PART * RP::BPP + i, half_at(off), q);
        }
    }
}

// The same for a part known at run time only (one case per part, each with constant offsets).
template <class WF, int KB, int PARTS, int P, class Chunk, class Store>
__device__ __forceinline__ void mma_unpack_part_of(int part, Chunk& chunk, Store& store) {
    if constexpr (P + 1 == PARTS)
        mma_unpack_part<WF, KB, PARTS, P>(chunk, store);
    else if (part == P)
        mma_unpack_part<WF, KB, PARTS, P>(chunk, store);
    else
        mma_unpack_part_of<WF, KB, PARTS, P + 1>(part, chunk, store);
}

// This thread's part of row wrow for K step s, after its copies landed (aligned) or, when rows are not
// 16-byte aligned (nb % KB != 0), straight from the blocks with 16-bit loads (correct, slower),
// blocks past the last as zeros. (K-quant rows are whole super-blocks: Q4_K's of 144 B always start
// aligned; Q6_K's of 210 B at any even offset, which its own unpacking takes.)
template <class WF, int KB, int PARTS, class Chunk, class Store>
__device__ __forceinline__ void mma_unpack_weights(Chunk chunk, const typename WF::block* wrow, int part, int s, int nb,
                                                   bool aligned, Store store) {
    using RP = RawPart<WF, KB, PARTS>;
    if constexpr (has_half_scales<WF>) {  // Q6_K: the super-block's offset in its first chunk, then its half
        const int o = (int)((uintptr_t)(wrow + s) & 15);
        if (part == 0)
            mma_unpack_q6_k_part<WF, KB, PARTS, 0>(chunk, store, o);
        else
            mma_unpack_q6_k_part<WF, KB, PARTS, 1>(chunk, store, o);
    } else if (aligned) {
        mma_unpack_part_of<WF, KB, PARTS, 0>(part, chunk, store);
        return;
    }
    if constexpr (!is_k_quant<WF>) {
        for (int i = 0; i < RP::BPP; i++) {
            const int b = part * RP::BPP + i, kb = s * KB + b;
            uint32_t q[WF::qs_words];
            for (int j = 0; j < WF::qs_words; j++) q[j] = kb < nb ? (uint32_t)load_int_b2(wrow[kb].qs, j) : 0u;
            const float d = kb < nb ? scale_to_float(wrow[kb].d) : 0.0f;
            if constexpr (has_min<WF>)
                store(b, d, q, kb < nb ? scale_to_float(wrow[kb].m) : 0.0f);
            else
                store(b, d, q);
        }
    }
}

// d_a * sumi from the mma's result bits D = float(MMA_MAGIC_F + sumi) and the pair (d_a, c), one rounding.
// [excerpt: block_dot]
__device__ __forceinline__ float block_dot(float d_a, float c, int D) { return fmaf(d_a, __int_as_float(D), c); }
// [end excerpt: block_dot]

}  // namespace gpu
