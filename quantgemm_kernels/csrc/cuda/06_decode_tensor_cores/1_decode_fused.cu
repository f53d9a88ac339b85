// cuda/06_decode_tensor_cores/1_decode_fused.cu (chapter 6): the decode kernel, every CTA
// quantizes the activations itself.
//
// What it teaches: a kernel for decode (N <= 8 per pass), decode.cuh's weight stream: 16-byte
// loads of 8-block units, staged per warp through a ring of cp.async buffers, each weight block
// unpacked once and used for every token, a butterfly sum per row. The activations take the
// simplest route: every CTA quantizes all T tokens' activations itself, from float32 in L2, into
// its shared memory before it streams its rows (FusedActs: no workspace, one kernel).
// Why it is faster: chapter 4's tiled kernels give a token a row of a 32-token tile (31 of 32 rows
// empty at N = 1) and read weights with narrow loads; here each weight byte is read once, 16
// bytes per load, and serves all T tokens.
// What it still lacks: every CTA repeats the quantization, K floats per token from L2 plus the
// quantizer's arithmetic, not overlapped with the weight stream: little at N = 1, more with every
// token. 2_decode.cu quantizes once, in a kernel of its own.
// Measured against 2_decode.cu on an H200 (weights cold; bench_results/nvidia-h200/2026-11-29/
// fused-sweep-013147.json): level at one token on the smallest layer (1024 x 4096: 4.45 against
// 4.51 us), behind everywhere else, by more with every token (4096 x 4096 N = 4: 13.60 against
// 9.22; 4096 x 14336 N = 1: 16.19 against 12.88).
// Grid: decode.cuh's.
#include "decode.cuh"

namespace gpu {
namespace {
// The activations of a launch: T tokens' float32 rows, quantized by every CTA into its shared memory.
struct FusedActs {
    static constexpr bool PDL = false;  // one kernel: nothing runs before it
    template <int T>
    __device__ __forceinline__ static void stage(const ActSource& src, const ActSmem& act, int K, int kb0, int nb,
                                                 int nu, uint64_t*) {
        // One thread per 32-value block, two blocks per round so that 16 independent 16-byte loads
        // per thread are in flight (a warp per block, one block at a time, waits on L2 once per block).
        const float* A = src.A;
        for (int b0 = threadIdx.x; b0 < T * nb; b0 += 2 * DEC_THREADS) {
            float x[2][QK];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int b = b0 + h * DEC_THREADS;
                if (b < T * nb) {
                    const float4* in = (const float4*)(A + (int64_t)(b / nb) * K + (int64_t)(kb0 + b % nb) * QK);
#pragma unroll
                    for (int j = 0; j < QK / 4; j++) {
                        const float4 v = in[j];
                        x[h][4 * j] = v.x;
                        x[h][4 * j + 1] = v.y;
                        x[h][4 * j + 2] = v.z;
                        x[h][4 * j + 3] = v.w;
                    }
                }
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int b = b0 + h * DEC_THREADS;
                if (b >= T * nb) break;
                const int t = b / nb, kb = b % nb;
                int qw[8];
                fp16_bits d16, s16;
                quantize_q8_1_thread(x[h], qw, d16, s16);
                int4* dst = act.qs + ((size_t)t * nu + kb / UNIT) * A_UNIT_VECS + 2 * (kb % UNIT);
                dst[0] = make_int4(qw[0], qw[1], qw[2], qw[3]);
                dst[1] = make_int4(qw[4], qw[5], qw[6], qw[7]);
                act.ds[(size_t)t * ds_pitch(nu) + (kb / UNIT) * A_UNIT_DS + kb % UNIT] =
                    make_float2(scale_to_float(d16), scale_to_float(s16));
            }
        }
    }
    static void prepare(const GemmProblem&, int4*, float2*, int, int, cudaStream_t) {}  // no workspace
};
}  // namespace
}  // namespace gpu

void cuda_q4_0_q8_1_decode_fused(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_decode<gpu::w_q4_0, gpu::FusedActs>(p, stream);
}
