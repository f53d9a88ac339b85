// appendix_c/conv1d_silu_int8.cpp: INT8 causal depthwise conv1d + SiLU + requantization.
//
// Plain loops, the specification in C++: for each (batch, channel) row and each time step, an
// int32 sum over the `width` taps, then conv1d_silu::dequant_silu_requant (conv1d_silu_int8.h),
// the float epilogue that the CUDA kernel shares. The binding splits the rows over threads; each
// output is computed by one thread from its own inputs, so the thread count cannot change a bit.
#include "conv1d_silu_int8.h"

void conv1d_silu_int8_cpu(const Conv1dSiluProblem& p, int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; ++row) {  // row = b * channels + c
        const int64_t c = row % p.channels;
        const int8_t* x = p.x + row * p.time;
        const int8_t* w = p.w + c * p.width;
        // One scale per channel, multiplied once: the kernel never applies s_x and s_w separately.
        const float scale = conv1d_silu::mul(p.x_scale[p.x_scale_per_channel ? c : 0], p.w_scale[c]);
        const float bias = p.bias ? p.bias[c] : 0.0f;
        for (int64_t t = 0; t < p.time; ++t) {
            // Tap k reads x[t - (width-1) + k]: the last tap is the current step, earlier taps look
            // back; taps before the sequence starts read zeros (the causal left padding).
            int32_t acc = 0;
            for (int64_t k = 0; k < p.width; ++k) {
                const int64_t src = t - (p.width - 1) + k;
                if (src >= 0) acc += int32_t(w[k]) * int32_t(x[src]);
            }
            const conv1d_silu::Requantized out =
                conv1d_silu::dequant_silu_requant(acc, scale, bias, p.out_scale, p.libm_exp);
            p.q[row * p.time + t] = out.q;
            if (p.z) p.z[row * p.time + t] = out.z;
        }
    }
}
