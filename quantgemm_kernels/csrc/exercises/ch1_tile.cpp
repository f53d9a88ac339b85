// Chapter 1 exercise: the inner loop of a blocked GEMM on the CPU, C [N, M] = A [N, K] @ W [M, K]^T.
// The driver below walks C in TN x TM tiles and K in slices of TK; the reader writes tile_update.
#include <stdint.h>
#include <stdio.h>  // printf, for debugging: what the code prints comes after the verdict

#define TN 4   // rows of A (tokens) per tile
#define TM 8   // rows of W (outputs) per tile
#define TK 64  // K values per slice

// [show]
// Add one K slice (TK = 64 values) to a TN x TM (4 x 8) tile of outputs kept in registers:
//   acc[i][j] += A[n0 + i][k] * W[m0 + j][k]   for i < tn, j < tm and k0 <= k < k0 + tk.
// A is [N, K] and W is [M, K], both row-major: A[n][k] is A[n * K + k], W[m][k] is W[m * K + k].
// At the edges of C a tile is partial: only tn <= TN rows of A and tm <= TM rows of W exist.
static void tile_update(const float* A, const float* W, float acc[TN][TM], int n0, int m0, int k0, int tn, int tm,
                        int tk, int K) {
    // @BODY@
}
// [/show]

extern "C" int qgex_run(const void* const* in, void* const* out, const int64_t* dims, char* err, int err_len) {
    (void)err;
    (void)err_len;
    const float* A = (const float*)in[0];
    const float* W = (const float*)in[1];
    float* C = (float*)out[0];
    const int M = (int)dims[0], N = (int)dims[1], K = (int)dims[2];
    for (int n0 = 0; n0 < N; n0 += TN) {
        for (int m0 = 0; m0 < M; m0 += TM) {
            const int tn = N - n0 < TN ? N - n0 : TN, tm = M - m0 < TM ? M - m0 : TM;
            float acc[TN][TM] = {};
            for (int k0 = 0; k0 < K; k0 += TK) tile_update(A, W, acc, n0, m0, k0, tn, tm, K - k0 < TK ? K - k0 : TK, K);
            for (int i = 0; i < tn; i++)
                for (int j = 0; j < tm; j++) C[(int64_t)(n0 + i) * M + m0 + j] = acc[i][j];
        }
    }
    return 0;
}
