// cpu/04_w4a8/q8_0_2_blocked.cpp (chapter 4, W8A8): the blocked W4A8 tile with Q8_0 weights.
//
// The tile is gemm_q8_1_blocked in 04_w4a8/2_blocked.cpp, instantiated there for Q8_0. Unpacking
// a Q8_0 block into the tile's int8 buffer is a plain copy (no nibbles to split), and a block
// contributes d_w * d_a * sumi with no compensation (w_q8_1.h, struct w_q8_0). Each weight block
// is 34 bytes instead of 18, so at N = 1 this kernel reads almost twice the memory of W4A8.
#include "w_q8_1.h"

void cpu_q8_0_q8_1_blocked(const GemmProblem& p, int m_begin, int m_end) {
    gemm_q8_1_blocked<w_q8_0>(p, m_begin, m_end);
}
