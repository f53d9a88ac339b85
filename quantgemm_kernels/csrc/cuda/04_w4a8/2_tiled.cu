// cuda/04_w4a8/2_tiled.cu (chapter 4, W4A8): shared-memory tiles of blocks.
//
// What it teaches: the tiles of 01_fp32/2_tiled.cu and 03_w4a16/2_tiled.cu, holding blocks instead
// of floats. A 32 x 32 thread block computes a 32 x 32 tile of C; one step along K is one block column: warp ty
// copies block kb of activation row n0+ty (32 quants, d, s) and of weight row m0+ty (its raw
// quant bytes and d) into shared memory, with the scales already converted to float. Then thread
// (ty, tx) computes the integer dot of token row ty with weight row tx, exactly as the naive
// kernel does per block, and adds block_result. The quants stay quants in shared memory (not
// dequantized as in chapter 3): the inner loop stays integer.
// Why it is faster than the naive kernel: a warp's global loads are one block (18 or 36
// contiguous bytes) instead of 32 rows, and each block loaded serves 32 threads.
// What it still lacks: one integer multiply-add per product (04_w4a8/4_tiled_dp4a.cu adds __dp4a),
// byte-wide loads and stores when staging; decode (N = 1) leaves 31 of 32 token rows empty, as in
// 03_w4a16/2_tiled.cu.
//
// Shared memory: thread (ty, tx) reads activation row ty (the same address for the whole warp: a
// broadcast) and weight row tx (32 rows per warp). A weight row is padded to qs_bytes + 4 bytes,
// 5 or 9 words: an odd number of 4-byte banks, so rows 0..31 start in 32 different banks and the
// warp's reads never collide.
// Occupancy: __launch_bounds__(1024, 2) holds the kernel to 32 registers per thread so that two
// 1024-thread blocks fit on an SM: while one waits at a barrier, the other computes.
//
// W8A8 (cuda_q8_0_q8_1_tiled, below): the same template with WF = w_q8_0. The weight tile row holds
// 32 signed quant bytes (36-byte pitch: 9 words, odd, no bank conflicts) instead of 16 bytes of
// nibbles; no compensation.
// Grid: x = ceil(M / 32), y = min(ceil(N / 32), 65535) looping over tiles of N; block 32 x 32.
#include "../w_q8_1.cuh"

namespace gpu {
namespace {
constexpr int TILE = 32;
}

template <class WF>
__global__ void __launch_bounds__(TILE* TILE, 2)  // 2 blocks per SM: at most 32 registers
    q8_1_tiled_kernel(const block_q8_1* __restrict__ A, const typename WF::block* __restrict__ W, float* __restrict__ C,
                      int N, int M, int K) {
    __shared__ int8_t a_qs[TILE][QK];                 // block kb of activation rows n0 .. n0+31
    __shared__ uint8_t w_qs[TILE][WF::qs_bytes + 4];  // block kb of weight rows m0 .. m0+31 (+4: banks)
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
        // [excerpt: tile_loop]
        for (int kb = 0; kb < nb; kb++) {
            // warp ty stages row ty of both tiles; lane tx copies quant byte tx, lane 0 the scales
            a_qs[ty][tx] = a_ok ? a_row[kb].qs[tx] : 0;
            if (tx < WF::qs_bytes) w_qs[ty][tx] = w_ok ? ((const uint8_t*)w_row[kb].qs)[tx] : 0;
            if (tx == 0) {
                a_d[ty] = a_ok ? scale_to_float(a_row[kb].d) : 0.0f;
                a_s[ty] = a_ok ? scale_to_float(a_row[kb].s) : 0.0f;
                w_d[ty] = w_ok ? scale_to_float(w_row[kb].d) : 0.0f;
            }
            __syncthreads();
            // thread (ty, tx): activation row ty times weight row tx, one block
            int sumi = 0;
#pragma unroll 8  // fully unrolled, the hoisted byte loads would not fit in 32 registers
            for (int j = 0; j < QK / 2; j++) {
                int lo, hi;
                WF::pair(w_qs[tx], j, lo, hi);  // weight elements j and j + 16
                sumi += lo * a_qs[ty][j] + hi * a_qs[ty][j + QK / 2];
            }
            acc += block_result<WF>(w_d[tx], a_d[ty], a_s[ty], sumi);
            __syncthreads();  // every thread is done with the tiles before the next step overwrites them
            // [end excerpt: tile_loop]
        }
        if (n < N && m < M) C[(int64_t)n * M + m] = acc;
    }
}

template <class WF>
void gemm_q8_1_tiled(const GemmProblem& p, cudaStream_t stream) {
    const dim3 block(TILE, TILE);
    const int nblocks = (p.N + TILE - 1) / TILE;
    const dim3 grid((p.M + TILE - 1) / TILE, nblocks < 65535 ? nblocks : 65535);
    q8_1_tiled_kernel<WF>
        <<<grid, block, 0, stream>>>((const block_q8_1*)p.A, (const typename WF::block*)p.W, p.C, p.N, p.M, p.K);
}

template void gemm_q8_1_tiled<w_q4_0>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_tiled<w_q8_0>(const GemmProblem&, cudaStream_t);

}  // namespace gpu

void cuda_q4_0_q8_1_tiled(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_tiled<gpu::w_q4_0>(p, stream); }

void cuda_q8_0_q8_1_tiled(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_tiled<gpu::w_q8_0>(p, stream); }
