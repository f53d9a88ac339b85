// cuda/04_w4a8/5_vec_dp4a.cu (chapter 4, W4A8): tiles + __dp4a + the widest loads that are legal.
//
// What it teaches: moving more bytes per instruction, at both levels of the memory hierarchy,
// within what the block layouts allow (w_q8_1.cuh: Alignment).
//  * Global -> shared. tiled_dp4a staged byte by byte, a warp copying one 32-value block per
//    instruction. Here lanes copy 32-bit words: a Q8_1 word with one 32-bit load (its quants sit
//    at byte 4 of 36: 4-byte aligned), a Q4_0/Q8_0 word with two 16-bit loads (load_int_b2: byte 2
//    of 18/34, 2-byte aligned; a 32-bit load there faults with "misaligned address"). Nothing wider
//    is legal on the blocks in global memory, which is why ggml-cuda reads them 32 bits at a time.
//    With words, the 32 lanes of a warp copy BK = 4 activation blocks in one instruction, so one
//    K step of the tile now covers 4 blocks (128 values) and pays its two barriers once per 4.
//  * Shared -> registers. The tile is ours to lay out: rows of 16-byte vectors (int4), so a thread
//    reads an activation block with two 128-bit loads, a weight block with one (Q4_0) or two
//    (Q8_0), and the activation's (d, s) as one 64-bit float2: 5 shared loads per Q4_0 block pair
//    instead of tiled_dp4a's 15 (8 + 4 words, 3 scales).
// The arithmetic is tiled_dp4a's: 8 __dp4a per block pair, block_result, float accumulation.
// Why it is faster: fewer load instructions per byte moved, at both levels, and a quarter of the
// barriers per block of K.
// What it still lacks: each thread still owns one output, so each __dp4a comes with about half a
// shared load (register tiling, several outputs per thread, would cut that); int8 tensor cores
// (mma.sync, llama.cpp's MMQ) do a 16 x 8 x 32 integer product per instruction where __dp4a does
// 1 x 1 x 4; and decode (N = 1) leaves 31 of 32 token rows empty (mul_mat_vec-style kernels, one
// warp per output row, are the answer there).
//
// Shared memory: thread (ty, tx) reads activation row ty (a broadcast) and weight row tx. A
// 128-bit shared load is served a quarter warp (8 lanes) at a time; with a row pitch of an odd
// number of 16-byte vectors (W_PITCH), 8 consecutive rows start in 8 different 16-byte bank
// groups, so the reads never collide. The weight scales are stored [block][row] so that a warp
// reads 32 consecutive floats.
//
// W8A8 (cuda_q8_0_q8_1_vec_dp4a, below): the same template with WF = w_q8_0. A weight block is two
// 16-byte vectors (Q4_0: one), the row pitch 9 vectors (odd), staged by all 32 lanes (Q4_0: 16); no
// compensation.
// Grid: x = ceil(M / 32), y = min(ceil(N / 32), 65535) looping over tiles of N; block 32 x 32.
#include "../w_q8_1.cuh"

namespace gpu {
namespace {
constexpr int TILE = 32;
constexpr int BK = 4;  // blocks per K step: 4 activation blocks = 32 words, one per lane
static_assert(BK * QK / 4 == 32, "a warp stages BK activation blocks with one word per lane");

// The four ints of a 128-bit vector, in memory order.
__device__ __forceinline__ void unpack_int4(const int4 q, int* out) {
    out[0] = q.x;
    out[1] = q.y;
    out[2] = q.z;
    out[3] = q.w;
}
}  // namespace

template <class WF>
__global__ void __launch_bounds__(TILE* TILE, 2)  // 2 blocks per SM: at most 32 registers
    q8_1_vec_dp4a_kernel(const block_q8_1* __restrict__ A, const typename WF::block* __restrict__ W,
                         float* __restrict__ C, int N, int M, int K) {
    constexpr int A_VECS = QK / 16;           // 16-byte vectors per activation block: 2
    constexpr int W_VECS = WF::qs_words / 4;  // 16-byte vectors per weight block: 1 (Q4_0) or 2 (Q8_0)
    constexpr int W_PITCH = BK * W_VECS + 1;  // vectors per weight row: odd (BK is even), see the header
    static_assert(BK % 2 == 0 && BK * WF::qs_words <= 32, "weight row fits in one warp's words");
    __shared__ int4 a_qs[TILE][BK * A_VECS];  // blocks kb .. kb+BK-1 of activation rows n0 .. n0+31
    __shared__ int4 w_qs[TILE][W_PITCH];      // blocks kb .. kb+BK-1 of weight rows m0 .. m0+31
    __shared__ float2 a_ds[TILE][BK];         // (d, s) of each activation block
    __shared__ float w_d[BK][TILE];           // d of each weight block, [block][row]
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
        for (int kb = 0; kb < nb; kb += BK) {  // blocks kb .. kb+BK-1; those past nb are stored as zeros
            // Warp ty stages row ty of both tiles, in words. Word tx of the activation row is word
            // tx % 8 of block kb + tx / 8; word tx of the weight row is word tx % qs_words of block
            // kb + tx / qs_words: blocks land back to back, so lane tx writes word tx of the row.
            {
                const int b = kb + tx / (QK / 4);
                ((int*)a_qs[ty])[tx] = (a_ok && b < nb) ? load_int_b4(a_row[b].qs, tx % (QK / 4)) : 0;
            }
            if (tx < BK * WF::qs_words) {
                const int b = kb + tx / WF::qs_words;
                ((int*)w_qs[ty])[tx] = (w_ok && b < nb) ? load_int_b2(w_row[b].qs, tx % WF::qs_words) : 0;
            }
            if (tx < BK) {  // lane tx: the scales of block kb + tx
                const int b = kb + tx;
                a_ds[ty][tx] = (a_ok && b < nb) ? make_float2(scale_to_float(a_row[b].d), scale_to_float(a_row[b].s))
                                                : make_float2(0.0f, 0.0f);
                w_d[tx][ty] = (w_ok && b < nb) ? scale_to_float(w_row[b].d) : 0.0f;
            }
            __syncthreads();
            // thread (ty, tx): activation row ty times weight row tx, BK blocks, 128-bit reads
#pragma unroll 1  // unrolled, the hoisted loads of 4 block pairs would not fit in 32 registers
            for (int bk = 0; bk < BK; bk++) {
                int a[QK / 4], v[WF::qs_words];  // the block pair's quants as words
#pragma unroll
                for (int k = 0; k < A_VECS; k++) unpack_int4(a_qs[ty][bk * A_VECS + k], a + 4 * k);
#pragma unroll
                for (int k = 0; k < W_VECS; k++) unpack_int4(w_qs[tx][bk * W_VECS + k], v + 4 * k);
                int sumi = 0;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int lo, hi;
                    WF::words(v, i, lo, hi);            // weight elements 4i..4i+3 and 4i+16..4i+19
                    sumi = __dp4a(lo, a[i], sumi);      // x activation elements 4i..4i+3
                    sumi = __dp4a(hi, a[i + 4], sumi);  // x activation elements 4i+16..4i+19
                }
                const float2 ds = a_ds[ty][bk];
                acc += block_result<WF>(w_d[bk][tx], ds.x, ds.y, sumi);
            }
            __syncthreads();  // every thread is done with the tiles before the next step overwrites them
            // [end excerpt: tile_loop]
        }
        if (n < N && m < M) C[(int64_t)n * M + m] = acc;
    }
}

template <class WF>
void gemm_q8_1_vec_dp4a(const GemmProblem& p, cudaStream_t stream) {
    const dim3 block(TILE, TILE);
    const int nblocks = (p.N + TILE - 1) / TILE;
    const dim3 grid((p.M + TILE - 1) / TILE, nblocks < 65535 ? nblocks : 65535);
    q8_1_vec_dp4a_kernel<WF>
        <<<grid, block, 0, stream>>>((const block_q8_1*)p.A, (const typename WF::block*)p.W, p.C, p.N, p.M, p.K);
}

template void gemm_q8_1_vec_dp4a<w_q4_0>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_vec_dp4a<w_q8_0>(const GemmProblem&, cudaStream_t);

}  // namespace gpu

void cuda_q4_0_q8_1_vec_dp4a(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_vec_dp4a<gpu::w_q4_0>(p, stream);
}

void cuda_q8_0_q8_1_vec_dp4a(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_vec_dp4a<gpu::w_q8_0>(p, stream);
}
