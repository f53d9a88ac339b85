// tools/k_quants_cuda/v1_decode.cuh: the first version of cuda/08_k_quants/1_decode.cu (commit 5d3a248), kept
// verbatim below this header for tools/k_quants_cuda/variants.cu, which includes it inside namespace v1 to time
// the step before and after on the same GPU in one run (kquant-decode-214114.json measured this version).
// Not compiled into the package.
// cuda/08_k_quants/1_decode.cu (chapter 8): decode with K-quant weights, Q4_K and Q6_K times Q8_1
// activations, the pairing llama.cpp's CUDA backend uses for them (MMVQ, ggml-cuda/vecdotq.cuh's
// vec_dot_q4_K_q8_1 and vec_dot_q6_K_q8_1).
//
// What it teaches: a K-quant super-block (256 values) against Q8_1's 32-value blocks. The CPU
// steps of the chapter pair K-quants with Q8_K (one scale per 256 values, 16-value bsums); on the
// GPU the activations stay Q8_1, quantized once per call by the quantizer of chapter 6
// (common.cuh's quantize_q8_1_thread, or its sum_x twin with ggml-cuda's bytes). A Q4_K sub-block
// of 32 is exactly one Q8_1 block, so each gets its own d_a; a Q6_K sub-block of 16 is half of one.
// Per super-block, with u the Q8_1 quants and d_a their scale (block b):
//   Q4_K  d_w * sum_b d_a,b sc_b (q . u)_b  -  dmin_w * sum_b d_a,b m_b sum(u_b)
//   Q6_K  d_w * sum_t d_a,b(t) sc_t ((q - 32) . u)_t          t = sub-block of 16, b(t) = t / 2
// sum(u_b) is the integer sum of the activation quants, one more __dp4a with 0x01010101 (MMVQ's
// choice: it does not read Q8_1's s, so the min term is exact in integers and the result does
// not depend on what s holds). Every product inside is an integer; floats only scale them.
// The unpacking, per lane and 32-bit word: Q4_K word j of a 64-value chunk holds 4 values of its
// even sub-block (low nibbles) and the same 4 positions of the odd one (high nibbles); Q6_K's
// value is a nibble of ql with 2 bits of qh moved to bits 4-5, minus 32 (__vsubss4, per byte).
// Why this shape: a GEMV reads every weight byte once, so all that matters is streaming W. Lanes
// of a warp take consecutive words of a super-block (Q4_K: 16 lanes x 8 bytes, two super-blocks
// per warp step; Q6_K: 32 lanes x 4 bytes of ql), so a warp's load instruction covers whole
// 128-byte lines; each lane loads its tokens' activation words once and uses them for KQ_ROWS rows;
// a butterfly shuffle (fixed order, deterministic) sums the lanes of a row.
// What it still lacks: against chapter 6's decode step (decode.cuh), no 16-byte loads staged
// through shared memory with cp.async and no activations in shared memory (each lane reads its
// activation words from L1/L2); Q6_K's 210-byte blocks are only 2-byte aligned, so its words
// are two 16-bit loads. For N > 8 it makes passes of up to 8 tokens and reads W once per pass;
// prefill needs tensor cores (MMQ). Not tuned: KQ_WARPS and KQ_ROWS are first guesses.
// Grid: ceil(M / (KQ_WARPS * KQ_ROWS)) CTAs of KQ_WARPS warps; warp w owns KQ_ROWS consecutive rows.
// Needs __dp4a (sm_61); K a multiple of 256 (the binding checks that W is whole super-blocks and
// that A has the same K).
#include <algorithm>

#include "w_q8_1.cuh"

namespace gpu {
namespace {
constexpr int KQ_WARPS = 4;  // warps per CTA
constexpr int KQ_THREADS = 32 * KQ_WARPS;
constexpr int KQ_ROWS = 2;           // weight rows per warp, sharing the activation loads
constexpr int KQ_MAX_T = 8;          // tokens per pass (accumulators in registers)
constexpr int Q8_PER_K = QK_K / QK;  // Q8_1 blocks per super-block: 8

// The activations: float32 A [N, K] to Q8_1 blocks [N, K/32] in the workspace, one thread per
// block, with chapter 6's quantizer (the reference's bytes, or ggml-cuda's in the sum_x mode).
__global__ void quantize_rows_q8_1_kernel(const float* __restrict__ A, block_q8_1* __restrict__ Aq, int64_t blocks,
                                          int sum_mode) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= blocks) return;
    float x[QK];
    const float4* in = (const float4*)(A + i * QK);  // rows of K % 256 == 0 floats: 16-byte aligned
#pragma unroll
    for (int j = 0; j < QK / 4; j++) {
        const float4 v = in[j];
        x[4 * j] = v.x;
        x[4 * j + 1] = v.y;
        x[4 * j + 2] = v.z;
        x[4 * j + 3] = v.w;
    }
    int qw[8];
    fp16_bits d16, s16;
    if (sum_mode == Q8_1_S_SUM_X)
        quantize_q8_1_thread_sum_x(x, qw, d16, s16);
    else
        quantize_q8_1_thread(x, qw, d16, s16);
    block_q8_1* b = Aq + i;
    b->d = d16;
    b->s = s16;
    int* q = (int*)b->qs;  // byte 4 of a 36-byte block: 4-byte aligned
#pragma unroll
    for (int j = 0; j < 8; j++) q[j] = qw[j];
}

// ---------------------------------------------------------------- Q4_K
// 16 lanes per super-block. Lane li: 64-value chunk c = li / 4 (sub-blocks 2c and 2c + 1, Q8_1
// blocks 2c and 2c + 1), words 2l and 2l + 1 of the chunk's 8 (l = li % 4): one 8-byte load.
struct kq_q4_k {
    using block = block_q4_k;
    static constexpr int LANES = 16;
    struct Weights {
        int v[2];         // 8 nibble pairs: low nibbles sub-block 2c, high nibbles sub-block 2c + 1
        int sc[2], m[2];  // the two sub-blocks' 6-bit scales and mins
        float d, dmin;
        __device__ __forceinline__ void load(const block* b, int li) {
            const int c = li / 4, l = li % 4;
            const int2 q = *(const int2*)(b->qs + 32 * c + 8 * l);  // block 16-byte aligned, qs at 16
            v[0] = q.x;
            v[1] = q.y;
            const uint32_t dm = *(const uint32_t*)b;  // d | dmin
            d = scale_to_float((fp16_bits)(dm & 0xFFFF));
            dmin = scale_to_float((fp16_bits)(dm >> 16));
            // The 12 scale bytes as six 16-bit pairs: pair c holds sub-blocks 2c and 2c + 1 side by
            // side, so one 16-bit mask extracts both (get_scale_min_k4 for j = 2c, 2c + 1).
            const uint16_t* s = (const uint16_t*)b->scales;
            uint32_t scp, mp;
            if (c < 2) {  // sub-blocks 0-3: low 6 bits of bytes 0-3 (scales) and 4-7 (mins)
                scp = s[c] & 0x3F3F;
                mp = s[c + 2] & 0x3F3F;
            } else {  // sub-blocks 4-7: a nibble of bytes 8-11, the top 2 bits of bytes 0-3 / 4-7
                scp = (s[c + 2] & 0x0F0F) | ((s[c - 2] & 0xC0C0) >> 2);
                mp = ((s[c + 2] >> 4) & 0x0F0F) | ((s[c] & 0xC0C0) >> 2);
            }
            sc[0] = scp & 0xFF;
            sc[1] = scp >> 8;
            m[0] = mp & 0xFF;
            m[1] = mp >> 8;
        }
    };
    struct Acts {  // one token's activation words for this lane, and their blocks' d_a
        int u[4];  // block 2c: words 2l, 2l + 1; block 2c + 1: the same words
        float da[2];
        int usum[2];  // sum of the 8 quants of each block this lane sees: the min term's integer
        __device__ __forceinline__ void load(const block_q8_1* a, int li) {  // a: the super-block's 8 blocks
            const int c = li / 4, l = li % 4;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const block_q8_1* b = a + 2 * c + i;
                u[2 * i] = load_int_b4(b->qs, 2 * l);
                u[2 * i + 1] = load_int_b4(b->qs, 2 * l + 1);
                da[i] = scale_to_float(b->d);
                usum[i] = __dp4a(0x01010101, u[2 * i + 1], __dp4a(0x01010101, u[2 * i], 0));
            }
        }
    };
    __device__ __forceinline__ static float dot(const Weights& w, const Acts& a) {
        float sum_d = 0.0f, sum_m = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; i++) {  // i = 0: low nibbles (sub-block 2c), 1: high (2c + 1)
            const int q0 = (w.v[0] >> (4 * i)) & 0x0F0F0F0F, q1 = (w.v[1] >> (4 * i)) & 0x0F0F0F0F;
            const int sumi = __dp4a(q1, a.u[2 * i + 1], __dp4a(q0, a.u[2 * i], 0));
            sum_d += a.da[i] * (float)(sumi * w.sc[i]);
            sum_m += a.da[i] * (float)(a.usum[i] * w.m[i]);
        }
        return w.d * sum_d - w.dmin * sum_m;
    }
};

// ---------------------------------------------------------------- Q6_K
// 32 lanes per super-block. Lane li: half h = li / 16 (128 values), ql word li (values 32k + 4j'
// .. + 3 of the half for k = k1 and k1 + 2, j' = li % 8, k1 = (li / 8) % 2), their high bits in qh
// word 8h + j' at bits 2k. Q8_1 blocks 4h + k1 and 4h + k1 + 2, word j'.
struct kq_q6_k {
    using block = block_q6_k;
    static constexpr int LANES = 32;
    struct Weights {
        int vl, vh;  // low 4 bits (two nibbles per byte), high 2 bits (shifted to bits 0-1 and 4-5)
        int sc[2];
        float d;
        __device__ __forceinline__ void load(const block* b, int li) {
            const int h = li / 16, k1 = (li / 8) % 2, j = li % 8;
            vl = load_int_b2(b->ql, li);                     // 210-byte blocks: 2-byte aligned only
            vh = load_int_b2(b->qh, 8 * h + j) >> (2 * k1);  // bits 2k1 (k = k1) and 2k1 + 4 (k = k1 + 2)
            const int t = 8 * h + 2 * k1 + j / 4;            // sub-block of 16 of values 32 k1 + 4 j
            sc[0] = b->scales[t];
            sc[1] = b->scales[t + 4];  // 64 values on: k = k1 + 2
            d = scale_to_float(b->d);
        }
    };
    struct Acts {
        int u[2];
        float da[2];
        __device__ __forceinline__ void load(const block_q8_1* a, int li) {
            const int h = li / 16, k1 = (li / 8) % 2, j = li % 8;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const block_q8_1* b = a + 4 * h + k1 + 2 * i;
                u[i] = load_int_b4(b->qs, j);
                da[i] = scale_to_float(b->d);
            }
        }
    };
    __device__ __forceinline__ static float dot(const Weights& w, const Acts& a) {
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int lo = (w.vl >> (4 * i)) & 0x0F0F0F0F;         // i = 0: low nibbles, 1: high
            const int hi = ((w.vh >> (4 * i)) << 4) & 0x30303030;  // 2 bits to bits 4-5 of each byte
            const int q = __vsubss4(lo | hi, 0x20202020);          // q - 32, per byte: -32 .. 31
            sum += a.da[i] * (float)(__dp4a(q, a.u[i], 0) * w.sc[i]);
        }
        return w.d * sum;
    }
};

// ---------------------------------------------------------------- the kernel
// T tokens of Q8_1 activations (Aq, K/32 blocks per token) times KQ_ROWS rows per warp of W (nbk
// super-blocks per row); C [T, M].
template <class KQ, int T>
__global__ void __launch_bounds__(KQ_THREADS)
    kq_decode_kernel(const block_q8_1* __restrict__ Aq, const typename KQ::block* __restrict__ W, float* __restrict__ C,
                     int M, int nbk) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int row0 = (blockIdx.x * KQ_WARPS + warp) * KQ_ROWS;
    if (row0 >= M) return;                       // the whole warp: no shuffle waits for it
    constexpr int SB_PER_STEP = 32 / KQ::LANES;  // super-blocks a warp covers per step: 2 (Q4_K), 1 (Q6_K)
    const int li = lane % KQ::LANES;
    float acc[KQ_ROWS][T];
#pragma unroll
    for (int r = 0; r < KQ_ROWS; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.0f;

    for (int sb0 = 0; sb0 < nbk; sb0 += SB_PER_STEP) {
        const int sb = sb0 + lane / KQ::LANES;
        if (sb >= nbk) continue;  // Q4_K, an odd number of super-blocks: half a warp idles at the end
        typename KQ::Weights w[KQ_ROWS];
#pragma unroll
        for (int r = 0; r < KQ_ROWS; r++) {  // rows past M read row M - 1 and are not written
            const int row = min(row0 + r, M - 1);
            w[r].load(W + (int64_t)row * nbk + sb, li);
        }
#pragma unroll
        for (int t = 0; t < T; t++) {
            typename KQ::Acts a;
            a.load(Aq + ((int64_t)t * nbk + sb) * Q8_PER_K, li);  // loaded once, used for KQ_ROWS rows
#pragma unroll
            for (int r = 0; r < KQ_ROWS; r++) acc[r][t] += KQ::dot(w[r], a);
        }
    }
    // butterfly sum over the warp (fixed order: deterministic); lane 0 writes
#pragma unroll
    for (int r = 0; r < KQ_ROWS; r++)
#pragma unroll
        for (int t = 0; t < T; t++) {
            float v = acc[r][t];
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(QG_FULL_MASK, v, off);
            if (lane == 0 && row0 + r < M) C[(int64_t)t * M + row0 + r] = v;
        }
}

template <class KQ, int T>
void launch_kq_pass(const block_q8_1* Aq, const typename KQ::block* W, float* C, int M, int nbk, cudaStream_t stream) {
    const int rows_per_cta = KQ_WARPS * KQ_ROWS;
    kq_decode_kernel<KQ, T><<<(M + rows_per_cta - 1) / rows_per_cta, KQ_THREADS, 0, stream>>>(Aq, W, C, M, nbk);
}

// p.A float32 [N, K], p.W KQ blocks [M, K/256], p.workspace at least N * K/32 Q8_1 blocks (gemm.h's
// act_workspace_bytes: N * K + 8 * N * K/32 bytes, more than the 36 * N * K/32 needed).
template <class KQ>
void gemm_kq_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    const int nbk = p.K / QK_K;
    const int64_t blocks = (int64_t)p.N * (p.K / QK);
    block_q8_1* Aq = (block_q8_1*)p.workspace;
    quantize_rows_q8_1_kernel<<<(unsigned)((blocks + 127) / 128), 128, 0, stream>>>((const float*)p.A, Aq, blocks,
                                                                                    p.q8_1_sum_mode);
    const auto* W = (const typename KQ::block*)p.W;
    for (int n0 = 0; n0 < p.N; n0 += KQ_MAX_T) {
        const block_q8_1* a = Aq + (int64_t)n0 * nbk * Q8_PER_K;
        float* c = p.C + (int64_t)n0 * p.M;
        switch (std::min(KQ_MAX_T, p.N - n0)) {
            case 1: launch_kq_pass<KQ, 1>(a, W, c, p.M, nbk, stream); break;
            case 2: launch_kq_pass<KQ, 2>(a, W, c, p.M, nbk, stream); break;
            case 3: launch_kq_pass<KQ, 3>(a, W, c, p.M, nbk, stream); break;
            case 4: launch_kq_pass<KQ, 4>(a, W, c, p.M, nbk, stream); break;
            case 5: launch_kq_pass<KQ, 5>(a, W, c, p.M, nbk, stream); break;
            case 6: launch_kq_pass<KQ, 6>(a, W, c, p.M, nbk, stream); break;
            case 7: launch_kq_pass<KQ, 7>(a, W, c, p.M, nbk, stream); break;
            default: launch_kq_pass<KQ, 8>(a, W, c, p.M, nbk, stream); break;
        }
    }
}
}  // namespace
}  // namespace gpu

void cuda_q4_k_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_kq_q8_1_decode<gpu::kq_q4_k>(p, stream);
}

void cuda_q6_k_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_kq_q8_1_decode<gpu::kq_q6_k>(p, stream);
}
