// cpu/04_w4a8/q8_0_1_naive.cpp (chapter 4, W8A8): the naive W4A8 loop with Q8_0 weights.
//
// The loop is gemm_q8_1_naive in 04_w4a8/1_naive.cpp, instantiated there for Q8_0. What differs
// lives in w_q8_1.h (struct w_q8_0): the weight quants are signed int8 read as stored, and a
// block contributes d_w * d_a * sumi: no offset, so no compensation and no use for s_a.
#include "w_q8_1.h"

void cpu_q8_0_q8_1_naive(const GemmProblem& p, int m_begin, int m_end) {
    gemm_q8_1_naive<w_q8_0>(p, m_begin, m_end);
}
