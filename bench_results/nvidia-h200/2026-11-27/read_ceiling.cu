// Experiment: how fast can one pass over Q4_0 weights go, cold? (not part of the package)
//  read_ldg   : plain 16-byte loads, grid-stride, U independent loads per thread in flight
//  gemv_bulk  : persistent CTAs, each a contiguous range of rows, one producer thread streaming
//               them with cp.async.bulk into a ring of S stages (mbarrier full/empty), 8 consumer
//               warps, one token of Q8_1 activations (image: 17 int4 per unit, (d, s) per block)
//               MODE 0: read only (consumers release the stage), MODE 1: the GEMV.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace {
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, int bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(bytes), "r"((uint32_t)__cvta_generic_to_shared(bar))
                 : "memory");
}
__device__ __forceinline__ void bar_init(uint64_t* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(count)
                 : "memory");
}
__device__ __forceinline__ void bar_expect(uint64_t* bar, int bytes) {
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)),
        "r"(bytes)
        : "memory");
}
__device__ __forceinline__ void bar_arrive(uint64_t* bar) {
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
__device__ __forceinline__ void bar_wait_bounded(uint64_t* bar, int parity) {  // traps instead of hanging
    for (long n = 0;; n++) {
        uint32_t ok;
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(ok)
            : "r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(parity)
            : "memory");
        if (ok) return;
        if (n > (1l << 24)) __trap();
    }
}

template <int U>
__global__ void read_ldg(const int4* __restrict__ p, long n, int* out) {
    int acc = 0;
    const long stride = (long)gridDim.x * blockDim.x;
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        int4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = __ldg(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        int4 v = __ldg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7ead1234) out[0] = acc;
}

__device__ __forceinline__ int word_at(const uint32_t* w, int off) {  // off compile-time after unrolling
    const int i = off >> 2, s = off & 3;
    return s == 0 ? (int)w[i] : (int)__funnelshift_r(w[i], w[i + 1], 8 * s);
}

constexpr int CONS_WARPS = 8;
constexpr int UVECS = 9;         // Q4_0: 8 blocks = 144 B
constexpr int A_UNIT_VECS = 17;  // activation quants per unit: 16 int4 + 1 pad
constexpr int A_UNIT_DS = 9;     // (d, s) per unit: 8 + 1 pad

// One producer warp (thread 0 issues), CONS_WARPS consumer warps. Stage = RPS rows.
template <int MODE>
__global__ void __launch_bounds__(32 * (CONS_WARPS + 1))
    gemv_bulk(const uint8_t* __restrict__ W, const int4* __restrict__ act_img, int act_bytes, float* __restrict__ C,
              int M, int nu, int RPS, int S) {
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ uint64_t full[32], empty[32], act_bar;
    const int row_bytes = nu * UVECS * 16;
    const int stage_bytes = RPS * row_bytes;
    uint8_t* act = smem;
    uint8_t* ring = smem + ((act_bytes + 127) / 128) * 128;
    const int G = gridDim.x;
    const int r0 = (int)((long)M * blockIdx.x / G), r1 = (int)((long)M * (blockIdx.x + 1) / G);
    const int n_st = (r1 - r0 + RPS - 1) / RPS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], 1);  // the one warp that consumed it
        }
        bar_init(&act_bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (warp == CONS_WARPS) {  // producer
        if (lane != 0) return;
        auto issue = [&](int i) {
            const int s = i % S;
            if (i >= S) bar_wait_bounded(&empty[s], ((i / S) - 1) & 1);
            const int rows = min(RPS, r1 - r0 - i * RPS);
            bar_expect(&full[s], rows * row_bytes);
            bulk_copy(ring + (size_t)s * stage_bytes, W + (size_t)(r0 + i * RPS) * row_bytes, rows * row_bytes,
                      &full[s]);
        };
        int i = 0;
        for (; i < min(S, n_st); i++) issue(i);
        if (MODE == 1) {
            bar_expect(&act_bar, act_bytes);
            bulk_copy(act, act_img, act_bytes, &act_bar);
        }
        for (; i < n_st; i++) issue(i);
        return;
    }
    if (MODE == 1) bar_wait_bounded(&act_bar, 0);
    const int4* aq = (const int4*)act;
    const float2* ads = (const float2*)(act + nu * A_UNIT_VECS * 16);
    // Consumer warp w: stages w, w + 8, ...; within the stage all RPS rows, lane over units.
    for (int i = warp; i < n_st; i += CONS_WARPS) {
        const int s = i % S;
        bar_wait_bounded(&full[s], (i / S) & 1);
        if (MODE == 1) {
            const int rows = min(RPS, r1 - r0 - i * RPS);
            for (int rr = 0; rr < rows; rr++) {
                float acc = 0.0f;
                const uint4* rowp = (const uint4*)(ring + (size_t)s * stage_bytes + (size_t)rr * row_bytes);
                for (int u = lane; u < nu; u += 32) {
                    uint32_t w[UVECS * 4 + 1];
#pragma unroll
                    for (int v = 0; v < UVECS; v++) {
                        const uint4 x = rowp[u * UVECS + v];
                        w[4 * v] = x.x;
                        w[4 * v + 1] = x.y;
                        w[4 * v + 2] = x.z;
                        w[4 * v + 3] = x.w;
                    }
                    w[UVECS * 4] = 0;
#pragma unroll
                    for (int b = 0; b < 8; b++) {
                        const int off = 18 * b;
                        const uint16_t dbits = (uint16_t)(w[off >> 2] >> (8 * (off & 3)));
                        const float dw = __half2float(__ushort_as_half(dbits));
                        const int4 a0 = aq[u * A_UNIT_VECS + 2 * b], a1 = aq[u * A_UNIT_VECS + 2 * b + 1];
                        const int a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
                        int sumi = 0;
#pragma unroll
                        for (int j = 0; j < 4; j++) {
                            const int q = word_at(w, off + 2 + 4 * j);
                            sumi = __dp4a(q & 0x0F0F0F0F, a[j], sumi);
                            sumi = __dp4a((q >> 4) & 0x0F0F0F0F, a[j + 4], sumi);
                        }
                        const float2 ds = ads[u * A_UNIT_DS + b];
                        acc += dw * (ds.x * (float)sumi - 8.0f * ds.y);
                    }
                }
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
                if (lane == 0) C[r0 + i * RPS + rr] = acc;
            }
        }
        __syncwarp();
        if (lane == 0) bar_arrive(&empty[s]);
    }
}
}  // namespace

void run_read_ldg(torch::Tensor W, int ctas, int threads, int U, torch::Tensor out) {
    const long n = W.numel() / 16;
    auto st = at::cuda::getCurrentCUDAStream();
    if (U == 2)
        read_ldg<2><<<ctas, threads, 0, st>>>((const int4*)W.data_ptr(), n, out.data_ptr<int>());
    else if (U == 4)
        read_ldg<4><<<ctas, threads, 0, st>>>((const int4*)W.data_ptr(), n, out.data_ptr<int>());
    else if (U == 8)
        read_ldg<8><<<ctas, threads, 0, st>>>((const int4*)W.data_ptr(), n, out.data_ptr<int>());
    else
        read_ldg<16><<<ctas, threads, 0, st>>>((const int4*)W.data_ptr(), n, out.data_ptr<int>());
    TORCH_CHECK(cudaGetLastError() == cudaSuccess, "launch");
}

void run_gemv_bulk(torch::Tensor W, torch::Tensor act_img, torch::Tensor C, int M, int K, int ctas, int RPS, int S,
                   int mode) {
    const int nu = K / 256;
    const int act_bytes = (int)act_img.numel();
    const int row_bytes = nu * UVECS * 16;
    const size_t smem = ((act_bytes + 127) / 128) * 128 + (size_t)S * RPS * row_bytes;
    TORCH_CHECK(S % CONS_WARPS == 0 && S <= 32 && smem <= 227 * 1024, "smem ", smem);
    auto k = mode ? gemv_bulk<1> : gemv_bulk<0>;
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    auto st = at::cuda::getCurrentCUDAStream();
    k<<<ctas, 32 * (CONS_WARPS + 1), smem, st>>>((const uint8_t*)W.data_ptr(), (const int4*)act_img.data_ptr(),
                                                 act_bytes, C.data_ptr<float>(), M, nu, RPS, S);
    TORCH_CHECK(cudaGetLastError() == cudaSuccess, "launch");
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("read_ldg", &run_read_ldg);
    m.def("gemv_bulk", &run_gemv_bulk);
}
