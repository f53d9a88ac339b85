// cpu/quantize.cpp: llama.cpp's reference quantizers, row by row.
//
// Each function follows ggml-quants.c (quantize_row_*_ref) line for line; where llama.cpp's
// result depends on how the compiler rounds, the comment says which choice we make and why.
// The readable spec is quantgemm_kernels/formats.py; tests check both give the same bytes.
#include <math.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include "../gemm.h"

// 1/d, or 0 where d is 0 or 1/d overflows (a block with max |x| < 3.7e-37, where llama.cpp's
// cast of inf to an integer is undefined behaviour; such a block dequantizes to 0 there too).
static inline float inverse_scale(float d) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    return isinf(id) ? 0.0f : id;
}

// Q4_0: the scale comes from the *signed* value of largest magnitude (the first one on ties),
// d = max / -8, so that value maps exactly to quant 0 and the grid is [-8, 7] * d.
// llama.cpp computes x*id, rounds it to float, adds 8.5f, rounds again and truncates. A fused
// multiply-add would round once and can give another quant when x*id + 8.5 lands next to an
// integer; ggml builds its C as ISO C11, where GCC does not contract, and gguf's numpy quantizer
// rounds twice too. So do we: this file is built with -ffp-contract=off, and the CUDA quantizer
// spells the two roundings out (__fmul_rn, __fadd_rn) because nvcc contracts by default.
void quantize_rows_q4_0(const float* x, block_q4_0* y, int64_t rows, int64_t K, int /*mode*/) {
    const int64_t nb = rows * (K / QK);
    for (int64_t i = 0; i < nb; i++) {
        const float* xb = x + i * QK;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++) {
            if (amax < fabsf(xb[j])) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8;
        const float id = inverse_scale(d);
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK / 2; j++) {
            const float p0 = xb[j] * id, p1 = xb[j + QK / 2] * id;
            const float v0 = p0 + 8.5f, v1 = p1 + 8.5f;
            const int q0 = (int)v0 < 15 ? (int)v0 : 15;  // truncation toward zero, as (int8_t)
            const int q1 = (int)v1 < 15 ? (int)v1 : 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

// Q4_1: asymmetric, m = min, d = (max - min) / 15, q = trunc((x - m) * (1/d) + 0.5). The first of
// equal extremes is kept (strict comparisons), which decides the sign of a zero min. As for Q4_0,
// the product and the + 0.5f are rounded separately (no fused multiply-add).
void quantize_rows_q4_1(const float* x, block_q4_1* y, int64_t rows, int64_t K, int /*mode*/) {
    const int64_t nb = rows * (K / QK);
    for (int64_t i = 0; i < nb; i++) {
        const float* xb = x + i * QK;
        float min = INFINITY, max = -INFINITY;  // llama.cpp starts at +-FLT_MAX: the same for finite x
        for (int j = 0; j < QK; j++) {
            if (xb[j] < min) min = xb[j];
            if (xb[j] > max) max = xb[j];
        }
        const float d = (max - min) / 15;
        const float id = inverse_scale(d);
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(min);
        for (int j = 0; j < QK / 2; j++) {
            const float p0 = (xb[j] - min) * id, p1 = (xb[j + QK / 2] - min) * id;
            const float v0 = p0 + 0.5f, v1 = p1 + 0.5f;
            const int q0 = (int)v0 < 15 ? (int)v0 : 15;
            const int q1 = (int)v1 < 15 ? (int)v1 : 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

// Q8_0: symmetric, d = amax / 127, q = round-half-away-from-zero(x * (1/d)).
void quantize_rows_q8_0(const float* x, block_q8_0* y, int64_t rows, int64_t K, int /*mode*/) {
    const int64_t nb = rows * (K / QK);
    for (int64_t i = 0; i < nb; i++) {
        const float* xb = x + i * QK;
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = amax > fabsf(xb[j]) ? amax : fabsf(xb[j]);
        const float d = amax / 127;
        const float id = inverse_scale(d);
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK; j++) y[i].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

// The sum of 32 floats in the order a warp's butterfly reduction adds them (ggml-cuda's
// warp_reduce_sum: lane i adds lane i^16, then i^8, ..., i^1). Every lane ends with the same value.
static float butterfly_sum32(const float* v_in) {
    float v[QK], t[QK];
    for (int j = 0; j < QK; j++) v[j] = v_in[j];
    for (int off = QK / 2; off > 0; off >>= 1) {
        for (int j = 0; j < QK; j++) t[j] = v[j] + v[j ^ off];
        for (int j = 0; j < QK; j++) v[j] = t[j];
    }
    return v[0];
}

// Q8_1: Q8_0's quants plus s. sum_mode picks llama.cpp's CPU reference (s = d * sum(q), with
// q = round(x * (1/d))) or its CUDA quantizer (s = sum(x), with q = round(x / d)).
#if defined(__AVX2__)
// Q8_1 (s = d * sum(q)) of one block with AVX2, the same bytes as the scalar loop below: max |x|
// is exact, x * id is one float multiply either way, and roundf (half away from zero) is built from
// a truncation (vroundps's nearest-even would round the .5 ties otherwise). Activations are
// quantized on every call of a Q8_1 kernel, so this is on the kernels' path (about 4 ns per value
// in the scalar loop: 15% of chapter 4's last step at N = 8). Returns false, leaving the block to the
// scalar loop, where max |x| is NaN or inf (whose outcome the scalar code defines).
static inline bool quantize_block_q8_1_avx2(const float* xb, block_q8_1& y) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], amax8 = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(xb + 8 * k);
        amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, v[k]));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax = _mm_cvtss_f32(m);
    if (_mm256_movemask_ps(nan) != 0 || !(amax <= 3.4028235e38f)) return false;
    const float d = amax / 127;
    const __m256 id = _mm256_set1_ps(inverse_scale(d));
    __m256i q[4], sum = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        const __m256 p = _mm256_mul_ps(v[k], id);
        const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m256 half =
            _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(p, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
        const __m256 away = _mm256_and_ps(half, _mm256_or_ps(_mm256_and_ps(sign, p), _mm256_set1_ps(1.0f)));
        q[k] = _mm256_cvtps_epi32(_mm256_add_ps(t, away));  // integers: the conversion is exact
        sum = _mm256_add_epi32(sum, q[k]);
    }
    // int32 -> int8 in element order (the packs work per 128-bit half, hence the final permute)
    const __m256i q16 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i*)y.qs, _mm256_permutevar8x32_epi32(q16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    y.d = fp32_to_fp16(d);
    y.s = fp32_to_fp16((float)_mm_cvtsi128_si32(s4) * d);
    return true;
}
#endif

void quantize_rows_q8_1(const float* x, block_q8_1* y, int64_t rows, int64_t K, int sum_mode) {
    const int64_t nb = rows * (K / QK);
    for (int64_t i = 0; i < nb; i++) {
        const float* xb = x + i * QK;
#if defined(__AVX2__)
        if (sum_mode == Q8_1_S_D_SUM_Q && quantize_block_q8_1_avx2(xb, y[i])) continue;
#endif
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = amax > fabsf(xb[j]) ? amax : fabsf(xb[j]);
        const float d = amax / 127;
        y[i].d = fp32_to_fp16(d);
        if (sum_mode == Q8_1_S_D_SUM_Q) {
            const float id = inverse_scale(d);
            int sum = 0;
            for (int j = 0; j < QK; j++) {
                y[i].qs[j] = (int8_t)roundf(xb[j] * id);
                sum += y[i].qs[j];
            }
            y[i].s = fp32_to_fp16((float)sum * d);
        } else {
            for (int j = 0; j < QK; j++) y[i].qs[j] = amax == 0.0f ? 0 : (int8_t)roundf(xb[j] / d);
            y[i].s = fp32_to_fp16(butterfly_sum32(xb));
        }
    }
}

void dequantize_rows_q4_0(const block_q4_0* x, float* y, int64_t rows, int64_t K) {
    const int64_t nb = rows * (K / QK);
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = (float)((x[i].qs[j] & 0x0F) - 8) * d;
            y[i * QK + j + QK / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_rows_q4_1(const block_q4_1* x, float* y, int64_t rows, int64_t K) {
    const int64_t nb = rows * (K / QK);
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
        for (int j = 0; j < QK / 2; j++) {  // q * d rounded, then + m (dequantize_row_q4_1)
            y[i * QK + j] = (float)(x[i].qs[j] & 0x0F) * d + m;
            y[i * QK + j + QK / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void dequantize_rows_q8_0(const block_q8_0* x, float* y, int64_t rows, int64_t K) {
    const int64_t nb = rows * (K / QK);
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK; j++) y[i * QK + j] = (float)x[i].qs[j] * d;
    }
}

void dequantize_rows_q8_1(const block_q8_1* x, float* y, int64_t rows, int64_t K) {
    const int64_t nb = rows * (K / QK);
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK; j++) y[i * QK + j] = (float)x[i].qs[j] * d;
    }
}

// ================================================================ K-quants (chapter 8)
// Super-blocks of QK_K = 256 values. The quantizers are ggml-quants.c's reference ones
// (quantize_row_q4_K_ref, quantize_row_q6_K_ref, quantize_row_q8_K_ref) with their helpers
// (nearest_int, make_qkx2_quants, make_qx_quants), statement for statement. Q4_K and Q6_K search
// for their scales with float loops, so the order of every sum and the rounding of every product
// decide the bytes: no reordering here, and no FMA (this file is built with -ffp-contract=off;
// ggml's build of ggml-quants.c has no FMA either).

// ggml's nearest_int: round to nearest (half to even) through the float32 addition of 1.5 * 2^23,
// then read the integer off the mantissa bits. Valid for |f| <= 2^22 (ggml asserts it; a release
// build computes these same bits beyond it, and so do we).
static inline int nearest_int(float fval) {
    const float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

static constexpr float GROUP_MAX_EPS = 1e-15f;

// ggml's make_qkx2_quants with use_mad = false: x ~ scale * L - the_min, L in 0..nmax, the scale
// and min by weighted least squares over nstep + 1 trial scales (the min of the best fit so far
// is used for the next trial's grid, as in ggml).
static float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                              uint8_t* Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + min - x[i];
        diff = diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

// Q4_K: per sub-block of 32 a scale and a min (make_qkx2_quants, weights sqrt(mean x^2) + |x|),
// both quantized to 6 bits against the largest of the eight (d = max_scale / 63, dmin =
// max_min / 63, fp16), then the nibbles recomputed from the stored scales.
void quantize_rows_q4_k(const float* x, block_q4_k* y, int64_t rows, int64_t K, int /*mode*/) {
    const int64_t nb = rows * (K / QK_K);
    uint8_t L[QK_K], Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 32; ++j) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
            const float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < QK_K / 32; ++j) {
            uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);  // the low byte, as ggml's uint8_t
            uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
            ls = ls < 63 ? ls : 63;
            lm = lm < 63 ? lm : 63;
            if (j < 4) {
                y[i].scales[j] = ls;
                y[i].scales[j + 4] = lm;
            } else {
                y[i].scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j - 0] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y[i].d = fp32_to_fp16(max_scale / 63.f);
        y[i].dmin = fp32_to_fp16(max_min / 63.f);
        for (int j = 0; j < QK_K / 32; ++j) {
            uint8_t sc, m;
            get_scale_min_k4(j, y[i].scales, &sc, &m);
            const float d = fp16_to_fp32(y[i].d) * sc;
            if (!d) continue;  // keeps the search's L, as ggml does
            const float dm = fp16_to_fp32(y[i].dmin) * m;
            for (int ii = 0; ii < 32; ++ii) {
                const int l = nearest_int((x[32 * j + ii] + dm) / d);
                L[32 * j + ii] = (uint8_t)(l < 0 ? 0 : l > 15 ? 15 : l);
            }
        }
        uint8_t* q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

// ggml's make_qx_quants with rmse_type = 1 and no importance weights (weights x^2): x ~ scale *
// (L - nmax), searched over 19 trial scales around -nmax / max.
static float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Q6_K: per sub-block of 16 a scale (make_qx_quants, nmax 32); the 16 scales become int8 against
// the one of largest magnitude (iscale = -128 / max_scale, d = 1 / iscale in fp16), then
// q = nearest_int(x / (d * scale)) + 32, 0..63, split into 4 low bits (ql) and 2 high bits (qh).
void quantize_rows_q6_k(const float* x, block_q6_k* y, int64_t rows, int64_t K, int /*mode*/) {
    const int64_t nb = rows * (K / QK_K);
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(block_q6_k));
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const int v = nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_fp32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = l < -32 ? -32 : l > 31 ? 31 : l;
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t* ql = y[i].ql;
        uint8_t* qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

// Q8_K: d = max / -127 in float32 (max: the signed value of largest magnitude, the first on
// ties), q = MIN(127, nearest_int((-127 / max) * x)), and the sums of 16 quants. A block of zeros:
// d = 0, zero quants; ggml leaves its bsums unwritten there, we write zeros.
void quantize_rows_q8_k(const float* x, block_q8_k* y, int64_t rows, int64_t K, int /*mode*/) {
    const int64_t nb = rows * (K / QK_K);
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof(block_q8_k));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) {
            const int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void dequantize_rows_q4_k(const block_q4_k* x, float* y, int64_t rows, int64_t K) {
    const int64_t nb = rows * (K / QK_K);
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t* q = x[i].qs;
        const float d = fp16_to_fp32(x[i].d), min = fp16_to_fp32(x[i].dmin);
        for (int j = 0, is = 0; j < QK_K; j += 64, q += 32, is += 2) {
            uint8_t sc, m;
            get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void dequantize_rows_q6_k(const block_q6_k* x, float* y, int64_t rows, int64_t K) {
    const int64_t nb = rows * (K / QK_K);
    for (int64_t i = 0; i < nb; i++) {
        const float d = fp16_to_fp32(x[i].d);
        const uint8_t* ql = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* sc = x[i].scales;
        for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

void dequantize_rows_q8_k(const block_q8_k* x, float* y, int64_t rows, int64_t K) {
    const int64_t nb = rows * (K / QK_K);
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * x[i].qs[j];
}
