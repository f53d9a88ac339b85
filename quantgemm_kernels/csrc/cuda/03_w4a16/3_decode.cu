// cuda/03_w4a16/3_decode.cu (chapter 3, W4A16): a GEMV for decode, the shape that lets 4-bit weights pay.
//
// What it teaches: at N = 1 (one token) a GEMM is a matrix-vector product. Every weight byte is used
// once (2 flops per 4.5 bits), so the time is the time to stream W from HBM, and W in Q4_0 is 7.1x
// smaller than in float32 (3.6x smaller than fp16). To turn fewer bytes into less time the kernel
// must read W at the memory's speed. Four things do it:
//  * Coalesced activations. A warp step covers 4 consecutive blocks of a row (128 values) and lane
//    l takes values 4l .. 4l+3 of them, so its activations are one float4 and the 32 lanes read 512
//    consecutive bytes: four full 128-byte lines per instruction. (One lane per block, what the
//    tiled kernel's layout suggests, has each lane read 128 B of its own: 32 lines per instruction.)
//  * Coalesced weights, read as 16-bit words. Lane l = 8 b + p (block b of the step, part p) needs
//    the four nibbles of values 4p .. 4p+3 of block b: the low nibbles of quant word p (p < 4) or
//    the high nibbles of word p - 4 (p >= 4), byte j of the word holding values 4(p % 4) + j and
//    4(p % 4) + j + 16. A block's quants start at byte 2 (2-byte aligned, formats.h), so the word is
//    two 16-bit loads (load_int_b2); with the block's scale, the warp's three loads read the step's
//    72 contiguous bytes of the row, lanes p and p + 4 sharing each word.
//  * Enough bytes in flight. Little's law: bytes in flight = bandwidth x latency. An H100 (3.35
//    TB/s, about 700 ns from load to data under load) needs about 2.3 MB in flight, 18 KB per SM
//    (132 SMs); an H200 (4.8 TB/s) about 3.4 MB, 25 KB per SM. A warp first issues the loads of
//    U steps of its R rows (U x R = 16: 16 x 72 = 1152 bytes of W, 48 loads per lane) and only then
//    uses them; at the 16 to 20 warps per SM that its registers allow (96 per thread), that is 18
//    to 23 KB per SM, without shared memory or asynchronous copies. A CTA's four warps take
//    interleaved steps of the same R rows (warp w steps w, w + 4, ...), so that together they read
//    288 contiguous bytes per row, and add their partial sums in shared memory, in a fixed order.
//  * Activations reused across rows, and no int -> float conversions. Each float4 of A serves the
//    warp's R rows; a nibble becomes a float with one byte permute and one add (the float with bits
//    0x4B0000nn is 2^23 + nn exactly), not the quarter-rate I2F instruction; the block's scale
//    multiplies once per 4 products: acc += d * sum_j (q_j - 8) a_j.
// Each lane's partial sums are added by a butterfly shuffle (warp_sum), then by the CTA's four warps
// through shared memory in warp order: the result does not depend on timing (deterministic).
// Why it is faster than 03_w4a16/2_tiled.cu: at N = 1 the tiled kernel computes 32 token rows of
// which 31 are empty, two barriers per 32 values, 18 bytes of weights per warp per step; this
// kernel does no wasted work and keeps about 1 KB of weights per warp in flight.
// What it still lacks:
//  * Tokens are a loop: N is cut into passes of T <= 8 tokens (the accumulators stay in registers),
//    each weight nibble is unpacked once per pass and used T times, but every pass reads W again and
//    the activation loads grow with T. Past a few tokens a tiled kernel that reuses W from shared
//    memory (chapter 4, chapter 6) wins.
//  * The activations stay float32, 128 bytes per block of 32 against the weights' 18: they come from
//    L1 (every CTA reads all of A), and their loads and the unpacking are work the weight stream must
//    hide. Chapter 4 quantizes them to 8 bits (Q8_1, 36 bytes per block) and multiplies integers.
//  * 16-bit weight loads: three load instructions per 72 bytes. Wider loads need the blocks
//    realigned: chapter 6's decode kernel copies 8-block units (144 B = 9 x 16 B) with cp.async.
//
// Grid: ceil(M / R) CTAs of 4 warps (R rows each), one launch per pass of T <= 8 tokens.
#include "../common.cuh"

namespace {
constexpr int WARPS = 4;  // warps per CTA: they split the K steps of the CTA's R rows
constexpr int THREADS = 32 * WARPS;
constexpr int STEP = 4;   // blocks of a row per warp step: 4 x 32 values = 32 lanes x 4 values
constexpr int MAX_T = 8;  // tokens per pass
static_assert(STEP * QK == 32 * 4, "a step gives each lane 4 values, one float4 of activations");

// [excerpt: nibble_to_float]
// Byte j (a nibble, 0..15) of `nibbles`, minus 8, as a float. The float whose bits are 0x4B0000nn is
// 2^23 + nn exactly, so one byte permute (PRMT) and one subtraction do what an int -> float
// conversion (I2F, a quarter-rate instruction) would.
__device__ __forceinline__ float nibble_minus_8(uint32_t nibbles, int j) {
    return __uint_as_float(__byte_perm(nibbles, 0x4B000000u, 0x7440 | j)) - 8388616.0f;  // 2^23 + 8
}
// [end excerpt: nibble_to_float]

// C[t, row0 .. row0+R) for T tokens, t < T: A [T, K] float32, W [M, K/32] Q4_0 blocks, C [T, M].
// R rows per CTA, U steps of weight loads in flight per warp.
template <int R, int U, int T>
__global__ void __launch_bounds__(THREADS)
    q4_0_f32_decode_kernel(const float* __restrict__ A, const block_q4_0* __restrict__ W, float* __restrict__ C, int M,
                           int K) {
    // [excerpt: lane_map]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int sub = lane / 8;            // block of the step this lane works on (0..3)
    const int part = lane % 8;           // its values in that block: 4 part .. 4 part + 3
    const int word = part % 4;           // the quant word that holds their nibbles...
    const int shift = part < 4 ? 0 : 4;  // ...in its low (values 4w + j) or high (4w + 16 + j) halves
    // [end excerpt: lane_map]
    const int nb = K / QK;  // blocks per row
    const int steps = (nb + STEP - 1) / STEP;
    const int row0 = blockIdx.x * R;

    // This lane's block of step 0 in each of the CTA's rows; step s is STEP * s blocks further. A row
    // past M (ragged M) reads row M - 1 again and is never written: no test inside the loop.
    const block_q4_0* w_row[R];
#pragma unroll
    for (int r = 0; r < R; r++) w_row[r] = W + (int64_t)min(row0 + r, M - 1) * nb + sub;
    const float* a_lane = A + sub * QK + 4 * part;  // this lane's 4 activations of step 0 (token 0)

    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.0f;

    // [excerpt: decode_loop]
    for (int s0 = warp; s0 < steps; s0 += WARPS * U) {  // this warp's steps s0, s0 + 4, ..., s0 + 4 (U - 1)
        // 1. Issue the weight loads of U steps x R rows; nothing waits for them until part 2.
        uint32_t q[U][R];
        fp16_bits d[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int s = s0 + WARPS * u;
#pragma unroll
            for (int r = 0; r < R; r++) {
                q[u][r] = 0;
                d[u][r] = 0;
                if (s * STEP + sub < nb) {  // false only in the last steps of a row
                    const block_q4_0& b = w_row[r][s * STEP];
                    q[u][r] = (uint32_t)load_int_b2(b.qs, word);  // two 16-bit loads
                    d[u][r] = b.d;
                }
            }
        }
        // 2. Use them: this lane's 4 nibbles of each row, unpacked once for all T tokens.
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int s = s0 + WARPS * u;
            if (s * STEP + sub >= nb) break;
            float w[R][4], dw[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint32_t nibbles = (q[u][r] >> shift) & 0x0F0F0F0Fu;
#pragma unroll
                for (int j = 0; j < 4; j++) w[r][j] = nibble_minus_8(nibbles, j);
                dw[r] = scale_to_float(d[u][r]);
            }
#pragma unroll
            for (int t = 0; t < T; t++) {
                const float4 a = *(const float4*)(a_lane + (int64_t)t * K + s * STEP * QK);  // 512 B per warp
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float x = w[r][0] * a.x;
                    x = fmaf(w[r][1], a.y, x);
                    x = fmaf(w[r][2], a.z, x);
                    x = fmaf(w[r][3], a.w, x);
                    acc[r][t] = fmaf(dw[r], x, acc[r][t]);  // the block's scale, once per 4 products
                }
            }
        }
    }
    // [end excerpt: decode_loop]

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

// One launch per pass of T <= 8 tokens; R rows per CTA and U steps in flight, U x R = 16.
template <int R, int U>
void launch_decode(const GemmProblem& p, cudaStream_t stream) {
    const block_q4_0* W = (const block_q4_0*)p.W;
    for (int n0 = 0; n0 < p.N; n0 += MAX_T) {
        const float* A = (const float*)p.A + (int64_t)n0 * p.K;
        float* C = p.C + (int64_t)n0 * p.M;
        switch (p.N - n0 < MAX_T ? p.N - n0 : MAX_T) {
            case 1: launch_pass<R, U, 1>(A, W, C, p.M, p.K, stream); break;
            case 2: launch_pass<R, U, 2>(A, W, C, p.M, p.K, stream); break;
            case 3: launch_pass<R, U, 3>(A, W, C, p.M, p.K, stream); break;
            case 4: launch_pass<R, U, 4>(A, W, C, p.M, p.K, stream); break;
            case 5: launch_pass<R, U, 5>(A, W, C, p.M, p.K, stream); break;
            case 6: launch_pass<R, U, 6>(A, W, C, p.M, p.K, stream); break;
            case 7: launch_pass<R, U, 7>(A, W, C, p.M, p.K, stream); break;
            default: launch_pass<R, U, 8>(A, W, C, p.M, p.K, stream); break;
        }
    }
}
}  // namespace

void cuda_q4_0_f32_decode(const GemmProblem& p, cudaStream_t stream) { launch_decode<2, 8>(p, stream); }
