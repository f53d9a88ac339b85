// tools/ch3_decode/variants.cu: a standalone harness for cuda/03_w4a16/3_decode.cu (chapter 3's decode
// step), no torch: it includes the step file, so it sees the kernel template and can launch any
// (R rows per CTA, U steps in flight, T tokens) configuration.
//   variants          resources (registers, CTAs per SM, bytes of W in flight), correctness of the
//                     launcher on ragged shapes and of every configuration (NMSE vs a float64 CPU
//                     reference, <= 1e-8), copy bandwidth, and per-call times (CUDA events around
//                     each call; cold: weights rotated over copies >= 4x L2; warm: one copy) at
//                     M = 4096, K = 14336. Event times include a launch gap: compare them with each
//                     other; the recorded numbers are quantgemm_kernels.measure's (CUPTI).
//   variants check    the launcher on small ragged shapes only (for compute-sanitizer)
//   variants prof     the launcher at N = 1, 1, 1, 8 (for ncu: --launch-skip 2 --launch-count 2)
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -I quantgemm_kernels/csrc -I quantgemm_kernels/csrc/cuda
//        tools/ch3_decode/variants.cu -o /tmp/variants      (tools/ch3_decode/run.sh does it all)
#include "03_w4a16/3_decode.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e = (x);                                                               \
        if (e != cudaSuccess) {                                                            \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

typedef void (*Launch)(const GemmProblem&, cudaStream_t);

// one kernel configuration, for N = T only (one pass)
template <int R, int U, int T>
void launch_v(const GemmProblem& p, cudaStream_t s) {
    launch_pass<R, U, T>((const float*)p.A, (const block_q4_0*)p.W, p.C, p.M, p.K, s);
}
template <int R, int U, int T>
void res(const char* name) {
    cudaFuncAttributes fa;
    int occ;
    cudaFuncGetAttributes(&fa, q4_0_f32_decode_kernel<R, U, T>);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, q4_0_f32_decode_kernel<R, U, T>, THREADS, 0);
    printf("# %-9s %3d regs, %2d CTAs/SM = %2d warps/SM, %4d B of W in flight per warp -> %5.1f KB/SM\n", name,
           fa.numRegs, occ, occ * WARPS, U * R * STEP * 18, occ * WARPS * U * R * STEP * 18 / 1024.0);
}
struct Variant {
    const char* name;
    int T;
    Launch fn;
    void (*res)(const char*);
};
#define V(R, U, T) {"R" #R "U" #U "T" #T, T, launch_v<R, U, T>, res<R, U, T>}
static Variant VARS[] = {
    V(2, 4, 1), V(2, 2, 1), V(2, 1, 1), V(2, 8, 1), V(4, 1, 1), V(4, 2, 1),
    V(4, 4, 1), V(8, 1, 1), V(8, 2, 1), V(4, 2, 2), V(4, 1, 4), V(8, 1, 8),
};

static void make_w(std::vector<block_q4_0>& w, int M, int K, unsigned seed) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> ud(-0.05f, 0.05f);
    w.resize((size_t)M * (K / QK));
    for (auto& b : w) {
        b.d = fp32_to_fp16(ud(g));
        for (int j = 0; j < QK / 2; j++) b.qs[j] = (uint8_t)(g() & 0xFF);
    }
}
static void make_a(std::vector<float>& a, size_t n, unsigned seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    a.resize(n);
    for (auto& x : a) x = nd(g);
}
static double check(Launch fn, int M, int N, int K, unsigned seed) {
    std::vector<block_q4_0> w;
    std::vector<float> a;
    make_w(w, M, K, seed);
    make_a(a, (size_t)N * K, seed + 1);
    const int nb = K / QK;
    std::vector<double> wd((size_t)M * K);
    for (int m = 0; m < M; m++)
        for (int b = 0; b < nb; b++) {
            const block_q4_0& blk = w[(size_t)m * nb + b];
            double d = fp16_to_fp32(blk.d);
            for (int j = 0; j < 16; j++) {
                wd[(size_t)m * K + b * 32 + j] = ((blk.qs[j] & 15) - 8) * d;
                wd[(size_t)m * K + b * 32 + j + 16] = ((blk.qs[j] >> 4) - 8) * d;
            }
        }
    block_q4_0* dW;
    float *dA, *dC;
    CK(cudaMalloc(&dW, w.size() * sizeof(block_q4_0)));
    CK(cudaMalloc(&dA, a.size() * 4));
    CK(cudaMalloc(&dC, (size_t)N * M * 4));
    CK(cudaMemcpy(dW, w.data(), w.size() * sizeof(block_q4_0), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dA, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dC, 0xFF, (size_t)N * M * 4));  // NaN poison
    GemmProblem p{dA, dW, dC, N, M, K};
    fn(p, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> c((size_t)N * M);
    CK(cudaMemcpy(c.data(), dC, c.size() * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++) {
            double r = 0;
            for (int k = 0; k < K; k++) r += (double)a[(size_t)n * K + k] * wd[(size_t)m * K + k];
            double x = c[(size_t)n * M + m];
            if (!std::isfinite(x)) return INFINITY;
            num += (x - r) * (x - r);
            den += r * r;
        }
    cudaFree(dW), cudaFree(dA), cudaFree(dC);
    return num / den;
}

struct Stats {
    float med, q1, q3;
};
static Stats time_it(Launch fn, std::vector<block_q4_0*>& Ws, int copies, float* dA, float* dC, int M, int N, int K,
                     int calls) {
    std::vector<cudaEvent_t> e0(calls), e1(calls);
    for (int i = 0; i < calls; i++) {
        CK(cudaEventCreate(&e0[i]));
        CK(cudaEventCreate(&e1[i]));
    }
    for (int i = 0; i < 3; i++) {
        GemmProblem p{dA, Ws[i % copies], dC, N, M, K};
        fn(p, 0);
    }
    for (int i = 0; i < calls; i++) {
        GemmProblem p{dA, Ws[i % copies], dC, N, M, K};
        CK(cudaEventRecord(e0[i]));
        fn(p, 0);
        CK(cudaEventRecord(e1[i]));
    }
    CK(cudaDeviceSynchronize());
    std::vector<float> t(calls);
    for (int i = 0; i < calls; i++) {
        CK(cudaEventElapsedTime(&t[i], e0[i], e1[i]));
        t[i] *= 1000.f;
    }
    for (int i = 0; i < calls; i++) cudaEventDestroy(e0[i]), cudaEventDestroy(e1[i]);
    std::sort(t.begin(), t.end());
    return {t[calls / 2], t[calls / 4], t[3 * calls / 4]};
}

int main(int argc, char** argv) {
    const bool check_only = argc > 1 && argv[1][0] == 'c';  // for compute-sanitizer: production launcher, small shapes
    if (argc > 1 && argv[1][0] == 'p') {  // for ncu: the production kernel at N = 1 (and N = 8), M = 4096, K = 14336
        const int M = 4096, K = 14336;
        std::vector<block_q4_0> w;
        make_w(w, M, K, 1);
        std::vector<float> a;
        make_a(a, (size_t)8 * K, 2);
        block_q4_0* dW;
        float *dA, *dC;
        CK(cudaMalloc(&dW, w.size() * sizeof(block_q4_0)));
        CK(cudaMalloc(&dA, a.size() * 4));
        CK(cudaMalloc(&dC, (size_t)8 * M * 4));
        CK(cudaMemcpy(dW, w.data(), w.size() * sizeof(block_q4_0), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dA, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
        for (int N : {1, 1, 1, 8}) {
            GemmProblem p{dA, dW, dC, N, M, K};
            cuda_q4_0_f32_decode(p, 0);
        }
        CK(cudaDeviceSynchronize());
        return 0;
    }
    int dev = 0, l2 = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    sms = prop.multiProcessorCount;
    printf("# %s, %d SMs, L2 %d MiB\n", prop.name, sms, l2 >> 20);
    for (auto& v : VARS) v.res(v.name);
    // correctness
    const int shapes[][3] = {{1, 1, 32},    {7, 1, 96},    {33, 5, 160},   {83, 9, 128},     {130, 2, 1024},
                             {17, 33, 288}, {45, 3, 64},   {256, 12, 512}, {4096, 1, 14336}, {4099, 8, 4096},
                             {3, 17, 4128}, {1, 1, 14336}, {45, 6, 64},    {19, 7, 320},     {100, 4, 4096}};
    int bad = 0;
    if (check_only) {
        const int small[][3] = {{1, 1, 32},     {7, 1, 96},    {33, 5, 160}, {83, 9, 128},
                                {130, 2, 1024}, {17, 33, 288}, {5, 8, 4128}};
        for (auto& s : small) {
            double e = check(cuda_q4_0_f32_decode, s[0], s[1], s[2], 1);
            printf("check prod M=%d N=%d K=%d nmse %.3g\n", s[0], s[1], s[2], e);
            bad += !(e <= 1e-8);
        }
        return bad != 0;
    }
    {
        double worst = 0;
        for (auto& sh : shapes) {
            double e = check(cuda_q4_0_f32_decode, sh[0], sh[1], sh[2], sh[0] * 7 + sh[1]);
            if (!(e <= 1e-8)) printf("FAIL prod M=%d N=%d K=%d nmse %.3g\n", sh[0], sh[1], sh[2], e), bad++;
            worst = std::max(worst, e);
        }
        printf("check prod worst nmse %.3g over %d shapes\n", worst, (int)(sizeof(shapes) / sizeof(shapes[0])));
    }
    for (auto& v : VARS) {
        double worst = 0;
        const int vs[][2] = {{7, 96}, {83, 128}, {130, 1024}, {257, 4128}, {33, 14336}};
        for (auto& sh : vs) {
            double e = check(v.fn, sh[0], v.T, sh[1], sh[0] + v.T);
            if (!(e <= 1e-8)) printf("FAIL %s M=%d K=%d nmse %.3g\n", v.name, sh[0], sh[1], e), bad++;
            worst = std::max(worst, e);
        }
        printf("check %-9s worst nmse %.3g\n", v.name, worst);
    }
    // copy bandwidth
    float copy_gbps;
    {
        size_t bytes = (size_t)1 << 30;
        void *s, *d;
        CK(cudaMalloc(&s, bytes));
        CK(cudaMalloc(&d, bytes));
        CK(cudaMemset(s, 1, bytes));
        cudaEvent_t a, b;
        cudaEventCreate(&a), cudaEventCreate(&b);
        CK(cudaMemcpy(d, s, bytes, cudaMemcpyDeviceToDevice));
        std::vector<float> t;
        for (int i = 0; i < 10; i++) {
            cudaEventRecord(a);
            cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice);
            cudaEventRecord(b);
            cudaEventSynchronize(b);
            float ms;
            cudaEventElapsedTime(&ms, a, b);
            t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        copy_gbps = 2.0 * bytes / (t[5] * 1e-3) / 1e9;
        printf("# copy %.0f GB/s (read + write, 1 GiB, median of 10)\n", copy_gbps);
        cudaFree(s), cudaFree(d);
    }
    // timing
    const int M = 4096, K = 14336;
    std::vector<block_q4_0> w;
    make_w(w, M, K, 1);
    size_t wb = w.size() * sizeof(block_q4_0);
    int copies = std::max(2, (int)std::ceil(4.0 * l2 / wb));
    std::vector<block_q4_0*> Ws(copies);
    for (auto& p : Ws) {
        CK(cudaMalloc(&p, wb));
        CK(cudaMemcpy(p, w.data(), wb, cudaMemcpyHostToDevice));
    }
    std::vector<float> a;
    make_a(a, (size_t)9 * K, 2);
    float *dA, *dC;
    CK(cudaMalloc(&dA, a.size() * 4));
    CK(cudaMalloc(&dC, (size_t)9 * M * 4));
    CK(cudaMemcpy(dA, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    printf("# M=%d K=%d, W %.1f MB, cold = %d copies; per-call event pairs, 7 x %d calls\n", M, K, wb / 1e6, copies,
           copies);
    printf("%-11s %3s %22s %22s %7s\n", "variant", "N", "cold med us (q1-q3)", "warm med us (q1-q3)", "%copy");
    for (auto& v : VARS) {
        const int N = v.T;
        Stats c = time_it(v.fn, Ws, copies, dA, dC, M, N, K, 7 * copies * 4);
        Stats h = time_it(v.fn, Ws, 1, dA, dC, M, N, K, 7 * copies * 4);
        double bytes = wb + (double)N * K * 4 + (double)N * M * 4;
        printf("%-11s %3d %8.2f (%5.2f-%5.2f) %8.2f (%5.2f-%5.2f) %6.1f\n", v.name, N, c.med, c.q1, c.q3, h.med, h.q1,
               h.q3, 100.0 * bytes / (c.med * 1e-6) / 1e9 / copy_gbps);
    }
    for (int N : {1, 2, 3, 4, 5, 6, 7, 8, 9}) {
        Stats c = time_it(cuda_q4_0_f32_decode, Ws, copies, dA, dC, M, N, K, 7 * copies * 4);
        Stats h = time_it(cuda_q4_0_f32_decode, Ws, 1, dA, dC, M, N, K, 7 * copies * 4);
        double bytes = wb + (double)N * K * 4 + (double)N * M * 4;
        printf("%-11s %3d %8.2f (%5.2f-%5.2f) %8.2f (%5.2f-%5.2f) %6.1f\n", "prod", N, c.med, c.q1, c.q3, h.med, h.q1,
               h.q3, 100.0 * bytes / (c.med * 1e-6) / 1e9 / copy_gbps);
    }
    CK(cudaGetLastError());
    printf("variants: %d failures\n", bad);
    return bad != 0;
}
