// cuda/q4_0_q8_1_decode.cu (chapter 6): the decode kernel. Few tokens (N <= 8 per pass), so the
// GEMM is a matrix-vector product that reads every weight byte once and does ~2 operations per
// byte: the only thing that matters is streaming W at the speed of HBM.
//
// What it teaches, against chapter 4's tiled kernels and llama.cpp's mul_mat_vec_q (MMVQ):
//  * 16-byte loads of raw weight bytes. A Q4_0 block is 18 B, so no block is 16-byte aligned,
//    but 8 blocks are 144 B = 9 x 16 B: when a row holds a multiple of 8 blocks (K % 256 == 0,
//    every LLM layer), each run of 8 blocks (a "unit") starts 16-byte aligned and a lane loads it
//    with 9 128-bit loads, then cuts the blocks out of registers at compile-time byte offsets
//    (funnel shifts). MMVQ reads the same bytes with 16-bit loads (get_int_b2), 8x the load
//    instructions, and the number of bytes in flight per SM is what sets a GEMV's bandwidth.
//    Q8_0 is the same with 8 x 34 B = 17 x 16 B. Rows with K % 256 != 0 take a per-block path
//    with 16-bit loads (correct everywhere, fast where it matters).
//  * Activation quantization fused in. Every CTA quantizes the N x K activations itself, in
//    shared memory, before its first row (llama.cpp launches a separate quantize_q8_1 kernel and
//    reads its output back from global memory). For N = 1 that is 14336 values from L2 per CTA,
//    hidden behind the weight loads each lane issues before the quantization starts.
//    The bytes in shared memory are llama.cpp's Q8_1 (quantize_q8_1_lane, common.cuh): the
//    results are those of chapter 4's reference, to float rounding.
//  * A layout for shared memory that keeps 32 lanes on 32 banks. Lane u works on unit u, so
//    lanes read activation blocks 8 blocks (256 B) apart: without padding, all 32 lanes would
//    hit the same bank. One 16-byte pad per unit shifts each lane by 4 banks (a 128-bit read is
//    served 8 lanes at a time: 8 x 4 banks, no conflict); the (d, s) pairs get one pad per unit.
//  * Many rows per CTA, weights unpacked once per block and reused for every token, warp-shuffle
//    reductions (deterministic: fixed order), and a grid of a few CTAs per SM that loops over
//    rows, so the activations are quantized a few hundred times rather than once per row.
//
// Work split: LPR lanes per row (a power of two, 32 unless a row has fewer units), 32 / LPR rows
// per warp at a time, 8 warps per CTA. Lane `sub` of a row takes units sub, sub + LPR, ...
// Passes: N is cut into passes of T <= 8 tokens (T a template parameter: the accumulators stay in
// registers); K is cut into chunks when T tokens of Q8_1 would not fit in shared memory (later
// chunks add to C, in order: still deterministic).
#include <algorithm>

#include "w_q8_1.cuh"

namespace gpu {
namespace {
constexpr int DEC_THREADS = 256;
constexpr int DEC_WARPS = DEC_THREADS / 32;
constexpr int UNIT = 8;                        // blocks per unit
constexpr int MAX_T = 8;                       // tokens per pass
constexpr int A_UNIT_VECS = UNIT * QK / 16 + 1;  // int4 per unit of activation quants: 16 + 1 pad
constexpr int A_UNIT_DS = UNIT + 1;              // float2 (d, s) per unit: 8 + 1 pad
constexpr int SMEM_PER_TOKEN_UNIT = A_UNIT_VECS * 16 + A_UNIT_DS * 8;  // 344 bytes

// Word j (4 bytes) of a byte string held in registers as 32-bit words, starting at byte `off`.
// After unrolling, `off` is a constant: one register, or one funnel shift of two.
__device__ __forceinline__ int word_at(const uint32_t* raw, int off) {
    const int w = off >> 2, sh = off & 3;
    return sh == 0 ? (int)raw[w] : (int)__funnelshift_r(raw[w], raw[w + 1], 8 * sh);
}

// Activation block `kb` of token t in shared memory: its 32 quants as 8 words, and (d, s).
struct ActSmem {
    int4* qs;     // [T][nu][A_UNIT_VECS]
    float2* ds;   // [T][nu][A_UNIT_DS]
    int nu;       // units per row chunk
    __device__ __forceinline__ void load(int t, int kb, int* a, float2& dsv) const {
        const int u = kb / UNIT, i = kb % UNIT;
        const int4* p = qs + ((size_t)t * nu + u) * A_UNIT_VECS + 2 * i;
        const int4 lo = p[0], hi = p[1];
        a[0] = lo.x; a[1] = lo.y; a[2] = lo.z; a[3] = lo.w;
        a[4] = hi.x; a[5] = hi.y; a[6] = hi.z; a[7] = hi.w;
        dsv = ds[((size_t)t * nu + u) * A_UNIT_DS + i];
    }
};

// One weight block (quants as words v, scale d_w) against T tokens' activation block kb.
template <class WF, int T>
__device__ __forceinline__ void block_times_tokens(const int* v, float d_w, const ActSmem& act, int kb,
                                                   float* acc) {
    int lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; i++) WF::words(v, i, lo[i], hi[i]);  // unpacked once, used T times
#pragma unroll
    for (int t = 0; t < T; t++) {
        int a[8];
        float2 ds;
        act.load(t, kb, a, ds);
        int sumi = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            sumi = __dp4a(lo[i], a[i], sumi);
            sumi = __dp4a(hi[i], a[i + 4], sumi);
        }
        acc[t] += block_result<WF>(d_w, ds.x, ds.y, sumi);
    }
}

template <class WF>
struct Unit {  // 8 consecutive weight blocks of one row, as raw 32-bit words
    static constexpr int BYTES = UNIT * (int)sizeof(typename WF::block);  // 144 (Q4_0) or 272 (Q8_0)
    static constexpr int VECS = BYTES / 16;                                // 9 or 17
    static_assert(BYTES % 16 == 0, "8 blocks are a whole number of 16-byte vectors");
    uint32_t w[VECS * 4 + 1];  // +1: word_at may read one word past the last block's end

    __device__ __forceinline__ void load(const uint8_t* p) {  // p is 16-byte aligned
        const uint4* v = (const uint4*)p;
#pragma unroll
        for (int i = 0; i < VECS; i++) {
            const uint4 x = __ldg(v + i);
            w[4 * i] = x.x; w[4 * i + 1] = x.y; w[4 * i + 2] = x.z; w[4 * i + 3] = x.w;
        }
        w[VECS * 4] = 0;
    }
    // Block i of the unit: scale (fp16 bits at byte B*i) and quants (from byte B*i + 2) as words.
    __device__ __forceinline__ void block(int i, int* v, float& d) const {
        constexpr int B = (int)sizeof(typename WF::block);
        const int off = B * i;
        d = scale_to_float((fp16_bits)(w[off >> 2] >> (8 * (off & 3))));
#pragma unroll
        for (int j = 0; j < WF::qs_words; j++) v[j] = word_at(w, off + 2 + 4 * j);
    }
};

template <class WF, int T>
__global__ void __launch_bounds__(DEC_THREADS)
decode_kernel(const float* __restrict__ A, const typename WF::block* __restrict__ W, float* __restrict__ C,
              int M, int K, int nb_total, int kb0, int nb, int lpr, bool accumulate) {
    // This launch: tokens A[0 .. T) (rows of K floats), blocks [kb0, kb0 + nb) of every weight row
    // (rows are nb_total blocks long), C rows [0 .. T) (M floats each), added to C if accumulate.
    extern __shared__ int4 smem[];
    const int nu = (nb + UNIT - 1) / UNIT;
    ActSmem act{smem, (float2*)(smem + (size_t)T * nu * A_UNIT_VECS), nu};
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int sub = lane % lpr;                       // this lane's place in its row's group
    const int rows_per_step = DEC_WARPS * (32 / lpr);
    const bool units = nb_total % UNIT == 0 && kb0 % UNIT == 0;  // every unit 16-byte aligned
    const int work = units ? nu : nb;                 // items per row: units or single blocks

    // First weight unit of this lane, requested before the quantization so that HBM is busy.
    int row = blockIdx.x * rows_per_step + warp * (32 / lpr) + lane / lpr;
    Unit<WF> cur;
    if (units && row < M && sub < work)
        cur.load((const uint8_t*)(W + (int64_t)row * nb_total + kb0 + UNIT * sub));

    // Quantize the activations into shared memory: one warp per 32-value block.
    for (int b = warp; b < T * nb; b += DEC_WARPS) {
        const int t = b / nb, kb = b % nb;
        const float x = A[(int64_t)t * K + (int64_t)(kb0 + kb) * QK + lane];
        fp16_bits d16, s16;
        const int q = quantize_q8_1_lane(x, d16, s16);
        int8_t* qs = (int8_t*)(act.qs + ((size_t)t * nu + kb / UNIT) * A_UNIT_VECS + 2 * (kb % UNIT));
        qs[lane] = (int8_t)q;
        if (lane == 0) act.ds[((size_t)t * nu + kb / UNIT) * A_UNIT_DS + kb % UNIT] =
            make_float2(scale_to_float(d16), scale_to_float(s16));
    }
    __syncthreads();

    for (int row0 = blockIdx.x * rows_per_step; row0 < M; row0 += gridDim.x * rows_per_step) {
        row = row0 + warp * (32 / lpr) + lane / lpr;
        float acc[T];
#pragma unroll
        for (int t = 0; t < T; t++) acc[t] = 0.0f;
        if (row < M) {
            const typename WF::block* w_row = W + (int64_t)row * nb_total + kb0;
            if (units) {
                for (int u = sub; u < work; u += lpr) {
                    if (u != sub || row0 != blockIdx.x * rows_per_step)
                        cur.load((const uint8_t*)(w_row + UNIT * u));  // (the first was loaded early)
                    Unit<WF> nxt;  // the lane's next unit of this row, in flight during the math
                    const bool more = u + lpr < work;
                    if (more) nxt.load((const uint8_t*)(w_row + UNIT * (u + lpr)));
#pragma unroll
                    for (int i = 0; i < UNIT; i++) {
                        int v[WF::qs_words];
                        float d_w;
                        cur.block(i, v, d_w);
                        block_times_tokens<WF, T>(v, d_w, act, UNIT * u + i, acc);
                    }
                    if (!more) break;
                    u += lpr;
#pragma unroll
                    for (int i = 0; i < UNIT; i++) {
                        int v[WF::qs_words];
                        float d_w;
                        nxt.block(i, v, d_w);
                        block_times_tokens<WF, T>(v, d_w, act, UNIT * u + i, acc);
                    }
                }
            } else {
                for (int kb = sub; kb < nb; kb += lpr) {  // unaligned rows: block by block, 16-bit loads
                    int v[WF::qs_words];
#pragma unroll
                    for (int j = 0; j < WF::qs_words; j++) v[j] = load_int_b2(w_row[kb].qs, j);
                    block_times_tokens<WF, T>(v, scale_to_float(w_row[kb].d), act, kb, acc);
                }
            }
        }
        // Sum the lpr partial sums of each row: butterfly within the group, fixed order.
#pragma unroll
        for (int t = 0; t < T; t++)
            for (int off = lpr / 2; off > 0; off >>= 1) acc[t] += __shfl_xor_sync(QG_FULL_MASK, acc[t], off);
        if (sub == 0 && row < M) {
#pragma unroll
            for (int t = 0; t < T; t++) {
                float* c = C + (int64_t)t * M + row;
                *c = accumulate ? *c + acc[t] : acc[t];
            }
        }
    }
}

int device_int(cudaDeviceAttr attr) {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, attr, dev);
    return v;
}

template <class WF, int T>
void launch_pass(const float* A, const typename WF::block* W, float* C, int M, int K, int nb_total, int kb0,
                 int nb, bool accumulate, cudaStream_t stream) {
    const int nu = (nb + UNIT - 1) / UNIT;
    const bool units = nb_total % UNIT == 0 && kb0 % UNIT == 0;
    const int work = units ? nu : nb;
    int lpr = 32;
    while (lpr > 1 && lpr / 2 >= work) lpr /= 2;  // fewest lanes per row that still give each one item
    const size_t smem = (size_t)T * nu * SMEM_PER_TOKEN_UNIT;
    auto kernel = decode_kernel<WF, T>;
    if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, DEC_THREADS, smem);
    const int rows_per_step = DEC_WARPS * (32 / lpr);
    const int steps = (M + rows_per_step - 1) / rows_per_step;
    // A few CTAs per SM, each looping over row steps: enough warps to keep HBM busy, few enough
    // that the activations are not quantized again for every 8 rows.
    const int ctas = std::max(1, std::min(steps, device_int(cudaDevAttrMultiProcessorCount) * std::min(per_sm, 2)));
    kernel<<<ctas, DEC_THREADS, smem, stream>>>(A, W, C, M, K, nb_total, kb0, nb, lpr, accumulate);
}

template <class WF>
void launch_tokens(int T, const float* A, const typename WF::block* W, float* C, int M, int K, int nb_total,
                   int kb0, int nb, bool accumulate, cudaStream_t stream) {
    switch (T) {
        case 1: launch_pass<WF, 1>(A, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 2: launch_pass<WF, 2>(A, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 3: launch_pass<WF, 3>(A, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 4: launch_pass<WF, 4>(A, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 5: launch_pass<WF, 5>(A, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 6: launch_pass<WF, 6>(A, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        case 7: launch_pass<WF, 7>(A, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
        default: launch_pass<WF, 8>(A, W, C, M, K, nb_total, kb0, nb, accumulate, stream); break;
    }
}
}  // namespace

// A is float32 [N, K] (p.A), quantized inside; W is WF blocks [M, K/32].
template <class WF>
void gemm_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    const int nb_total = p.K / QK;
    const int smem_max = device_int(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    // K chunk: as many whole units as fit for a full pass of MAX_T tokens.
    const int chunk_units = std::max(1, smem_max / (MAX_T * SMEM_PER_TOKEN_UNIT));
    const int chunk = std::min(nb_total, chunk_units * UNIT);
    for (int n0 = 0; n0 < p.N; n0 += MAX_T) {
        const int T = std::min(MAX_T, p.N - n0);
        for (int kb0 = 0; kb0 < nb_total; kb0 += chunk)
            launch_tokens<WF>(T, (const float*)p.A + (int64_t)n0 * p.K, (const typename WF::block*)p.W,
                              p.C + (int64_t)n0 * p.M, p.M, p.K, nb_total, kb0, std::min(chunk, nb_total - kb0),
                              kb0 > 0, stream);
    }
}

template void gemm_q8_1_decode<w_q4_0>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_decode<w_q8_0>(const GemmProblem&, cudaStream_t);

}  // namespace gpu

void cuda_q4_0_q8_1_decode(const GemmProblem& p, cudaStream_t stream) { gpu::gemm_q8_1_decode<gpu::w_q4_0>(p, stream); }
