// cpu/quantize.cpp: llama.cpp's reference quantizers, row by row.
//
// Each function follows ggml-quants.c (quantize_row_*_ref) line for line; where llama.cpp's
// result depends on how the compiler rounds, the comment says which choice we make and why.
// The readable spec is quantgemm_kernels/formats.py; tests check both give the same bytes.
#include <math.h>
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
void quantize_rows_q8_1(const float* x, block_q8_1* y, int64_t rows, int64_t K, int sum_mode) {
    const int64_t nb = rows * (K / QK);
    for (int64_t i = 0; i < nb; i++) {
        const float* xb = x + i * QK;
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
