// appendix_c/conv1d_silu_int8.cu: INT8 causal depthwise conv1d + SiLU + requantization.
//
// One thread per output element, the CPU loop's body per thread: an int32 sum over the taps,
// then the float epilogue conv1d_silu::dequant_silu_requant from conv1d_silu_int8.h, the same
// source the CPU kernel runs. On the device that source uses __fmul_rn/__fadd_rn/__fdiv_rn, which
// nvcc never fuses into an FMA (it fuses a plain a*b+c by default), and exp_portable instead of
// CUDA's expf, so the bits equal the CPU kernel's and the numpy simulation's.
//
// No shared memory and no vector loads: a real kernel (Quamba's, Dao's causal_conv1d) stages a
// chunk of x per block and reuses it across the width taps. That changes the speed, not the bits,
// as long as the per-output arithmetic stays as here.
#include "conv1d_silu_int8.h"

namespace {

__global__ void conv1d_silu_int8_kernel(const Conv1dSiluProblem p) {
    const int64_t total = p.batch * p.channels * p.time;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t row = i / p.time, t = i % p.time;  // row = b * channels + c
        const int64_t c = row % p.channels;
        const int8_t* x = p.x + row * p.time;
        const int8_t* w = p.w + c * p.width;
        const float scale = conv1d_silu::mul(p.x_scale[p.x_scale_per_channel ? c : 0], p.w_scale[c]);
        const float bias = p.bias ? p.bias[c] : 0.0f;
        int32_t acc = 0;
        for (int64_t k = 0; k < p.width; ++k) {
            const int64_t src = t - (p.width - 1) + k;  // causal: zeros before the sequence starts
            if (src >= 0) acc += int32_t(w[k]) * int32_t(x[src]);
        }
        const conv1d_silu::Requantized out =
            conv1d_silu::dequant_silu_requant(acc, scale, bias, p.out_scale, p.libm_exp);
        p.q[i] = out.q;
        if (p.z) p.z[i] = out.z;
    }
}

}  // namespace

void conv1d_silu_int8_cuda(const Conv1dSiluProblem& p, cudaStream_t stream) {
    const int64_t total = p.batch * p.channels * p.time;
    if (total == 0) return;
    constexpr int threads = 256;
    // A grid-stride loop covers any size; 65535 blocks of 256 threads are plenty to fill a GPU.
    const int64_t blocks = (total + threads - 1) / threads < 65535 ? (total + threads - 1) / threads : 65535;
    conv1d_silu_int8_kernel<<<int(blocks), threads, 0, stream>>>(p);
}
