// cuda/common.cuh: the device helpers the quantized CUDA kernels share: reading a scale, warp
// reductions, llama.cpp's Q8_1 activation quantizer (a warp or a thread per 32-value block),
// cutting words out of unaligned bytes, cp.async copies and programmatic dependent launch.
//
// A block stores its scale as fp16 bits (formats.h). formats.h's fp16_to_fp32 rebuilds the float
// with integer tricks so that CPU code needs no fp16 support; the GPU has a conversion
// instruction (cvt.f32.f16), exact for every half including subnormals, inf and NaN, so the
// kernels use it. Both give the same float: the reference reads scales the same way.
#pragma once
#include <cuda_fp16.h>

#include <utility>

#include "launchers.h"

__device__ __forceinline__ float scale_to_float(fp16_bits h) { return __half2float(__ushort_as_half(h)); }

constexpr unsigned QG_FULL_MASK = 0xffffffffu;

// Butterfly reductions over a warp; every lane gets the result. The sum's order is ggml-cuda's
// warp_reduce_sum, so a float sum rounds as it does there.
__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(QG_FULL_MASK, v, off));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(QG_FULL_MASK, v, off);
    return v;
}
__device__ __forceinline__ int warp_sum(int v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(QG_FULL_MASK, v, off);
    return v;
}

// 1/d, or 0 where d is 0 or 1/d overflows (as cpu/quantize.cpp's inverse_scale). nvcc would fuse
// a*b+c into an FMA that rounds differently from the C reference, so the roundings that matter are
// spelled out (__fdiv_rn, __fmul_rn).
__device__ __forceinline__ float inverse_scale(float d) {
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    return isinf(id) ? 0.0f : id;
}

// llama.cpp's quantize_row_q8_1_ref for one block, by a whole warp: lane j holds value j, gets
// back quant j; d and s (already rounded to fp16, as a kernel reads them from a block) in every
// lane. Byte for byte the CPU reference's (the kernels that use it are tested against it).
// Non-finite input: llama.cpp's result is undefined (fmaxf drops a NaN from the max, so the
// block quietly loses it). Here a block holding a NaN or an inf gets d = s = NaN instead, so
// every output it touches is NaN: bad input shows in the result rather than vanishing.
__device__ __forceinline__ int quantize_q8_1_lane(float v, fp16_bits& d16, fp16_bits& s16) {
    if (__any_sync(QG_FULL_MASK, !isfinite(v))) {
        d16 = s16 = 0x7E00;  // fp16 NaN
        return 0;
    }
    const float d = __fdiv_rn(warp_max(fabsf(v)), 127.0f);
    const int q = (int)roundf(__fmul_rn(v, inverse_scale(d)));
    d16 = fp32_to_fp16(d);
    s16 = fp32_to_fp16(__fmul_rn((float)warp_sum(q), d));
    return q;
}

// max |x| of a block of 32 values held by one thread, and whether all of them are finite.
__device__ __forceinline__ float block_amax(const float* x, bool& finite) {
    float amax = 0.0f;
    finite = true;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        amax = fmaxf(amax, fabsf(x[j]));
        finite = finite && isfinite(x[j]);
    }
    return amax;
}

// The same quantizer by one thread for a whole block (x[0..31] in registers): quants packed four
// to a word (qw[0..7], word i = values 4i..4i+3), d and s as fp16. Every step is order-free (a max,
// an integer sum, per-value roundings), so the bytes equal the warp version's and the reference's.
__device__ __forceinline__ void quantize_q8_1_thread(const float* x, int* qw, fp16_bits& d16, fp16_bits& s16) {
    bool finite;
    const float amax = block_amax(x, finite);
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = inverse_scale(d);
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t w = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int q = (int)roundf(__fmul_rn(x[4 * i + j], id));
            sum += q;
            w |= (uint32_t)(q & 0xFF) << (8 * j);
        }
        qw[i] = finite ? (int)w : 0;
    }
    d16 = finite ? fp32_to_fp16(d) : (fp16_bits)0x7E00;
    s16 = finite ? fp32_to_fp16(__fmul_rn((float)sum, d)) : (fp16_bits)0x7E00;
}

// The same quantizer by 8 lanes for a block, 4 values per lane: the layout of the image quantizers
// (chapter 6's decode, chapter 8's K-quant decode), ~8x the threads of one thread per block, so a
// token's few hundred blocks take a few thousand threads rather than a few hundred (the quantizer
// sits on the decode kernel's critical path). The 8 lanes are an aligned group of the warp (lanes
// 8h .. 8h + 7), lane g of it holding values 4g .. 4g + 3 (x); every lane of the warp must call it.
// Returns lane g's 4 quants packed into a word (value 4g in the low byte); d16, s16 and the block's
// sum of quants (usum) in every lane of the group. The reference's bytes, as quantize_q8_1_thread's
// (the max and the integer sum do not depend on order), or with sum_mode Q8_1_S_SUM_X those of
// ggml-cuda's quantize_q8_1: q = round(x / d) (0 where the block is all zeros) and s = the float sum
// of x in the order of its warp_reduce_sum, a butterfly over value offsets 16, 8, 4, 2, 1 (what its
// lane 0 holds): offsets 16, 8, 4 are lanes 4, 2, 1 of the group, offsets 2 and 1 are within a lane.
// A block holding a non-finite value gets zero quants and d = s = NaN, as quantize_q8_1_lane.
__device__ __forceinline__ int quantize_q8_1_group8(float4 x, int sum_mode, fp16_bits& d16, fp16_bits& s16, int& usum) {
    const float v[4] = {x.x, x.y, x.z, x.w};
    float amax = 0.0f;
    int finite = 1;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        amax = fmaxf(amax, fabsf(v[j]));
        finite &= isfinite(v[j]) ? 1 : 0;
    }
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(QG_FULL_MASK, amax, off));
        finite &= __shfl_xor_sync(QG_FULL_MASK, finite, off);
    }
    const float d = __fdiv_rn(amax, 127.0f);
    const bool sum_x = sum_mode == Q8_1_S_SUM_X;
    const float id = inverse_scale(d);
    uint32_t w = 0;
    int sum = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int q;
        if (sum_x)
            q = amax == 0.0f ? 0 : (int)roundf(__fdiv_rn(v[j], d));  // ggml-cuda: x / d
        else
            q = (int)roundf(__fmul_rn(v[j], id));  // the reference: x * (1 / d)
        sum += q;
        w |= (uint32_t)(q & 0xFF) << (8 * j);
    }
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) sum += __shfl_xor_sync(QG_FULL_MASK, sum, off);
    float s;
    if (sum_x) {
        float t[4] = {v[0], v[1], v[2], v[3]};
#pragma unroll
        for (int off = 4; off > 0; off >>= 1) {  // value offsets 16, 8, 4: lane offsets 4, 2, 1
#pragma unroll
            for (int j = 0; j < 4; j++) t[j] = __fadd_rn(t[j], __shfl_xor_sync(QG_FULL_MASK, t[j], off));
        }
        t[0] = __fadd_rn(t[0], t[2]);  // value offset 2
        t[1] = __fadd_rn(t[1], t[3]);
        s = __fadd_rn(t[0], t[1]);  // value offset 1
    } else {
        s = __fmul_rn((float)sum, d);
    }
    d16 = finite ? fp32_to_fp16(d) : (fp16_bits)0x7E00;
    s16 = finite ? fp32_to_fp16(s) : (fp16_bits)0x7E00;
    usum = finite ? sum : 0;
    return finite ? (int)w : 0;
}

// ggml-cuda's MMQ activation quantizer (quantize_mmq_q8_1) for one block, by a whole warp: lane j
// holds value j. d_inv = 127 / amax, q = round(x * d_inv), d = 1 / d_inv. ggml-cuda is compiled with
// -use_fast_math, so its two divisions are the approximate ones (__fdividef); ours are too. MMQ keeps
// d as fp16 beside the sum for Q4_0 weights (half2 (d, s)) and as a float32 for Q8_0 weights, which
// never read s: d_fp16 says which. An all-zero block gets zero quants and d = 0 (ggml divides by
// zero there and converts NaN); a non-finite value makes d NaN, as quantize_q8_1_lane does.
__device__ __forceinline__ int quantize_mmq_lane(float v, bool d_fp16, float& d_out) {
    if (__any_sync(QG_FULL_MASK, !isfinite(v))) {
        d_out = __int_as_float(0x7FC00000);  // NaN
        return 0;
    }
    const float amax = warp_max(fabsf(v));
    if (amax == 0.0f) {
        d_out = 0.0f;
        return 0;
    }
    const float d_inv = __fdividef(127.0f, amax);
    const float d = __fdividef(1.0f, d_inv);
    d_out = d_fp16 ? scale_to_float(fp32_to_fp16(d)) : d;
    return (int)roundf(__fmul_rn(v, d_inv));
}

// Word j (4 bytes) of a byte string held as 32-bit words, starting at byte `off`. After unrolling,
// `off` is a constant: one register, or one funnel shift of two.
// [excerpt: word_at]
__device__ __forceinline__ int word_at(const uint32_t* raw, int off) {
    const int w = off >> 2, sh = off & 3;
    return sh == 0 ? (int)raw[w] : (int)__funnelshift_r(raw[w], raw[w + 1], 8 * sh);
}
// [end excerpt: word_at]

// cp.async (sm_80+): a 16-byte copy global -> shared that does not pass through registers. Copies
// are grouped by commit; wait_group<n> waits until at most n of this thread's groups are pending.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#else
    __trap();
#endif
}
// The same with a guard: where `valid` is false nothing is read (src-size 0) and the 16 (4)
// bytes of shared memory are filled with zeros: tails of K need no separate code path.
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
#else
    __trap();
#endif
}
__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 4 : 0));
#else
    __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#else
    __trap();
#endif
}
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
#else
    __trap();
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::);
#else
    __trap();
#endif
}

// Programmatic dependent launch (sm_90+). A kernel launched with the programmatic-serialization
// attribute may start while the previous kernel in the stream still runs; grid_dependency_wait()
// blocks until that kernel has finished and its writes are visible, so everything before it must
// not read what the previous kernel writes (it may read other inputs: the decode kernel starts
// its weight copies there). allow_dependent_launch() in the previous kernel lets the dependent one
// be scheduled before it finishes. Both are no-ops without the attribute or before sm_90.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}
// Bulk copies and mbarriers (sm_90+): the wgmma steps' stages and the decode kernel's activations.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Bulk copies (the TMA engine, no per-thread copy instructions in the loop): `bytes` (a multiple of
// 16, both addresses 16-byte aligned) from global to shared memory, counted on an mbarrier.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, int bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(bytes), "r"((uint32_t)__cvta_generic_to_shared(bar))
                 : "memory");
}
// mbarriers: a phase completes when `count` arrivals (and the bytes an expect_tx announced) are in.
__device__ __forceinline__ void bar_init(uint64_t* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(count)
                 : "memory");
}
__device__ __forceinline__ void bar_expect(uint64_t* bar, int bytes) {  // one arrival, plus bytes to come
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)),
        "r"(bytes)
        : "memory");
}
__device__ __forceinline__ void bar_arrive(uint64_t* bar) {  // one arrival (release: this thread's writes before it)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar))
                 : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* bar, int parity) {
    asm volatile(
        "{\n.reg .pred p;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT_%=;\n}\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)),
        "r"(parity)
        : "memory");
}
// After bar_init: the barrier's initial state visible to the other threads and to the bulk copies.
__device__ __forceinline__ void bar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
#endif

// The host side: launch `kernel` with the programmatic-serialization attribute when `pdl` is true
// (an ordinary launch otherwise; the attribute needs compute capability 9.0 or newer).
template <class... Params, class... Args>
inline void launch_maybe_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             bool pdl, Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    // [excerpt: pdl_attribute]
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    // [end excerpt: pdl_attribute]
    cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}
