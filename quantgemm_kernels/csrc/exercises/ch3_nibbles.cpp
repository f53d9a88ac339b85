// Chapter 3 exercise: W4A16 on the CPU. The dot product of one Q4_0 block with 32 float
// activations, decoding the nibble pairs on the way; the driver sums it over the blocks of a row.
#include <stdio.h>  // printf, for debugging: what the code prints comes after the verdict

#include "formats.h"

// [show]
// One Q4_0 block times 32 float activations x[0..31]: return the sum over j of value_j * x[j],
// where value_j = (nibble_j - 8) * d. Byte b->qs[j] (j < 16) holds element j in its low nibble and
// element j + 16 in its high nibble; fp16_to_fp32(b->d) is the scale d as a float.
QG_HD float dot_q4_0_block(const block_q4_0* b, const float* x) {
    // @BODY@
}
// [/show]

extern "C" int qgex_run(const void* const* in, void* const* out, const int64_t* dims, char* err, int err_len) {
    (void)err;
    (void)err_len;
    const float* A = (const float*)in[0];            // [N, K] float32
    const block_q4_0* W = (const block_q4_0*)in[1];  // [M, K/32] blocks
    float* C = (float*)out[0];
    const int M = (int)dims[0], N = (int)dims[1], K = (int)dims[2], nb = K / QK;
    for (int n = 0; n < N; n++) {
        for (int m = 0; m < M; m++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) acc += dot_q4_0_block(&W[(int64_t)m * nb + b], &A[(int64_t)n * K + b * QK]);
            C[(int64_t)n * M + m] = acc;
        }
    }
    return 0;
}
