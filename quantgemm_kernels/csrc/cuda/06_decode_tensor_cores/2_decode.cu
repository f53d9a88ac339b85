// cuda/06_decode_tensor_cores/2_decode.cu (chapter 6): the decode kernel, activations quantized
// once and copied by every CTA.
//
// What it teaches: decode.cuh's weight stream, with the activations quantized once for all CTAs,
// by a small kernel of their own (quantize_image_kernel: llama.cpp's Q8_1 bytes,
// quantize_q8_1_group8 in common.cuh), straight into a workspace laid out exactly as the decode
// kernel keeps them in shared memory, so that each CTA fills its shared memory with plain copies
// (ImageActs). The decode kernel is launched with programmatic dependent launch
// (sm_90): it starts while the quantizer still runs, issues its first weight copies (weights do
// not depend on the quantizer), and only then waits for the quantizer's results
// (grid_dependency_wait), which one thread copies with two bulk copies per token, counted on an
// mbarrier of their own (cp.async before sm_90). llama.cpp also runs a separate quantize_q8_1
// kernel, but its MMVQ then reads the activations from global memory per block.
// Why it is faster: the previous step (1_decode_fused.cu) had every CTA quantize all N x K floats
// itself: 4x the bytes from L2 per CTA plus the quantizer's arithmetic, once per CTA, not
// overlapped with the weight stream, a cost that grows with every token. Here a CTA copies 36
// bytes per 32 values, behind its first weight copies.
// What it still lacks: for N > 8 it makes passes of 8 tokens and reads the weights once per pass;
// prefill needs tensor cores (3_mma_regstage.cu onwards).
//
// W8A8 (cuda_q8_0_q8_1_decode, below): the same kernel with WF = w_q8_0: 8 blocks are 272 B =
// 17 x 16 B, the quants need no unpacking and there is no compensation.
// Grid: decode.cuh's, after the quantizer's: 8 threads per (token, unit, block of the unit), 128 per CTA.
// Measured (H100, Q4_0 4096 x 14336, one token, weights cold; bench_results/nvidia-h100-80gb-hbm3/
// 2026-11-27): a call (quantizer + decode kernel, launched eagerly, CUPTI) took 18.3 us with one
// thread per block (448 threads for the whole GPU; narrow-001534.json) and takes 16.4 with 8
// (quantizer-063353.json), llama.cpp 17.8 in both runs; CUPTI gives the new quantizer 1.9 us.
// Tried and not kept: no quantizer kernel at N = 1, every CTA quantizing the token into its own
// shared memory (8 lanes per block) behind its first weight step: 19.8 us per call against 15.7
// (264 CTAs each reading and quantizing all 14336 floats).
// Tried and not kept: the same kernel with its data moved by the copy engine (one CTA of 16 warps
// per SM; lane 0 of each warp moving a whole step with one cp.async.bulk onto the warp's mbarrier,
// every ring slot issued before anything waits; the activations as two bulk copies per token on a
// barrier of their own, so that they no longer queue behind a cp.async group of weights). The idea
// came from a gap: on an H200 a kernel that only reads Q4_0 4096 x 14336 with 16-byte loads takes
// 8.9 us, this kernel 11.5 (bench_results/nvidia-h200/2026-11-27/read-ceiling-1330.txt). Correct
// (tests, memcheck, racecheck), but slower or equal at every N = 1-8 on the three Llama-3-8B shapes,
// both formats (H100, bench_results/nvidia-h100-80gb-hbm3/2026-11-27/bulk-131045.json: Q4_0 4096 x
// 14336 N = 1 16.1 against 15.7 us, 14336 x 4096 18.6 against 15.3): the start of the stream was not
// what held it back. Not profiled further. Its activation half, alone, with the weights on cp.async
// as before and 8 warps per CTA, is what ImageActs does now (decode.cuh's header has that A/B).
#include "decode.cuh"

namespace gpu {
namespace {
// Eight threads per (token, unit, block of the unit), four values each (quantize_q8_1_group8): the
// block's Q8_1 bytes, those of the reference quantizer (s = d * sum(q)) or, in the sum_x mode, those
// of ggml-cuda's quantize_q8_1 (s = sum(x), which MMVQ reads), or zeros for the blocks past K in a
// row's last unit, written into the layout ActSmem reads, pads included (zeros: they are copied,
// never used). Thread counts are multiples of 64, so a warp is wholly inside or past the end.
// [excerpt: image_quantizer]
__global__ void quantize_image_kernel(const float* __restrict__ A, int4* __restrict__ qs, float2* __restrict__ ds,
                                      int N, int nb_total, int nu_total, int sum_mode) {
    allow_dependent_launch();  // the decode kernel may start now: it waits for our results itself
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i - threadIdx.x % 32 >= (int64_t)N * nu_total * UNIT * 8) return;  // the whole warp is past the end
    const int g = (int)(i % 8);  // lane of the block's group: values 4g .. 4g + 3
    const int64_t blk = i / 8;   // (token * nu_total + unit) * UNIT + slot
    const int slot = (int)(blk % UNIT);
    const int64_t tu = blk / UNIT;  // token * nu_total + unit
    const int u = (int)(tu % nu_total), n = (int)(tu / nu_total);
    const int kb = u * UNIT + slot;
    const bool real = kb < nb_total;  // the same for the 8 lanes of a group
    const float4 x = real ? ((const float4*)(A + ((int64_t)n * nb_total + kb) * QK))[g] : make_float4(0, 0, 0, 0);
    fp16_bits d16, s16;
    int usum;
    const int w = quantize_q8_1_group8(x, sum_mode, d16, s16, usum);  // every lane: shuffles
    ((int*)(qs + tu * A_UNIT_VECS + 2 * slot))[g] = w;
    if (g != 0) return;
    float2* row_ds = ds + (int64_t)n * ds_pitch(nu_total);
    row_ds[u * A_UNIT_DS + slot] = real ? make_float2(scale_to_float(d16), scale_to_float(s16)) : make_float2(0, 0);
    if (slot == 0) {  // the unit's pads, and the row's last float2 when its pitch is rounded up
        qs[tu * A_UNIT_VECS + 2 * UNIT] = make_int4(0, 0, 0, 0);
        row_ds[u * A_UNIT_DS + UNIT] = make_float2(0.0f, 0.0f);
        if (u == nu_total - 1 && ds_pitch(nu_total) > nu_total * A_UNIT_DS)
            row_ds[nu_total * A_UNIT_DS] = make_float2(0.0f, 0.0f);
    }
}
// [end excerpt: image_quantizer]

// The activations of a launch: the quantizer's image, copied into shared memory.
struct ImageActs {
    static constexpr bool PDL = true;  // the decode kernel may start while the quantizer finishes
    template <int T>
    __device__ __forceinline__ static void stage(const ActSource& src, const ActSmem& act, int K, int kb0, int nb,
                                                 int nu, uint64_t* bar) {
        // [excerpt: image_copy]
        // The activations: wait for the quantizer (launched just before, programmatic dependent
        // launch), then copy T token rows of the image, as they will sit in shared memory. Row
        // chunks start at an even unit (the launcher's chunks are), so every copy is 16-byte aligned.
        grid_dependency_wait();
        const int u0 = kb0 / UNIT;
        const size_t g_pitch = ds_pitch(src.nu_total);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        // Two bulk copies per token (quants, pairs) counted on an mbarrier of their own: waiting for
        // them is not waiting for the weight steps issued before (a cp.async group would be, since
        // groups complete in order), so each warp starts on its first step as soon as that step
        // and the activations are in, not when the CTA's last step is.
        const int qbytes = nu * A_UNIT_VECS * 16, dbytes = ds_pitch(nu) * 8;
        if (threadIdx.x == 0) {
            bar_expect(bar, T * (qbytes + dbytes));
            for (int t = 0; t < T; t++) {
                bulk_copy(act.qs + (size_t)t * nu * A_UNIT_VECS, src.qs + ((size_t)t * src.nu_total + u0) * A_UNIT_VECS,
                          qbytes, bar);
                bulk_copy(act.ds + (size_t)t * ds_pitch(nu), src.ds + t * g_pitch + (size_t)u0 * A_UNIT_DS, dbytes,
                          bar);
            }
        }
        bar_wait(bar, 0);
#else
        const int qv = nu * A_UNIT_VECS, dv = ds_pitch(nu) / 2;
        for (int c = threadIdx.x; c < T * qv; c += DEC_THREADS) {
            const int t = c / qv, j = c % qv;
            cp_async16(act.qs + c, src.qs + ((size_t)t * src.nu_total + u0) * A_UNIT_VECS + j);
        }
        for (int c = threadIdx.x; c < T * dv; c += DEC_THREADS) {
            const int t = c / dv, j = c % dv;
            cp_async16((int4*)act.ds + c, (const int4*)(src.ds + t * g_pitch + (size_t)u0 * A_UNIT_DS) + j);
        }
        cp_async_commit();
        cp_async_wait_all();  // (the weight steps issued above land too: they were issued first)
#endif
        // [end excerpt: image_copy]
    }
    static void prepare(const GemmProblem& p, int4* img_qs, float2* img_ds, int nb_total, int nu_total,
                        cudaStream_t stream) {
        const int64_t threads = (int64_t)p.N * nu_total * UNIT * 8;  // a multiple of 64
        quantize_image_kernel<<<(unsigned)((threads + 127) / 128), 128, 0, stream>>>(
            (const float*)p.A, img_qs, img_ds, p.N, nb_total, nu_total, p.q8_1_sum_mode);
    }
};

}  // namespace
}  // namespace gpu

void cuda_q4_0_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_decode<gpu::w_q4_0, gpu::ImageActs>(p, stream);
}

void cuda_q8_0_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_decode<gpu::w_q8_0, gpu::ImageActs>(p, stream);
}

// Chapter 7: Q4_1 weights (w_q8_1.cuh, w_q4_1): 8 blocks are 160 B = 10 x 16 B; the min enters
// through the activations' s as in llama.cpp's MMVQ, so matching it takes s = sum(x) (sum_x).
void cuda_q4_1_q8_1_decode(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_decode<gpu::w_q4_1, gpu::ImageActs>(p, stream);
}
