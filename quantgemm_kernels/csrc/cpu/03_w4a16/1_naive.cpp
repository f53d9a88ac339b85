// cpu/03_w4a16/1_naive.cpp (chapter 3, W4A16): dequantize every weight inside the dot product.
//
// The weights are Q4_0 blocks, the activations float32. The loop is 01_fp32/1_naive.cpp with one change:
// where it read W[m, k], this kernel decodes it from the block that holds it,
//     w = (nibble - 8) * d,
// reading the block's fp16 scale once per block of 32. Weight memory shrinks 7x (18 B instead of
// 128 B per 32 values); the arithmetic grows, since every row of A decodes the whole W again.
// Byte j of a block carries element j (low nibble) and element j + 16 (high nibble), so one pass
// over the 16 bytes feeds two halves of the block.
#include "../../gemm.h"

void cpu_q4_0_f32_naive(const GemmProblem& p, int m_begin, int m_end) {
    const float* A = (const float*)p.A;
    const block_q4_0* W = (const block_q4_0*)p.W;
    const int nb = p.K / QK;  // blocks per row
    for (int n = 0; n < p.N; n++) {
        for (int m = m_begin; m < m_end; m++) {
            const float* a = A + (int64_t)n * p.K;
            const block_q4_0* w = W + (int64_t)m * nb;
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                const float d = fp16_to_fp32(w[b].d);
                for (int j = 0; j < QK / 2; j++) {
                    const float lo = (float)((w[b].qs[j] & 0x0F) - 8) * d;  // element j
                    const float hi = (float)((w[b].qs[j] >> 4) - 8) * d;    // element j + 16
                    acc += a[b * QK + j] * lo;
                    acc += a[b * QK + j + QK / 2] * hi;
                }
            }
            p.C[(int64_t)n * p.M + m] = acc;
        }
    }
}
