// cuda/03_w4a16/2_tiled.cu (chapter 3, W4A16): dequantize tiles of W into shared memory.
//
// What it teaches: 01_fp32/2_tiled.cu, changed in one line. TILE = 32 = QK, so one step along K covers
// exactly one Q4_0 block of each of the tile's 32 weight rows. Warp ty copies block k0/32 of
// weight row m0+ty: lane tx reads the byte holding element tx (byte tx % 16, low nibble for
// tx < 16, high for tx >= 16) and the block's scale, and stores the float (q - 8) * d in Ws.
// From there on the kernel is 01_fp32/2_tiled.cu's: the inner loop never sees a nibble.
// Why it is faster than 03_w4a16/1_naive.cu: a warp's loads of W are one block, 18 contiguous bytes
// (coalesced), instead of 32 rows; each weight is dequantized once per 32 tokens instead of once
// per token, and each value in shared memory serves 32 threads.
// What it still lacks:
//  * Decode (N = 1, one token) gets nothing from the tile: 31 of its 32 token rows are empty, so
//    31/32 of the threads compute outputs that are never written, and each block walks K one
//    32-value step at a time with two barriers per step, too few loads in flight to reach the
//    memory bandwidth that decoding is bound by. Decode wants another layout, 03_w4a16/3_decode.cu:
//    a warp on a row, several lanes per block (each its own 4-byte word of the quants, so that the
//    lanes of a block also read neighbouring float4s of A), many loads in flight, then a
//    warp-shuffle reduction; llama.cpp's mul_mat_vec kernels are built that way. One lane per
//    block is not enough: each lane would read its block's 128 bytes of activations alone, 32
//    lines per warp instruction. We keep the tile here because it is the step from
//    01_fp32/2_tiled.cu that chapters 3 and 4 build on.
//  * One output per thread: two shared-memory loads per multiply-add (register tiling, several
//    outputs per thread, is the next classic step; chapter 4 goes to integer arithmetic instead).
//
// Grid: x = ceil(M / 32), y = min(ceil(N / 32), 65535) looping over tiles of N; block 32 x 32.
#include "../common.cuh"

namespace {
constexpr int TILE = 32;
static_assert(TILE == QK, "one K step of the tile is one block of 32 values");

// Element j (0..31) of a Q4_0 block as a float: byte j % 16, low nibble for j < 16, high for j >= 16.
__device__ __forceinline__ float dequantize_q4_0(const block_q4_0& b, int j) {
    const int q = j < QK / 2 ? (b.qs[j] & 0x0F) : (b.qs[j - QK / 2] >> 4);
    return (float)(q - 8) * scale_to_float(b.d);
}

__global__ void q4_0_f32_tiled_kernel(const float* __restrict__ A, const block_q4_0* __restrict__ W,
                                      float* __restrict__ C, int N, int M, int K) {
    __shared__ float As[TILE][TILE + 1];  // +1: rows land in different banks when read by column
    __shared__ float Ws[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int nb = K / QK;  // blocks per row of W
    const int m0 = blockIdx.x * TILE;
    for (int n0 = blockIdx.y * TILE; n0 < N; n0 += gridDim.y * TILE) {  // gridDim.y is capped
        const int n = n0 + ty, m = m0 + tx;                             // the output this thread owns
        float acc = 0.0f;
        for (int k0 = 0; k0 < K; k0 += TILE) {  // K is a multiple of 32 = TILE: no K edge
            // thread (ty, tx) loads A[n0+ty, k0+tx] and dequantizes W[m0+ty, k0+tx], element tx of
            // block k0/32 of weight row m0+ty: a warp reads one 18-byte block
            As[ty][tx] = (n0 + ty < N) ? A[(int64_t)(n0 + ty) * K + k0 + tx] : 0.0f;
            Ws[ty][tx] = (m0 + ty < M) ? dequantize_q4_0(W[(int64_t)(m0 + ty) * nb + k0 / QK], tx) : 0.0f;
            __syncthreads();
            for (int k = 0; k < TILE; k++) acc += As[ty][k] * Ws[tx][k];
            __syncthreads();  // before the next iteration overwrites the tiles
        }
        if (n < N && m < M) C[(int64_t)n * M + m] = acc;
    }
}
}  // namespace

void cuda_q4_0_f32_tiled(const GemmProblem& p, cudaStream_t stream) {
    const dim3 block(TILE, TILE);
    const int nblocks = (p.N + TILE - 1) / TILE;
    const dim3 grid((p.M + TILE - 1) / TILE, nblocks < 65535 ? nblocks : 65535);
    q4_0_f32_tiled_kernel<<<grid, block, 0, stream>>>((const float*)p.A, (const block_q4_0*)p.W, p.C, p.N, p.M, p.K);
}
