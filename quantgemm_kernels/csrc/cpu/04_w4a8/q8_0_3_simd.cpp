// cpu/04_w4a8/q8_0_3_simd.cpp (chapter 4, W8A8): the SIMD W4A8 kernel with Q8_0 weights.
//
// The kernel is gemm_q8_1_simd in 04_w4a8/3_simd.cpp, instantiated there for Q8_0 (simd_w<w_q8_0>).
// The one real difference: the x86 byte dot products (vpdpbusd, vpmaddubsw) multiply an unsigned
// byte by a signed one, and Q8_0 weights are signed. The kernel feeds them |w| as the unsigned
// operand and a * sign(w) as the signed one (vpsignb), which leaves every product unchanged.
// Q4_0 needed no such step: its raw nibbles are unsigned, the -8 is paid by the compensation.
#include "w_q8_1.h"

void cpu_q8_0_q8_1_simd(const GemmProblem& p, int m_begin, int m_end) {
    gemm_q8_1_simd<w_q8_0>(p, m_begin, m_end);
}
