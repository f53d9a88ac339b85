// tools/bank_conflicts/tiled.cu: chapter 1's tiled CUDA kernel (cuda/01_fp32/2_tiled.cu) with and
// without the padding of its shared tiles, for one measurement of what the padding buys.
// run.sh compiles this file twice: STEP_FILE is the step file itself (tiles [32][33]) or a copy in
// which sed changed `TILE + 1]` to `TILE + 0]` (tiles [32][32]), the only difference.
//   tiled time   CUDA events around each of 20 calls at N = M = K = 2048 (after 3 warm-up calls):
//                median and quartiles, and the result's NMSE against a float64 CPU reference
//                on a 256 x 256 x 256 problem (the two builds must agree with it)
//   tiled prof   two calls at N = M = K = 2048, for Nsight Compute's shared-memory counters
#include STEP_FILE

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e = (x);                                                               \
        if (e != cudaSuccess) {                                                            \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

int main(int argc, char** argv) {
    const bool prof = argc > 1 && std::strcmp(argv[1], "prof") == 0;
    // correctness on a small problem
    {
        const int n = 256, m = 256, k = 256;
        std::mt19937 g(1);
        std::normal_distribution<float> nd(0.f, 1.f);
        std::vector<float> a((size_t)n * k), w((size_t)m * k), c((size_t)n * m);
        for (auto& x : a) x = nd(g);
        for (auto& x : w) x = nd(g);
        float *dA, *dW, *dC;
        CK(cudaMalloc(&dA, a.size() * 4));
        CK(cudaMalloc(&dW, w.size() * 4));
        CK(cudaMalloc(&dC, c.size() * 4));
        CK(cudaMemcpy(dA, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dW, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
        GemmProblem p{dA, dW, dC, n, m, k};
        cuda_f32_f32_tiled(p, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(c.data(), dC, c.size() * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < m; j++) {
                double r = 0;
                for (int q = 0; q < k; q++) r += (double)a[(size_t)i * k + q] * w[(size_t)j * k + q];
                num += (c[(size_t)i * m + j] - r) * (c[(size_t)i * m + j] - r);
                den += r * r;
            }
        printf("check 256x256x256 nmse %.3g\n", num / den);
        cudaFree(dA), cudaFree(dW), cudaFree(dC);
        if (!(num / den <= 1e-10)) return 1;
    }
    const int N = 2048, M = 2048, K = 2048;
    float *dA, *dW, *dC;
    CK(cudaMalloc(&dA, (size_t)N * K * 4));
    CK(cudaMalloc(&dW, (size_t)M * K * 4));
    CK(cudaMalloc(&dC, (size_t)N * M * 4));
    CK(cudaMemset(dA, 0, (size_t)N * K * 4));
    CK(cudaMemset(dW, 0, (size_t)M * K * 4));
    GemmProblem p{dA, dW, dC, N, M, K};
    if (prof) {
        for (int i = 0; i < 2; i++) cuda_f32_f32_tiled(p, 0);
        CK(cudaDeviceSynchronize());
        return 0;
    }
    const int calls = 20;
    std::vector<cudaEvent_t> e0(calls), e1(calls);
    for (int i = 0; i < calls; i++) {
        CK(cudaEventCreate(&e0[i]));
        CK(cudaEventCreate(&e1[i]));
    }
    for (int i = 0; i < 3; i++) cuda_f32_f32_tiled(p, 0);
    for (int i = 0; i < calls; i++) {
        CK(cudaEventRecord(e0[i]));
        cuda_f32_f32_tiled(p, 0);
        CK(cudaEventRecord(e1[i]));
    }
    CK(cudaDeviceSynchronize());
    std::vector<float> t(calls);
    for (int i = 0; i < calls; i++) CK(cudaEventElapsedTime(&t[i], e0[i], e1[i]));
    std::sort(t.begin(), t.end());
    printf("time N=M=K=2048 calls=%d median_ms %.4f q1_ms %.4f q3_ms %.4f min_ms %.4f\n", calls, t[calls / 2],
           t[calls / 4], t[3 * calls / 4], t[0]);
    return 0;
}
