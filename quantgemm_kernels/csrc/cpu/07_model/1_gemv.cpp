// cpu/07_model/1_gemv.cpp (chapter 7): the stationary step's arithmetic for one token (or a few),
// without its transposes.
//
// At N = 1 a decode step's GEMMs are matrix-vector products, and chapter 4's stationary step spends
// most of its time rearranging bytes: it transposes 8 rows' blocks into the rows-in-lanes layout
// (16 unpacks per 8 blocks), which pays when many tokens share the rearranged blocks and is pure
// overhead for one; with VNNI, Q8_0 weights also take 8 more vpdpbusd per 8 blocks for the -128
// start. SmolLM2's Q8_0 output layer (49152 x 576) ran at 2.3 ms on 2 threads of the course's CI
// machine, ggml's mul_mat at 0.97 ms.
//
// Here each row's block meets the token in the layout both already have: 32 quants against 32
// quants, one vpdpbusd (or vpmaddubsw + vpmaddwd on AVX2) giving 8 partial sums of a row. Eight
// rows at a time, a tree of vphaddd puts row j's exact block sum in lane j, and from there the
// arithmetic is the stationary step's, operation for operation:
//     c = fma(sumi_b, d_w * d_a, c) over the blocks in order, comp += c_w * s_a,
// then c - 8 * comp (Q4_0), c + comp (Q4_1), c (Q8_0). The integer sums are exact, so the output
// has the stationary step's bits (tests/test_gemv.py checks it), on every instruction set.
// Q8_0's signed weights take the sign trick (|w| against a * sign(w)), as ggml's vec_dot does.
// While 8 rows are summed, the next 8 rows' bytes are prefetched, a share per block: rows are
// contiguous, and at one token the kernel waits on memory. That prefetch, not the transposes, was
// most of the gain (2-core CI machine, SmolLM2's output layer: 2.3 ms without it, 1.5 ms with it,
// the stationary step 2.4 ms). It pays for rows up to K = 4096; on longer rows (Llama-3's 14336)
// the stationary step is as fast or faster (api.CPU_GEMV_MAX_K; the record is cited there).
// Tried there and not kept: prefetching into L2 only (_MM_HINT_T1), and each row's bytes 1 KB
// ahead instead of the next rows: no faster on long rows, slower on short ones.
//
// Without AVX2 (or FMA/F16C) every row takes the portable loop below, same arithmetic; the model
// picks this kernel only where the SIMD path compiled (api.pick_kernel).
#include <cmath>

#include "../04_w4a8/w_q8_1.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define QG_GEMV_X86 1
#include <immintrin.h>
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QG_GEMV_DOT(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#elif defined(__AVXVNNI__)
#define QG_GEMV_DOT(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s)
#else  // u8 x s8 pairs to int16 (at most 2 x 128 x 127: no saturation), then pairs to int32
#define QG_GEMV_DOT(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#endif
#endif

namespace {

template <class WF>
constexpr bool has_comp = WF::offset != 0 || WF::has_min;

template <class WF>
inline float finish(float c, float comp) {
    if constexpr (WF::has_min) return c + comp;
    if constexpr (WF::offset != 0) return c - (float)WF::offset * comp;
    (void)comp;
    return c;
}

template <class WF>
inline float comp_scale(const typename WF::block& b) {
    if constexpr (WF::has_min) return fp16_to_fp32(b.m);
    return fp16_to_fp32(b.d);
}

// One row, one token: the reference loop of the arithmetic above.
template <class WF>
float row_portable(const typename WF::block* w, const block_q8_1* a, int nb) {
    float c = 0.0f, comp = 0.0f;
    for (int b = 0; b < nb; b++) {
        int sumi = 0;
        for (int j = 0; j < QK; j++) sumi += WF::quant(w[b], j) * a[b].qs[j];
        const float d_a = fp16_to_fp32(a[b].d);
        c = std::fmaf((float)sumi, fp16_to_fp32(w[b].d) * d_a, c);
        if constexpr (has_comp<WF>) comp = comp + comp_scale<WF>(w[b]) * fp16_to_fp32(a[b].s);
    }
    return finish<WF>(c, comp);
}

#if QG_GEMV_X86
// A block's 32 quants as 32 bytes in element order (nibbles: elements 0..15 are the low halves).
template <class WF>
inline __m256i quants(const typename WF::block& b) {
    if constexpr (WF::offset == 0 && !WF::has_min) {  // Q8_0
        return _mm256_loadu_si256((const __m256i*)b.qs);
    } else {
        const __m128i x = _mm_loadu_si128((const __m128i*)b.qs);
        const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
        return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
    }
}

// 8 partial sums of a block pair (an unsigned and a signed operand; Q8_0: the sign trick).
template <class WF>
inline __m256i dot8(__m256i w, __m256i a) {
    if constexpr (WF::offset == 0 && !WF::has_min) return QG_GEMV_DOT(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return QG_GEMV_DOT(w, a);
}

// Row j's total in lane j, from 8 vectors of 8 partial sums (integer adds: exact).
inline __m256i sum_rows(const __m256i v[8]) {
    const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);  // halves: rows 0-3, 4-7
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// Rows m0 .. m0+7 against T tokens n0 .. n0+T-1.
template <class WF, int T>
void rows8(const GemmProblem& p, int nb, int m0, int n0) {
    using B = typename WF::block;
    const B* W = (const B*)p.W + (int64_t)m0 * nb;
    const block_q8_1* A = (const block_q8_1*)p.A + (int64_t)n0 * nb;
    __m256 acc[T], comp[T];
    for (int t = 0; t < T; t++) acc[t] = comp[t] = _mm256_setzero_ps();
    // the next 8 rows' bytes (those that exist), a share per block step, into the cache ahead of their turn
    const int64_t row_bytes = (int64_t)nb * (int64_t)sizeof(B), next_row = (int64_t)m0 + 8;
    const int64_t rows_next = next_row + 8 <= p.M ? 8 : (next_row < p.M ? p.M - next_row : 0);
    const char* next = (const char*)p.W + next_row * row_bytes * (rows_next > 0);
    const int64_t ahead = (rows_next * row_bytes + 63) / 64, per_step = (ahead + nb - 1) / nb;
    // [excerpt: gemv_rows8]
    for (int b = 0; b < nb; b++) {
        for (int64_t l = b * per_step; l < (b + 1) * per_step && l < ahead; l++)
            _mm_prefetch(next + 64 * l, _MM_HINT_T0);
        __m256i w[8];
        fp16_bits d[8], m[8] = {};
        for (int j = 0; j < 8; j++) {
            const B& blk = W[(int64_t)j * nb + b];
            w[j] = quants<WF>(blk);
            d[j] = blk.d;
            if constexpr (WF::has_min) m[j] = blk.m;
        }
        const __m256 d_w = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)d));  // the 8 rows' scales
        __m256 c_w = d_w;                                                        // what multiplies s_a
        if constexpr (WF::has_min) c_w = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)m));
        for (int t = 0; t < T; t++) {
            const block_q8_1& a = A[(int64_t)t * nb + b];
            const __m256i aq = _mm256_loadu_si256((const __m256i*)a.qs);
            __m256i v[8];
            for (int j = 0; j < 8; j++) v[j] = dot8<WF>(w[j], aq);
            const __m256i sumi = sum_rows(v);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_mul_ps(d_w, _mm256_set1_ps(fp16_to_fp32(a.d))),
                                     acc[t]);
            if constexpr (has_comp<WF>)
                comp[t] = _mm256_add_ps(comp[t], _mm256_mul_ps(c_w, _mm256_set1_ps(fp16_to_fp32(a.s))));
        }
    }
    // [end excerpt: gemv_rows8]
    for (int t = 0; t < T; t++) {
        alignas(32) float c8[8], comp8[8];
        _mm256_store_ps(c8, acc[t]);
        _mm256_store_ps(comp8, comp[t]);
        for (int j = 0; j < 8; j++) p.C[(int64_t)(n0 + t) * p.M + m0 + j] = finish<WF>(c8[j], comp8[j]);
    }
}
#endif

template <class WF>
void gemm_q8_1_gemv(const GemmProblem& p, int m_begin, int m_end) {
    const int nb = p.K / QK;
    using B = typename WF::block;
    int m = m_begin;
#if QG_GEMV_X86
    for (; m + 8 <= m_end; m += 8) {
        int n = 0;
        for (; n + 4 <= p.N; n += 4) rows8<WF, 4>(p, nb, m, n);
        switch (p.N - n) {
            case 3: rows8<WF, 3>(p, nb, m, n); break;
            case 2: rows8<WF, 2>(p, nb, m, n); break;
            case 1: rows8<WF, 1>(p, nb, m, n); break;
            default: break;
        }
    }
#endif
    for (; m < m_end; m++)
        for (int n = 0; n < p.N; n++)
            p.C[(int64_t)n * p.M + m] =
                row_portable<WF>((const B*)p.W + (int64_t)m * nb, (const block_q8_1*)p.A + (int64_t)n * nb, nb);
}

}  // namespace

void cpu_q4_0_q8_1_gemv(const GemmProblem& p, int m_begin, int m_end) { gemm_q8_1_gemv<w_q4_0>(p, m_begin, m_end); }
void cpu_q8_0_q8_1_gemv(const GemmProblem& p, int m_begin, int m_end) { gemm_q8_1_gemv<w_q8_0>(p, m_begin, m_end); }
void cpu_q4_1_q8_1_gemv(const GemmProblem& p, int m_begin, int m_end) { gemm_q8_1_gemv<w_q4_1>(p, m_begin, m_end); }

// Whether the 8-row SIMD path compiled here (the model picks the kernel only then).
bool cpu_gemv_simd() {
#if QG_GEMV_X86
    return true;
#else
    return false;
#endif
}
