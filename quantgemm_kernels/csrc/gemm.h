// gemm.h: the one problem description every GEMM kernel of the course takes.
//
// Convention for the whole course (torch.nn.functional.linear, llama.cpp's test-backend-ops):
//   weights      W [M, K]   M = output features      (llama.cpp: m)
//   activations  A [N, K]   N = tokens (the batch)   (llama.cpp: n)
//   output       C [N, M] = A @ W^T                  K = the reduction (llama.cpp: k)
// Rows are contiguous. Quantized rows are K/32 blocks back to back (K/256 super-blocks for the K-quants).
//
// Every CPU kernel is   void name(const GemmProblem& p, int m_begin, int m_end);
//   it computes the columns [m_begin, m_end) of C for all N rows; the binding splits M across
//   threads, so a kernel file holds only the single-threaded idea it teaches.
// Every CUDA kernel is  void name(const GemmProblem& p, cudaStream_t stream);   (cuda/launchers.h)
#pragma once
#include "formats.h"

struct GemmProblem {
    const void* A;  // float [N, K], or block_q8_1 [N, K/32] (block_q8_k [N, K/256]) for 8-bit activations
    const void* W;  // float [M, K], or the weight format's blocks [M, K/32] (K-quants: [M, K/256])
    float* C;       // float [N, M]
    int N, M, K;
    void* workspace = nullptr;  // scratch on the kernel's device, for kernels that need one (chapter 6)
    // Kernels that quantize float32 A themselves (chapter 6): what Q8_1's s holds (formats.h,
    // Q8_1_S_*). Only the decode kernels read s; the binding refuses the mode for the others.
    int q8_1_sum_mode = 0;
    // The fp16 step (QG_F32_AS_F16): A is already fp16 [N, K] (torch.float16), not float32, so the
    // kernel reads it as it is instead of converting it into the workspace first.
    bool a_f16 = false;
};

// Workspace of the chapter 6 kernels (float32 activations quantized on the GPU), the larger of:
//  * the mma kernel's: int8 quants [N][K], then float2 (d, c) [N][K/32], 16-byte aligned;
//  * the decode kernel's image of its shared memory: per token, units of 8 blocks as
//    QG_DECODE_UNIT_VECS 16-byte vectors (quants + a pad), then per token QG_DECODE_UNIT_DS
//    float2 (d, s) per unit, rounded up to an even count.
constexpr int QG_DECODE_UNIT_VECS = 17, QG_DECODE_UNIT_DS = 9;
//  * the wgmma kernel's image of its shared memory: per tile of QG_WGMMA_TILE_TOKENS tokens and
//    K step of 8 blocks, a unit of QG_WGMMA_UNIT_BYTES (quants, then (d, c) pairs).
constexpr int QG_WGMMA_TILE_TOKENS = 128, QG_WGMMA_UNIT_BYTES = 8 * 128 * 32 + 8 * 128 * 8;
inline size_t act_workspace_bytes(int64_t N, int64_t K) {
    const int64_t nb = K / QK, nu = (nb + 7) / 8;
    const size_t mma = (size_t)(((N * K + 15) / 16) * 16 + N * nb * 8);
    const size_t decode = (size_t)(N * nu * QG_DECODE_UNIT_VECS * 16 + N * ((nu * QG_DECODE_UNIT_DS + 1) / 2 * 2) * 8);
    const size_t wgmma = (size_t)((N + QG_WGMMA_TILE_TOKENS - 1) / QG_WGMMA_TILE_TOKENS) * nu * QG_WGMMA_UNIT_BYTES;
    const size_t most = mma > decode ? mma : decode;
    return most > wgmma ? most : wgmma;
}

// Split-K of the fifth wgmma step (cuda/06_decode_tensor_cores/8_wgmma_splitk.cu): a tile's K steps
// of 8 blocks are shared by `splits` CTAs, enough to give every SM one CTA when the tiles alone
// leave most idle (M = 4096, N <= 128: 32 tiles for 132 SMs), each CTA keeping at least
// QG_SPLITK_MIN_STEPS steps. The partial sums, splits planes of N x M floats, follow the
// activation units in the workspace, at splitk_offset.
constexpr int QG_SPLITK_MAX = 8, QG_SPLITK_MIN_STEPS = 4;
// CTAs per output tile: sms / tiles, so that every SM gets one, but each split keeping at least
// min_steps of the K steps, and at most max_splits; 1 where the tiles fill the GPU.
inline int splits_for(int64_t tiles, int64_t steps, int64_t min_steps, int64_t max_splits, int sms) {
    int64_t s = sms / (tiles > 0 ? tiles : 1);
    if (s > steps / min_steps) s = steps / min_steps;
    if (s > max_splits) s = max_splits;
    return s < 1 ? 1 : (int)s;
}
inline int wgmma_splits(int64_t N, int64_t M, int64_t K, int sms) {
    const int64_t tiles = ((M + QG_WGMMA_TILE_TOKENS - 1) / QG_WGMMA_TILE_TOKENS) *
                          ((N + QG_WGMMA_TILE_TOKENS - 1) / QG_WGMMA_TILE_TOKENS);
    return splits_for(tiles, (K / QK + 7) / 8, QG_SPLITK_MIN_STEPS, QG_SPLITK_MAX, sms);
}
inline size_t splitk_offset(int64_t N, int64_t K) { return (act_workspace_bytes(N, K) + 255) / 256 * 256; }
inline size_t splitk_workspace_bytes(int64_t N, int64_t M, int64_t K, int sms) {
    const int s = wgmma_splits(N, M, K, sms);
    return splitk_offset(N, K) + (s > 1 ? (size_t)s * N * M * sizeof(float) : 0);
}

// The eighth wgmma step (cuda/06_decode_tensor_cores/12_wgmma_f16.cu): the activations as fp16
// [N][K] at the start of the workspace (not when the caller gives them as fp16: a_f16), then (split
// K) the partial sums of the split tiles (f16_plan). A tile is 128 weight rows by
// f16_tile_tokens(N, M, K, sms) tokens (the wgmma's N: 16, 32, 64, 128 or 256); K is split in
// steps of 8 blocks while the tiles leave SMs idle, each split keeping at least QG_F16_MIN_STEPS
// steps.
constexpr int QG_F16_TILE = 128, QG_F16_MAX_SPLITS = 8, QG_F16_MIN_STEPS = 2;
inline int f16_tile_splits(int64_t tiles, int64_t K, int sms) {
    return splits_for(tiles, (K / QK + 7) / 8, QG_F16_MIN_STEPS, QG_F16_MAX_SPLITS, sms);
}
// Up to 128 tokens, N rounded up to the next width. Past 128, tiles of 256 tokens where they paid:
// each dequantized weight fragment serves twice the tokens, and a 256-token tile costs about 1.7 of
// a 128-token one (H200, weights cold, 0.82 to 0.89 of the time at 2048 and 4096 tokens:
// bench_results/nvidia-h200/2026-11-29/f16-nt256-ab.txt). The CTAs run in waves of one
// per SM, so a tile width pays by its waves: 256 where ceil(tiles / SMs) is more than 1.7 times
// fewer (N = 640, 768, 1024 on Llama-3-8B's 4096-row layers; not N = 1100, 3 waves against 2, nor
// N = 640 on the 14336-row ones, 5 against 3: each measured, f16-nt256-ragged.txt; N = 160 to 256 on
// the 14336-row layers, one wave against two, 15 to 27 % less time: f16-nt256-le256.txt). Where both
// widths fit one wave, 256-token tiles leave half the SMs idle and split K: that paid only with
// no more padding than 128-token tiles and a long K, where the split's sum pass is small against the
// GEMM (M = 4096, N = 512: 2 % less time at K = 14336, 13 % more at K = 4096; N = 384, padded to
// 512, 8 % more at K = 14336). The same holds where the 128-token tiles split K too (M = 4096, N = 129
// to 256: 32 tiles in 4 splits against 64 in 2): each CTA dequantizes half the weights for the same
// tensor work, 3 to 15 % less time at K = 14336 (Q8_0 N = 192 63.6 -> 55.2 us, N = 256 61.1 -> 57.5),
// up to 7 % more at K = 4096, where only Q8_0 at 160 and 192 tokens gained (f16-w256-ab.txt).
// QG_F16_SPLIT256_MIN_K, between the two lengths, is not measured.
// Tried and lost: narrower tiles instead of a split (M = 4096, 24 to 256 tokens: the width halved
// once, or until the tiles fill the SMs unsplit), slower in all but one cell, up to 2.2x at K = 14336
// (Q4_0 4096 x 14336 N = 128 32.8 us with 128-token tiles in 4 splits, 38.2 with 64 in 2, 55.3 with 32
// unsplit; f16-narrow-ab.txt): a dequantized weight fragment then serves fewer tokens, and the
// dequantization, the same work per weight at any width, is what a tile pays for.
constexpr int64_t QG_F16_SPLIT256_MIN_K = 8192;
inline int f16_tile_tokens(int64_t N, int64_t M, int64_t K, int sms) {
    if (N <= 128) return N <= 16 ? 16 : N <= 32 ? 32 : N <= 64 ? 64 : 128;
    const int64_t rows = (M + QG_F16_TILE - 1) / QG_F16_TILE, n128 = (N + 127) / 128, n256 = (N + 255) / 256;
    const int64_t w128 = (rows * n128 + sms - 1) / sms, w256 = (rows * n256 + sms - 1) / sms;
    if (10 * w128 > 17 * w256) return 256;
    const bool split_pays = 2 * n256 == n128 && f16_tile_splits(rows * n256, K, sms) > 1 && K >= QG_F16_SPLIT256_MIN_K;
    return split_pays ? 256 : 128;
}
// The launch: tokens per tile, splits of K, and how many tiles run whole. CTAs run in waves of one
// per SM, and the last wave of a launch whose tiles are not a multiple of the SMs runs part full
// (Q4_0 14336 x 4096 at 1024 tokens: 448 tiles of 256, 3 waves of 132 and one of 52). So the tiles
// of that last wave are split over K too, as many CTAs each as fill the SMs (f16_tile_splits),
// while the others run whole: the 52 as 104 CTAs of half the K steps, the partial sums added by a
// pass after the GEMM. Where all tiles fit one wave and leave SMs idle, every tile is split
// (whole = 0); where the last wave's tiles cannot split (more than half the SMs), none is.
struct F16Plan {
    int tokens, splits;    // tokens per tile (the wgmma's N), CTAs per split tile
    int64_t tiles, whole;  // tiles (128 weight rows x tokens), and of those the first `whole` unsplit
    int64_t ctas() const { return whole + (tiles - whole) * splits; }
};
// [excerpt: f16_plan]
inline F16Plan f16_plan(int64_t N, int64_t M, int64_t K, int sms) {
    const int nt = f16_tile_tokens(N, M, K, sms);
    const int64_t tiles = ((M + QG_F16_TILE - 1) / QG_F16_TILE) * ((N + nt - 1) / nt);
    const int s = f16_tile_splits(tiles, K, sms);
    if (s > 1) return {nt, s, tiles, 0};
    const int64_t whole = tiles / sms * sms, tail = tiles - whole;
    const int ts = tiles > sms && tail > 0 ? f16_tile_splits(tail, K, sms) : 1;
    return ts > 1 ? F16Plan{nt, ts, tiles, whole} : F16Plan{nt, 1, tiles, tiles};
}
// [end excerpt: f16_plan]
inline size_t f16_splits_offset(int64_t N, int64_t K, bool a_f16) {
    return a_f16 ? 0 : ((size_t)N * K * 2 + 255) / 256 * 256;
}
// The partial sums: every tile split, `splits` planes of N x M floats; the last wave's tiles split,
// per split tile `splits` tiles of tokens x 128 floats, in the tile's own layout.
inline size_t f16_workspace_bytes(int64_t N, int64_t M, int64_t K, int sms, bool a_f16) {
    const F16Plan pl = f16_plan(N, M, K, sms);
    const size_t partials = pl.splits == 1  ? 0
                            : pl.whole == 0 ? (size_t)pl.splits * N * M
                                            : (size_t)(pl.tiles - pl.whole) * pl.splits * pl.tokens * QG_F16_TILE;
    return f16_splits_offset(N, K, a_f16) + partials * sizeof(float);
}

typedef void (*CpuGemmFn)(const GemmProblem& p, int m_begin, int m_end);

// ---- CPU quantizers (cpu/quantize.cpp), one pair per row of formats.def: rows of K floats <->
// rows of K/qk blocks. `mode` selects a variant of a format's quantizer: for Q8_1, what s holds
// (Q8_1_S_*); the other formats have one quantizer and ignore it.
#define QG_FORMAT(name, id, block, qk)                                                      \
    void quantize_rows_##name(const float* x, block* y, int64_t rows, int64_t K, int mode); \
    void dequantize_rows_##name(const block* x, float* y, int64_t rows, int64_t K);
#include "formats.def"
#undef QG_FORMAT
