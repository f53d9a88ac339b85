// cpu/04_w4a8/3_simd.cpp (chapter 4, W4A8): the CPU's DP4A, int8 SIMD dot products.
//
// The blocked kernel's tile, with the integer dot product of a block written for the hardware:
// the 32 quants of a block fill one 256-bit register, and one instruction multiplies 32 byte
// pairs and adds them in groups of four into 8 int32 lanes, exactly what DP4A does for 4 pairs
// on a GPU. Which instruction is chosen when this file compiles (the build uses -march=native,
// -mcpu=native on ARM):
//   AVX-512 VNNI / AVX-VNNI   vpdpbusd   u8 x s8 -> int32, one instruction
//   AVX2                      vpmaddubsw (u8 x s8 -> pairs summed to int16) then vpmaddwd
//                             with ones (int16 pairs summed to int32): two instructions
//   ARM NEON + dot product    sdot (vdotq_s32) s8 x s8 -> int32, 16 pairs per instruction,
//   (ARMv8.2 dotprod)         two for a block; plain ARMv8.0 NEON: smull + sadalp instead
//   anything else             a plain loop (the specification of the others)
// Both x86 instructions take one operand unsigned and one signed. Q4_0 nibbles are unsigned
// 0..15 and Q8_1 quants are signed: they fit as stored, which is why the compensation
// d_w * (d_a * sumi - 8 * s_a) suits SIMD; subtracting 8 first would make both operands signed.
// W8A8 (cpu_q8_0_q8_1_simd, below) is the same template with WF = w_q8_0 (simd_w<w_q8_0>), and Q8_0
// weights are signed: the kernel feeds the instructions |w| as the unsigned operand and a * sign(w)
// as the signed one (vpsignb), which leaves every product unchanged. ARM's sdot takes two signed
// operands: nibbles 0..15 are valid signed bytes and Q8_0 quants are signed, so neither needs a trick.
//
// Two more changes against the blocked kernel, both to keep work out of the block loop:
//  * The 8 int32 lanes are not added up per block. They are converted to float, scaled by
//    d_w * d_a and accumulated in a vector; the lanes are added once, at the end.
//  * Hence the compensation is summed on its own, sum_b d_w * s_a, and subtracted at the end:
//        C = sum_b d_w d_a sumi_b  -  8 * sum_b d_w s_a,b      (the same sum, regrouped)
// On x86 the fp16 scales are converted by the F16C instruction vcvtph2ps instead of in software.
#include "w_q8_1.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define QG_X86_SIMD 1
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define QG_NEON_SIMD 1
#include <arm_neon.h>
#else
#include <math.h>
#endif

namespace {

// ---- one block's int8 dot product, and the float vector it is accumulated into ----
#if QG_X86_SIMD
typedef __m256i qvec;  // the 32 quants of one block (as bytes)
typedef __m256i ivec;  // 8 int32 partial sums of one block's dot product
typedef __m256 fvec;   // 8 float partial sums of one output

// 32 u8 x s8 products, summed in fours into 8 int32 lanes.
// [excerpt: dot_u8s8]
inline ivec dot_u8s8(qvec u, qvec s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    // int16 cannot overflow here: 2 * 127 * 127 = 32258 < 32767 (Q8_0 and Q8_1 quants are in
    // [-127, 127]; Q4_0 nibbles are at most 15).
    const __m256i pairs = _mm256_maddubs_epi16(u, s);
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
#endif
}

inline qvec load_q8_1(const block_q8_1& a) { return _mm256_loadu_si256((const __m256i*)a.qs); }
inline float scale_f32(fp16_bits h) { return _cvtsh_ss(h); }
inline fvec fzero() { return _mm256_setzero_ps(); }
inline void accumulate(fvec& acc, ivec sumi, float scale) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(scale), acc);
}
inline float hsum(fvec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

template <class WF>
struct simd_w;
template <>
struct simd_w<w_q4_0> {
    // 16 bytes -> 32 nibbles in element order: low halves are elements 0..15, high halves 16..31.
    // The block sits at a 2-byte boundary; x86 unaligned loads do not care. (Q4_1's blocks too.)
    template <class B>
    static inline qvec load(const B& b) {
        const __m128i x = _mm_loadu_si128((const __m128i*)b.qs);
        const __m256i both = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
        return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
    }
    static inline ivec dot(qvec w, qvec a) { return dot_u8s8(w, a); }  // nibbles are unsigned
};
template <>
struct simd_w<w_q4_1> : simd_w<w_q4_0> {};  // Q4_1's nibbles: Q4_0's layout, unsigned
template <>
struct simd_w<w_q8_0> {
    static inline qvec load(const block_q8_0& b) { return _mm256_loadu_si256((const __m256i*)b.qs); }
    // w * a = |w| * (a * sign(w)): the unsigned operand is |w|, the sign moves to a.
    static inline ivec dot(qvec w, qvec a) { return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)); }
    // [end excerpt: dot_u8s8]
};

#elif QG_NEON_SIMD
typedef int8x16x2_t qvec;  // the 32 quants of one block, two 128-bit registers
typedef int32x4_t ivec;    // 4 int32 partial sums of one block's dot product
typedef float32x4_t fvec;  // 4 float partial sums of one output

// [excerpt: dot_neon]
// 32 s8 x s8 products, summed in fours into 4 int32 lanes.
inline ivec dot_s8s8(qvec x, qvec y) {
#if defined(__ARM_FEATURE_DOTPROD)
    const int32x4_t lo = vdotq_s32(vdupq_n_s32(0), x.val[0], y.val[0]);  // sdot: 16 pairs
    return vdotq_s32(lo, x.val[1], y.val[1]);
#else
    // ARMv8.0: widening multiplies to int16 (|q| <= 127 * 127 fits), then pairwise adds to int32
    int32x4_t s = vpaddlq_s16(vmull_s8(vget_low_s8(x.val[0]), vget_low_s8(y.val[0])));
    s = vpadalq_s16(s, vmull_s8(vget_high_s8(x.val[0]), vget_high_s8(y.val[0])));
    s = vpadalq_s16(s, vmull_s8(vget_low_s8(x.val[1]), vget_low_s8(y.val[1])));
    return vpadalq_s16(s, vmull_s8(vget_high_s8(x.val[1]), vget_high_s8(y.val[1])));
#endif
}
// [end excerpt: dot_neon]

inline qvec load_q8_1(const block_q8_1& a) { return {{vld1q_s8(a.qs), vld1q_s8(a.qs + 16)}}; }
inline float scale_f32(fp16_bits h) {
    __fp16 f;  // ARM's half-precision type: the conversion is one instruction (fcvt)
    memcpy(&f, &h, sizeof f);
    return (float)f;
}
inline fvec fzero() { return vdupq_n_f32(0.0f); }
inline void accumulate(fvec& acc, ivec sumi, float scale) { acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), scale); }
inline float hsum(fvec v) { return vaddvq_f32(v); }

template <class WF>
struct simd_w;
template <>
struct simd_w<w_q4_0> {
    // 16 bytes -> low nibbles (elements 0..15) and high nibbles (16..31), as bytes 0..15
    template <class B>
    static inline qvec load(const B& b) {
        const uint8x16_t x = vld1q_u8(b.qs);
        return {{vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8(x, 4))}};
    }
    static inline ivec dot(qvec w, qvec a) { return dot_s8s8(w, a); }  // 0..15 are signed bytes too
};
template <>
struct simd_w<w_q4_1> : simd_w<w_q4_0> {};
template <>
struct simd_w<w_q8_0> {
    static inline qvec load(const block_q8_0& b) { return {{vld1q_s8(b.qs), vld1q_s8(b.qs + 16)}}; }
    static inline ivec dot(qvec w, qvec a) { return dot_s8s8(w, a); }  // signed x signed: no sign trick
};

#else  // portable: one int per block, what the instructions above compute
struct qvec {
    int8_t q[QK];
};
typedef int ivec;
typedef float fvec;

inline qvec load_q8_1(const block_q8_1& a) {
    qvec v;
    memcpy(v.q, a.qs, QK);
    return v;
}
inline float scale_f32(fp16_bits h) { return fp16_to_fp32(h); }
inline fvec fzero() { return 0.0f; }
inline void accumulate(fvec& acc, ivec sumi, float scale) { acc = fmaf((float)sumi, scale, acc); }
inline float hsum(fvec v) { return v; }

template <class WF>
struct simd_w {
    static inline qvec load(const typename WF::block& b) {
        qvec v;
        for (int l = 0; l < QK; l++) v.q[l] = (int8_t)WF::quant(b, l);
        return v;
    }
    static inline ivec dot(const qvec& w, const qvec& a) {
        int s = 0;
        for (int l = 0; l < QK; l++) s += w.q[l] * a.q[l];
        return s;
    }
};
#endif

// ---- the tile: the blocked kernel's loops around the block dot product above ----
template <class WF, int TN, int TM>
inline void tile(const block_q8_1* A, const typename WF::block* W, float* C, int nb, int M, int n0, int m0) {
    fvec acc[TN][TM];
    float comp[TN][TM] = {};  // sum_b d_w * s_a for weights with an offset (Q4_0), sum_b m_w * s_a with a min (Q4_1)
    for (int i = 0; i < TN; i++)
        for (int j = 0; j < TM; j++) acc[i][j] = fzero();
    for (int b = 0; b < nb; b++) {
        qvec wq[TM];  // the TM weight blocks of this step of K, unpacked once
        float d_w[TM], m_w[TM];
        for (int j = 0; j < TM; j++) {
            const typename WF::block& blk = W[(int64_t)(m0 + j) * nb + b];
            d_w[j] = scale_f32(blk.d);
            if constexpr (WF::has_min) m_w[j] = scale_f32(blk.m);
            wq[j] = simd_w<WF>::load(blk);
        }
        for (int i = 0; i < TN; i++) {
            const block_q8_1& a = A[(int64_t)(n0 + i) * nb + b];
            // [excerpt: block_loop]
            const qvec aq = load_q8_1(a);
            const float d_a = scale_f32(a.d);
            const float s_a = WF::offset != 0 || WF::has_min ? scale_f32(a.s) : 0.0f;  // Q8_0 never reads s
            for (int j = 0; j < TM; j++) {
                accumulate(acc[i][j], simd_w<WF>::dot(wq[j], aq), d_w[j] * d_a);
                if constexpr (WF::offset != 0) comp[i][j] += d_w[j] * s_a;
                if constexpr (WF::has_min) comp[i][j] += m_w[j] * s_a;
                // [end excerpt: block_loop]
            }
        }
    }
    for (int i = 0; i < TN; i++) {
        for (int j = 0; j < TM; j++) {
            float c = hsum(acc[i][j]);
            if constexpr (WF::offset != 0) c -= (float)WF::offset * comp[i][j];
            if constexpr (WF::has_min) c += comp[i][j];
            C[(int64_t)(n0 + i) * M + m0 + j] = c;
        }
    }
}
}  // namespace

template <class WF>
void gemm_q8_1_simd(const GemmProblem& p, int m_begin, int m_end) {
    const block_q8_1* A = (const block_q8_1*)p.A;
    const typename WF::block* W = (const typename WF::block*)p.W;
    const int nb = p.K / QK;
    constexpr int TN = 4, TM = 4;
    int n = 0;
    for (; n + TN <= p.N; n += TN) {
        int m = m_begin;
        for (; m + TM <= m_end; m += TM) tile<WF, TN, TM>(A, W, p.C, nb, p.M, n, m);
        for (; m < m_end; m++) tile<WF, TN, 1>(A, W, p.C, nb, p.M, n, m);
    }
    for (; n < p.N; n++) {
        int m = m_begin;
        for (; m + TM <= m_end; m += TM) tile<WF, 1, TM>(A, W, p.C, nb, p.M, n, m);
        for (; m < m_end; m++) tile<WF, 1, 1>(A, W, p.C, nb, p.M, n, m);
    }
}

// Which of the paths above this build compiled (the benchmark records it; the ARM test checks it).
const char* simd_path_04_w4a8() {
#if QG_X86_SIMD && defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return "avx512-vnni";
#elif QG_X86_SIMD && defined(__AVXVNNI__)
    return "avx-vnni";
#elif QG_X86_SIMD
    return "avx2";
#elif QG_NEON_SIMD && defined(__ARM_FEATURE_DOTPROD)
    return "neon-dotprod";
#elif QG_NEON_SIMD
    return "neon";
#else
    return "portable";
#endif
}

template void gemm_q8_1_simd<w_q4_0>(const GemmProblem&, int, int);
template void gemm_q8_1_simd<w_q8_0>(const GemmProblem&, int, int);
template void gemm_q8_1_simd<w_q4_1>(const GemmProblem&, int, int);

void cpu_q4_0_q8_1_simd(const GemmProblem& p, int m_begin, int m_end) { gemm_q8_1_simd<w_q4_0>(p, m_begin, m_end); }

void cpu_q8_0_q8_1_simd(const GemmProblem& p, int m_begin, int m_end) { gemm_q8_1_simd<w_q8_0>(p, m_begin, m_end); }

// Chapter 7: Q4_1 weights. The nibbles go in as Q4_0's (unsigned), and the min is summed beside the
// dot products as the compensation is, sum_b m_w * s_a, and added at the end.
void cpu_q4_1_q8_1_simd(const GemmProblem& p, int m_begin, int m_end) { gemm_q8_1_simd<w_q4_1>(p, m_begin, m_end); }
