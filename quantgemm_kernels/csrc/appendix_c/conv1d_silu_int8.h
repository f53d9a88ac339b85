// appendix_c/conv1d_silu_int8.h: an INT8 causal depthwise conv1d + SiLU, requantized to INT8.
//
// The op of a quantized Mamba block's short convolution (Quamba's quant_causal_conv1d), small:
//
//   acc[b,c,t] = sum_k w[c,k] * x[b,c,t-(W-1)+k]      int32; x = 0 before t = 0 (causal padding)
//   s[c]       = x_scale[c or 0] * w_scale[c]          float32, once per channel
//   y          = float(acc) * s[c] + bias[c]           the only dequantization: a multiply, then an add
//   z          = y / (1 + exp(-y))                     SiLU in float32
//   q          = clamp(roundf(z / out_scale), -128, 127)   round half away from zero, as C's roundf
//
// Every float step is one IEEE operation rounded to float32, in this order, so that the CPU
// kernel, the CUDA kernel and the numpy simulation (quantgemm_kernels/appendices/simulation.py)
// give the same bits. Three things would break that, and this header pins each one:
//   * contraction: a compiler may fuse a*b+c into one FMA with a single rounding. The C++ is built
//     with -ffp-contract=off; on the GPU nvcc contracts by default, so device code spells every
//     operation as an intrinsic (__fmul_rn, __fadd_rn, ...) that is never fused.
//   * exp: glibc's expf, numpy's float32 exp and CUDA's expf are each within a few ulp of e^x,
//     not the same ulp. exp_portable() below is built from + - * / and floor only, so it has the
//     same bits everywhere. The op's libm_exp flag switches to the platform's expf, to measure
//     what that costs.
//   * rounding mode: roundf rounds ties away from zero; numpy's and torch's round go to even.
//
// This header is plain C++ with CUDA qualifiers behind __CUDACC__: no torch, so .cu files stay torch-free.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CONV1D_HD __host__ __device__ __forceinline__
#else
#define CONV1D_HD inline
#endif

struct Conv1dSiluProblem {
    const int8_t* x;       // [batch, channels, time], contiguous
    const int8_t* w;       // [channels, width]
    const float* x_scale;  // [1] (per tensor) or [channels] (per channel)
    const float* w_scale;  // [channels]
    const float* bias;     // [channels], or nullptr for no bias
    int8_t* q;             // out: [batch, channels, time]
    float* z;              // out: SiLU output before requantization, or nullptr
    float out_scale;
    bool x_scale_per_channel;
    bool libm_exp;  // use the platform's expf instead of exp_portable (not bit-portable)
    int64_t batch, channels, time, width;
};

// Width limit: |acc| <= width * 128 * 128 must stay exact when converted to float (2^24).
constexpr int64_t CONV1D_SILU_MAX_WIDTH = 1024;

// cpu/conv1d_silu_int8.cpp: rows [row_begin, row_end) of the batch * channels rows.
void conv1d_silu_int8_cpu(const Conv1dSiluProblem& p, int64_t row_begin, int64_t row_end);

#if defined(WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
// appendix_c/conv1d_silu_int8.cu: one thread per output element, on the given stream.
void conv1d_silu_int8_cuda(const Conv1dSiluProblem& p, cudaStream_t stream);
#endif

namespace conv1d_silu {

// One correctly rounded float32 operation each, never fused with a neighbour.
CONV1D_HD float mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;  // -ffp-contract=off (see _build.py) keeps it from fusing with an add
#endif
}
CONV1D_HD float add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
CONV1D_HD float sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
CONV1D_HD float div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);  // IEEE division even under --use_fast_math
#else
    return a / b;
#endif
}
// 2^n for -126 <= n <= 127, built from its bits: exact.
CONV1D_HD float pow2i(int n) {
    const uint32_t bits = uint32_t(n + 127) << 23;
#ifdef __CUDA_ARCH__
    return __uint_as_float(bits);
#else
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

// Constants as hex literals, so that C++, CUDA and Python read the same float32 values.
constexpr float LOG2E = 0x1.715476p+0f;    // log2(e)
constexpr float LN2_HI = 0x1.62e4p-1f;     // ln 2 to 15 bits: n * LN2_HI is exact for |n| < 2^9
constexpr float LN2_LO = 0x1.7f7d1cp-20f;  // ln 2 - LN2_HI
constexpr float INV_FACT7 = 0x1.a01a02p-13f, INV_FACT6 = 0x1.6c16c2p-10f, INV_FACT5 = 0x1.111112p-7f,
                INV_FACT4 = 0x1.555556p-5f, INV_FACT3 = 0x1.555556p-3f;  // 1/k! rounded to float32

// e^x with n = round(x / ln 2), r = x - n ln 2 (|r| <= ln2/2), e^x = 2^n * e^r, and e^r by its
// Taylor series to degree 7 in Horner form. Within 1.2 ulp of e^x (the notebook measures it).
// x is clamped to [-87, 88] so that 2^n stays a normal float; SiLU needs no more: for y < -88
// it returns about y * e^-88, which any int8 grid rounds to 0, as it does the true y * e^y.
CONV1D_HD float exp_portable(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float n = floorf(add(mul(x, LOG2E), 0.5f));
    const float r = sub(sub(x, mul(n, LN2_HI)), mul(n, LN2_LO));
    float p = INV_FACT7;
    p = add(mul(p, r), INV_FACT6);
    p = add(mul(p, r), INV_FACT5);
    p = add(mul(p, r), INV_FACT4);
    p = add(mul(p, r), INV_FACT3);
    p = add(mul(p, r), 0.5f);
    p = add(mul(p, r), 1.0f);
    p = add(mul(p, r), 1.0f);
    return mul(p, pow2i(int(n)));
}

struct Requantized {
    int8_t q;  // the int8 output
    float z;   // SiLU(y) before requantization
};

// Everything after the integer sum, for one output. `scale` = x_scale * w_scale[c] (one mul).
CONV1D_HD Requantized dequant_silu_requant(int32_t acc, float scale, float bias, float out_scale, bool libm_exp) {
    const float y = add(mul(float(acc), scale), bias);
    const float e = libm_exp ? expf(-y) : exp_portable(-y);
    const float z = div(y, add(1.0f, e));
    float r = roundf(div(z, out_scale));  // halves go away from zero
    r = r < -128.0f ? -128.0f : (r > 127.0f ? 127.0f : r);
    return {int8_t(r), z};
}

}  // namespace conv1d_silu
