// Chapter 4 exercise: W4A8 on the CPU. One Q4_0 weight block times one Q8_1 activation block in
// integers, with the -8 of every nibble paid once per block through the activations' s.
#include <stdio.h>  // printf, for debugging: what the code prints comes after the verdict

#include "formats.h"

// [show]
// One Q4_0 weight block w times one Q8_1 activation block a, as chapter 4's kernels compute it:
//   sumi   = sum over j of nibble_j * a->qs[j]      (integers, the raw nibbles 0..15, no -8)
//   result = d_w * (d_a * sumi - 8 * s_a)           (s_a = d_a * sum of a->qs, stored in the block)
// Byte w->qs[j] holds element j in its low nibble and element j + 16 in its high nibble.
// fp16_to_fp32 reads the scales w->d, a->d and a->s.
QG_HD float dot_q4_0_q8_1_block(const block_q4_0* w, const block_q8_1* a) {
    // @BODY@
}
// [/show]

extern "C" int qgex_run(const void* const* in, void* const* out, const int64_t* dims, char* err, int err_len) {
    (void)err;
    (void)err_len;
    const block_q8_1* A = (const block_q8_1*)in[0];  // [N, K/32] blocks
    const block_q4_0* W = (const block_q4_0*)in[1];  // [M, K/32] blocks
    float* C = (float*)out[0];
    const int M = (int)dims[0], N = (int)dims[1], K = (int)dims[2], nb = K / QK;
    for (int n = 0; n < N; n++) {
        for (int m = 0; m < M; m++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) acc += dot_q4_0_q8_1_block(&W[(int64_t)m * nb + b], &A[(int64_t)n * nb + b]);
            C[(int64_t)n * M + m] = acc;
        }
    }
    return 0;
}
