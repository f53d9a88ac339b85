// cpu/08_k_quants/2_simd.cpp (chapter 8, K-quants): the super-block dot products on int8 SIMD.
//
// Chapter 4's SIMD step (04_w4a8/3_simd.cpp) with K-quant blocks: a 4 x 4 tile of outputs, the
// weights of a super-block unpacked once per tile into eight 256-bit vectors of 32 quants, the
// activations' eight vectors loaded once per token. What is new is the second level of scales,
// and on x86 it costs no extra instruction: AVX2's int8 dot product is two instructions,
//   vpmaddubsw   u8 x s8 byte pairs summed to int16
//   vpmaddwd     int16 pairs times int16 summed to int32
// and chapter 4 fed the second one ones. Here it gets the sub-block's integer scale instead, so
// the scale multiplies while the pairs are summed (ggml's AVX2 kernels do the same):
//   Q4_K: one scale per 32 values, broadcast to all 16 int16 lanes of a vector.
//   Q6_K: one scale per 16 values, the two halves of a vector get their own (lanes 0-7: the
//         first 16 values, 8-15: the next 16).
// The int32 lanes of a super-block are summed over its sub-blocks as integers and become float
// once per 256 values (times d_w * d_a). Both instructions want one unsigned operand:
//   Q4_K nibbles are unsigned 0..15 as stored; the min term needs no weight quant at all,
//        dmin_w d_a * sum_s m_s * (bsums[2s] + bsums[2s+1]), summed beside the dot products.
//   Q6_K quants are q - 32 with q in 0..63 unsigned: the products use q as stored, and the -32
//        returns through the activations' sums, 32 * sum_t sc_t * bsums[t] (Q8_K's bsums serve
//        both formats), the compensation of chapter 4 with Q8_K's sums in place of Q8_1's s.
// int16 cannot overflow: a pair sum is at most 2 * 63 * 127 = 16002 (Q6_K), 2 * 15 * 127 (Q4_K).
// On ARM (AArch64 NEON) a 256-bit vector is two 128-bit registers; the quants, 0..15 and 0..63,
// are below 128, so both operands can be read as signed bytes: sdot (vdotq_s32, with the dot
// product extension) sums 4 byte pairs into each int32 lane, and without it smull/smlal2 sum
// pairs to int16 and saddlp widens them; the sub-block's scale then multiplies 4 int32 lanes (mla).
// Without AVX2 or NEON the same loops run on plain integers (the specification of the instructions).
#include "k_quants.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define QG_X86_SIMD 1
#include <immintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define QG_ARM_NEON 1
#include <arm_neon.h>
#else
#include <math.h>
#endif

namespace {

#if QG_X86_SIMD
typedef __m256i qvec;  // 32 quants
typedef __m256i ivec;  // 8 int32 partial sums
typedef __m256 fvec;   // 8 float partial sums of one output

inline qvec load32(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }
inline ivec izero() { return _mm256_setzero_si256(); }
inline fvec fzero() { return _mm256_setzero_ps(); }
// [excerpt: avx2_dot_scaled]
// sum += the 32 products u * s, in pairs times the int16 scales (per int16 lane), to 8 int32 lanes
inline void dot_scaled(ivec& sum, qvec u, qvec s, __m256i scale16) {
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale16));
}
inline __m256i scales16(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
}
// [end excerpt: avx2_dot_scaled]
inline void accumulate(fvec& acc, ivec sumi, float scale) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(scale), acc);
}
inline float hsum(fvec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
inline float scale_f32(fp16_bits h) { return _cvtsh_ss(h); }

// Q4_K: 32 bytes hold sub-block 2c in their low nibbles and 2c+1 in their high nibbles.
inline void unpack_q4_k(const block_q4_k& b, qvec* q) {
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < 4; c++) {
        const __m256i x = load32(b.qs + 32 * c);
        q[2 * c] = _mm256_and_si256(x, lo4);
        q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo4);  // 16-bit shift, then the mask
    }
}
// Q6_K: per half of 128 values, ql[0:32] and ql[32:64] give the low 4 bits of values 0-31 / 32-63
// (low nibbles) and 64-95 / 96-127 (high nibbles); qh bits 2k, 2k+1 the high 2 bits of value 32k + l.
inline void unpack_q6_k(const block_q6_k& b, qvec* q) {
    const __m256i lo4 = _mm256_set1_epi8(0x0F), hi2 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = load32(b.ql + 64 * h), l1 = load32(b.ql + 64 * h + 32), qh = load32(b.qh + 32 * h);
        q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, lo4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), hi2));
        q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, lo4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), hi2));
        q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo4), _mm256_and_si256(qh, hi2));
        q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo4),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), hi2));
    }
}

#elif QG_ARM_NEON
struct qvec {
    int8x16_t lo, hi;  // 32 quants in two registers
};
typedef int32x4_t ivec;
typedef float32x4_t fvec;

inline qvec load32(const void* p) {
    const int8_t* q = (const int8_t*)p;
    return {vld1q_s8(q), vld1q_s8(q + 16)};
}
inline ivec izero() { return vdupq_n_s32(0); }
inline fvec fzero() { return vdupq_n_f32(0.0f); }
struct scale_pair {
    int lo, hi;  // the scale of values 0-15 and of values 16-31
};
inline scale_pair scales16(int lo, int hi) { return {lo, hi}; }
// 16 byte products summed into 4 int32 lanes
inline int32x4_t dot16(int8x16_t u, int8x16_t s) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(vdupq_n_s32(0), u, s);
#else
    int16x8_t pairs = vmull_s8(vget_low_s8(u), vget_low_s8(s));  // products of bytes 0-7
    pairs = vmlal_high_s8(pairs, u, s);  // + those of bytes 8-15: |sum| <= 2 * 63 * 128, an int16
    return vpaddlq_s16(pairs);
#endif
}
inline void dot_scaled(ivec& sum, const qvec& u, const qvec& s, scale_pair sc) {
    sum = vmlaq_n_s32(sum, dot16(u.lo, s.lo), sc.lo);
    sum = vmlaq_n_s32(sum, dot16(u.hi, s.hi), sc.hi);
}
inline void accumulate(fvec& acc, ivec sumi, float scale) { acc = vfmaq_n_f32(acc, vcvtq_f32_s32(sumi), scale); }
inline float hsum(fvec v) { return vaddvq_f32(v); }
inline float scale_f32(fp16_bits h) { return fp16_to_fp32(h); }

inline qvec as_qvec(uint8x16_t lo, uint8x16_t hi) { return {vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi)}; }
inline void unpack_q4_k(const block_q4_k& b, qvec* q) {
    const uint8x16_t lo4 = vdupq_n_u8(0x0F);
    for (int c = 0; c < 4; c++) {
        const uint8x16_t x0 = vld1q_u8(b.qs + 32 * c), x1 = vld1q_u8(b.qs + 32 * c + 16);
        q[2 * c] = as_qvec(vandq_u8(x0, lo4), vandq_u8(x1, lo4));
        q[2 * c + 1] = as_qvec(vshrq_n_u8(x0, 4), vshrq_n_u8(x1, 4));
    }
}
inline void unpack_q6_k(const block_q6_k& b, qvec* q) {
    const uint8x16_t lo4 = vdupq_n_u8(0x0F), hi2 = vdupq_n_u8(0x30);
    for (int h = 0; h < 2; h++) {
        uint8x16_t v[4][2];
        for (int p = 0; p < 2; p++) {  // the two 16-byte halves of each vector
            const uint8x16_t l0 = vld1q_u8(b.ql + 64 * h + 16 * p), l1 = vld1q_u8(b.ql + 64 * h + 32 + 16 * p);
            const uint8x16_t qh = vld1q_u8(b.qh + 32 * h + 16 * p);
            v[0][p] = vorrq_u8(vandq_u8(l0, lo4), vandq_u8(vshlq_n_u8(qh, 4), hi2));
            v[1][p] = vorrq_u8(vandq_u8(l1, lo4), vandq_u8(vshlq_n_u8(qh, 2), hi2));
            v[2][p] = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(qh, hi2));
            v[3][p] = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(qh, 2), hi2));
        }
        for (int k = 0; k < 4; k++) q[4 * h + k] = as_qvec(v[k][0], v[k][1]);
    }
}

#else  // portable: the same arithmetic on plain integers
struct qvec {
    int8_t q[32];
};
typedef int ivec;
typedef float fvec;

inline qvec load32(const void* p) {
    qvec v;
    memcpy(v.q, p, 32);
    return v;
}
inline ivec izero() { return 0; }
inline fvec fzero() { return 0.0f; }
struct scale_pair {
    int lo, hi;  // the scale of values 0-15 and of values 16-31
};
inline scale_pair scales16(int lo, int hi) { return {lo, hi}; }
inline void dot_scaled(ivec& sum, const qvec& u, const qvec& s, scale_pair sc) {
    int lo = 0, hi = 0;
    for (int l = 0; l < 16; l++) lo += (uint8_t)u.q[l] * s.q[l];
    for (int l = 16; l < 32; l++) hi += (uint8_t)u.q[l] * s.q[l];
    sum += sc.lo * lo + sc.hi * hi;
}
inline void accumulate(fvec& acc, ivec sumi, float scale) { acc = fmaf((float)sumi, scale, acc); }
inline float hsum(fvec v) { return v; }
inline float scale_f32(fp16_bits h) { return fp16_to_fp32(h); }

inline void unpack_q4_k(const block_q4_k& b, qvec* q) {
    int8_t v[QK_K];
    q4_k_unpack(b, v);
    for (int s = 0; s < 8; s++) memcpy(q[s].q, v + 32 * s, 32);
}
inline void unpack_q6_k(const block_q6_k& b, qvec* q) {
    int8_t v[QK_K];
    q6_k_unpack(b, v);  // q - 32: back to the stored 0..63, the unsigned operand
    for (int s = 0; s < 8; s++)
        for (int l = 0; l < 32; l++) q[s].q[l] = (int8_t)(v[32 * s + l] + 32);
}
#endif

// One weight super-block, unpacked once per tile: its quants as 8 vectors of 32, its scales.
struct w_q4_k {
    typedef block_q4_k block;
    qvec q[8];
    int sc[8], m[8];
    float d, dmin;
    void load(const block_q4_k& b) {
        unpack_q4_k(b, q);
        q4_k_scales(b, sc, m);
        d = scale_f32(b.d);
        dmin = scale_f32(b.dmin);
    }
    // sum_s sc_s * dot_s into 8 int32 lanes; `corr` gets what is subtracted after scaling by d_a:
    // dmin * sum_s m_s * (bsums[2s] + bsums[2s+1])
    // [excerpt: w_q4_k_dot]
    ivec dot(const qvec* a, const int16_t* bsums, float& corr) const {
        ivec sum = izero();
        int summ = 0;
        for (int s = 0; s < 8; s++) {
            dot_scaled(sum, q[s], a[s], scales16(sc[s], sc[s]));
            summ += m[s] * (bsums[2 * s] + bsums[2 * s + 1]);
        }
        corr = dmin * (float)summ;
        return sum;
    }
    // [end excerpt: w_q4_k_dot]
};

struct w_q6_k {
    typedef block_q6_k block;
    qvec q[8];  // the stored 0..63 (value - 32 = q - 32)
    int sc[16];
    float d;
    void load(const block_q6_k& b) {
        unpack_q6_k(b, q);
        for (int t = 0; t < 16; t++) sc[t] = b.scales[t];
        d = scale_f32(b.d);
    }
    // sum_t sc_t * dot(q, a) over the 16 sub-blocks of 16; `corr` = d * 32 * sum_t sc_t * bsums[t],
    // the -32 of every quant returned through the activation sums
    // [excerpt: w_q6_k_dot]
    ivec dot(const qvec* a, const int16_t* bsums, float& corr) const {
        ivec sum = izero();
        int sumb = 0;
        for (int v = 0; v < 8; v++) {
            dot_scaled(sum, q[v], a[v], scales16(sc[2 * v], sc[2 * v + 1]));
            sumb += sc[2 * v] * bsums[2 * v] + sc[2 * v + 1] * bsums[2 * v + 1];
        }
        corr = d * (float)(32 * sumb);
        return sum;
    }
    // [end excerpt: w_q6_k_dot]
};

// A TN x TM tile of outputs: per super-block, TM weight blocks unpacked once, each of the TN
// activation blocks loaded once and met with all TM of them.
template <class WK, int TN, int TM>
void tile(const block_q8_k* A, const typename WK::block* W, float* C, int nb, int M, int n0, int m0) {
    fvec acc[TN][TM];
    float corr[TN][TM] = {};  // sum_b d_a * corr_b, subtracted at the end
    for (int i = 0; i < TN; i++)
        for (int j = 0; j < TM; j++) acc[i][j] = fzero();
    WK w[TM];
    qvec aq[8];
    for (int b = 0; b < nb; b++) {
        for (int j = 0; j < TM; j++) w[j].load(W[(int64_t)(m0 + j) * nb + b]);
        for (int i = 0; i < TN; i++) {
            const block_q8_k& a = A[(int64_t)(n0 + i) * nb + b];
            for (int v = 0; v < 8; v++) aq[v] = load32(a.qs + 32 * v);
            for (int j = 0; j < TM; j++) {
                float c;
                const ivec sumi = w[j].dot(aq, a.bsums, c);
                accumulate(acc[i][j], sumi, w[j].d * a.d);
                corr[i][j] += a.d * c;
            }
        }
    }
    for (int i = 0; i < TN; i++)
        for (int j = 0; j < TM; j++) C[(int64_t)(n0 + i) * M + m0 + j] = hsum(acc[i][j]) - corr[i][j];
}

template <class WK>
void gemm_k_simd(const GemmProblem& p, int m_begin, int m_end) {
    const block_q8_k* A = (const block_q8_k*)p.A;
    const typename WK::block* W = (const typename WK::block*)p.W;
    const int nb = p.K / QK_K;
    constexpr int TN = 4, TM = 4;
    int n = 0;
    for (; n + TN <= p.N; n += TN) {
        int m = m_begin;
        for (; m + TM <= m_end; m += TM) tile<WK, TN, TM>(A, W, p.C, nb, p.M, n, m);
        for (; m < m_end; m++) tile<WK, TN, 1>(A, W, p.C, nb, p.M, n, m);
    }
    for (; n < p.N; n++) {
        int m = m_begin;
        for (; m + TM <= m_end; m += TM) tile<WK, 1, TM>(A, W, p.C, nb, p.M, n, m);
        for (; m < m_end; m++) tile<WK, 1, 1>(A, W, p.C, nb, p.M, n, m);
    }
}
}  // namespace

void cpu_q4_k_q8_k_simd(const GemmProblem& p, int m_begin, int m_end) { gemm_k_simd<w_q4_k>(p, m_begin, m_end); }

void cpu_q6_k_q8_k_simd(const GemmProblem& p, int m_begin, int m_end) { gemm_k_simd<w_q6_k>(p, m_begin, m_end); }

// Which of the paths above this build compiled (tests/test_cpu_cross_k_quants.py checks it).
const char* simd_path_08_k_quants() {
#if QG_X86_SIMD
    return "avx2";
#elif QG_ARM_NEON && defined(__ARM_FEATURE_DOTPROD)
    return "neon-dotprod";
#elif QG_ARM_NEON
    return "neon";
#else
    return "portable";
#endif
}
