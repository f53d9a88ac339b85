// cpu/04_w4a8/1_naive.cpp (chapter 4, W4A8): integer dot products, scales once per block.
//
// Chapter 3 turned every weight into a float before multiplying. Here the activations are
// quantized too (Q8_1, by gemm() before the kernel runs), so a block of 32 products is pure
// integer work:
//     sumi = sum_j q_w,j * q_a,j          raw nibbles 0..15 times int8 quants, exact in int32
// and only then do the scales enter, once per block instead of once per element:
//     block = d_w * (d_a * sumi - 8 * s_a)          (w_q8_1.h derives it: the compensation)
// The nibbles are used as stored; the -8 of Q4_0 is paid once per block through the activation
// sum s_a.
//
// W8A8 (cpu_q8_0_q8_1_naive, below): the same loop with WF = w_q8_0; the weight format is a
// template parameter and w_q8_1.h says what differs: the weight quants are signed int8 read as
// stored, and a block contributes d_w * d_a * sumi: no offset, so no compensation and no use for
// s_a.
#include "w_q8_1.h"

template <class WF>
void gemm_q8_1_naive(const GemmProblem& p, int m_begin, int m_end) {
    using block_w = typename WF::block;
    const block_q8_1* A = (const block_q8_1*)p.A;
    const block_w* W = (const block_w*)p.W;
    const int nb = p.K / QK;  // blocks per row
    for (int n = 0; n < p.N; n++) {
        for (int m = m_begin; m < m_end; m++) {
            const block_q8_1* a = A + (int64_t)n * nb;
            const block_w* w = W + (int64_t)m * nb;
            float acc = 0.0f;
            // [excerpt: block_loop]
            for (int b = 0; b < nb; b++) {
                int sumi = 0;
                for (int j = 0; j < QK; j++) sumi += WF::quant(w[b], j) * a[b].qs[j];
                acc += block_result<WF>(WF::scales_of(w[b]), fp16_to_fp32(a[b].d), fp16_to_fp32(a[b].s), sumi);
                // [end excerpt: block_loop]
            }
            p.C[(int64_t)n * p.M + m] = acc;
        }
    }
}

template void gemm_q8_1_naive<w_q4_0>(const GemmProblem&, int, int);
template void gemm_q8_1_naive<w_q8_0>(const GemmProblem&, int, int);
template void gemm_q8_1_naive<w_q4_1>(const GemmProblem&, int, int);

// [excerpt: launchers]
void cpu_q4_0_q8_1_naive(const GemmProblem& p, int m_begin, int m_end) { gemm_q8_1_naive<w_q4_0>(p, m_begin, m_end); }

void cpu_q8_0_q8_1_naive(const GemmProblem& p, int m_begin, int m_end) { gemm_q8_1_naive<w_q8_0>(p, m_begin, m_end); }
// [end excerpt: launchers]

// Chapter 7: Q4_1 weights (w_q8_1.h, struct w_q4_1): the same loop, the min added through s_a.
void cpu_q4_1_q8_1_naive(const GemmProblem& p, int m_begin, int m_end) { gemm_q8_1_naive<w_q4_1>(p, m_begin, m_end); }
