// cpu/04_w4a8/w_q8_1.h (chapter 4): what changes when the weights that meet Q8_1 activations are Q4_0
// (W4A8) instead of Q8_0 (W8A8). Everything else, the loops of the naive, blocked and SIMD
// kernels, is the same code, written once as a template on one of the two structs below.
//
// Per block of 32, both formats reduce to an integer dot product of stored quants,
//     sumi = sum_j q_w,j * q_a,j,
// followed by one line of float arithmetic with the blocks' scales:
//   Q8_0: q_w is the signed weight quant, so      block = d_w * d_a * sumi
//   Q4_0: q_w is the raw nibble 0..15 and the weight is (q_w - 8) * d_w, so
//         sum_j (q_w,j - 8) d_w * q_a,j d_a = d_w * (d_a * sumi - 8 * d_a * sum_j q_a,j)
//                                           = d_w * (d_a * sumi - 8 * s_a),
//         with s_a = d_a * sum_j q_a,j, the value a Q8_1 block stores next to d. That is why the
//         activations are Q8_1 and not Q8_0: the 8 is never subtracted from a nibble.
//   Q4_1 (chapter 7): the weight is q_w * d_w + m_w with the nibbles 0..15 as stored, so
//         sum_j (q_w,j d_w + m_w) * q_a,j d_a = d_w * d_a * sumi + m_w * s_a:
//         the same s_a, added this time (llama.cpp's ggml_vec_dot_q4_1_q8_1 computes exactly this).
// What a block contributes besides sumi travels as WF::scales: d_w, and m_w for Q4_1.
//
// The kernels: each step file <n>_<step>.cpp defines the template gemm_q8_1_<step>, instantiates
// it for both structs and defines both launchers (cpu_q4_0_q8_1_<step>, cpu_q8_0_q8_1_<step>).
#pragma once
#include "../../gemm.h"

// [excerpt: weight_formats]
struct w_q4_0 {
    using block = block_q4_0;
    using quant_t = uint8_t;          // nibbles are unsigned, 0..15: u8 x s8 products (see simd)
    static constexpr int offset = 8;  // a stored nibble q means the integer q - 8
    static constexpr bool has_min = false;
    // The stored integer of element j: byte j holds element j (low half) and j + 16 (high half).
    static inline int quant(const block& b, int j) { return j < QK / 2 ? b.qs[j] & 0x0F : b.qs[j - QK / 2] >> 4; }
    struct scales {
        float d;
    };
    static inline scales scales_of(const block& b) { return {fp16_to_fp32(b.d)}; }
};

struct w_q8_0 {
    using block = block_q8_0;
    using quant_t = int8_t;
    static constexpr int offset = 0;  // quants are already signed
    static constexpr bool has_min = false;
    static inline int quant(const block& b, int j) { return b.qs[j]; }
    struct scales {
        float d;
    };
    static inline scales scales_of(const block& b) { return {fp16_to_fp32(b.d)}; }
};

// [excerpt: block_result]
// One block's contribution, from the integer dot product and the scales.
template <class WF>
inline float block_result(const typename WF::scales& w, float d_a, float s_a, int sumi) {
    if constexpr (WF::has_min) {
        return (w.d * d_a) * (float)sumi + w.m * s_a;  // Q4_1 (chapter 7): the min, through s_a
    } else if constexpr (WF::offset == 0) {
        (void)s_a;  // unused, not multiplied by 0: s_a can be inf (fp16 overflow) and 0 * inf = NaN
        return w.d * (d_a * (float)sumi);
    } else {
        return w.d * (d_a * (float)sumi - (float)WF::offset * s_a);  // the compensation
                                                                     // [end excerpt: weight_formats]
    }
}
// [end excerpt: block_result]

// [excerpt: w_q4_1]
// Chapter 7: Q4_1, the nibbles of Q4_0 with a min instead of an offset.
struct w_q4_1 {
    using block = block_q4_1;
    using quant_t = uint8_t;          // nibbles 0..15, in Q4_0's byte order
    static constexpr int offset = 0;  // nothing subtracted: m_w is added through s_a instead
    static constexpr bool has_min = true;
    static inline int quant(const block& b, int j) { return j < QK / 2 ? b.qs[j] & 0x0F : b.qs[j - QK / 2] >> 4; }
    struct scales {
        float d, m;
    };
    static inline scales scales_of(const block& b) { return {fp16_to_fp32(b.d), fp16_to_fp32(b.m)}; }
};
// [end excerpt: w_q4_1]

// The steps of chapter 4. Each computes C columns [m_begin, m_end), as every CPU kernel does.
template <class WF>
void gemm_q8_1_naive(const GemmProblem& p, int m_begin, int m_end);
template <class WF>
void gemm_q8_1_blocked(const GemmProblem& p, int m_begin, int m_end);
template <class WF>
void gemm_q8_1_simd(const GemmProblem& p, int m_begin, int m_end);
// The instruction set the SIMD step compiled for: "avx512-vnni", "avx-vnni", "avx2", "neon-dotprod",
// "neon" or "portable" (3_simd.cpp).
const char* simd_path_04_w4a8();
