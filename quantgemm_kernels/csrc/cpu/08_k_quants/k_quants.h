// cpu/08_k_quants/k_quants.h: what chapter 8's CPU steps share: the weight quants of one Q4_K
// or Q6_K super-block as int8, and the scales of its sub-blocks.
//
// A K-quant super-block holds 256 values in sub-blocks (Q4_K: 8 of 32, Q6_K: 16 of 16), each with
// its own small integer scale; the fp16 d of the block scales those integers in turn. Against
// Q8_K activations (one float32 d_a per 256 values, and bsums, the sums of its 16-value groups),
// a super-block contributes, as ggml's ggml_vec_dot_q4_K_q8_K / ggml_vec_dot_q6_K_q8_K compute it:
//
//   Q4_K  (value = d * sc[s] * q - dmin * m[s], q in 0..15)
//         d_w d_a * sum_s sc[s] * (sum_{j in s} q_j a_j)  -  dmin_w d_a * sum_s m[s] * (bsums[2s] + bsums[2s+1])
//   Q6_K  (value = d * sc[t] * (q - 32), q in 0..63)
//         d_w d_a * sum_t sc[t] * (sum_{j in t} (q_j - 32) a_j)
//
// Every sum inside is an integer: the scales stay integers until the last multiply, and the
// min term of Q4_K needs no weight quant at all, only the activations' bsums (the reason Q8_K
// carries them).
#pragma once
#include "../../gemm.h"

// The 256 nibbles of a Q4_K block in value order: qs[32c + l] holds value 64c + l (low nibble)
// and value 64c + 32 + l (high nibble).
static inline void q4_k_unpack(const block_q4_k& b, int8_t* q) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = (int8_t)(b.qs[32 * c + l] & 0xF);
            q[64 * c + 32 + l] = (int8_t)(b.qs[32 * c + l] >> 4);
        }
}

// The 256 quants of a Q6_K block minus 32 (-32..31), in value order: in each half of 128 values,
// value 32k + l has its low 4 bits in ql[l + 32 * (k & 1)] (low nibble for k < 2, high for k >= 2)
// and its high 2 bits at bit 2k of qh[l].
static inline void q6_k_unpack(const block_q6_k& b, int8_t* q) {
    for (int h = 0; h < 2; h++) {
        const uint8_t* ql = b.ql + 64 * h;
        const uint8_t* qh = b.qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            q[128 * h + l + 0] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            q[128 * h + l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[128 * h + l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[128 * h + l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

// The eight 6-bit scales and mins of a Q4_K block (get_scale_min_k4, formats.h).
static inline void q4_k_scales(const block_q4_k& b, int* sc, int* m) {
    for (int s = 0; s < 8; s++) {
        uint8_t a, c;
        get_scale_min_k4(s, b.scales, &a, &c);
        sc[s] = a;
        m[s] = c;
    }
}
