// cpu/01_fp32/2_blocked.cpp (chapter 1): register blocking + independent accumulators.
//
// Two ideas over the naive loop:
//  1. A 2x4 tile of outputs is computed at once: each A value loaded is used 4 times and each W
//     value twice, so the loop does 8 multiply-adds per 6 loads instead of 1 per 2.
//  2. Each output keeps LANES partial sums (one per SIMD lane), so the compiler can vectorise the
//     K loop without reordering a single sum; the lanes are added at the end.
// Edges (N or M not a multiple of the tile) fall back to the same code with a 1x1 tile.
#include <math.h>
#include "../../gemm.h"

namespace {
constexpr int LANES = 8;

template <int TN, int TM>
inline void tile(const float* A, const float* W, float* C, int K, int M, int n0, int m0) {
    float acc[TN][TM][LANES] = {};
    int k = 0;
    for (; k + LANES <= K; k += LANES) {
        for (int i = 0; i < TN; i++)
            for (int j = 0; j < TM; j++)
                for (int l = 0; l < LANES; l++)
                    acc[i][j][l] =
                        fmaf(A[(int64_t)(n0 + i) * K + k + l], W[(int64_t)(m0 + j) * K + k + l], acc[i][j][l]);
    }
    for (int i = 0; i < TN; i++) {
        for (int j = 0; j < TM; j++) {
            float s = 0.0f;
            for (int l = 0; l < LANES; l++) s += acc[i][j][l];
            for (int kk = k; kk < K; kk++) s = fmaf(A[(int64_t)(n0 + i) * K + kk], W[(int64_t)(m0 + j) * K + kk], s);
            C[(int64_t)(n0 + i) * M + m0 + j] = s;
        }
    }
}
}  // namespace

void cpu_f32_f32_blocked(const GemmProblem& p, int m_begin, int m_end) {
    const float* A = (const float*)p.A;
    const float* W = (const float*)p.W;
    constexpr int TN = 2, TM = 4;
    int n = 0;
    for (; n + TN <= p.N; n += TN) {
        int m = m_begin;
        for (; m + TM <= m_end; m += TM) tile<TN, TM>(A, W, p.C, p.K, p.M, n, m);
        for (; m < m_end; m++) tile<TN, 1>(A, W, p.C, p.K, p.M, n, m);
    }
    for (; n < p.N; n++) {
        int m = m_begin;
        for (; m + TM <= m_end; m += TM) tile<1, TM>(A, W, p.C, p.K, p.M, n, m);
        for (; m < m_end; m++) tile<1, 1>(A, W, p.C, p.K, p.M, n, m);
    }
}
