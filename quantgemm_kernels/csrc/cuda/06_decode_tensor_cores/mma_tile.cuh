// cuda/06_decode_tensor_cores/mma_tile.cuh (chapter 6): the kernel the mma steps 4_mma.cu and
// 5_mma_packed.cu share, a template on how the weights sit in shared memory (WL, below): 128 x 128
// CTA tiles of int8 mma.sync m16n8k32 (mma.cuh: the signed-nibble formula, the magic-number
// conversion), 8 warps of 64 x 32 outputs, K in steps of 8 blocks, double-buffered.
//  * Every thread stages: all copies are cp.async, issued during a K step for the next one, one
//    kind at a time (blocks 0, 2, 4: the copy queue is short). Weights: the 144 (Q4_0), 160 (Q4_1)
//    or 272 (Q8_0) bytes of 8 blocks of a row, as two halves of 5, 5 or 9 chunks of 16 B, into a raw buffer
//    laid out [half][chunk][row] so that a warp's 32 copies (32 rows) hit distinct banks;
//    activation quants 16 B; scales 4 B. At the step's end each thread stores the half row that it
//    copied itself into the tile, in the layout's form (no barrier between its copy and its read),
//    and one barrier per step hands the tile to all warps. The K tail (K % 256 != 0) is
//    zero-filled by the copies (cp.async with src-size 0); weights whose rows are not 16-byte
//    aligned then are read block by block with 16-bit loads (correct, slower).
//  * Activation fragments come by ldmatrix: one ldmatrix.x4 is the B of two mmas (two groups of 8
//    tokens). Weight scales sit in an order where a lane's four (rows g, g + 8 of two 16-row tiles)
//    are one 16-byte load. Of the activation's (d, c) pairs only d is copied, [block][token], so
//    columns 2t, 2t + 1 are one 8-byte load; c is one FMUL (-12582912 * d, exact) shared by the 4
//    row tiles. Shared memory serves 128 bytes per cycle, and a 16-byte load of 32 lanes takes 4 of
//    those passes even when 8 lanes share an address: loading c too would cost more than the FMUL.
//  * The 8 blocks of a step are unrolled: every shared-memory offset is a constant.
//  * Q4_1 (chapter 7): value = d q + m, so a block adds d_w d_a sumi + m_w s_a. The nibbles go to
//    the mma as they are (0..15), and the min term is one more FMA per result and block, from two
//    more scale tables (MinTerms: m_w beside d_w, the activations' s beside d), as in llama.cpp's MMQ.
//  * Q4_K (chapter 8): a K step of 8 blocks is one 144-byte super-block per row, and each of its
//    blocks of 32 is a Q4_1 block with scale d sc_j and min -dmin m_j: the staging copies the header
//    chunk and 4 nibble chunks per part (mma.cuh's RawPart<w_q4_k>) and unpacks the 6-bit scales
//    and mins into the same tables; the K loop is Q4_1's.
//  * Q6_K (chapter 8): a K step is one 210-byte super-block per row, at an even offset of a 16-byte
//    chunk: each part copies the 10 chunks that cover its half (mma.cuh's RawPart<w_q6_k>) and unpacks
//    the values q - 32 as int8. Its scales d sc_t come per 16 values, two per block of 32 (wd, and
//    HalfScales' wd_hi beside it), so each k32 mma becomes two of k = 16 on the same fragments
//    (mma_s8_k16), each result scaled by its own: 4 FMAs per result and block where Q4_0 takes 2.
//    llama.cpp's MMQ (vec_dot_q6_K_q8_1_mma) runs the same two mmas, adds sc_2j sumi_0 + sc_2j+1 sumi_1
//    in int32 and converts that (I2F); here the two sums exceed the magic-number range (|sumi| < 2^22)
//    once multiplied by their scales, so each is converted by the mma itself and scaled in float.
//
// Shared memory: two tiles (weights in the layout's form, activation quants, both scales) and the
// raw weight buffer. Registers: one CTA per SM (__launch_bounds__(256, 1)).
// Grid: x = ceil(M / 128), y = ceil(N / 128) (slices of at most 65535 token tiles); 256 threads.
#pragma once
#include "mma.cuh"

namespace gpu {
namespace {
constexpr int BM = 128, BN = 128;  // CTA tile: weight rows x tokens
constexpr int KB = 8;              // blocks per K step (whole 16-byte chunks of Q4_0 and Q8_0 rows)
constexpr int WM = 64, WN = 32;    // warp tile
constexpr int THREADS = 256;
constexpr int MT = WM / 16, NT = WN / 8;  // mma tiles per warp
static_assert((BM / WM) * (BN / WN) * 32 == THREADS, "the warps cover the CTA tile");
constexpr int PARTS = THREADS / BM;  // threads that stage one weight row, a part of KB / PARTS blocks each
static_assert(KB % PARTS == 0 && BM % 32 == 0, "parts of whole blocks, one part per warp");
constexpr int AD_PITCH =
    BN + 4;  // floats per block row of activation scales; +4: the copies' 8 blocks hit 8 bank groups
constexpr int ROW = KB * QK + 16;  // bytes per row of int8 values; +16: the 8 rows of an ldmatrix hit 8 bank groups

template <class WF>
using Raw = RawPart<WF, KB, PARTS>;  // mma.cuh: the raw layout and unpacking this step shares with wgmma

// The weights' layout in the tile is the step's (WL: 4_mma.cu's Unpacked, 5_mma_packed.cu's Packed):
//   WL::w_row<WF>()                       bytes per weight row of the tile
//   WL::store_block<WF>(tile, r, b, d, q)  block b of row r (scale d, quant words q) into the tile
//   WL::load_a<WF>(af, cur, ...)           the mma A fragments of block b for this warp's 4 row tiles
// Q4_1's min term: the weights' mins (in wd's order) and the activations' sums s (in ad's order).
// Empty for the formats without a min.
template <bool HAS_MIN>
struct MinTerms {};
template <>
struct MinTerms<true> {
    float wmin[KB][BM];        // weight mins m_w, rows in wd_slot order
    float asum[KB][AD_PITCH];  // activation sums s [block][token]
};

// Q6_K's second scale per block of 32, that of its values 16..31 (wd holds the first), rows in wd's order.
template <bool HALF_SCALES>
struct HalfScales {};
template <>
struct HalfScales<true> {
    float wd_hi[KB][BM];
};

template <class WF, class WL>
struct Tile : MinTerms<has_min<WF>>, HalfScales<has_half_scales<WF>> {  // one K step in shared memory
    static constexpr int W_ROW = WL::template w_row<WF>();
    uint8_t w[BM][W_ROW];    // weights, as the layout keeps them
    uint8_t a[BN][ROW];      // activation quants [token][block * 32 + k]
    float wd[KB][BM];        // weight scales (Q4_0: divided by 16), rows in wd_slot order
    float ad[KB][AD_PITCH];  // activation scales d [block][token] (c = -MMA_MAGIC_F * d is one FMUL away)
};

// Where row r's scale goes in wd[b]: a warp's 64 rows as [tile pair][g][tile in pair][g or g + 8],
// so that lane g reads rows g and g + 8 of two 16-row tiles in one float4.
__device__ __forceinline__ int wd_slot(int r) {
    const int rr = r % WM, i = rr / 16, h = (rr % 16) / 8, g = rr % 8;
    return r - rr + (i / 2) * 32 + g * 4 + (i % 2) * 2 + h;
}

// SPLIT (10_mma_splitk.cu): the tile's K steps are split over gridDim.z CTAs as in the wgmma
// steps' split-K (wgmma_ws.cuh's split_range), CTA z writing its partial sums to plane z of C
// (planes of N x M: one slice of tokens, which a split launch always is).
template <class WF, class WL, bool SPLIT>
__global__ void __launch_bounds__(THREADS, 1)
    mma_kernel(const int8_t* __restrict__ aq, const float2* __restrict__ ads, const typename WF::block* __restrict__ W,
               float* __restrict__ C, int N, int M, int K) {
    using RP = Raw<WF>;
    extern __shared__ int4 smem_raw[];
    Tile<WF, WL>* tiles = (Tile<WF, WL>*)smem_raw;                        // [2]
    uint4(*raw)[RP::CHUNKS][BM] = (uint4(*)[RP::CHUNKS][BM])(tiles + 2);  // [PARTS][CHUNKS][BM]: lanes = rows
    const int nb = K / QK;
    const int steps = (nb + KB - 1) / KB;
    const int s_begin = SPLIT ? (int)((int64_t)steps * blockIdx.z / gridDim.z) : 0;
    const int s_end = SPLIT ? (int)((int64_t)steps * (blockIdx.z + 1) / gridDim.z) : steps;
    const bool aligned = nb % KB == 0;  // weight rows' K steps start 16-byte aligned: cp.async
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int wm = (warp % (BM / WM)) * WM, wn = (warp / (BM / WM)) * WN;  // this warp's tile

    // ---- staging, three kinds of cp.async issued at three points of a K step (not all at once:
    // the copy queue is short). Weights: thread tid copies and unpacks part wp (warp-uniform) of row wr.
    const int wr = tid % BM, wp = tid / BM;
    // rows past M repeat the last; a row is nb blocks, nb / 8 super-blocks for the K-quants
    const typename WF::block* wrow = W + (int64_t)min(m0 + wr, M - 1) * (nb / blocks_per_stored<WF>);
    auto copy_weights = [&](int s) {
        if (!aligned) return;
        if constexpr (has_half_scales<WF>) {  // Q6_K: from the chunk that holds super-block s's first byte
            const typename WF::block* sb = wrow + s;
            const int4* src = (const int4*)((uintptr_t)sb & ~(uintptr_t)15);
            const bool w_last = s + 1 == steps && m0 + wr >= M - 1;  // W's last super-block (rows past M repeat it)
#pragma unroll
            for (int c = 0; c < RP::CHUNKS; c++) {
                const int4* chunk = src + RP::chunk(wp, c);
                if (c == RP::CHUNKS - 1 && w_last)
                    raw[wp][c][wr] = load16_until(chunk, sb + 1);  // its last chunk may end past W (mma.cuh)
                else
                    cp_async16(&raw[wp][c][wr], chunk);
            }
        } else if constexpr (is_k_quant<
                                 WF>) {  // K step s is the row's super-block s: its header, then the part's nibbles
            const int4* src = (const int4*)(wrow + s);
#pragma unroll
            for (int c = 0; c < RP::CHUNKS; c++) cp_async16(&raw[wp][c][wr], src + RP::chunk(wp, c));
        } else {
            const int4* src = (const int4*)(wrow + s * KB) + RP::first_chunk(wp);
#pragma unroll
            for (int c = 0; c < RP::CHUNKS; c++) cp_async16(&raw[wp][c][wr], src + c);
        }
    };
    auto copy_quants = [&](Tile<WF, WL>& tile, int s) {  // BN rows x 16 chunks: chunk tid % 16 of rows tid / 16 + 16 k
        const int kb0 = s * KB, j = tid % 16;
        const bool valid = kb0 + j / 2 < nb;
        const int8_t* src = aq + (int64_t)kb0 * QK + 16 * j;
#pragma unroll
        for (int k = 0; k < BN * 16 / THREADS; k++) {
            const int r = tid / 16 + (THREADS / 16) * k;
            // tokens past N: zeros, not copies of the last token (a tile of 1 token would have all
            // its threads load the same 16 bytes, every CTA of the grid at once)
            cp_async16_zfill(&tile.a[r][16 * j], src + (int64_t)min(n0 + r, N - 1) * K, valid && n0 + r < N);
        }
    };
    auto copy_scales = [&](Tile<WF, WL>& tile,
                           int s) {  // BN rows x KB scales d (4 B of each pair), into [block][token]
        const int b = tid % KB;
        const bool valid = s * KB + b < nb;
        const float* src = (const float*)(ads + (valid ? s * KB + b : 0));
#pragma unroll
        for (int k = 0; k < BN * KB / THREADS; k++) {
            const int r = tid / KB + (THREADS / KB) * k;
            const bool token = valid && n0 + r < N;  // tokens past N: zeros, as the quants
            cp_async4_zfill(&tile.ad[b][r], src + 2 * (int64_t)min(n0 + r, N - 1) * nb, token);
            if constexpr (has_min<WF>)  // the pair's other 4 B: s
                cp_async4_zfill(&tile.asum[b][r], src + 2 * (int64_t)min(n0 + r, N - 1) * nb + 1, token);
        }
        cp_async_commit();
    };
    auto unpack_step = [&](Tile<WF, WL>& tile, int s) {  // this thread's part row, after its copies landed
        mma_unpack_weights<WF, KB, PARTS>([&](int part, int c) { return raw[part][c][wr]; }, wrow, wp, s, nb, aligned,
                                          [&](int b, float d, const uint32_t* q, float m = 0.0f) {
                                              if constexpr (has_min<WF>)
                                                  tile.wmin[b][wd_slot(wr)] = m;
                                              else if constexpr (has_half_scales<WF>)  // Q6_K: m is the 2nd scale
                                                  tile.wd_hi[b][wd_slot(wr)] = m;
                                              else
                                                  (void)m;
                                              WL::template store_block<WF>(tile, wr, b, d, q);
                                          });
    };

    float acc[MT][NT][4] = {};

    // ldmatrix row addresses. A (weights), per 16-row tile: lanes 0-7 rows 0-7, 8-15 rows 8-15 at
    // k 0..15; lanes 16-31 the same rows at k 16..31 -> registers a0 a1 a2 a3 of the mma.
    // B (tokens), per two 8-token tiles: lanes 0-7 tokens 0-7 at k 0..15, 8-15 the same at k 16..31,
    // 16-31 tokens 8-15 -> b0 b1 of the first tile, b0 b1 of the second.
    const unsigned a_addr = (unsigned)__cvta_generic_to_shared(&tiles[0].w[wm + lane % 16][16 * (lane / 16)]);
    const unsigned b_addr =
        (unsigned)__cvta_generic_to_shared(&tiles[0].a[wn + lane % 8 + 8 * (lane / 16)][16 * ((lane / 8) % 2)]);

    copy_weights(s_begin);
    copy_quants(tiles[0], s_begin);
    copy_scales(tiles[0], s_begin);
    cp_async_wait_all();
    unpack_step(tiles[0], s_begin);
    __syncthreads();

    // [excerpt: k_loop]
    for (int s = s_begin; s < s_end; s++) {
        const Tile<WF, WL>& cur = tiles[(s - s_begin) & 1];
        Tile<WF, WL>& nxt = tiles[(s - s_begin + 1) & 1];
        const unsigned stage = (unsigned)(((s - s_begin) & 1) * sizeof(Tile<WF, WL>));
        const bool next = s + 1 < s_end;
#pragma unroll
        for (int b = 0; b < KB; b++) {
            if (next) {  // the next step's copies, in flight while the tensor cores work
                if (b == 0) copy_weights(s + 1);
                if (b == 2) copy_quants(nxt, s + 1);
                if (b == 4) copy_scales(nxt, s + 1);
            }
            int af[MT][4], bf[NT][2];
            float dw[MT][2];
            float2 da[NT];                                                 // d of columns 2t and 2t + 1
            WL::template load_a<WF>(af, cur, a_addr, stage, b, wm, g, t);  // the weights: the step's layout
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                int r[4];
                ldsm_x4(r, b_addr + stage + j * 8 * ROW + b * QK);
                bf[j][0] = r[0];
                bf[j][1] = r[1];
                bf[j + 1][0] = r[2];
                bf[j + 1][1] = r[3];
            }
            // a per-row table of the block (wd_slot order): lane g's rows g and g + 8 of two 16-row
            // tiles are one float4
            auto load_rows = [&](const float* row, float (&out)[MT][2]) {
#pragma unroll
                for (int i = 0; i < MT; i += 2) {
                    const float4 v = *(const float4*)&row[wm + 16 * i + 4 * g];
                    out[i][0] = v.x;
                    out[i][1] = v.y;
                    out[i + 1][0] = v.z;
                    out[i + 1][1] = v.w;
                }
            };
            load_rows(cur.wd[b], dw);
#pragma unroll
            for (int j = 0; j < NT; j++) da[j] = *(const float2*)&cur.ad[b][wn + 8 * j + 2 * t];
            float mw[MT][2];  // Q4_1: the min term's operands, loaded as dw and da are
            float2 sa[NT];
            if constexpr (has_min<WF>) {
                load_rows(cur.wmin[b], mw);
#pragma unroll
                for (int j = 0; j < NT; j++) sa[j] = *(const float2*)&cur.asum[b][wn + 8 * j + 2 * t];
            }
            float dw_hi[MT][2];  // Q6_K: the scales of the blocks' values 16..31
            if constexpr (has_half_scales<WF>) load_rows(cur.wd_hi[b], dw_hi);
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    int d[4], d_hi[4];
                    if constexpr (has_half_scales<WF>) {  // Q6_K: k 0..15 and 16..31 apart, one scale each
                        mma_s8_k16(d, af[i][0], af[i][1], bf[j][0], (int)MMA_MAGIC);
                        mma_s8_k16(d_hi, af[i][2], af[i][3], bf[j][1], (int)MMA_MAGIC);
                    } else {
                        mma_s8(d, af[i], bf[j], (int)MMA_MAGIC);
                    }
#pragma unroll
                    for (int r = 0; r < 4; r++) {  // d[r]: row g (+8 for r >= 2), column 2t (+1 for odd r)
                        const float d_a = (r & 1) ? da[j].y : da[j].x;
                        const float dot = block_dot(d_a, -MMA_MAGIC_F * d_a, d[r]);  // the FMUL is shared by 2 tiles
                        acc[i][j][r] = fmaf(dw[i][r >> 1], dot, acc[i][j][r]);
                        if constexpr (has_half_scales<WF>)  // + d sc d_a sumi of the values 16..31
                            acc[i][j][r] =
                                fmaf(dw_hi[i][r >> 1], block_dot(d_a, -MMA_MAGIC_F * d_a, d_hi[r]), acc[i][j][r]);
                        if constexpr (has_min<WF>)  // + m_w s_a, after the d term as in MMQ
                            acc[i][j][r] = fmaf(mw[i][r >> 1], (r & 1) ? sa[j].y : sa[j].x, acc[i][j][r]);
                    }
                }
        }
        if (next) {
            cp_async_wait_all();
            unpack_step(nxt, s + 1);
        }
        __syncthreads();
    }
    // [end excerpt: k_loop]

    mma_store_tiles(SPLIT ? C + (int64_t)blockIdx.z * N * M : C, acc, m0 + wm, n0 + wn, g, t, M, N);
}
}  // namespace

// SPLIT: the split-K launch of 10_mma_splitk.cu (wgmma_splits in gemm.h decides how many; one
// split is the plain launch).
template <class WF, class WL, bool SPLIT = false>
void gemm_q8_1_mma(const GemmProblem& p, cudaStream_t stream) {
    int8_t* aq;
    float2* ads;
    // Q4_0, Q4_1: MMQ keeps d in fp16; Q4_1 takes (d, s) pairs for its min term. Q4_K (chapter 8):
    // MMQ's pairs as Q4_1 in the sum_x mode (WF = w_q4_k<true>), else (d, d sum(q)) (the reference's).
    // Q6_K: (d, c), the reference's bytes (no min term; no sum_x mode, 4_mma.cu says why)
    if constexpr (!is_k_quant<WF>)
        mma_quantize_acts(p, stream, aq, ads, WF::offset == 8 || has_min<WF>, has_min<WF>);
    else if constexpr (has_half_scales<WF>)
        mma_quantize_acts(p, stream, aq, ads, true);
    else if constexpr (WF::mmq_scales)
        mma_quantize_acts(p, stream, aq, ads, true, true);
    else
        mma_quantize_acts_sum_q<WF>(p, stream, aq, ads);
    const size_t smem = 2 * sizeof(Tile<WF, WL>) + (size_t)BM * PARTS * Raw<WF>::CHUNKS * 16;
    {  // 172 to 201 KB: Hopper's 227 KB per block fit it, Ampere's (A100: 163 KB; sm_86/89: 99 KB) do not
        int dev = 0, optin = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (smem > (size_t)optin)
            throw std::runtime_error("the mma steps need " + std::to_string(smem / 1024) +
                                     " KB of shared memory per block; this GPU allows " + std::to_string(optin / 1024) +
                                     " KB (use the decode kernel, or a GPU of compute capability 9.0)");
    }
    // [excerpt: mma_split_launch]
    if constexpr (SPLIT) {
        int dev = 0, sms = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        const int splits = wgmma_splits(p.N, p.M, p.K, sms);  // 128 x 128 tiles, as the wgmma steps'
        if (splits > 1) {  // few tiles: one slice of tokens (N <= 128 x SMs), partial planes, then their sum
            float* partial = (float*)((uint8_t*)p.workspace + splitk_offset(p.N, p.K));
            cudaFuncSetAttribute(mma_kernel<WF, WL, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
            const dim3 grid((p.M + BM - 1) / BM, (p.N + BN - 1) / BN, splits);
            mma_kernel<WF, WL, true>
                <<<grid, THREADS, smem, stream>>>(aq, ads, (const typename WF::block*)p.W, partial, p.N, p.M, p.K);
            splitk_sum(partial, p.C, (int64_t)p.N * p.M, splits, stream);
            return;
        }
    }
    // [end excerpt: mma_split_launch]
    cudaFuncSetAttribute(mma_kernel<WF, WL, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    mma_launch_slices<BN>(p, aq, ads, [&](const int8_t* aq_n, const float2* ads_n, float* C_n, int n) {
        const dim3 grid((p.M + BM - 1) / BM, (n + BN - 1) / BN);
        mma_kernel<WF, WL, false>
            <<<grid, THREADS, smem, stream>>>(aq_n, ads_n, (const typename WF::block*)p.W, C_n, n, p.M, p.K);
    });
}

}  // namespace gpu
