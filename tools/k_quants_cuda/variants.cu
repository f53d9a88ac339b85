// tools/k_quants_cuda/variants.cu: a standalone harness for cuda/08_k_quants/1_decode.cu (chapter 8's K-quant
// decode kernels, Q4_K and Q6_K weights times Q8_1 activations), no torch: it includes the step file, so it sees
// the kernel template and can launch any (T tokens, R rows per warp, STAGES step buffers per warp) configuration.
//   variants cpu      no GPU needed: the lane arithmetic of both formats (the step file's Weights / Acts / dot,
//                     which are host-callable) run on the CPU over a whole GEMM, each warp step's bytes cut out
//                     of W as the kernel's cp.async copies cut them (16-byte aligned cover, clipped at W's end),
//                     against the float64 reference; and q - 32 per byte (kq_minus32) on every byte value.
//   variants          the cpu checks, then resources (registers, shared memory, CTAs per SM, grid and waves at
//                     M = 4096, bytes of W in flight per SM), correctness of the production launchers on ragged
//                     shapes (K a multiple of 256, N over one pass of 8) and of every configuration, copy
//                     bandwidth, and per-call times (CUDA events around each call, quantizer included; cold:
//                     weights rotated over copies >= 4x L2; warm: one copy) at M = 4096, K = 14336, N = 1, 2,
//                     4, 8: the production launchers, the configurations and chapter 6's Q4_0 decode step
//                     (the same 33 MB of weights as Q4_K at this shape) as the yardstick. (The first version
//                     of the step, which kquant-decode-214114.json measured, is in git history; the log
//                     kq-variants-2222.log timed it beside this one.)
//   variants check    the launchers and every configuration on small ragged shapes only (for compute-sanitizer)
// Correctness: NMSE = sum (C - ref)^2 / sum ref^2 <= 1e-8 (testing.KERNEL_NMSE), ref in float64 from the
// dequantized weights and the dequantized Q8_1 activations, quantized on the CPU as llama.cpp's
// quantize_row_q8_1_ref does (the bytes the GPU quantizer writes): kernel and reference differ only in the
// order of float32 additions (~1e-14); one wrong sub-block lands far above 1e-8.
// Event times include a launch gap: compare them with each other; the recorded numbers are
// quantgemm_kernels.measure's (CUPTI). Build and run: tools/k_quants_cuda/variants.sh.
#include "08_k_quants/1_decode.cu"
#include "06_decode_tensor_cores/2_decode.cu"  // cuda_q4_0_q8_1_decode: the yardstick

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
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

using gpu::kq_act_sb;
using gpu::kq_q4_k;
using gpu::kq_q6_k;
typedef void (*Launch)(const GemmProblem&, cudaStream_t);
static const double NMSE_MAX = 1e-8;

// ---------------------------------------------------------------- CPU side: data, quantizer, reference
template <class KQ>
static void make_w(std::vector<uint8_t>& w, int M, int nbk, unsigned seed) {
    constexpr int B = KQ::BYTES;
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> ud(1e-4f, 1e-3f);
    w.resize((size_t)M * nbk * B);
    for (auto& x : w) x = (uint8_t)(g() & 0xFF);  // quants and (6- or 8-bit) scales: any byte is valid
    for (size_t b = 0; b < (size_t)M * nbk; b++) {
        uint8_t* p = w.data() + b * B;
        const fp16_bits d = fp32_to_fp16(ud(g)), dmin = fp32_to_fp16(ud(g));
        if (B == 144) {  // Q4_K: d | dmin | scales | qs
            memcpy(p, &d, 2);
            memcpy(p + 2, &dmin, 2);
        } else {  // Q6_K: ql | qh | scales | d
            memcpy(p + 208, &d, 2);
        }
    }
}
static void make_a(std::vector<float>& a, size_t n, unsigned seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    a.resize(n);
    for (auto& x : a) x = nd(g);
}
// ggml's dequantize_row_q4_K / q6_K for one super-block, in float64
static void dequant(const uint8_t* p, int B, double* out) {
    if (B == 144) {
        fp16_bits d16, m16;
        memcpy(&d16, p, 2);
        memcpy(&m16, p + 2, 2);
        const double d = fp16_to_fp32(d16), dmin = fp16_to_fp32(m16);
        const uint8_t *scales = p + 4, *qs = p + 16;
        for (int j = 0; j < 8; j++) {  // sub-block j: chunk j / 2, low nibbles for even j, high for odd
            uint8_t sc, m;
            get_scale_min_k4(j, scales, &sc, &m);
            for (int l = 0; l < 32; l++) {
                const int q = (j % 2 == 0) ? (qs[32 * (j / 2) + l] & 15) : (qs[32 * (j / 2) + l] >> 4);
                out[32 * j + l] = d * sc * q - dmin * m;
            }
        }
    } else {
        fp16_bits d16;
        memcpy(&d16, p + 208, 2);
        const double d = fp16_to_fp32(d16);
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t* sc = (const int8_t*)(p + 192);
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    const uint8_t lb = ql[64 * h + 32 * (k & 1) + l];
                    const int q = ((k < 2 ? lb & 15 : lb >> 4) | (((qh[32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
                    const int i = 128 * h + 32 * k + l;
                    out[i] = d * sc[i / 16] * q;
                }
    }
}
// quantize_row_q8_1_ref (the reference's bytes, which kq_quantize_kernel writes): the image and the
// dequantized values
static void quantize_img(const std::vector<float>& a, int N, int K, std::vector<kq_act_sb>& img,
                         std::vector<double>& deq) {
    const int nbk = K / QK_K;
    img.assign((size_t)N * nbk, kq_act_sb{});
    deq.assign((size_t)N * K, 0.0);
    for (int n = 0; n < N; n++)
        for (int kb = 0; kb < K / QK; kb++) {
            const float* x = &a[(size_t)n * K + kb * QK];
            float amax = 0.f;
            for (int j = 0; j < QK; j++) amax = std::max(amax, std::fabs(x[j]));
            const float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            if (std::isinf(id)) id = 0.0f;
            const fp16_bits d16 = fp32_to_fp16(d);
            kq_act_sb& s = img[(size_t)n * nbk + kb / 8];
            int sum = 0;
            for (int j = 0; j < QK; j++) {
                const int q = (int)std::roundf(x[j] * id);
                s.qs[32 * (kb % 8) + j] = (int8_t)q;
                sum += q;
                deq[(size_t)n * K + kb * QK + j] = (double)q * fp16_to_fp32(d16);
            }
            s.d[kb % 8] = fp16_to_fp32(d16);
            s.usum[kb % 8] = sum;
        }
}
static std::vector<double> reference(const std::vector<uint8_t>& w, int B, const std::vector<double>& adeq, int M,
                                     int N, int K) {
    const int nbk = K / QK_K;
    std::vector<double> ref((size_t)N * M), row(K);
    for (int m = 0; m < M; m++) {
        for (int sb = 0; sb < nbk; sb++) dequant(&w[((size_t)m * nbk + sb) * B], B, &row[sb * QK_K]);
        for (int n = 0; n < N; n++) {
            double r = 0;
            for (int k = 0; k < K; k++) r += adeq[(size_t)n * K + k] * row[k];
            ref[(size_t)n * M + m] = r;
        }
    }
    return ref;
}
static double nmse(const float* c, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(c[i])) return INFINITY;
        num += (c[i] - ref[i]) * (c[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return num / den;
}

// The kernel's arithmetic on the CPU: per row and warp step, the 16-byte vectors the warp's cp.async copies
// (from W's byte offset rounded down to 16, clipped at W's end, zero-filled), then every lane's loads and dot.
template <class KQ, int SB>
static double emulate(int M, int N, int K, unsigned seed) {
    constexpr int B = KQ::BYTES, VECS = gpu::kq_step_vecs<KQ, SB>();
    const int nbk = K / QK_K;
    std::vector<uint8_t> w;
    std::vector<float> a;
    std::vector<kq_act_sb> img;
    std::vector<double> adeq;
    make_w<KQ>(w, M, nbk, seed);
    make_a(a, (size_t)N * K, seed + 1);
    quantize_img(a, N, K, img, adeq);
    const std::vector<double> ref = reference(w, B, adeq, M, N, K);
    std::vector<float> c((size_t)N * M);
    std::vector<int4> buf(VECS);
    for (int m = 0; m < M; m++) {
        std::vector<float> acc((size_t)N * 32, 0.f);  // per token and lane
        for (int sb0 = 0; sb0 < nbk; sb0 += SB) {
            const int nsb = std::min(SB, nbk - sb0);
            const size_t start = ((size_t)m * nbk + sb0) * B, a0 = start & ~(size_t)15;
            const int n = (int)((start - a0 + (size_t)nsb * B + 15) / 16);
            if (n > VECS) return INFINITY;
            memset(buf.data(), 0, VECS * 16);
            for (int v = 0; v < n; v++)
                memcpy((uint8_t*)buf.data() + 16 * v, &w[a0 + 16 * v], std::min((size_t)16, w.size() - (a0 + 16 * v)));
            for (int lane = 0; lane < 32; lane++)
                for (int j = lane / 8; j < nsb; j += 4) {  // the lane's super-blocks j of the step
                    typename KQ::Weights wt;
                    wt.load((const uint8_t*)buf.data() + (start - a0) + j * B, lane % 8);
                    for (int t = 0; t < N; t++) {
                        typename KQ::Acts ac;
                        ac.load(&img[(size_t)t * nbk + sb0 + j], lane % 8);
                        acc[t * 32 + lane] += KQ::dot(wt, ac);
                    }
                }
        }
        for (int t = 0; t < N; t++) {
            float s = 0.f;
            for (int lane = 0; lane < 32; lane++) s += acc[t * 32 + lane];
            c[(size_t)t * M + m] = s;
        }
    }
    return nmse(c.data(), ref);
}

static int cpu_checks() {
    int bad = 0;
    for (int q = 0; q < 64; q++)  // four bytes at once: q, q ^ 63, (q + 17) % 64, (q * 5) % 64
    {
        const int b[4] = {q, q ^ 63, (q + 17) % 64, (q * 5) % 64};
        const int r = gpu::kq_minus32(b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24);
        for (int i = 0; i < 4; i++) bad += (int)(int8_t)(r >> (8 * i)) != b[i] - 32;
    }
    printf("cpu kq_minus32 on all 6-bit values: %s\n", bad ? "FAIL" : "ok");
    const int shapes[][3] = {{1, 1, 256}, {7, 3, 768}, {33, 5, 1280}, {5, 9, 2304}, {3, 2, 4096}, {2, 1, 14336}};
    double worst[2] = {0, 0};
    for (auto& s : shapes) {
        const unsigned seed = s[0] * 7 + s[2];
        const double e4[3] = {emulate<kq_q4_k, 4>(s[0], s[1], s[2], seed), emulate<kq_q4_k, 8>(s[0], s[1], s[2], seed),
                              emulate<kq_q4_k, 16>(s[0], s[1], s[2], seed)};
        const double e6[3] = {emulate<kq_q6_k, 4>(s[0], s[1], s[2], seed), emulate<kq_q6_k, 8>(s[0], s[1], s[2], seed),
                              emulate<kq_q6_k, 16>(s[0], s[1], s[2], seed)};
        for (int i = 0; i < 3; i++) {  // steps of 4, 8 and 16 super-blocks
            for (double e : {e4[i], e6[i]})
                if (!(e <= NMSE_MAX))
                    printf("FAIL cpu SB=%d M=%d N=%d K=%d nmse %.3g\n", 4 << i, s[0], s[1], s[2], e), bad++;
            worst[0] = std::max(worst[0], e4[i]), worst[1] = std::max(worst[1], e6[i]);
        }
    }
    printf("cpu lane arithmetic worst nmse: q4_k %.3g, q6_k %.3g (threshold %.0e)\n", worst[0], worst[1], NMSE_MAX);
    return bad;
}

// ---------------------------------------------------------------- GPU side
static cudaStream_t g_stream;

template <class KQ, int T, int R, int SB, int S>  // one configuration, for N = T only (one pass)
void launch_v(const GemmProblem& p, cudaStream_t s) {
    gpu::kq_quantize((const float*)p.A, (kq_act_sb*)p.workspace, p.N, p.K, 0, s);
    gpu::kq_launch<KQ, T, R, SB, S>((const kq_act_sb*)p.workspace, (const typename KQ::block*)p.W, p.C, p.M, p.K / QK_K,
                                    s);
}
template <class KQ, int T, int R, int SB, int S>
void res(const char* name, int sms) {
    auto kernel = gpu::kq_decode_kernel<KQ, T, R, SB, S>;
    constexpr size_t smem = gpu::kq_smem_bytes<KQ, R, SB, S>();
    cudaFuncAttributes fa;
    int occ = 0;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaFuncGetAttributes(&fa, kernel));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, gpu::KQ_THREADS, smem));
    const int M = 4096, groups = (M + R - 1) / R;
    const int grid = std::max(1, std::min((groups + gpu::KQ_WARPS - 1) / gpu::KQ_WARPS, sms * occ));
    const double warps_sm = (double)grid * gpu::KQ_WARPS / sms;
    printf(
        "# %-14s %3d regs %2d B spill, smem %5.1f KB/CTA, %d CTAs/SM; M=4096: %4d CTAs = %.2f waves, %4.1f "
        "warps/SM, %5.1f KB of W in flight/SM\n",
        name, fa.numRegs, (int)fa.localSizeBytes, smem / 1024.0, occ, grid, (double)grid / (sms * std::max(occ, 1)),
        warps_sm, warps_sm * (S - 1) * R * SB * KQ::BYTES / 1024.0);
}
struct Variant {
    const char* name;
    int fmt;  // 4: Q4_K, 6: Q6_K
    int T;
    Launch fn;
    void (*res)(const char*, int);
};
#define V(F, T, R, SB, S)                                                                  \
    {"q" #F "_k T" #T " R" #R " SB" #SB " S" #S, F, T, launch_v<kq_q##F##_k, T, R, SB, S>, \
     res<kq_q##F##_k, T, R, SB, S>}
// T R SB S: tokens, rows per warp, super-blocks per warp step, step buffers per warp. The production
// choices (kq_launch_tokens) are T1 R1 SB16 S2 and, for T > 1, R2 SB8 S3.
static Variant VARS[] = {
    V(4, 1, 1, 4, 3),  V(4, 1, 1, 8, 3),  V(4, 1, 1, 16, 2), V(4, 1, 1, 16, 3), V(4, 1, 1, 32, 2), V(4, 1, 2, 8, 3),
    V(4, 2, 1, 16, 2), V(4, 2, 2, 8, 3),  V(4, 2, 2, 16, 2), V(4, 4, 2, 8, 3),  V(4, 4, 2, 16, 2), V(4, 4, 4, 8, 2),
    V(4, 8, 1, 16, 2), V(4, 8, 2, 8, 3),  V(4, 8, 2, 16, 2), V(4, 8, 4, 8, 2),  V(6, 1, 1, 4, 3),  V(6, 1, 1, 8, 3),
    V(6, 1, 1, 16, 2), V(6, 1, 1, 16, 3), V(6, 1, 1, 32, 2), V(6, 1, 2, 8, 3),  V(6, 2, 1, 16, 2), V(6, 2, 2, 8, 3),
    V(6, 2, 2, 16, 2), V(6, 4, 2, 8, 3),  V(6, 4, 2, 16, 2), V(6, 4, 4, 8, 2),  V(6, 8, 1, 16, 2), V(6, 8, 2, 8, 3),
    V(6, 8, 2, 16, 2), V(6, 8, 4, 8, 2),
};

struct DevBuf {
    void* p = nullptr;
    explicit DevBuf(size_t n) { CK(cudaMalloc(&p, std::max(n, (size_t)1))); }
    ~DevBuf() { cudaFree(p); }
};

// fn on one shape against the float64 reference; the workspace is exactly the kernel's image (N * K/256
// entries of 320 B) unless ws_bytes says more, so that compute-sanitizer sees any write past it.
static double check(Launch fn, int fmt, int M, int N, int K, unsigned seed, size_t ws_bytes = 0) {
    const int B = fmt == 4 ? 144 : 210, nbk = K / QK_K;
    std::vector<uint8_t> w;
    std::vector<float> a;
    std::vector<kq_act_sb> img;
    std::vector<double> adeq;
    if (fmt == 4)
        make_w<kq_q4_k>(w, M, nbk, seed);
    else
        make_w<kq_q6_k>(w, M, nbk, seed);
    make_a(a, (size_t)N * K, seed + 1);
    quantize_img(a, N, K, img, adeq);
    const std::vector<double> ref = reference(w, B, adeq, M, N, K);
    DevBuf dW(w.size()), dA(a.size() * 4), dC((size_t)N * M * 4),
        ws(std::max(ws_bytes, (size_t)N * nbk * sizeof(kq_act_sb)));
    CK(cudaMemcpy(dW.p, w.data(), w.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dA.p, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dC.p, 0xFF, (size_t)N * M * 4));  // NaN poison
    GemmProblem p{dA.p, dW.p, (float*)dC.p, N, M, K};
    p.workspace = ws.p;
    fn(p, g_stream);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(g_stream));
    std::vector<float> c((size_t)N * M);
    CK(cudaMemcpy(c.data(), dC.p, c.size() * 4, cudaMemcpyDeviceToHost));
    return nmse(c.data(), ref);
}

struct Stats {
    float med, q1, q3;
};
static Stats time_it(Launch fn, std::vector<void*>& Ws, int copies, void* dA, float* dC, void* ws, int M, int N, int K,
                     int calls) {
    std::vector<cudaEvent_t> e0(calls), e1(calls);
    for (int i = 0; i < calls; i++) {
        CK(cudaEventCreate(&e0[i]));
        CK(cudaEventCreate(&e1[i]));
    }
    auto prob = [&](int i) {
        GemmProblem p{dA, Ws[i % copies], dC, N, M, K};
        p.workspace = ws;
        return p;
    };
    for (int i = 0; i < 3; i++) fn(prob(i), g_stream);
    for (int i = 0; i < calls; i++) {
        CK(cudaEventRecord(e0[i], g_stream));
        fn(prob(i), g_stream);
        CK(cudaEventRecord(e1[i], g_stream));
    }
    CK(cudaStreamSynchronize(g_stream));
    CK(cudaGetLastError());
    std::vector<float> t(calls);
    for (int i = 0; i < calls; i++) {
        CK(cudaEventElapsedTime(&t[i], e0[i], e1[i]));
        t[i] *= 1000.f;
    }
    for (int i = 0; i < calls; i++) cudaEventDestroy(e0[i]), cudaEventDestroy(e1[i]);
    std::sort(t.begin(), t.end());
    return {t[calls / 2], t[calls / 4], t[3 * calls / 4]};
}

static void fill_q4_0(std::vector<uint8_t>& w, int M, int K) {  // random Q4_0 blocks, small d
    std::mt19937 g(5);
    w.resize((size_t)M * (K / QK) * sizeof(block_q4_0));
    for (auto& x : w) x = (uint8_t)(g() & 0xFF);
    for (size_t b = 0; b < (size_t)M * (K / QK); b++) {
        const fp16_bits d = fp32_to_fp16(1e-3f);
        memcpy(w.data() + b * sizeof(block_q4_0), &d, 2);
    }
}

int main(int argc, char** argv) {
    const bool cpu_only = argc > 1 && !strcmp(argv[1], "cpu"), check_only = argc > 1 && !strcmp(argv[1], "check");
    int bad = 0;
    if (!check_only) bad += cpu_checks();  // (check mode: the GPU alone, for compute-sanitizer)
    if (cpu_only) return bad != 0;
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    int dev = 0, l2 = 0;
    CK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    const int sms = prop.multiProcessorCount;
    printf("# %s, %d SMs, L2 %d MiB, sm_%d%d\n", prop.name, sms, l2 >> 20, prop.major, prop.minor);

    if (check_only) {  // for compute-sanitizer: launchers (several passes too) and configurations, small shapes
        const int small[][3] = {{1, 1, 256}, {7, 3, 768}, {33, 9, 1280}, {5, 17, 2304}, {130, 2, 512}, {3, 8, 4352}};
        for (auto& s : small)
            for (int fmt : {4, 6}) {
                const double e =
                    check(fmt == 4 ? cuda_q4_k_q8_1_decode : cuda_q6_k_q8_1_decode, fmt, s[0], s[1], s[2], s[0] + s[2]);
                printf("check prod q%d_k M=%d N=%d K=%d nmse %.3g\n", fmt, s[0], s[1], s[2], e);
                bad += !(e <= NMSE_MAX);
            }
        for (auto& v : VARS) {
            const double e = check(v.fn, v.fmt, 9, v.T, 1280, 3);
            printf("check %-14s M=9 K=1280 nmse %.3g\n", v.name, e);
            bad += !(e <= NMSE_MAX);
        }
        printf("check: %d failures\n", bad);
        return bad != 0;
    }

    for (auto& v : VARS) v.res(v.name, sms);
    // correctness: the production launchers (N > 8: passes of 8)
    const int shapes[][3] = {{1, 1, 256},   {7, 1, 768},      {33, 5, 1280},   {83, 9, 2304},  {130, 2, 4096},
                             {17, 17, 512}, {4096, 1, 14336}, {4099, 8, 4096}, {3, 16, 4352},  {1, 1, 14336},
                             {45, 6, 256},  {19, 7, 2560},    {100, 4, 4096},  {257, 9, 2048}, {129, 3, 4096}};
    for (int fmt : {4, 6}) {
        double worst = 0;
        for (auto& sh : shapes) {
            const double e = check(fmt == 4 ? cuda_q4_k_q8_1_decode : cuda_q6_k_q8_1_decode, fmt, sh[0], sh[1], sh[2],
                                   sh[0] * 7 + sh[1]);
            if (!(e <= NMSE_MAX))
                printf("FAIL prod q%d_k M=%d N=%d K=%d nmse %.3g\n", fmt, sh[0], sh[1], sh[2], e), bad++;
            worst = std::max(worst, e);
        }
        printf("check prod q%d_k worst nmse %.3g over %d shapes\n", fmt, worst,
               (int)(sizeof(shapes) / sizeof(shapes[0])));
    }
    for (auto& v : VARS) {
        double worst = 0;
        const int vs[][2] = {{7, 768}, {83, 1280}, {130, 4096}, {257, 2304}, {33, 14336}};
        for (auto& sh : vs) {
            const double e = check(v.fn, v.fmt, sh[0], v.T, sh[1], sh[0] + v.T);
            if (!(e <= NMSE_MAX)) printf("FAIL %s M=%d K=%d nmse %.3g\n", v.name, sh[0], sh[1], e), bad++;
            worst = std::max(worst, e);
        }
        printf("check %-14s worst nmse %.3g\n", v.name, worst);
    }
    // copy bandwidth
    float copy_gbps;
    {
        const size_t bytes = (size_t)1 << 30;
        DevBuf s(bytes), d(bytes);
        CK(cudaMemset(s.p, 1, bytes));
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        CK(cudaMemcpy(d.p, s.p, bytes, cudaMemcpyDeviceToDevice));
        std::vector<float> t;
        for (int i = 0; i < 10; i++) {
            CK(cudaEventRecord(a, g_stream));
            CK(cudaMemcpyAsync(d.p, s.p, bytes, cudaMemcpyDeviceToDevice, g_stream));
            CK(cudaEventRecord(b, g_stream));
            CK(cudaEventSynchronize(b));
            float ms;
            CK(cudaEventElapsedTime(&ms, a, b));
            t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        copy_gbps = 2.0 * bytes / (t[5] * 1e-3) / 1e9;
        printf("# copy %.0f GB/s (read + write, 1 GiB, median of 10)\n", copy_gbps);
    }
    // timing at M = 4096, K = 14336
    const int M = 4096, K = 14336, NMAX = 9;
    std::vector<float> a;
    make_a(a, (size_t)NMAX * K, 2);
    DevBuf dA(a.size() * 4), dC((size_t)NMAX * M * 4), ws(act_workspace_bytes(NMAX, K));
    CK(cudaMemcpy(dA.p, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    printf("%-16s %3s %22s %22s %7s %7s\n", "variant", "N", "cold med us (q1-q3)", "warm med us (q1-q3)", "GB/s",
           "%copy");
    for (int fmt : {4, 6, 0}) {  // 0: chapter 6's Q4_0 decode step, the yardstick
        std::vector<uint8_t> w;
        if (fmt == 4) make_w<kq_q4_k>(w, M, K / QK_K, 1);
        if (fmt == 6) make_w<kq_q6_k>(w, M, K / QK_K, 1);
        if (fmt == 0) fill_q4_0(w, M, K);
        const size_t wb = w.size();
        const int copies = std::max(2, (int)std::ceil(4.0 * l2 / wb));
        std::vector<void*> Ws(copies);
        for (auto& p : Ws) {
            CK(cudaMalloc(&p, wb));
            CK(cudaMemcpy(p, w.data(), wb, cudaMemcpyHostToDevice));
        }
        const int calls = std::max(100, 20 * copies);
        printf("# %s: W %.1f MB, cold = %d copies; %d calls per row\n",
               fmt == 0   ? "q4_0"
               : fmt == 4 ? "q4_k"
                          : "q6_k",
               wb / 1e6, copies, calls);
        auto row = [&](const char* name, Launch fn, int N) {
            const Stats c = time_it(fn, Ws, copies, dA.p, (float*)dC.p, ws.p, M, N, K, calls);
            const Stats h = time_it(fn, Ws, 1, dA.p, (float*)dC.p, ws.p, M, N, K, calls);
            const double gbps = wb / (c.med * 1e-6) / 1e9;  // weight bytes only
            printf("%-16s %3d %8.2f (%5.2f-%5.2f) %8.2f (%5.2f-%5.2f) %7.0f %6.1f\n", name, N, c.med, c.q1, c.q3, h.med,
                   h.q1, h.q3, gbps, 100.0 * gbps / copy_gbps);
        };
        if (fmt == 0) {
            for (int N : {1, 2, 4, 8}) row("ch6 q4_0 decode", cuda_q4_0_q8_1_decode, N);
        } else {
            Launch prod = fmt == 4 ? cuda_q4_k_q8_1_decode : cuda_q6_k_q8_1_decode;
            for (auto& v : VARS)
                if (v.fmt == fmt) row(v.name, v.fn, v.T);
            for (int N = 1; N <= NMAX; N++) row("prod", prod, N);
        }
        for (auto& p : Ws) cudaFree(p);
    }
    CK(cudaGetLastError());
    printf("variants: %d failures\n", bad);
    return bad != 0;
}
