// cuda/06_decode_tensor_cores/4_mma.cu (chapter 6): int8 tensor cores for prefill (many tokens), second step.
//
// The first step (06_decode_tensor_cores/3_mma_regstage.cu: mma.sync m16n8k32, the signed-nibble formula, the
// magic-number conversion of mma.cuh) spent only 61% of its time in its inner loop, and that loop
// 14 instructions per mma, 8 of them the scaling FMAs. Nsight Compute (H100, n = 512): 2 warps per
// scheduler, one instruction issued every 1.8 cycles; the activation copy loop 10% of the samples,
// the barrier 10%, the weight stores 5%. This step removes instructions and shared-memory traffic:
//  * Weights are unpacked once per CTA, not once per warp. The staging turns each Q4_0 block into
//    its 32 int8 values 16 * (q - 8) (mma.cuh's signed nibbles) in a [row][k] tile of shared
//    memory; the first step cut nibbles at every fragment load, in each of the 4 warps that share a
//    row. Q8_0 blocks are copied as they are (dropping the scale's two bytes).
//  * Fragments come by ldmatrix: one ldmatrix.x4 is an mma's A (rows g, g + 8, k halves 0 and 16),
//    or the B of two mmas (two groups of 8 tokens). Weight scales sit in an order where a lane's
//    four (rows g, g + 8 of two 16-row tiles) are one 16-byte load. Of the activation's (d, c)
//    pairs only d is copied, [block][token], so columns 2t, 2t + 1 are one 8-byte load; c is one
//    FMUL (-12582912 * d, exact) shared by the 4 row tiles. Shared memory serves 128 bytes per
//    cycle, and a 16-byte load of 32 lanes takes 4 of those passes even when 8 lanes share an
//    address: loading c too cost more than the FMUL.
//    Per block and warp (64 x 32 outputs, 16 mma): 4 + 2 ldmatrix, 2 LDS.128 + 4 LDS.64, 8 FMUL.
//  * Every thread stages: all copies are cp.async, issued during a K step for the next one, one
//    kind at a time (blocks 0, 2, 4: the copy queue is short). Weights: the 144 (Q4_0) or 272
//    (Q8_0) bytes of 8 blocks of a row, as two halves of 5 or 9 chunks of 16 B, into a raw buffer
//    laid out [half][chunk][row] so that a warp's 32 copies (32 rows) hit distinct banks;
//    activation quants 16 B; scales 4 B. At the step's end each thread unpacks the half row that it
//    copied itself (no barrier between its copy and its read), and one barrier per step hands the
//    tile to all warps. The K tail (K % 256 != 0) is zero-filled by the copies (cp.async with
//    src-size 0); weights whose rows are not 16-byte aligned then are read block by block with
//    16-bit loads (correct, slower).
//  * The 8 blocks of a step are unrolled: every shared-memory offset is a constant.
// Measured on an H100 (n = 512, k = 14336): 0.269 -> 0.244 ms. Tried and slower there: 16 warps of
// 32 x 32 (4 per scheduler, but 40% more shared-memory traffic per mma: 0.270 ms), and unpacking in
// the middle of the step with the copies at blocks 0, 1, 2 (0.253 ms). On the H200 of the recorded
// comparison (ch6-comparison-152451): 0.272 (first step) -> 0.246 ms; weights kept packed in shared
// memory (KEEP_PACKED, cuda_q4_0_q8_1_mma_packed: fewer passes, logic back in the loop) 0.271 ms.
//
// W8A8 (cuda_q8_0_q8_1_mma, below): the same kernel with WF = w_q8_0: 8 blocks are 272 B = 17 x 16
// B, the quants need no unpacking and there is no compensation.
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
constexpr int AD_PITCH = BN + 4;   // floats per block row of activation scales; +4: the copies' 8 blocks hit 8 bank groups
constexpr int ROW = KB * QK + 16;  // bytes per row of int8 values; +16: the 8 rows of an ldmatrix hit 8 bank groups

template <class WF>
using Raw = RawPart<WF, KB, PARTS>;  // mma.cuh: the raw layout and unpacking this step shares with wgmma

template <class WF, bool KEEP_PACKED>
struct Tile {  // one K step in shared memory
    static constexpr bool PACKED = KEEP_PACKED && WF::offset == 8;  // Q4_0 nibbles kept as stored
    static constexpr int W_ROW = PACKED ? KB * WF::qs_bytes + 16 : ROW;  // 144: rows g hit banks 4g + t
    uint8_t w[BM][W_ROW];    // weights as int8 values [row][block * 32 + k] (Q4_0: 16 (q - 8))
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

// One block of a weight row into the tile: its values as int8 and its scale.
template <class WF, bool P>
__device__ __forceinline__ void store_block(Tile<WF, P>& tile, int r, int b, float d, const uint32_t* q) {
    uint4* dst = (uint4*)&tile.w[r][b * QK];
    if constexpr (Tile<WF, P>::PACKED) {
        *(uint4*)&tile.w[r][b * WF::qs_bytes] = make_uint4(q[0], q[1], q[2], q[3]);
        tile.wd[b][wd_slot(r)] = d * (1.0f / 16);
    } else if constexpr (WF::offset == 8) {  // Q4_0: word j's low nibbles are k = 4j.., its high ones 16 + 4j..
        dst[0] = make_uint4(q4_0_signed_lo(q[0]), q4_0_signed_lo(q[1]), q4_0_signed_lo(q[2]), q4_0_signed_lo(q[3]));
        dst[1] = make_uint4(q4_0_signed_hi(q[0]), q4_0_signed_hi(q[1]), q4_0_signed_hi(q[2]), q4_0_signed_hi(q[3]));
        tile.wd[b][wd_slot(r)] = d * (1.0f / 16);  // exact: the mma sums 16 (q - 8) a
    } else {
        dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
        dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
        tile.wd[b][wd_slot(r)] = d;
    }
}

template <class WF, bool P>
__global__ void __launch_bounds__(THREADS, 1)
mma_kernel(const int8_t* __restrict__ aq, const float2* __restrict__ ads, const typename WF::block* __restrict__ W,
           float* __restrict__ C, int N, int M, int K) {
    using RP = Raw<WF>;
    extern __shared__ int4 smem_raw[];
    Tile<WF, P>* tiles = (Tile<WF, P>*)smem_raw;                                   // [2]
    uint4(*raw)[RP::CHUNKS][BM] = (uint4(*)[RP::CHUNKS][BM])(tiles + 2);  // [PARTS][CHUNKS][BM]: lanes = rows
    const int nb = K / QK;
    const int steps = (nb + KB - 1) / KB;
    const bool aligned = nb % KB == 0;  // weight rows' K steps start 16-byte aligned: cp.async
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int wm = (warp % (BM / WM)) * WM, wn = (warp / (BM / WM)) * WN;  // this warp's tile

    // ---- staging, three kinds of cp.async issued at three points of a K step (not all at once:
    // the copy queue is short). Weights: thread tid copies and unpacks part wp (warp-uniform) of row wr.
    const int wr = tid % BM, wp = tid / BM;
    const typename WF::block* wrow = W + (int64_t)min(m0 + wr, M - 1) * nb;  // rows past M repeat the last
    auto copy_weights = [&](int s) {
        if (!aligned) return;
        const int4* src = (const int4*)(wrow + s * KB) + RP::first_chunk(wp);
#pragma unroll
        for (int c = 0; c < RP::CHUNKS; c++) cp_async16(&raw[wp][c][wr], src + c);
    };
    auto copy_quants = [&](Tile<WF, P>& tile, int s) {  // BN rows x 16 chunks: chunk tid % 16 of rows tid / 16 + 16 k
        const int kb0 = s * KB, j = tid % 16;
        const bool valid = kb0 + j / 2 < nb;
        const int8_t* src = aq + (int64_t)kb0 * QK + 16 * j;
#pragma unroll
        for (int k = 0; k < BN * 16 / THREADS; k++) {
            const int r = tid / 16 + (THREADS / 16) * k;
            cp_async16_zfill(&tile.a[r][16 * j], src + (int64_t)min(n0 + r, N - 1) * K, valid);
        }
    };
    auto copy_scales = [&](Tile<WF, P>& tile, int s) {  // BN rows x KB scales d (4 B of each pair), into [block][token]
        const int b = tid % KB;
        const bool valid = s * KB + b < nb;
        const float* src = (const float*)(ads + (valid ? s * KB + b : 0));
#pragma unroll
        for (int k = 0; k < BN * KB / THREADS; k++) {
            const int r = tid / KB + (THREADS / KB) * k;
            cp_async4_zfill(&tile.ad[b][r], src + 2 * (int64_t)min(n0 + r, N - 1) * nb, valid);
        }
        cp_async_commit();
    };
    auto unpack_step = [&](Tile<WF, P>& tile, int s) {  // this thread's part row, after its copies landed
        mma_unpack_weights<WF, KB, PARTS>([&](int part, int c) { return raw[part][c][wr]; }, wrow, wp, s, nb, aligned,
                                          [&](int b, float d, const uint32_t* q) { store_block<WF, P>(tile, wr, b, d, q); });
    };

    float acc[MT][NT][4] = {};

    // ldmatrix row addresses. A (weights), per 16-row tile: lanes 0-7 rows 0-7, 8-15 rows 8-15 at
    // k 0..15; lanes 16-31 the same rows at k 16..31 -> registers a0 a1 a2 a3 of the mma.
    // B (tokens), per two 8-token tiles: lanes 0-7 tokens 0-7 at k 0..15, 8-15 the same at k 16..31,
    // 16-31 tokens 8-15 -> b0 b1 of the first tile, b0 b1 of the second.
    const unsigned a_addr = (unsigned)__cvta_generic_to_shared(&tiles[0].w[wm + lane % 16][16 * (lane / 16)]);
    const unsigned b_addr = (unsigned)__cvta_generic_to_shared(&tiles[0].a[wn + lane % 8 + 8 * (lane / 16)][16 * ((lane / 8) % 2)]);

    copy_weights(0);
    copy_quants(tiles[0], 0);
    copy_scales(tiles[0], 0);
    cp_async_wait_all();
    unpack_step(tiles[0], 0);
    __syncthreads();

    for (int s = 0; s < steps; s++) {
        const Tile<WF, P>& cur = tiles[s & 1];
        Tile<WF, P>& nxt = tiles[(s + 1) & 1];
        const unsigned stage = (unsigned)((s & 1) * sizeof(Tile<WF, P>));
        const bool next = s + 1 < steps;
#pragma unroll
        for (int b = 0; b < KB; b++) {
            if (next) {  // the next step's copies, in flight while the tensor cores work
                if (b == 0) copy_weights(s + 1);
                if (b == 2) copy_quants(nxt, s + 1);
                if (b == 4) copy_scales(nxt, s + 1);
            }
            int af[MT][4], bf[NT][2];
            float dw[MT][2];
            float2 da[NT];  // d of columns 2t and 2t + 1
            if constexpr (Tile<WF, P>::PACKED) {
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    const uint8_t* p0 = &cur.w[wm + 16 * i + g][b * WF::qs_bytes + 4 * t];
                    const uint32_t v0 = *(const uint32_t*)p0, v1 = *(const uint32_t*)(p0 + 8 * Tile<WF, P>::W_ROW);
                    af[i][0] = (int)q4_0_signed_lo(v0); af[i][1] = (int)q4_0_signed_lo(v1);
                    af[i][2] = (int)q4_0_signed_hi(v0); af[i][3] = (int)q4_0_signed_hi(v1);
                }
            } else {
#pragma unroll
                for (int i = 0; i < MT; i++) ldsm_x4(af[i], a_addr + stage + i * 16 * ROW + b * QK);
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                int r[4];
                ldsm_x4(r, b_addr + stage + j * 8 * ROW + b * QK);
                bf[j][0] = r[0]; bf[j][1] = r[1]; bf[j + 1][0] = r[2]; bf[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; i += 2) {
                const float4 v = *(const float4*)&cur.wd[b][wm + 16 * i + 4 * g];
                dw[i][0] = v.x; dw[i][1] = v.y; dw[i + 1][0] = v.z; dw[i + 1][1] = v.w;
            }
#pragma unroll
            for (int j = 0; j < NT; j++) da[j] = *(const float2*)&cur.ad[b][wn + 8 * j + 2 * t];
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    int d[4];
                    mma_s8(d, af[i], bf[j], (int)MMA_MAGIC);
#pragma unroll
                    for (int r = 0; r < 4; r++) {  // d[r]: row g (+8 for r >= 2), column 2t (+1 for odd r)
                        const float d_a = (r & 1) ? da[j].y : da[j].x;
                        const float dot = block_dot(d_a, -MMA_MAGIC_F * d_a, d[r]);  // the FMUL is shared by 2 tiles
                        acc[i][j][r] = fmaf(dw[i][r >> 1], dot, acc[i][j][r]);
                    }
                }
        }
        if (next) {
            cp_async_wait_all();
            unpack_step(nxt, s + 1);
        }
        __syncthreads();
    }

    mma_store_tiles(C, acc, m0 + wm, n0 + wn, g, t, M, N);
}
}  // namespace

template <class WF, bool KEEP_PACKED>
void gemm_q8_1_mma(const GemmProblem& p, cudaStream_t stream) {
    constexpr bool P = KEEP_PACKED;
    int8_t* aq;
    float2* ads;
    mma_quantize_acts(p, stream, aq, ads, WF::offset == 8);  // Q4_0: MMQ keeps d in fp16
    const size_t smem = 2 * sizeof(Tile<WF, P>) + (size_t)BM * PARTS * Raw<WF>::CHUNKS * 16;
    cudaFuncSetAttribute(mma_kernel<WF, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    mma_launch_slices<BN>(p, aq, ads, [&](const int8_t* aq_n, const float2* ads_n, float* C_n, int n) {
        const dim3 grid((p.M + BM - 1) / BM, (n + BN - 1) / BN);
        mma_kernel<WF, P><<<grid, THREADS, smem, stream>>>(aq_n, ads_n, (const typename WF::block*)p.W, C_n, n, p.M, p.K);
    });
}

template void gemm_q8_1_mma<w_q4_0, false>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_mma<w_q4_0, true>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_mma<w_q8_0, false>(const GemmProblem&, cudaStream_t);

}  // namespace gpu

void cuda_q4_0_q8_1_mma(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_mma<gpu::w_q4_0, false>(p, stream); }

void cuda_q8_0_q8_1_mma(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_mma<gpu::w_q8_0, false>(p, stream); }
