// cpu/08_k_quants/1_naive.cpp (chapter 8, K-quants): Q4_K and Q6_K weights times Q8_K activations,
// one output at a time, integers inside a super-block, floats once per super-block.
//
// The loop is chapter 4's (1_naive.cpp there) with a second level of scales: inside a super-block
// of 256 values each sub-block's integer dot product is multiplied by its integer scale and
// summed as an integer; the float scales d_w and d_a enter once per 256 values. Q4_K's min
// costs no work per weight: it is m[s] times the sum of the activation quants of sub-block s,
// which Q8_K stores (bsums, two per sub-block of 32). k_quants.h writes out both formulas.
#include "k_quants.h"

void cpu_q4_k_q8_k_naive(const GemmProblem& p, int m_begin, int m_end) {
    const block_q8_k* A = (const block_q8_k*)p.A;
    const block_q4_k* W = (const block_q4_k*)p.W;
    const int nb = p.K / QK_K;  // super-blocks per row
    int8_t q[QK_K];
    int sc[8], mn[8];
    for (int m = m_begin; m < m_end; m++) {
        for (int n = 0; n < p.N; n++) {
            const block_q8_k* a = A + (int64_t)n * nb;
            const block_q4_k* w = W + (int64_t)m * nb;
            float acc = 0.0f;
            // [excerpt: q4_k_superblock]
            for (int b = 0; b < nb; b++) {
                q4_k_unpack(w[b], q);
                q4_k_scales(w[b], sc, mn);
                int sumi = 0, summ = 0;
                for (int s = 0; s < 8; s++) {
                    int dot = 0;
                    for (int j = 32 * s; j < 32 * s + 32; j++) dot += q[j] * a[b].qs[j];
                    sumi += sc[s] * dot;
                    summ += mn[s] * (a[b].bsums[2 * s] + a[b].bsums[2 * s + 1]);
                }
                acc += fp16_to_fp32(w[b].d) * a[b].d * (float)sumi;
                acc -= fp16_to_fp32(w[b].dmin) * a[b].d * (float)summ;
            }
            // [end excerpt: q4_k_superblock]
            p.C[(int64_t)n * p.M + m] = acc;
        }
    }
}

void cpu_q6_k_q8_k_naive(const GemmProblem& p, int m_begin, int m_end) {
    const block_q8_k* A = (const block_q8_k*)p.A;
    const block_q6_k* W = (const block_q6_k*)p.W;
    const int nb = p.K / QK_K;
    int8_t q[QK_K];
    for (int m = m_begin; m < m_end; m++) {
        for (int n = 0; n < p.N; n++) {
            const block_q8_k* a = A + (int64_t)n * nb;
            const block_q6_k* w = W + (int64_t)m * nb;
            float acc = 0.0f;
            // [excerpt: q6_k_superblock]
            for (int b = 0; b < nb; b++) {
                q6_k_unpack(w[b], q);
                int sumi = 0;
                for (int t = 0; t < 16; t++) {
                    int dot = 0;
                    for (int j = 16 * t; j < 16 * t + 16; j++) dot += q[j] * a[b].qs[j];
                    sumi += w[b].scales[t] * dot;
                }
                acc += fp16_to_fp32(w[b].d) * a[b].d * (float)sumi;
            }
            // [end excerpt: q6_k_superblock]
            p.C[(int64_t)n * p.M + m] = acc;
        }
    }
}
