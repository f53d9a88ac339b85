// cuda/04_w4a8/4_tiled_dp4a.cu (chapter 4, W4A8): shared-memory tiles of blocks + __dp4a.
//
// What it teaches: the two previous ideas together. 04_w4a8/2_tiled.cu's tiles, staged the same
// way, with 04_w4a8/3_dp4a.cu's inner loop: the tiles are declared as 32-bit words, so thread
// (ty, tx) reads activation row ty and weight row tx one word at a time and does 8 __dp4a per
// block pair (w_q8_1.cuh: words) instead of 32 multiply-adds. Shared memory is 4-byte aligned, so
// the word reads need no load_int_b2 here: the 2-byte alignment of Q4_0 is a property of the
// blocks in global memory, and the copy into the tile leaves it behind. Diff against the tiled
// kernel: the tile types, the byte view used when staging, the inner loop.
// Why it is faster: per block pair (Q4_0) the tiled kernel's inner loop was 48 byte loads from
// shared memory and 32 multiply-adds; here it is 12 word loads and 8 __dp4a.
// What it still lacks: the staging is still byte by byte, every shared-memory read is 32 bits
// wide (04_w4a8/5_vec_dp4a.cu widens both), and decode (N = 1) leaves 31 of 32 token rows empty.
//
// Shared memory: thread (ty, tx) reads activation row ty (the same address for the whole warp: a
// broadcast) and weight row tx (32 rows per warp). A weight row is padded to qs_words + 1 words,
// 5 or 9: an odd number of 4-byte banks, so rows 0..31 start in 32 different banks and the
// warp's reads never collide.
//
// W8A8 (cuda_q8_0_q8_1_tiled_dp4a, below): the same template with WF = w_q8_0. The weight tile row
// is 8 words (9 with the bank padding) used as they are; no compensation.
// Grid: x = ceil(M / 32), y = min(ceil(N / 32), 65535) looping over tiles of N; block 32 x 32.
#include "../w_q8_1.cuh"

namespace gpu {
namespace {
constexpr int TILE = 32;
}

template <class WF>
__global__ void __launch_bounds__(TILE* TILE, 2)  // 2 blocks per SM: at most 32 registers
    q8_1_tiled_dp4a_kernel(const block_q8_1* __restrict__ A, const typename WF::block* __restrict__ W,
                           float* __restrict__ C, int N, int M, int K) {
    __shared__ int a_qs[TILE][QK / 4];            // block kb of activation rows n0 .. n0+31, as words
    __shared__ int w_qs[TILE][WF::qs_words + 1];  // block kb of weight rows m0 .. m0+31 (+1: banks)
    __shared__ float a_d[TILE], a_s[TILE], w_d[TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int nb = K / QK;  // blocks per row, of A and of W
    const int m0 = blockIdx.x * TILE;
    const bool w_ok = m0 + ty < M;  // tile row ty is a real weight row
    // The rows warp ty copies; past the end, row 0 stands in and zeros are stored instead.
    const typename WF::block* w_row = W + (int64_t)(w_ok ? m0 + ty : 0) * nb;
    for (int n0 = blockIdx.y * TILE; n0 < N; n0 += gridDim.y * TILE) {  // gridDim.y is capped
        const int n = n0 + ty, m = m0 + tx;                             // the output this thread owns
        const bool a_ok = n0 + ty < N;                                  // tile row ty is a real activation row
        const block_q8_1* a_row = A + (int64_t)(a_ok ? n0 + ty : 0) * nb;
        float acc = 0.0f;
        for (int kb = 0; kb < nb; kb++) {
            // warp ty stages row ty of both tiles; lane tx copies quant byte tx, lane 0 the scales
            ((int8_t*)a_qs[ty])[tx] = a_ok ? a_row[kb].qs[tx] : 0;
            if (tx < WF::qs_bytes) ((uint8_t*)w_qs[ty])[tx] = w_ok ? ((const uint8_t*)w_row[kb].qs)[tx] : 0;
            if (tx == 0) {
                a_d[ty] = a_ok ? scale_to_float(a_row[kb].d) : 0.0f;
                a_s[ty] = a_ok ? scale_to_float(a_row[kb].s) : 0.0f;
                w_d[ty] = w_ok ? scale_to_float(w_row[kb].d) : 0.0f;
            }
            __syncthreads();
            // thread (ty, tx): activation row ty times weight row tx, one block
            int sumi = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int lo, hi;
                WF::words(w_qs[tx], i, lo, hi);            // weight elements 4i..4i+3 and 4i+16..4i+19
                sumi = __dp4a(lo, a_qs[ty][i], sumi);      // x activation elements 4i..4i+3
                sumi = __dp4a(hi, a_qs[ty][i + 4], sumi);  // x activation elements 4i+16..4i+19
            }
            acc += block_result<WF>(w_d[tx], a_d[ty], a_s[ty], sumi);
            __syncthreads();  // every thread is done with the tiles before the next step overwrites them
        }
        if (n < N && m < M) C[(int64_t)n * M + m] = acc;
    }
}

template <class WF>
void gemm_q8_1_tiled_dp4a(const GemmProblem& p, cudaStream_t stream) {
    const dim3 block(TILE, TILE);
    const int nblocks = (p.N + TILE - 1) / TILE;
    const dim3 grid((p.M + TILE - 1) / TILE, nblocks < 65535 ? nblocks : 65535);
    q8_1_tiled_dp4a_kernel<WF>
        <<<grid, block, 0, stream>>>((const block_q8_1*)p.A, (const typename WF::block*)p.W, p.C, p.N, p.M, p.K);
}

template void gemm_q8_1_tiled_dp4a<w_q4_0>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_tiled_dp4a<w_q8_0>(const GemmProblem&, cudaStream_t);

}  // namespace gpu

void cuda_q4_0_q8_1_tiled_dp4a(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_tiled_dp4a<gpu::w_q4_0>(p, stream);
}

void cuda_q8_0_q8_1_tiled_dp4a(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_tiled_dp4a<gpu::w_q8_0>(p, stream);
}
