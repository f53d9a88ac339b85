// cuda/06_decode_tensor_cores/3_mma_regstage.cu (chapter 6): int8 tensor cores for prefill (many
// tokens), first step: weights staged through registers and unpacked at every fragment load.
//
// What it teaches, against chapter 4's vec_dp4a (one output per thread, 1 x 1 x 4 per __dp4a):
//  * mma.sync.m16n8k32 (sm_80 and later): one warp multiplies a 16 x 32 int8 tile by a 32 x 8
//    one in a single instruction, 4096 multiply-adds. k = 32 is exactly one block, so each mma
//    is one block's integer dot product for a 16 x 8 patch of outputs, and the block's scales are
//    applied to its four int32 results per thread right after. That scaling, not the mma, is the
//    work that limits this kernel, so every instruction of it counts (below).
//    Weights play the mma's A (rows = output features m), tokens its B (columns = n).
//  * No compensation: llama.cpp's MMQ on tensor cores makes Q4_0's nibbles signed (q - 8) while
//    loading its tile and computes d_w * d_a * sum((q - 8) * a), the exact integer dot, without
//    chapter 4's -8 * s_a term (which uses s_a rounded to fp16). We do the same, so the per-block
//    work is two FMAs: for dp4a kernels the compensation saves work, on tensor cores it costs.
//    The signed nibble is made with one logic op: a nibble q moved to the top of its byte is the
//    int8 16 * q, and flipping bit 7 makes it 16 * (q - 8). The mma then sums 16 * (q - 8) * a
//    (|sum| < 2^20) and the weight scale is stored divided by 16 (exact: a power of two).
//  * The fragment layouts. Lane (g = lane / 4, t = lane % 4) supplies A words for rows g and g+8,
//    k = 4t..4t+3 and 16+4t..16+4t+3, and B words for column g, the same k; it gets back C for
//    rows g, g+8 and columns 2t, 2t+1. A Q4_0 block's quant word t holds elements 4t..4t+3 in its
//    low nibbles and 16+4t.. in its high ones: exactly the pair (a0, a2) the mma wants, one
//    shift and one logic op away.
//  * Integer to float for free, with the offset removed inside the scaling FMA: mma.cuh.
//  * A 128 x 128 CTA tile (8 warps of 64 x 32), K in steps of 8 blocks, double-buffered in
//    shared memory: the next step's activations arrive by cp.async and its weights by 128-bit
//    loads into registers while the tensor cores work on the current step. Weights are staged
//    like the decode kernel's (8 blocks = 144 B, 16-byte aligned when K % 256 == 0), cut into
//    words in registers and stored in a padded layout where every fragment read is free of bank
//    conflicts. Shapes with K % 256 != 0 stage block by block (16-bit loads): correct, slower.
//  * Activations are quantized first into the workspace layout of mma.cuh.
// Why it is faster: against vec_dp4a, one mma does 4096 multiply-adds where a __dp4a does 4, and
// an output's block is scaled once per 16 x 8 patch, not per thread and output.
// What it still lacks: the scaling, not the mma, limits it: 14 instructions per mma in the inner
// loop, 8 of them the scaling FMAs, plus the nibble logic at every fragment load in each of the 4
// warps that share a row, and weights staged through the registers of half the threads.
// 4_mma.cu unpacks once per CTA and stages with every thread. Q4_0 only.
//
// Profile (Nsight Compute, H100, Q4_0, N = 512, K = 14336): 240 registers per thread allow one
// CTA of 8 warps per SM, 2 warps per scheduler; a scheduler issued an instruction every 1.8
// cycles and the FP32 pipe was 33% busy: latency, with too few warps to hide it. Samples: the
// inner loop 61% (14 instructions per mma: 8 scaling FMAs, 2 logic operations per weight word),
// the loop that issues the activation copies 10%, the barrier at the end of a K step 10%, the
// weight stores 5%. With 8 warps per SM the levers left are fewer instructions and fewer passes
// through shared memory (4_mma.cu).
//
// Shared memory: two tiles (weight words, weight scales, activation quants, (d, c)), padded so
// that every fragment read is free of bank conflicts.
// Grid: x = ceil(M / 128), y = ceil(N / 128) (slices of at most 65535 token tiles); 256 threads.
#include "mma.cuh"

namespace gpu {
namespace {
constexpr int BM = 128, BN = 128;  // CTA tile: weight rows x tokens
constexpr int KB = 8;              // blocks per K step (one 16-byte aligned unit per weight row)
constexpr int WM = 64, WN = 32;    // warp tile
constexpr int THREADS = 256;
constexpr int MT = WM / 16, NT = WN / 8;  // mma tiles per warp
static_assert((BM / WM) * (BN / WN) * 32 == THREADS, "8 warps cover the CTA tile");
constexpr int A_PITCH = KB * QK + 16;  // bytes per token row of activation quants (+16: banks)
constexpr int A_DS_PITCH = KB + 2;     // float2 per token row of (d, c) (+2: banks, 16-B rows)

template <class WF>
struct Tile {                                              // one K step in shared memory
    static constexpr int W_WORDS = KB * WF::qs_words + 4;  // words per weight row (+4: banks)
    uint32_t w[BM][W_WORDS];                               // weight quants, row-major, blocks back to back
    float wd[KB][BM];                                      // weight scales [block][row] (Q4_0: divided by 16)
    uint8_t a[BN][A_PITCH];                                // activation quants [token][byte]
    float2 ads[BN][A_DS_PITCH];                            // activation (d, c = -MMA_MAGIC_F * d) [token][block]
};

// ---------------------------------------------------------------- the GEMM
// The A fragment words of one weight block for the mma: (a0 a2) for a row from its quant words.
template <class WF>
// [excerpt: weight_frag]
__device__ __forceinline__ void weight_frag(const uint32_t* row_words, int t, int& k_lo, int& k_hi) {
    if constexpr (WF::offset == 8) {               // Q4_0: word t, low nibbles = k 4t.., high = k 16+4t..
        k_lo = (int)q4_0_signed_lo(row_words[t]);  // each byte becomes the int8 16 * (q - 8)
        k_hi = (int)q4_0_signed_hi(row_words[t]);
        // [end excerpt: weight_frag]
    } else {  // Q8_0: words t and t + 4
        k_lo = (int)row_words[t];
        k_hi = (int)row_words[t + 4];
    }
}

template <class WF>
__global__ void __launch_bounds__(THREADS, 1)
    mma_regstage_kernel(const int8_t* __restrict__ aq, const float2* __restrict__ ads,
                        const typename WF::block* __restrict__ W, float* __restrict__ C, int N, int M, int K) {
    extern __shared__ int4 smem_raw[];
    Tile<WF>* tiles = (Tile<WF>*)smem_raw;  // [2]
    constexpr int B = (int)sizeof(typename WF::block);
    constexpr int UNIT_VECS = KB * B / 16;                         // 9 (Q4_0) or 17 (Q8_0)
    constexpr float W_SCALE = WF::offset == 8 ? 1.0f / 16 : 1.0f;  // Q4_0's quants enter the mma as 16 * (q - 8)
    const int nb = K / QK;
    const int steps = (nb + KB - 1) / KB;
    const bool units = nb % KB == 0;  // every weight row's K step starts 16-byte aligned
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int wm = (warp % (BM / WM)) * WM, wn = (warp / (BM / WM)) * WN;  // this warp's tile

    // ---- staging: threads 0..127 own a weight row, threads 128..255 copy activations
    uint32_t raw[UNIT_VECS * 4 + 1];        // weight unit in flight (weight threads)
    const int wrow = min(m0 + tid, M - 1);  // rows past M repeat the last (outputs masked)
    auto load_weights = [&](int step) {     // global -> registers
        if (tid >= BM || !units) return;
        const uint4* src = (const uint4*)(W + (int64_t)wrow * nb + step * KB);
#pragma unroll
        for (int i = 0; i < UNIT_VECS; i++) {
            const uint4 v = __ldg(src + i);
            raw[4 * i] = v.x;
            raw[4 * i + 1] = v.y;
            raw[4 * i + 2] = v.z;
            raw[4 * i + 3] = v.w;
        }
        raw[UNIT_VECS * 4] = 0;
    };
    auto store_weights = [&](Tile<WF>& tile, int step) {  // registers (or global, slow path) -> shared
        if (tid >= BM) return;
        uint32_t* dst = tile.w[tid];
        if (units) {
#pragma unroll
            for (int b = 0; b < KB; b++) {
                tile.wd[b][tid] = W_SCALE * scale_to_float((fp16_bits)(raw[(B * b) >> 2] >> (8 * ((B * b) & 3))));
#pragma unroll
                for (int j = 0; j < WF::qs_words; j++) dst[b * WF::qs_words + j] = word_at(raw, B * b + 2 + 4 * j);
            }
        } else {
            for (int b = 0; b < KB; b++) {
                const int kb = step * KB + b;
                const typename WF::block* blk = W + (int64_t)wrow * nb + kb;
                tile.wd[b][tid] = kb < nb ? W_SCALE * scale_to_float(blk->d) : 0.0f;
                for (int j = 0; j < WF::qs_words; j++)
                    dst[b * WF::qs_words + j] = kb < nb ? load_int_b2(blk->qs, j) : 0;
            }
        }
    };
    auto load_acts = [&](Tile<WF>& tile, int step) {  // global -> shared, asynchronous where possible
        if (tid < BM) return;
        const int i0 = tid - BM;  // 0..127
        const int kb0 = step * KB;
        if (units) {
            // quants: BN rows x 16 chunks of 16 B; (d, -8s): BN rows x 4 chunks
            for (int c = i0; c < BN * 16; c += THREADS - BM) {
                const int r = c / 16, j = c % 16;
                const int n = min(n0 + r, N - 1);
                cp_async16(&tile.a[r][16 * j], aq + (int64_t)n * K + (int64_t)kb0 * QK + 16 * j);
            }
            for (int c = i0; c < BN * 4; c += THREADS - BM) {
                const int r = c / 4, j = c % 4;
                const int n = min(n0 + r, N - 1);
                cp_async16(&tile.ads[r][2 * j], ads + (int64_t)n * nb + kb0 + 2 * j);
            }
        } else {
            for (int c = i0; c < BN * KB * 8; c += THREADS - BM) {  // words
                const int r = c / (KB * 8), w = c % (KB * 8), kb = kb0 + w / 8;
                const int n = min(n0 + r, N - 1);
                ((int*)tile.a[r])[w] = kb < nb ? ((const int*)(aq + (int64_t)n * K))[kb * 8 + w % 8] : 0;
            }
            for (int c = i0; c < BN * KB; c += THREADS - BM) {
                const int r = c / KB, b = c % KB, kb = kb0 + b;
                const int n = min(n0 + r, N - 1);
                tile.ads[r][b] = kb < nb ? ads[(int64_t)n * nb + kb] : make_float2(0.0f, 0.0f);
            }
        }
    };

    float acc[MT][NT][4] = {};

    load_weights(0);
    load_acts(tiles[0], 0);
    store_weights(tiles[0], 0);
    cp_async_wait_all();
    __syncthreads();

    // [excerpt: k_loop]
    for (int s = 0; s < steps; s++) {
        Tile<WF>& cur = tiles[s & 1];
        const bool next = s + 1 < steps;
        if (next) {  // in flight while the tensor cores work
            load_weights(s + 1);
            load_acts(tiles[(s + 1) & 1], s + 1);
        }
#pragma unroll 2
        for (int b = 0; b < KB; b++) {
            int af[MT][4], bf[NT][2];
            float dw[MT][2];
            float2 da[NT][2];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const int r = wm + 16 * i + g;
                weight_frag<WF>(cur.w[r] + b * WF::qs_words, t, af[i][0], af[i][2]);
                weight_frag<WF>(cur.w[r + 8] + b * WF::qs_words, t, af[i][1], af[i][3]);
                dw[i][0] = cur.wd[b][r];
                dw[i][1] = cur.wd[b][r + 8];
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int c = wn + 8 * j;
                // [excerpt: act_frag]
                const int* arow = (const int*)cur.a[c + g] + b * 8;
                bf[j][0] = arow[t];
                bf[j][1] = arow[t + 4];
                // [end excerpt: act_frag]
                da[j][0] = cur.ads[c + 2 * t][b];
                da[j][1] = cur.ads[c + 2 * t + 1][b];
            }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    int d[4];
                    // [excerpt: magic_mma]
                    mma_s8(d, af[i], bf[j], (int)MMA_MAGIC);
#pragma unroll
                    for (int r = 0; r < 4; r++) {                     // d[r] holds the float 12582912 + sumi
                        const float2 a = da[j][r & 1];                // (d_a, -12582912 * d_a)
                        const float dot = block_dot(a.x, a.y, d[r]);  // d_a * sumi, one rounding
                        acc[i][j][r] = fmaf(dw[i][r >> 1], dot, acc[i][j][r]);
                        // [end excerpt: magic_mma]
                    }
                }
        }
        if (next) store_weights(tiles[(s + 1) & 1], s + 1);
        cp_async_wait_all();
        __syncthreads();
    }
    // [end excerpt: k_loop]

    mma_store_tiles(C, acc, m0 + wm, n0 + wn, g, t, M, N);
}
}  // namespace

template <class WF>
void gemm_q8_1_mma_regstage(const GemmProblem& p, cudaStream_t stream) {
    int8_t* aq;
    float2* ads;
    mma_quantize_acts(p, stream, aq, ads, WF::offset == 8);  // Q4_0: MMQ keeps d in fp16
    const size_t smem = 2 * sizeof(Tile<WF>);
    cudaFuncSetAttribute(mma_regstage_kernel<WF>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    mma_launch_slices<BN>(p, aq, ads, [&](const int8_t* aq_n, const float2* ads_n, float* C_n, int n) {
        const dim3 grid((p.M + BM - 1) / BM, (n + BN - 1) / BN);
        mma_regstage_kernel<WF>
            <<<grid, THREADS, smem, stream>>>(aq_n, ads_n, (const typename WF::block*)p.W, C_n, n, p.M, p.K);
    });
}

}  // namespace gpu

void cuda_q4_0_q8_1_mma_regstage(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_mma_regstage<gpu::w_q4_0>(p, stream);
}
