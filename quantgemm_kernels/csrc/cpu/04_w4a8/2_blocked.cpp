// cpu/04_w4a8/2_blocked.cpp (chapter 4, W4A8): unpack weights once per tile, as in chapter 3.
//
// The naive kernel splits the nibbles of a weight block again for every row of A, reads its
// scales again, and converts fp16 to float once per block and output. This one computes a
// TN x TM tile of outputs at once:
//  1. For each block of 32 along K, the TM weight blocks are unpacked once into bytes (TM x 32,
//     a few registers; unsigned nibbles for Q4_0) and their scales converted once; all TN rows
//     of A use them.
//  2. Each activation block (quants, d_a, s_a) is read once and serves TM weight rows.
// The per-block arithmetic, sumi and the compensation, is the naive kernel's. The inner integer
// loop over 32 quants is a plain loop the compiler vectorises (with -march=native GCC even picks
// the u8 x s8 dot-product instruction for Q4_0), but each block's sum still ends in a horizontal
// add and scalar scaling; the SIMD step keeps the whole block in vector registers.
// Edges (N or M not a multiple of the tile) use the same code with a smaller tile.
//
// W8A8 (cpu_q8_0_q8_1_blocked, below): the same tile with WF = w_q8_0. Unpacking a Q8_0 block into
// the tile's int8 buffer is a plain copy (no nibbles to split), and a block contributes d_w * d_a *
// sumi with no compensation (w_q8_1.h, struct w_q8_0). Each weight block is 34 bytes instead of 18,
// so at N = 1 this kernel reads almost twice the memory of W4A8.
#include "w_q8_1.h"

namespace {
template <class WF, int TN, int TM>
inline void tile(const block_q8_1* A, const typename WF::block* W, float* C, int nb, int M, int n0, int m0) {
    float acc[TN][TM] = {};
    for (int b = 0; b < nb; b++) {
        // [excerpt: block_loop]
        typename WF::quant_t wq[TM][QK];  // the TM weight blocks of this step of K, unpacked once
        typename WF::scales d_w[TM];
        for (int j = 0; j < TM; j++) {
            const typename WF::block& blk = W[(int64_t)(m0 + j) * nb + b];
            d_w[j] = WF::scales_of(blk);
            for (int l = 0; l < QK; l++) wq[j][l] = (typename WF::quant_t)WF::quant(blk, l);
        }
        for (int i = 0; i < TN; i++) {
            const block_q8_1& a = A[(int64_t)(n0 + i) * nb + b];
            const float d_a = fp16_to_fp32(a.d), s_a = fp16_to_fp32(a.s);
            for (int j = 0; j < TM; j++) {
                int sumi = 0;
                for (int l = 0; l < QK; l++) sumi += wq[j][l] * a.qs[l];
                acc[i][j] += block_result<WF>(d_w[j], d_a, s_a, sumi);
                // [end excerpt: block_loop]
            }
        }
    }
    for (int i = 0; i < TN; i++)
        for (int j = 0; j < TM; j++) C[(int64_t)(n0 + i) * M + m0 + j] = acc[i][j];
}
}  // namespace

template <class WF>
void gemm_q8_1_blocked(const GemmProblem& p, int m_begin, int m_end) {
    const block_q8_1* A = (const block_q8_1*)p.A;
    const typename WF::block* W = (const typename WF::block*)p.W;
    const int nb = p.K / QK;
    constexpr int TN = 4, TM = 4;
    int n = 0;
    for (; n + TN <= p.N; n += TN) {
        int m = m_begin;
        for (; m + TM <= m_end; m += TM) tile<WF, TN, TM>(A, W, p.C, nb, p.M, n, m);
        for (; m < m_end; m++) tile<WF, TN, 1>(A, W, p.C, nb, p.M, n, m);
    }
    for (; n < p.N; n++) {
        int m = m_begin;
        for (; m + TM <= m_end; m += TM) tile<WF, 1, TM>(A, W, p.C, nb, p.M, n, m);
        for (; m < m_end; m++) tile<WF, 1, 1>(A, W, p.C, nb, p.M, n, m);
    }
}

template void gemm_q8_1_blocked<w_q4_0>(const GemmProblem&, int, int);
template void gemm_q8_1_blocked<w_q8_0>(const GemmProblem&, int, int);
template void gemm_q8_1_blocked<w_q4_1>(const GemmProblem&, int, int);

void cpu_q4_0_q8_1_blocked(const GemmProblem& p, int m_begin, int m_end) {
    gemm_q8_1_blocked<w_q4_0>(p, m_begin, m_end);
}

void cpu_q8_0_q8_1_blocked(const GemmProblem& p, int m_begin, int m_end) {
    gemm_q8_1_blocked<w_q8_0>(p, m_begin, m_end);
}

// Chapter 7: Q4_1 weights, the same tile (the scales kept per block are d_w and m_w).
void cpu_q4_1_q8_1_blocked(const GemmProblem& p, int m_begin, int m_end) {
    gemm_q8_1_blocked<w_q4_1>(p, m_begin, m_end);
}
