// cuda/06_decode_tensor_cores/8_wgmma_splitk.cu (chapter 6): the warp-specialized wgmma step with
// split-K, fifth step.
//
// What it teaches: filling the GPU when the output has few tiles. The fourth step (7_wgmma_ws.cu)
// gives each 128 x 128 tile of C to one CTA, which walks the whole of K. At M = 4096 and up to 128
// tokens that is 32 CTAs on a GPU of 132 SMs: three quarters of the SMs, and of the memory
// system's ability to keep requests in flight, stay idle, and the time is that of one CTA streaming
// 128 rows x K alone. Here the K steps of a tile are split over gridDim.z CTAs (wgmma_splits in
// gemm.h: as many as fill the SMs once, at most 8, each keeping at least 4 steps of 8 blocks), each
// writes its partial sums to a plane of the workspace, and a second kernel adds the planes in a
// fixed order (z = 0, 1, ...): the result does not depend on which CTA finished first.
// Why it is faster: 4x the CTAs at M = 4096, N <= 128, each with a quarter of the K steps (H100,
// Q4_0, N = 64, cold: 170 -> 53 us at K = 14336, 52 -> 22 us at K = 4096; sweep-143850.json); the
// weights are still read once (each split reads its own K range), the activations once per tile as
// before. The partials cost splits x N x M x 4 bytes written and read again: at N = 64, M = 4096
// and 4 splits, 4 MB, against the 29 MB of Q4_0 weights at K = 14336.
// What it still lacks: the split is fixed per launch (stream-K, as llama.cpp's MMQ does, balances
// tiles of uneven cost); the partials travel through global memory and a second launch.
//
// The arithmetic: each split sums its blocks in the fourth step's order; the planes are then added,
// so outputs differ from the fourth step's by float32 rounding of the regrouped sum (a test bounds
// it). With one split (large M or N, or short K) the launcher runs the fourth step as it is, and the
// bits are the same.
// Tried and lost: the sum kernel launched with programmatic dependent launch, every split GEMM
// (steps 6 to 8, the mma split step) allowing it at its start, so that its CTAs would be placed
// before the GEMM ends (the sum is 1.6 us of a 12 us call, Q4_0 4096 x 4096 N = 16). No faster on an
// H100, same machine, one build after the other: the fp16 step 12.7 us against 12.1 there, 24.7
// against 24.2 on 4096 x 14336, the small step 11.9 against 11.5 (split-pdl-155328.json against
// split-nopdl-155419.json): with one GEMM CTA holding an SM's registers, the sum's CTAs find no room
// before the GEMM's CTAs leave. Allowed after the K loop instead, the fp16 step's sum does gain
// (12_wgmma_f16.cu's header): splitk_sum's `pdl` says which launches use it.
// Grid: 7_wgmma_ws.cu's, with gridDim.z = splits; then splitk_sum over the N x M outputs.
#include "wgmma_ws.cuh"

namespace gpu {
namespace {
// [excerpt: splitk_sum]
// C = P[0] + P[1] + ... + P[splits - 1], in that order, four floats per thread and loop.
__global__ void __launch_bounds__(256)
    splitk_sum_kernel(const float4* __restrict__ P, float4* __restrict__ C, int64_t plane4, int splits) {
    grid_dependency_wait();  // launched with PDL: the GEMM's partials are complete and visible from here
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < plane4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 s = P[i];
        for (int z = 1; z < splits; z++) {
            const float4 v = P[z * plane4 + i];
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        C[i] = s;
    }
}
// [end excerpt: splitk_sum]

// The same for planes whose size is not a multiple of 4 floats (M odd and N odd).
__global__ void __launch_bounds__(256)
    splitk_sum_scalar_kernel(const float* __restrict__ P, float* __restrict__ C, int64_t plane, int splits) {
    grid_dependency_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += (int64_t)gridDim.x * blockDim.x) {
        float s = P[i];
        for (int z = 1; z < splits; z++) s += P[z * plane + i];
        C[i] = s;
    }
}
}  // namespace

// CW: consumer warpgroups per CTA (2; the sixth step, 9_wgmma_narrow.cu, passes 1 for N <= 64).
template <class WF, int CW>
void gemm_q8_1_wgmma_splitk(const GemmProblem& p, cudaStream_t stream) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    // [excerpt: splitk_launch]
    const int splits = wgmma_splits(p.N, p.M, p.K, sms);
    if (splits == 1) {  // the tiles fill the GPU (or K is short): the fourth step as it is
        wg::launch_wgmma_ws<WF, false, CW>(p, stream, 1, p.C);
        return;
    }
    // the binding sized the workspace with splitk_workspace_bytes: the partials follow the activations
    float* partial = (float*)((uint8_t*)p.workspace + splitk_offset(p.N, p.K));
    wg::launch_wgmma_ws<WF, true, CW>(p, stream, splits, partial);
    splitk_sum(partial, p.C, (int64_t)p.N * p.M, splits, stream);
    // [end excerpt: splitk_launch]
}

// The planes' sum, four floats per thread where the plane allows (16-byte aligned: the workspace's
// partials start on a 256-byte boundary, C is torch's). pdl: launched with programmatic dependent
// launch (sm_90 and later; the fp16 step), its CTAs waiting inside for the GEMM's writes.
void splitk_sum(const float* P, float* C, int64_t plane, int splits, cudaStream_t stream, bool pdl) {
    int dev = 0, sms = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    pdl = pdl && major >= 9;
    const int64_t items = plane % 4 == 0 ? plane / 4 : plane;
    const int blocks = (int)std::min<int64_t>((items + 255) / 256, (int64_t)sms * 8);
    if (plane % 4 == 0)
        launch_maybe_pdl(splitk_sum_kernel, dim3(blocks), dim3(256), 0, stream, pdl, (const float4*)P, (float4*)C,
                         plane / 4, splits);
    else
        launch_maybe_pdl(splitk_sum_scalar_kernel, dim3(blocks), dim3(256), 0, stream, pdl, P, C, plane, splits);
}

template void gemm_q8_1_wgmma_splitk<w_q4_0, 2>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_wgmma_splitk<w_q8_0, 2>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_wgmma_splitk<w_q4_0, 1>(const GemmProblem&, cudaStream_t);
template void gemm_q8_1_wgmma_splitk<w_q8_0, 1>(const GemmProblem&, cudaStream_t);
}  // namespace gpu

void cuda_q4_0_q8_1_wgmma_splitk(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_wgmma_splitk<gpu::w_q4_0>(p, stream);
}

void cuda_q8_0_q8_1_wgmma_splitk(const GemmProblem& p, cudaStream_t stream) {
    gpu::gemm_q8_1_wgmma_splitk<gpu::w_q8_0>(p, stream);
}
