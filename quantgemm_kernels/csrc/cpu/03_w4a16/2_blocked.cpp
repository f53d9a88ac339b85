// cpu/03_w4a16/2_blocked.cpp (chapter 3, W4A16): dequantize a block once, use it for many rows.
//
// The naive kernel decodes every weight once per row of A, and adds into one serial accumulator.
// This one borrows 01_fp32/2_blocked.cpp's tile and adds one idea for quantized weights:
//  1. A TN x TM tile of outputs is computed at once. For each block of 32 along K, the TM weight
//     blocks are dequantized once into a small float buffer (a few registers' worth: TM x 32
//     floats) and that buffer serves all TN rows of A. Decoding now costs 1/TN of what it did,
//     and each A value loaded is used TM times.
//  2. As in 01_fp32/2_blocked.cpp, each output keeps LANES partial sums, one per SIMD lane, so the
//     compiler vectorises the K loop without reordering any sum (we build without -ffast-math).
// The decode itself, (nibble - 8) * d, is the naive kernel's; only where it happens has moved.
// Edges (N or M not a multiple of the tile) use the same code with a smaller tile.
#include <math.h>
#include "../../gemm.h"

namespace {
constexpr int LANES = 8;

// (nibble - 8) * d for the 32 values of one block, in element order: the naive kernel's decode.
// Kept out of line on purpose. Alone, GCC vectorises this loop into a handful of vector
// instructions; inlined into the tile's loop nest, it unrolls it and converts one value at a
// time, which makes this kernel about 3x slower (no faster than the naive one).
// [excerpt: dequantize_and_tile]
__attribute__((noinline)) void dequantize_block(const block_q4_0& blk, float* __restrict out) {
    const float d = fp16_to_fp32(blk.d);
    for (int l = 0; l < QK / 2; l++) {
        out[l] = (float)((blk.qs[l] & 0x0F) - 8) * d;
        out[l + QK / 2] = (float)((blk.qs[l] >> 4) - 8) * d;
    }
}

template <int TN, int TM>
inline void tile(const float* A, const block_q4_0* W, float* C, int K, int M, int n0, int m0) {
    const int nb = K / QK;
    float acc[TN][TM][LANES] = {};
    for (int b = 0; b < nb; b++) {
        float w[TM][QK];  // the TM weight blocks of this step of K, dequantized once
        for (int j = 0; j < TM; j++) dequantize_block(W[(int64_t)(m0 + j) * nb + b], w[j]);
        for (int i = 0; i < TN; i++) {
            const float* a = A + (int64_t)(n0 + i) * K + b * QK;
            for (int j = 0; j < TM; j++)
                for (int c = 0; c < QK; c += LANES)
                    for (int l = 0; l < LANES; l++) acc[i][j][l] = fmaf(a[c + l], w[j][c + l], acc[i][j][l]);
        }
    }
    for (int i = 0; i < TN; i++) {
        for (int j = 0; j < TM; j++) {
            float s = 0.0f;
            for (int l = 0; l < LANES; l++) s += acc[i][j][l];
            C[(int64_t)(n0 + i) * M + m0 + j] = s;
            // [end excerpt: dequantize_and_tile]
        }
    }
}
}  // namespace

void cpu_q4_0_f32_blocked(const GemmProblem& p, int m_begin, int m_end) {
    const float* A = (const float*)p.A;
    const block_q4_0* W = (const block_q4_0*)p.W;
    constexpr int TN = 4, TM = 4;
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
