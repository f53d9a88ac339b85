// Chapter 4 exercise, CUDA: the integer dot product of a Q4_0 x Q8_1 block pair with __dp4a, the
// inner loop of cuda/04_w4a8/3_dp4a.cu; the scaffold adds the scales and the compensation.
#include <string.h>

#include "cuda_run.cuh"
#include "formats.h"

// [show]
// sumi of one Q4_0 x Q8_1 block pair with __dp4a(x, y, acc) (acc + the four products of the signed
// bytes of x and y). w[0..3] are the weight block's quants as 4 words: word i is bytes qs[4i..4i+3],
// so its low nibbles are elements 4i..4i+3 and its high nibbles elements 4i+16..4i+19. a[0..7] are
// the activation quants as 8 words: word i is elements 4i..4i+3. Return the sum over j of
// nibble_j * a_j, the raw nibbles 0..15 (no -8), with 8 calls of __dp4a.
__device__ int block_sumi(const int* w, const int* a) {
    // @BODY@
}
// [/show]

// One thread per output C[n][m]: the block pairs of the row, words read with 16-bit loads (the
// quants of an 18-byte block are only 2-byte aligned), then d_w * (d_a * sumi - 8 * s_a).
__global__ void w4a8_dp4a(const block_q8_1* A, const block_q4_0* W, float* C, int M, int N, int nb) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x, n = blockIdx.y;
    if (m >= M) return;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        const block_q4_0* wb = &W[(int64_t)m * nb + b];
        const block_q8_1* ab = &A[(int64_t)n * nb + b];
        int w[4], a[8];
        for (int i = 0; i < 4; i++) {
            const uint16_t* h = (const uint16_t*)(wb->qs + 4 * i);
            w[i] = (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
        }
        for (int i = 0; i < 8; i++) a[i] = ((const int*)ab->qs)[i];
        const int sumi = block_sumi(w, a);
        acc += fp16_to_fp32(wb->d) * (fp16_to_fp32(ab->d) * (float)sumi - 8.0f * fp16_to_fp32(ab->s));
    }
    C[(int64_t)n * M + m] = acc;
}

extern "C" int qgex_run(const void* const* in, void* const* out, const int64_t* dims, char* err, int err_len) {
    const int M = (int)dims[0], N = (int)dims[1], K = (int)dims[2], nb = K / QK;
    DevBuf A, W, C;
    QGEX_UPLOAD(A, in[0], sizeof(block_q8_1) * N * nb);
    QGEX_UPLOAD(W, in[1], sizeof(block_q4_0) * M * nb);
    QGEX_UPLOAD(C, out[0], sizeof(float) * N * M);
    w4a8_dp4a<<<dim3((M + 127) / 128, N), 128>>>((const block_q8_1*)A.p, (const block_q4_0*)W.p, (float*)C.p, M, N, nb);
    QGEX_FINISH_LAUNCH("w4a8_dp4a");
    QGEX_CHECK(cudaMemcpy(out[0], C.p, sizeof(float) * N * M, cudaMemcpyDeviceToHost));
    return 0;
}
