// cpu/01_fp32/1_naive.cpp (chapter 1): one dot product per output, straight from the definition
//   C[n, m] = sum_k A[n, k] * W[m, k]
// Both operands are read along K, so each dot product streams two contiguous rows. What it lacks:
// every row of W is re-read from memory once per row of A, and one accumulator serialises the adds.
#include "../../gemm.h"

void cpu_f32_f32_naive(const GemmProblem& p, int m_begin, int m_end) {
    const float* A = (const float*)p.A;
    const float* W = (const float*)p.W;
    for (int n = 0; n < p.N; n++) {
        for (int m = m_begin; m < m_end; m++) {
            float acc = 0.0f;
            for (int k = 0; k < p.K; k++) acc += A[(int64_t)n * p.K + k] * W[(int64_t)m * p.K + k];
            p.C[(int64_t)n * p.M + m] = acc;
        }
    }
}
