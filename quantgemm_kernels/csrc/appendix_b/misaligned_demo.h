// appendix_b/misaligned_demo.h: the misaligned-load demonstration, one launcher.
// Plain C++ with CUDA runtime types only, like launchers.h; appendix_b/bindings.cpp is the only caller.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

// How a thread reads the 16 quant bytes of a Q4_0 block as four 32-bit words.
enum QgMisalignedMode : int {
    QG_MIS_NAIVE_B4 = 0,     // 18-byte blocks, *(const int*) at byte 2: faults, "misaligned address"
    QG_MIS_B2 = 1,           // 18-byte blocks, two 16-bit loads per word (load_int_b2, the fix)
    QG_MIS_B1 = 2,           // 18-byte blocks, four 8-bit loads per word (llama.cpp's get_int_b1)
    QG_MIS_REPACKED_B4 = 3,  // repacked: scales and quants in two arrays, one 32-bit load per word
    QG_MIS_REPACKED_B16 = 4  // repacked, one 128-bit load per block (all four words)
};

// y[b] = sum of the 32 dequantized values of Q4_0 block b = d_b * (sum of nibbles - 8 * 32).
// Modes 0-2 read `blocks` (nb llama.cpp blocks of 18 bytes); modes 3-4 read `scales` (nb fp16
// bits) and `quants` (nb * 16 bytes, 16-byte aligned). The other pointers may be null.
void cuda_misaligned_block_sums(const void* blocks, const uint16_t* scales, const uint8_t* quants, float* y, int64_t nb,
                                int mode, cudaStream_t stream);
