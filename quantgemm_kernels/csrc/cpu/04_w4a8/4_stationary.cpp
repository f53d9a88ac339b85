// cpu/04_w4a8/4_stationary.cpp (chapter 4, W4A8): the SIMD step with the weights kept in cache
// and the rows of a tile in the lanes of one vector.
//
// The block arithmetic of 3_simd.cpp (the same integer dot products; Q4_0's compensation
// d_w * s_a summed beside them), with the changes that llama.cpp's CPU kernels make too
// (llamafile's tinyBLAS, which llama.cpp's own build turns on, and the Q4_0 weights it repacks at
// load time, ggml-cpu/repack.cpp):
//
//  * Weight-stationary loop order. The SIMD step walks tokens in the outer loop and sweeps all of
//    W for every tile of 4 tokens: at N = 8 it reads a 4096 x 14336 Q4_0 matrix (33 MB) twice
//    from memory, at N = 512 a hundred and twenty-eight times. Here a tile of 4 weight rows
//    (4 x 7.9 KB of Q4_0 at K = 14336) is the outer loop and every token streams past it, so W is
//    read from memory once per call; the activations (N x 15.8 KB) come from the caches.
//  * Rows in lanes. The SIMD step keeps 8 float partial sums per output and converts, scales and
//    accumulates each block pair on its own (3 vector instructions per pair, and a broadcast of the
//    scale). Here the 4 rows' dot products of a token and block are first summed across their lanes
//    into one vector with row j in lane j (integer adds: exact), and that vector is converted,
//    scaled and accumulated once for the 4 rows. repack.cpp's interleaved layout buys the same
//    thing by storing the rows' bytes side by side; here the rows are combined in registers.
//  * The 4 rows' fp16 scales are converted together (one vcvtph2ps / fcvtl), so d_w * d_a and the
//    compensation d_w * s_a are one vector multiply per token and block for the 4 rows.
//  * Q8_0 weights on VNNI without the sign trick: vpdpbusd needs an unsigned operand, and
//    a + 128 is one (a XOR 0x80, once per token and block). sum (a + 128) w = sum a w + 128 sum w,
//    so the dot product starts from -128 * sum w (per 4-byte lane, one more vpdpbusd per weight
//    block, shared by all tokens) instead of 0: one instruction per block pair instead of three.
//    (AVX2's vpmaddubsw cannot do this: (a + 128) w overflows its int16 pair sums.)
//  * With VNNI, no reduction at all (tile8, below): 8 rows' blocks transposed in registers so that
//    each 32-bit lane of a vpdpbusd belongs to one row, the token's 4 bytes broadcast to all lanes:
//    the layout llama.cpp's repacked Q4_0 (block_q4_0x8) has in memory, built per weight block and
//    shared by 8 tokens.
//
// Q4_1 (chapter 7's model) takes Q4_0's path with its min instead of the offset: comp sums
// m_w * s_a per block (the rows' mins converted together like their scales) and is added at the
// end, where Q4_0 subtracts 8 * comp.
//
// Each output is  c = fma(sumi_b, d_w d_a, c) over the blocks b in order, then - 8 * comp for Q4_0
// (+ comp for Q4_1):
// the same float operations on every instruction set, so AVX-512, AVX2, NEON and the portable
// loop give the same bits (tests/test_cpu_cross.py checks it). Register tiles: with VNNI 8 weight
// rows x 8 tokens; otherwise 4 rows x TN tokens, TN = 8 where the ISA has 32 vector registers
// (NEON's), 4 with AVX2's 16; the remainders take tiles of fewer rows or tokens.
#include <type_traits>

#include "w_q8_1.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define QG_X86_SIMD 1
#include <immintrin.h>
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QG_VNNI(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#elif defined(__AVXVNNI__)
#define QG_VNNI(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#endif
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define QG_NEON_SIMD 1
#include <arm_neon.h>
#else
#include <math.h>
#endif

namespace {

// The fp16 scales of the tile's weight blocks as one 64-bit word, row j in bits 16j (0 for absent rows).
template <class B, int TM>
inline uint64_t packed_d(const B* const* w) {  // w: TM block pointers
    uint64_t h = 0;
    for (int j = 0; j < TM; j++) h |= (uint64_t)w[j]->d << (16 * j);
    return h;
}
// Q4_1's fp16 mins, packed the same way.
template <class B, int TM>
inline uint64_t packed_m(const B* const* w) {
    uint64_t h = 0;
    for (int j = 0; j < TM; j++) h |= (uint64_t)w[j]->m << (16 * j);
    return h;
}

// What the tile adds beside the integer dot products: Q4_0's offset (c - 8 * sum d_w s_a) or
// Q4_1's min (c + sum m_w s_a); Q8_0 has neither.
template <class WF>
constexpr bool has_comp = WF::offset != 0 || WF::has_min;
// Signed weight quants (Q8_0): the unsigned operand of vpdpbusd / vpmaddubsw must come from elsewhere.
template <class WF>
constexpr bool signed_w = std::is_signed<typename WF::quant_t>::value;
template <class WF>
inline float finish(float c, float comp) {
    if constexpr (WF::has_min) return c + comp;
    if constexpr (WF::offset != 0) return c - (float)WF::offset * comp;
    return c;
}

// A Q8_1 block's d and s, side by side at its start, as the low 32 bits of a word for f16x4.
inline uint64_t d_and_s(const block_q8_1& a) {
    uint32_t ds;
    memcpy(&ds, &a, sizeof ds);
    return ds;
}

#if QG_X86_SIMD
#if defined(__AVX512VL__)
constexpr int TN = 8;  // 8 tokens x (accumulator + compensation) + 4 weight vectors: AVX-512's 32 registers
#else
constexpr int TN = 4;  // AVX2: 16 registers
#endif
typedef __m256i qvec;
typedef __m256i ivec;   // 8 int32 partial sums of one block pair
typedef __m128i ivec4;  // one int32 per weight row of the tile
typedef __m128 svec;    // one float per weight row of the tile

inline svec f16x4(uint64_t h) { return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h)); }
inline svec splat(float x) { return _mm_set1_ps(x); }
inline svec splat0(svec v) { return _mm_shuffle_ps(v, v, 0x00); }  // lane 0 everywhere
inline svec splat1(svec v) { return _mm_shuffle_ps(v, v, 0x55); }  // lane 1 everywhere
inline svec mul4(svec a, svec b) { return _mm_mul_ps(a, b); }
inline svec add4(svec a, svec b) { return _mm_add_ps(a, b); }
inline float lane(svec v, int j) {
    alignas(16) float f[4];
    _mm_store_ps(f, v);
    return f[j];
}
inline ivec izero() { return _mm256_setzero_si256(); }
// The 8 lanes of each of 4 rows' dot products, summed: lane j = row j's integer dot product.
// A 4 x 4 transpose-and-add in each 128-bit half (unpacks, single-uop shuffles: a little faster
// than vphaddd's), then the two halves added.
inline ivec4 sum_rows(ivec d0, ivec d1, ivec d2, ivec d3) {
    const __m256i t0 = _mm256_add_epi32(_mm256_unpacklo_epi32(d0, d1), _mm256_unpackhi_epi32(d0, d1));
    const __m256i t1 = _mm256_add_epi32(_mm256_unpacklo_epi32(d2, d3), _mm256_unpackhi_epi32(d2, d3));
    const __m256i s = _mm256_add_epi32(_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}
// acc += sumi * scale for the 4 rows at once: one conversion, one FMA
inline svec fma_rows(ivec4 sumi, svec scale, svec acc) { return _mm_fmadd_ps(_mm_cvtepi32_ps(sumi), scale, acc); }
inline qvec load_q8_1(const block_q8_1& a) { return _mm256_loadu_si256((const __m256i*)a.qs); }

template <class WF>
struct simd_w;
template <>
struct simd_w<w_q4_0> {  // nibbles: the unsigned operand as stored
    struct W {
        qvec q;
    };
    template <class B>  // Q4_0's blocks and Q4_1's: the same nibble layout
    static inline W load(const B& b) {
        const __m128i x = _mm_loadu_si128((const __m128i*)b.qs);
        return {_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0x0F))};
    }
    static inline qvec prep_a(qvec a) { return a; }
    static inline ivec dot(const W& w, qvec a) {
#ifdef QG_VNNI
        return QG_VNNI(_mm256_setzero_si256(), w.q, a);
#else
        return _mm256_madd_epi16(_mm256_maddubs_epi16(w.q, a), _mm256_set1_epi16(1));
#endif
    }
};
template <>
struct simd_w<w_q4_1> : simd_w<w_q4_0> {};  // Q4_1's nibbles: Q4_0's layout, unsigned
template <>
struct simd_w<w_q8_0> {
#ifdef QG_VNNI
    struct W {
        qvec q;
        __m256i bias;  // -128 * sum of w per 4-byte lane: sum (a + 128) w + bias = sum a w
    };
    static inline W load(const block_q8_0& b) {
        const qvec q = _mm256_loadu_si256((const __m256i*)b.qs);
        const __m256i sum_w = QG_VNNI(_mm256_setzero_si256(), _mm256_set1_epi8(1), q);
        return {q, _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum_w, 7))};
    }
    static inline qvec prep_a(qvec a) { return _mm256_xor_si256(a, _mm256_set1_epi8((char)0x80)); }  // a + 128
    static inline ivec dot(const W& w, qvec a) { return QG_VNNI(w.bias, a, w.q); }
#else
    struct W {
        qvec q, abs;
    };
    static inline W load(const block_q8_0& b) {
        const qvec q = _mm256_loadu_si256((const __m256i*)b.qs);
        return {q, _mm256_sign_epi8(q, q)};
    }
    static inline qvec prep_a(qvec a) { return a; }
    static inline ivec dot(const W& w, qvec a) {  // the SIMD step's sign trick
        return _mm256_madd_epi16(_mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(a, w.q)), _mm256_set1_epi16(1));
    }
#endif
};

#elif QG_NEON_SIMD
constexpr int TN = 8;  // 8 x 2 accumulators + 8 registers of weights in 32
typedef int8x16x2_t qvec;
typedef int32x4_t ivec;
typedef int32x4_t ivec4;
typedef float32x4_t svec;

inline svec f16x4(uint64_t h) { return vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(h))); }
inline svec splat(float x) { return vdupq_n_f32(x); }
inline svec splat0(svec v) { return vdupq_laneq_f32(v, 0); }
inline svec splat1(svec v) { return vdupq_laneq_f32(v, 1); }
inline svec mul4(svec a, svec b) { return vmulq_f32(a, b); }
inline svec add4(svec a, svec b) { return vaddq_f32(a, b); }
inline float lane(svec v, int j) {
    float f[4];
    vst1q_f32(f, v);
    return f[j];
}
inline ivec izero() { return vdupq_n_s32(0); }
// Pairwise adds: [d0, d1, d2, d3] summed lane-wise in two addp
inline ivec4 sum_rows(ivec d0, ivec d1, ivec d2, ivec d3) { return vpaddq_s32(vpaddq_s32(d0, d1), vpaddq_s32(d2, d3)); }
inline svec fma_rows(ivec4 sumi, svec scale, svec acc) { return vfmaq_f32(acc, vcvtq_f32_s32(sumi), scale); }
inline qvec load_q8_1(const block_q8_1& a) { return {{vld1q_s8(a.qs), vld1q_s8(a.qs + 16)}}; }
inline int32x4_t dot_s8s8(qvec x, qvec y) {  // as in the SIMD step
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), x.val[0], y.val[0]), x.val[1], y.val[1]);
#else
    int32x4_t s = vpaddlq_s16(vmull_s8(vget_low_s8(x.val[0]), vget_low_s8(y.val[0])));
    s = vpadalq_s16(s, vmull_s8(vget_high_s8(x.val[0]), vget_high_s8(y.val[0])));
    s = vpadalq_s16(s, vmull_s8(vget_low_s8(x.val[1]), vget_low_s8(y.val[1])));
    return vpadalq_s16(s, vmull_s8(vget_high_s8(x.val[1]), vget_high_s8(y.val[1])));
#endif
}
template <class WF>
struct simd_w;
template <>
struct simd_w<w_q4_0> {
    struct W {
        qvec q;
    };
    template <class B>  // Q4_0's blocks and Q4_1's: the same nibble layout
    static inline W load(const B& b) {
        const uint8x16_t x = vld1q_u8(b.qs);
        return {{{vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8(x, 4))}}};
    }
    static inline qvec prep_a(qvec a) { return a; }
    static inline ivec dot(const W& w, qvec a) { return dot_s8s8(w.q, a); }
};
template <>
struct simd_w<w_q4_1> : simd_w<w_q4_0> {};
template <>
struct simd_w<w_q8_0> {
    struct W {
        qvec q;
    };
    static inline W load(const block_q8_0& b) { return {{{vld1q_s8(b.qs), vld1q_s8(b.qs + 16)}}}; }
    static inline qvec prep_a(qvec a) { return a; }
    static inline ivec dot(const W& w, qvec a) { return dot_s8s8(w.q, a); }
};

#else  // portable: the same arithmetic, one int per block pair, 4 rows at a time
constexpr int TN = 4;
struct qvec {
    int8_t q[QK];
};
typedef int ivec;
struct ivec4 {
    int i[4];
};
struct svec {
    float f[4];
};
inline svec f16x4(uint64_t h) {
    svec s;
    for (int j = 0; j < 4; j++) s.f[j] = fp16_to_fp32((fp16_bits)(h >> (16 * j)));
    return s;
}
inline svec splat(float x) { return {{x, x, x, x}}; }
inline svec splat0(svec v) { return splat(v.f[0]); }
inline svec splat1(svec v) { return splat(v.f[1]); }
inline svec mul4(svec a, svec b) { return {{a.f[0] * b.f[0], a.f[1] * b.f[1], a.f[2] * b.f[2], a.f[3] * b.f[3]}}; }
inline svec add4(svec a, svec b) { return {{a.f[0] + b.f[0], a.f[1] + b.f[1], a.f[2] + b.f[2], a.f[3] + b.f[3]}}; }
inline float lane(svec v, int j) { return v.f[j]; }
inline ivec izero() { return 0; }
inline ivec4 sum_rows(ivec d0, ivec d1, ivec d2, ivec d3) { return {{d0, d1, d2, d3}}; }
inline svec fma_rows(ivec4 sumi, svec scale, svec acc) {
    svec r;
    for (int j = 0; j < 4; j++) r.f[j] = fmaf((float)sumi.i[j], scale.f[j], acc.f[j]);
    return r;
}
inline qvec load_q8_1(const block_q8_1& a) {
    qvec v;
    memcpy(v.q, a.qs, QK);
    return v;
}
template <class WF>
struct simd_w {
    struct W {
        qvec q;
    };
    static inline W load(const typename WF::block& b) {
        W w;
        for (int l = 0; l < QK; l++) w.q.q[l] = (int8_t)WF::quant(b, l);
        return w;
    }
    static inline qvec prep_a(qvec a) { return a; }
    static inline int dot(const W& w, const qvec& a) {
        int s = 0;
        for (int l = 0; l < QK; l++) s += w.q.q[l] * a.q[l];
        return s;
    }
};
#endif

// TM (<= 4) weight rows (m0 ..) x TN_ tokens (n0 ..), the whole of K. One vector per token holds
// the TM rows' outputs, one row per lane.
template <class WF, int TM, int TN_>
inline void tile(const block_q8_1* A, const typename WF::block* W, float* C, int nb, int M, int n0, int m0) {
    using B = typename WF::block;
    svec acc[TN_], comp[TN_];  // per token: the rows' sums, and sum_b d_w * s_a (Q4_0) or m_w * s_a (Q4_1)
    for (int i = 0; i < TN_; i++) acc[i] = comp[i] = splat(0.0f);
    const B* wrow[TM];
    const block_q8_1* arow[TN_];
    for (int j = 0; j < TM; j++) wrow[j] = W + (int64_t)(m0 + j) * nb;
    for (int i = 0; i < TN_; i++) arow[i] = A + (int64_t)(n0 + i) * nb;
    // [excerpt: stationary_loop]
    for (int b = 0; b < nb; b++) {
        const B* wb[TM];
        typename simd_w<WF>::W wq[TM];
        for (int j = 0; j < TM; j++) {
            wb[j] = wrow[j] + b;
            wq[j] = simd_w<WF>::load(*wb[j]);
        }
        const svec d_w = f16x4(packed_d<B, TM>(wb));  // the rows' scales in one conversion
        svec c_w = d_w;                               // what multiplies s_a: d_w, or Q4_1's m_w
        if constexpr (WF::has_min) c_w = f16x4(packed_m<B, TM>(wb));
        for (int i = 0; i < TN_; i++) {
            const block_q8_1& a = arow[i][b];
            const qvec aq = simd_w<WF>::prep_a(load_q8_1(a));
            const svec ds = f16x4(d_and_s(a));                 // d_a, s_a
            ivec d[4] = {izero(), izero(), izero(), izero()};  // rows past TM: 0
            for (int j = 0; j < TM; j++) d[j] = simd_w<WF>::dot(wq[j], aq);
            acc[i] = fma_rows(sum_rows(d[0], d[1], d[2], d[3]), mul4(d_w, splat0(ds)), acc[i]);
            if constexpr (has_comp<WF>) comp[i] = add4(comp[i], mul4(c_w, splat1(ds)));  // (d_w or m_w) * s_a
        }
    }
    // [end excerpt: stationary_loop]
    for (int i = 0; i < TN_; i++) {
        for (int j = 0; j < TM; j++) C[(int64_t)(n0 + i) * M + m0 + j] = finish<WF>(lane(acc[i], j), lane(comp[i], j));
    }
}

// A tile of r < TN tokens, r known at run time (tile's token count is a template argument).
template <class WF, int TM, int R>
inline void remainder(const block_q8_1* A, const typename WF::block* W, float* C, int nb, int M, int n0, int m0,
                      int r) {
    if constexpr (R > 0) {
        if (r == R) return tile<WF, TM, R>(A, W, C, nb, M, n0, m0);
        remainder<WF, TM, R - 1>(A, W, C, nb, M, n0, m0, r);
    }
}

// Every token past TM weight rows: the rows stay in cache while the tokens stream.
template <class WF, int TM>
inline void rows(const GemmProblem& p, int nb, int m0) {
    const block_q8_1* A = (const block_q8_1*)p.A;
    const typename WF::block* W = (const typename WF::block*)p.W;
    int n = 0;
    for (; n + TN <= p.N; n += TN) tile<WF, TM, TN>(A, W, p.C, nb, p.M, n, m0);
    // the last N % TN tokens in one tile, so that N = 2 .. 7 also unpack each weight block once
    remainder<WF, TM, TN - 1>(A, W, p.C, nb, p.M, n, m0, p.N - n);
}
#if QG_X86_SIMD
// ---- 8 rows with the token broadcast, no reduction across lanes (VNNI; AVX2 for the nibbles) ----
// The 8 rows' unpacked blocks are transposed in registers (load_rows8: 8 x 8 int32, unpacks),
// so that vector k holds bytes 4k..4k+3 of every row, row j in lane j. One vpdpbusd of vector k with
// the token's bytes 4k..4k+3 broadcast to all lanes then adds 4 products to each row's own lane:
// after 8 of them lane j is row j's integer dot product, as llama.cpp's repacked block_q4_0x8 layout
// gives it, with the transposition paid once per weight block and shared by the TN8 tokens.
// The integer sums are the ones the 4-row tiles compute, and the float operations per output the
// same (fma(sumi, d_w d_a, c) per block, then - 8 * comp): the same bits.
// Without VNNI (AVX2), the nibble formats take the same tile with vpmaddubsw: each gives a row's
// two products per int16, and the 8 of a block are summed in int16 before one vpmaddwd: a nibble
// (<= 15) times a Q8_1 quant (|q| <= 127) is at most 1905, so 16 of them stay below 32767 and
// nothing saturates. Q8_0 takes the sign trick there (|w| against a * sign(w), as in the SIMD
// step): its products reach 127 x 127, so each k's int16 pair sums are widened by their own
// vpmaddwd; still fewer instructions per block pair than the 4-row tile's reduction across lanes.
#ifdef QG_VNNI
constexpr int TN8 = 8;
#else
constexpr int TN8 = 4;  // AVX2's 16 registers: 8 hold the block's rows, 8 the tokens' sums
#endif

inline int dword(const int8_t* q, int k) {
    int v;
    memcpy(&v, q + 4 * k, sizeof v);
    return v;
}

// The 8 rows' integer dot products with one token's block, row j in lane j (wt: load_rows8's
// vectors; a: the token's quants, dword k broadcast against wt[k]).
template <class WF>
inline __m256i dot_rows8(const __m256i wt[8], const int8_t* a, __m256i init) {
#ifdef QG_VNNI
    __m256i sumi = init;
    for (int k = 0; k < 8; k++) sumi = QG_VNNI(sumi, wt[k], _mm256_set1_epi32(dword(a, k)));
    return sumi;
#else
    (void)init;
    if constexpr (signed_w<WF>) {              // Q8_0: the SIMD step's sign trick
        __m256i s32 = _mm256_setzero_si256();  // |w| times a * sign(w), per k
        for (int k = 0; k < 8; k++) {
            const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wt[k], wt[k]),
                                                   _mm256_sign_epi8(_mm256_set1_epi32(dword(a, k)), wt[k]));
            s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        }
        return s32;
    }
    __m256i s16 = _mm256_maddubs_epi16(wt[0], _mm256_set1_epi32(dword(a, 0)));
    for (int k = 1; k < 8; k++)
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(wt[k], _mm256_set1_epi32(dword(a, k))));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
#endif
}

// A 4 x 4 transpose of dwords inside each 128-bit half: r[k]'s half gets dword k of r[0..3]'s halves.
inline void transpose4x4_halves(__m256i r[4]) {
    const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]);  // r0.0 r1.0 r0.1 r1.1 (per half)
    const __m256i t1 = _mm256_unpackhi_epi32(r[0], r[1]);  // r0.2 r1.2 r0.3 r1.3
    const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]);
    const __m256i t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    r[0] = _mm256_unpacklo_epi64(t0, t2);  // r0.0 r1.0 r2.0 r3.0
    r[1] = _mm256_unpackhi_epi64(t0, t2);
    r[2] = _mm256_unpacklo_epi64(t1, t3);
    r[3] = _mm256_unpackhi_epi64(t1, t3);
}

// The 8 rows' blocks as the rows-in-lanes vectors: wt[k] lane j = dword k of row j's 32 unpacked
// quants (bytes 4k .. 4k+3). Rows j and j + 4 share a vector from the start, row j in the low 128
// bits and row j + 4 in the high (the second 16 bytes come in with the load: vinserti128 from
// memory is no shuffle), so the transposition stays inside the 128-bit halves: 16 unpacks for 8
// rows where a full 8 x 8 transpose takes 24 shuffles (a third of them across the halves), and the
// nibbles' unpacking needs no shuffle either. At N = 1 these shuffles are most of the work.
template <class WF>
inline void load_rows8(const typename WF::block* const* blk, __m256i wt[8]) {
    for (int p = 0; p < 4; p++) {
        const __m128i* q0 = (const __m128i*)blk[p]->qs;
        const __m128i* q4 = (const __m128i*)blk[p + 4]->qs;
        const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(q0)), _mm_loadu_si128(q4), 1);
        if constexpr (signed_w<WF>) {  // Q8_0: bytes 0..15, then 16..31
            wt[p] = x;
            wt[p + 4] =
                _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(q0 + 1)), _mm_loadu_si128(q4 + 1), 1);
        } else {  // nibbles: elements 0..15 are the low halves of the 16 bytes, 16..31 the high
            const __m256i low4 = _mm256_set1_epi8(0x0F);
            wt[p] = _mm256_and_si256(x, low4);
            wt[p + 4] = _mm256_and_si256(_mm256_srli_epi16(x, 4), low4);
        }
    }
    transpose4x4_halves(wt);
    transpose4x4_halves(wt + 4);
}


template <class WF, int TN_>
inline void tile8(const block_q8_1* A, const typename WF::block* W, float* C, int nb, int M, int n0, int m0) {
    using B = typename WF::block;
    __m256 acc[TN_], comp[TN_];
    for (int i = 0; i < TN_; i++) acc[i] = comp[i] = _mm256_setzero_ps();
    // [excerpt: rows_in_lanes]
    for (int b = 0; b < nb; b++) {
        __m256i wt[8];
        const B* blk[8];
        fp16_bits d[8], m[8] = {};
        for (int j = 0; j < 8; j++) {
            blk[j] = W + (int64_t)(m0 + j) * nb + b;
            d[j] = blk[j]->d;
            if constexpr (WF::has_min) m[j] = blk[j]->m;
        }
        load_rows8<WF>(blk, wt);
        const __m256 d_w = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)d));  // the 8 rows' scales
        __m256 c_w = d_w;  // what multiplies s_a: d_w, or Q4_1's m_w
        if constexpr (WF::has_min) c_w = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)m));
        __m256i init = _mm256_setzero_si256();
#ifdef QG_VNNI
        if constexpr (signed_w<WF>) {  // Q8_0: a + 128 against signed w, started from -128 * sum w
            for (int k = 0; k < 8; k++) init = QG_VNNI(init, _mm256_set1_epi8(1), wt[k]);
            init = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(init, 7));
        }
#endif
        for (int i = 0; i < TN_; i++) {
            const block_q8_1& a = A[(int64_t)(n0 + i) * nb + b];
            __m256i sumi = init;
#ifdef QG_VNNI
            if constexpr (signed_w<WF>) {   // Q8_0: the token, + 128, is the unsigned operand
                alignas(32) int8_t au[QK];  // broadcast from memory: a load, no ALU work
                _mm256_store_si256((__m256i*)au, simd_w<WF>::prep_a(load_q8_1(a)));
                for (int k = 0; k < 8; k++) sumi = QG_VNNI(sumi, _mm256_set1_epi32(dword(au, k)), wt[k]);
            } else  // Q4_0, Q4_1: the nibbles are
#endif
            {
                sumi = dot_rows8<WF>(wt, a.qs, init);
            }
            const __m128 ds = f16x4(d_and_s(a));  // d_a, s_a
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_mul_ps(d_w, _mm256_broadcastss_ps(ds)), acc[i]);
            if constexpr (has_comp<WF>)
                comp[i] = _mm256_add_ps(comp[i], _mm256_mul_ps(c_w, _mm256_broadcastss_ps(_mm_movehdup_ps(ds))));
        }
    }
    // [end excerpt: rows_in_lanes]
    for (int i = 0; i < TN_; i++) {
        alignas(32) float c8[8], comp8[8];
        _mm256_store_ps(c8, acc[i]);
        _mm256_store_ps(comp8, comp[i]);
        for (int j = 0; j < 8; j++) C[(int64_t)(n0 + i) * M + m0 + j] = finish<WF>(c8[j], comp8[j]);
    }
}

template <class WF, int R>
inline void remainder8(const block_q8_1* A, const typename WF::block* W, float* C, int nb, int M, int n0, int m0,
                       int r) {
    if constexpr (R > 0) {
        if (r == R) return tile8<WF, R>(A, W, C, nb, M, n0, m0);
        remainder8<WF, R - 1>(A, W, C, nb, M, n0, m0, r);
    }
}

template <class WF>
inline void rows8(const GemmProblem& p, int nb, int m0) {
    const block_q8_1* A = (const block_q8_1*)p.A;
    const typename WF::block* W = (const typename WF::block*)p.W;
    int n = 0;
    for (; n + TN8 <= p.N; n += TN8) tile8<WF, TN8>(A, W, p.C, nb, p.M, n, m0);
    remainder8<WF, TN8 - 1>(A, W, p.C, nb, p.M, n, m0, p.N - n);
}
#endif
}  // namespace

template <class WF>
void gemm_q8_1_stationary(const GemmProblem& p, int m_begin, int m_end) {
    const int nb = p.K / QK;
    int m = m_begin;
#ifdef QG_VNNI
    for (; m + 8 <= m_end; m += 8) rows8<WF>(p, nb, m);
#elif QG_X86_SIMD
    for (; m + 8 <= m_end; m += 8) rows8<WF>(p, nb, m);  // AVX2: vpmaddubsw in place of vpdpbusd
#endif
    for (; m + 4 <= m_end; m += 4) rows<WF, 4>(p, nb, m);
    for (; m < m_end; m++) rows<WF, 1>(p, nb, m);
}

void cpu_q4_0_q8_1_stationary(const GemmProblem& p, int m_begin, int m_end) {
    gemm_q8_1_stationary<w_q4_0>(p, m_begin, m_end);
}

void cpu_q8_0_q8_1_stationary(const GemmProblem& p, int m_begin, int m_end) {
    gemm_q8_1_stationary<w_q8_0>(p, m_begin, m_end);
}

// Chapter 7: Q4_1 weights (SmolLM2's), Q4_0's path with the min summed beside the dot products.
void cpu_q4_1_q8_1_stationary(const GemmProblem& p, int m_begin, int m_end) {
    gemm_q8_1_stationary<w_q4_1>(p, m_begin, m_end);
}
