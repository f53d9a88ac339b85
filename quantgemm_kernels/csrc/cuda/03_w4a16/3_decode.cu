// cuda/03_w4a16/3_decode.cu (chapter 3, W4A16): a GEMV for decode, the shape that lets 4-bit weights pay.
//
// What it teaches: at N = 1 (one token) a GEMM is a matrix-vector product. Every weight byte is used
// once (2 flops per 4.5 bits), so the time is the time to stream W from memory, and W in Q4_0 is
// 7.1x smaller than in float32 (3.6x smaller than fp16). To turn fewer bytes into less time the
// kernel must keep the memory busy. Four things do it:
//  * Many lanes per row, each on its own 4-byte word. A warp step covers 8 consecutive blocks of a
//    row (256 values) and lane l = 4 b + w takes quant word w (bytes 4w .. 4w+3 of the nibbles) of
//    block b: its low nibbles are values 4w .. 4w+3, its high nibbles values 4w+16 .. 4w+19. The
//    warp's loads of a step read the row's 144 contiguous bytes, every byte by one instruction;
//    blocks are 18 bytes and their quants 2-byte aligned (formats.h), so a word is two 16-bit loads
//    (load_int_b2, llama.cpp's get_int_b2) and the scale a third.
//  * Coalesced float4 activations. Lane l's 8 activations are two float4, values 4w.. and 4w+16..
//    of block b: the 4 lanes of a block read 64 contiguous bytes per instruction, the warp 1 KB of
//    A per step in two instructions, every 32-byte sector fully used. (With one lane per block each
//    lane would read its own 128 bytes: 32 lines per warp instruction.)
//  * Enough bytes in flight. Little's law: bytes in flight = bandwidth x latency. An H100 (3.35
//    TB/s, some 600 to 800 ns from load to data under load) needs about 2.3 MB in flight, 18 KB per
//    SM (132 SMs); an H200 (4.8 TB/s) about 3.4 MB, 26 KB per SM. A warp issues the loads of U steps
//    of its R rows before it uses any (part 1 of batch()): at N = 1, R = 2 rows and U = 1 step,
//    288 bytes of W per warp (6 loads per lane, 3 per row); at 32 registers per thread 16 CTAs of
//    4 warps share an SM, 64 warps and 18 KB of weights per SM when all are waiting on loads, and
//    the 2048 CTAs of M = 4096 all fit at once (16 x 132 = 2112 slots). More steps per warp (U = 4:
//    48 registers, 10 CTAs, 45 KB per SM, 1.55 waves) measured 7-9 % slower: bytes in flight come as
//    well from more warps as from more loads per warp, and more warps also leave no last wave.
//    A CTA's four warps take interleaved steps of its R rows (warp w steps w, w + 4, ...) and add
//    their sums in shared memory, in a fixed order.
//  * Activations reused across rows, no int -> float conversions. Each float4 of A serves the CTA's
//    R rows (more rows for more tokens: launch_tokens); a nibble becomes a float with one byte
//    permute and one subtraction (the float with bits 0x4B0000nn is 2^23 + nn exactly), not the
//    quarter-rate I2F; the block's scale multiplies once per 8 products: acc += d * sum_j (q_j - 8) a_j.
// Each lane's sums are added by a butterfly shuffle (warp_sum), then by the CTA's four warps in warp
// order: the result does not depend on timing (deterministic).
// Why it is faster than 03_w4a16/2_tiled.cu: at N = 1 the tiled kernel computes 32 token rows of
// which 31 are empty, with two barriers per 32 values and 18 bytes of weights per warp step in
// flight; this kernel does no wasted work and keeps 18 KB of weights per SM in flight.
// What it still lacks:
//  * Loads that are wide where it matters. The 16-bit weight loads and the float32 activations both
//    go through L1: per 8 blocks of a row, three weight instructions touching 2 or 3 lines, and per
//    token two activation instructions touching 8 lines each, shared by R rows. On an H100 at N = 1
//    the profiler shows L1 the busiest unit and warps waiting on loads, not DRAM: wider weight loads
//    need the blocks realigned (chapter 6's decode kernel copies 8-block units, 144 B = 9 x 16 B,
//    with cp.async), fewer activation bytes need them quantized (chapter 4: Q8_1, 36 B per block
//    against float32's 128).
//  * Tokens are a loop: N is cut into passes of T <= 8 tokens (the accumulators stay in registers).
//    A weight nibble is unpacked once per pass and used T times, but the activation loads grow with
//    T and every pass reads W again: past a few tokens, tiled kernels that reuse W from shared
//    memory (chapters 4 and 6) win.
//
// Grid: ceil(M / R) CTAs of 4 warps (R rows each), one launch per pass of T <= 8 tokens.
#include "../common.cuh"

namespace {
constexpr int WARPS = 4;  // warps per CTA: they split the K steps of the CTA's R rows
constexpr int THREADS = 32 * WARPS;
constexpr int STEP = 8;   // blocks of a row per warp step: 8 blocks x 4 quant words = 32 lanes
constexpr int MAX_T = 8;  // tokens per pass

// [excerpt: nibble_to_float]
// Byte j (a nibble, 0..15) of `nibbles`, minus 8, as a float. The float whose bits are 0x4B0000nn is
// 2^23 + nn exactly, so one byte permute (PRMT) and one subtraction do what an int -> float
// conversion (I2F, a quarter-rate instruction) would.
__device__ __forceinline__ float nibble_minus_8(uint32_t nibbles, int j) {
    return __uint_as_float(__byte_perm(nibbles, 0x4B000000u, 0x7440 | j)) - 8388616.0f;  // 2^23 + 8
}
// [end excerpt: nibble_to_float]

// One batch of a warp: U steps (s0, s0 + WARPS, ...) of the R rows w_row[], for T tokens (a_lane:
// this lane's activations of step 0, token 0). TAIL: the batch runs past the end of the rows, so
// each load and each use is guarded; the other batches have no test inside.
template <int R, int U, int T, bool TAIL>
__device__ __forceinline__ void batch(const block_q4_0* const (&w_row)[R], const float* a_lane, int s0, int nb, int K,
                                      int word, int sub, float (&acc)[R][T]) {
    // [excerpt: decode_loop]
    // 1. Issue the weight loads of U steps x R rows; nothing waits for them until part 2.
    uint32_t q[U][R];
    fp16_bits d[U][R];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int kb = (s0 + WARPS * u) * STEP;  // the step's first block; this lane's is kb + sub
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (TAIL && kb + sub >= nb) continue;
            const block_q4_0& b = w_row[r][kb];
            q[u][r] = (uint32_t)load_int_b2(b.qs, word);  // two 16-bit loads
            d[u][r] = b.d;
        }
    }
    // 2. Use them: the word's 8 nibbles of each row, unpacked once for all T tokens.
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int kb = (s0 + WARPS * u) * STEP;
        if (TAIL && kb + sub >= nb) break;
        float w[R][8], dw[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint32_t lo = q[u][r] & 0x0F0F0F0Fu, hi = (q[u][r] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                w[r][j] = nibble_minus_8(lo, j);      // value 4 word + j
                w[r][j + 4] = nibble_minus_8(hi, j);  // value 4 word + j + 16
            }
            dw[r] = scale_to_float(d[u][r]);
        }
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float* a = a_lane + (int64_t)t * K + kb * QK;
            const float4 al = *(const float4*)a, ah = *(const float4*)(a + QK / 2);  // values 4w.., 4w + 16..
#pragma unroll
            for (int r = 0; r < R; r++) {
                float x = w[r][0] * al.x;
                x = fmaf(w[r][1], al.y, x);
                x = fmaf(w[r][2], al.z, x);
                x = fmaf(w[r][3], al.w, x);
                x = fmaf(w[r][4], ah.x, x);
                x = fmaf(w[r][5], ah.y, x);
                x = fmaf(w[r][6], ah.z, x);
                x = fmaf(w[r][7], ah.w, x);
                acc[r][t] = fmaf(dw[r], x, acc[r][t]);  // the block's scale, once per 8 products
            }
        }
    }
    // [end excerpt: decode_loop]
}

// C[t, row0 .. row0+R) for T tokens: A [T, K] float32, W [M, K/32] Q4_0 blocks, C [T, M]. R rows per
// CTA, U steps of weight loads in flight per warp.
template <int R, int U, int T>
__global__ void __launch_bounds__(THREADS)
    q4_0_f32_decode_kernel(const float* __restrict__ A, const block_q4_0* __restrict__ W, float* __restrict__ C, int M,
                           int K) {
    // [excerpt: lane_map]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int sub = lane / 4;   // block of the step this lane works on (0..7)
    const int word = lane % 4;  // its quant word: values 4 word .. +3 (low nibbles), 4 word + 16 .. +19 (high)
    // [end excerpt: lane_map]
    const int nb = K / QK;  // blocks per row
    const int steps = (nb + STEP - 1) / STEP;
    const int row0 = blockIdx.x * R;

    // This lane's block of step 0 in each of the CTA's rows; step s is STEP * s blocks further. A row
    // past M (ragged M) reads row M - 1 again and is never written: no test inside the loop.
    const block_q4_0* w_row[R];
#pragma unroll
    for (int r = 0; r < R; r++) w_row[r] = W + (int64_t)min(row0 + r, M - 1) * nb + sub;
    const float* a_lane = A + sub * QK + 4 * word;  // this lane's activations of step 0, token 0

    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.0f;

    // Warp w takes steps w, w + 4, w + 8, ... (the CTA's 4 warps read neighbouring steps), U at a time.
    int s0 = warp;
    for (; (s0 + WARPS * (U - 1) + 1) * STEP <= nb; s0 += WARPS * U)  // batches inside the rows
        batch<R, U, T, false>(w_row, a_lane, s0, nb, K, word, sub, acc);
    if (s0 < steps) batch<R, U, T, true>(w_row, a_lane, s0, nb, K, word, sub, acc);  // the rest

    // [excerpt: reduce]
    // Sum the 32 lanes (butterfly), then the CTA's warps in warp order: deterministic.
    __shared__ float partial[WARPS][R * T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float v = warp_sum(acc[r][t]);
            if (lane == 0) partial[warp][r * T + t] = v;
        }
    __syncthreads();
    if (threadIdx.x < R * T) {
        const int r = threadIdx.x / T, t = threadIdx.x % T;
        if (row0 + r < M) {
            float s = partial[0][threadIdx.x];
#pragma unroll
            for (int w = 1; w < WARPS; w++) s += partial[w][threadIdx.x];
            C[(int64_t)t * M + row0 + r] = s;
        }
    }
    // [end excerpt: reduce]
}

template <int R, int U, int T>
void launch_pass(const float* A, const block_q4_0* W, float* C, int M, int K, cudaStream_t stream) {
    q4_0_f32_decode_kernel<R, U, T><<<(M + R - 1) / R, THREADS, 0, stream>>>(A, W, C, M, K);
}
// A pass of T tokens. More tokens, more rows per CTA: every float4 of activations serves R rows,
// and the activations' L1 traffic (T x 128 B per block, against the weights' 18) is what grows
// with T. At one token U = 1 (more warps rather than more loads per warp); from two tokens U falls
// as R x T grows, to stay within the registers. The choice per T is the fastest, or within the
// spread of the fastest, of the (R, U) pairs measured at M = 4096, K = 14336 on an H100
// (tools/ch3_decode/variants.cu's table; notes in the commits that set it).
template <int T>
void launch_tokens(const float* A, const block_q4_0* W, float* C, int M, int K, cudaStream_t stream) {
    constexpr int R = T == 1 ? 2 : (T <= 4 ? 4 : 8);
    constexpr int U = T == 1 ? 1 : (T <= 3 ? 2 : 1);
    launch_pass<R, U, T>(A, W, C, M, K, stream);
}

// One launch per pass of T <= 8 tokens.
void launch_decode(const GemmProblem& p, cudaStream_t stream) {
    const block_q4_0* W = (const block_q4_0*)p.W;
    for (int n0 = 0; n0 < p.N; n0 += MAX_T) {
        const float* A = (const float*)p.A + (int64_t)n0 * p.K;
        float* C = p.C + (int64_t)n0 * p.M;
        switch (p.N - n0 < MAX_T ? p.N - n0 : MAX_T) {
            case 1: launch_tokens<1>(A, W, C, p.M, p.K, stream); break;
            case 2: launch_tokens<2>(A, W, C, p.M, p.K, stream); break;
            case 3: launch_tokens<3>(A, W, C, p.M, p.K, stream); break;
            case 4: launch_tokens<4>(A, W, C, p.M, p.K, stream); break;
            case 5: launch_tokens<5>(A, W, C, p.M, p.K, stream); break;
            case 6: launch_tokens<6>(A, W, C, p.M, p.K, stream); break;
            case 7: launch_tokens<7>(A, W, C, p.M, p.K, stream); break;
            default: launch_tokens<8>(A, W, C, p.M, p.K, stream); break;
        }
    }
}
}  // namespace

void cuda_q4_0_f32_decode(const GemmProblem& p, cudaStream_t stream) { launch_decode(p, stream); }
