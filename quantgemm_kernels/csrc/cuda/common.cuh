// cuda/common.cuh: the one device helper every quantized CUDA kernel shares.
//
// A block stores its scale as fp16 bits (formats.h). formats.h's fp16_to_fp32 rebuilds the float
// with integer tricks so that CPU code needs no fp16 support; the GPU has a conversion
// instruction (cvt.f32.f16), exact for every half including subnormals, inf and NaN, so the
// kernels use it. Both give the same float: the reference reads scales the same way.
#pragma once
#include <cuda_fp16.h>

#include "launchers.h"

__device__ __forceinline__ float scale_to_float(fp16_bits h) { return __half2float(__ushort_as_half(h)); }
