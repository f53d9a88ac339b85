// bindings.cpp: the only file that sees torch::Tensor.
//
// It registers four operators under torch.ops.quantgemm, checks every input before a kernel sees
// a pointer (dtype, device, shape, contiguity, alignment), allocates the output and calls the
// kernel: CPU kernels split over threads with at::parallel_for, CUDA launchers on the current
// stream with a launch check. The Python layer (quantgemm_kernels/api.py) checks the same things
// first with friendlier messages; these checks are the last line before memory is touched.
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/all.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "gemm.h"

#define QG_CPU_KERNEL(name, wfmt, afmt) void name(const GemmProblem& p, int m_begin, int m_end);
#include "cpu/kernels.def"
#undef QG_CPU_KERNEL

#ifdef WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include "cuda/launchers.h"
#endif

namespace {

// Error messages are built without iostreams: strings as they are, numbers with std::to_string,
// torch types by name. On the course's GPU image (torch 2.11.0+cu130, g++ 13.3, Python 3.12) the
// extension ends up with its own static copy of libstdc++ (792 exported symbols, no libstdc++.so
// in ldd), and formatting a number through an ostream there (c10::str) crashed the process with a
// segmentation fault, while the same throw with a message of strings only raised cleanly
// (book/robustness.md). qg_str sidesteps the locale machinery that crash lives in.
inline void qg_append(std::string& s, const char* v) { s += v; }
inline void qg_append(std::string& s, const std::string& v) { s += v; }
inline void qg_append(std::string& s, c10::string_view v) { s.append(v.data(), v.size()); }
inline void qg_append(std::string& s, char v) { s += v; }
inline void qg_append(std::string& s, at::ScalarType v) { s += c10::toString(v); }
inline void qg_append(std::string& s, const c10::Device& v) {
    s += c10::DeviceTypeName(v.type(), /*lower_case=*/true);
    if (v.has_index()) s += ":" + std::to_string(v.index());
}
template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
inline void qg_append(std::string& s, T v) { s += std::to_string(v); }
template <class T, std::enable_if_t<std::is_enum_v<T>, int> = 0>
inline void qg_append(std::string& s, T v) { s += std::to_string(static_cast<long long>(v)); }
template <class... Args>
std::string qg_str(const Args&... args) {
    std::string s;
    (qg_append(s, args), ...);
    return s;
}

// QG_CHECK(cond, message parts...): throw std::runtime_error (a Python RuntimeError). The Python
// layer (api.py) has already raised a precise TypeError/ValueError for anything a user can pass;
// these checks guard direct calls of torch.ops.quantgemm.* before memory is touched.
#define QG_CHECK(cond, ...) \
    do { if (!(cond)) throw std::runtime_error(qg_str(__VA_ARGS__)); } while (0)

struct FormatInfo { const char* name; QgFormat fmt; int64_t block_bytes; };
const FormatInfo FORMATS[] = {{"q4_0", QG_Q4_0, 18}, {"q8_0", QG_Q8_0, 34}, {"q8_1", QG_Q8_1, 36}};

const FormatInfo& format_info(const std::string& fmt) {
    for (const auto& f : FORMATS) if (fmt == f.name) return f;
    throw std::runtime_error(qg_str("unknown format '", fmt, "': expected one of q4_0, q8_0, q8_1"));
}

void check_float_rows(const at::Tensor& x, const char* what) {
    QG_CHECK(x.scalar_type() == at::kFloat, what, " must be float32, got ", x.scalar_type());
    QG_CHECK(x.dim() == 2, what, " must be 2-D [rows, K], got ", x.dim(), "-D");
    QG_CHECK(x.is_contiguous(), what, " must be contiguous (call .contiguous())");
    QG_CHECK(x.size(1) > 0 && x.size(1) % QK == 0, what, ": K (", x.size(1),
                      ") must be a positive multiple of 32");
}

void check_block_rows(const at::Tensor& q, const FormatInfo& f, const char* what) {
    QG_CHECK(q.scalar_type() == at::kByte, what, " must be uint8 blocks, got ", q.scalar_type());
    QG_CHECK(q.dim() == 2, what, " must be 2-D [rows, K/32*", f.block_bytes, "], got ", q.dim(), "-D");
    QG_CHECK(q.is_contiguous(), what, " must be contiguous");
    QG_CHECK(q.size(1) > 0 && q.size(1) % f.block_bytes == 0, what, ": row of ", q.size(1),
                      " bytes is not a whole number of ", f.name, " blocks (", f.block_bytes, " B)");
}

// ---------------------------------------------------------------- quantize / dequantize
at::Tensor quantize_cpu(const at::Tensor& x, c10::string_view fmt_sv, int64_t sum_mode) {
    const FormatInfo& f = format_info(std::string(fmt_sv));
    check_float_rows(x, "x");
    QG_CHECK(sum_mode == Q8_1_S_D_SUM_Q || sum_mode == Q8_1_S_SUM_X, "bad q8_1 sum mode ", sum_mode);
    const int64_t rows = x.size(0), K = x.size(1);
    at::Tensor q = at::empty({rows, K / QK * f.block_bytes}, x.options().dtype(at::kByte));
    if (rows == 0) return q;
    const float* xp = x.data_ptr<float>();
    uint8_t* qp = q.data_ptr<uint8_t>();
    const int64_t row_bytes = K / QK * f.block_bytes;
    at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
        const float* xs = xp + r0 * K;
        void* ys = qp + r0 * row_bytes;
        switch (f.fmt) {
            case QG_Q4_0: quantize_rows_q4_0(xs, (block_q4_0*)ys, r1 - r0, K); break;
            case QG_Q8_0: quantize_rows_q8_0(xs, (block_q8_0*)ys, r1 - r0, K); break;
            default: quantize_rows_q8_1(xs, (block_q8_1*)ys, r1 - r0, K, (int)sum_mode); break;
        }
    });
    return q;
}

at::Tensor dequantize_cpu(const at::Tensor& q, c10::string_view fmt_sv) {
    const FormatInfo& f = format_info(std::string(fmt_sv));
    check_block_rows(q, f, "q");
    const int64_t rows = q.size(0), K = q.size(1) / f.block_bytes * QK;
    at::Tensor y = at::empty({rows, K}, q.options().dtype(at::kFloat));
    if (rows == 0) return y;
    const uint8_t* qp = q.data_ptr<uint8_t>();
    float* yp = y.data_ptr<float>();
    switch (f.fmt) {
        case QG_Q4_0: dequantize_rows_q4_0((const block_q4_0*)qp, yp, rows, K); break;
        case QG_Q8_0: dequantize_rows_q8_0((const block_q8_0*)qp, yp, rows, K); break;
        default: dequantize_rows_q8_1((const block_q8_1*)qp, yp, rows, K); break;
    }
    return y;
}

// ---------------------------------------------------------------- GEMM
struct KernelFormats { QgFormat w, a; };

int64_t block_bytes_of(QgFormat f) { return f == QG_Q4_0 ? 18 : f == QG_Q8_0 ? 34 : f == QG_Q8_1 ? 36 : 0; }

// Checks A [N, K or K/32 blocks] and W [M, ...] against the kernel's formats; returns K.
int64_t check_gemm_inputs(const at::Tensor& A, const at::Tensor& W, const KernelFormats& kf) {
    QG_CHECK(A.dim() == 2 && W.dim() == 2, "A and W must be 2-D");
    QG_CHECK(A.device() == W.device(), "A and W must be on the same device, got ", A.device(), " and ", W.device());
    QG_CHECK(A.is_contiguous() && W.is_contiguous(), "A and W must be contiguous");
    auto k_of = [](const at::Tensor& t, QgFormat f, const char* what) -> int64_t {
        if (f == QG_F32 || f == QG_F32_AS_Q8_1) {
            QG_CHECK(t.scalar_type() == at::kFloat, what, " must be float32, got ", t.scalar_type());
            return t.size(1);
        }
        QG_CHECK(t.scalar_type() == at::kByte, what, " must be uint8 blocks, got ", t.scalar_type());
        QG_CHECK(t.size(1) % block_bytes_of(f) == 0, what, ": row of ", t.size(1),
                          " bytes is not a whole number of ", block_bytes_of(f), "-byte blocks");
        return t.size(1) / block_bytes_of(f) * QK;
    };
    const int64_t Ka = k_of(A, kf.a, "A"), Kw = k_of(W, kf.w, "W");
    QG_CHECK(Ka == Kw, "A and W disagree on K: A has K=", Ka, ", W has K=", Kw);
    QG_CHECK(Ka > 0 && Ka % QK == 0, "K (", Ka, ") must be a positive multiple of 32");
    QG_CHECK(A.size(0) <= INT32_MAX && W.size(0) <= INT32_MAX && Ka <= INT32_MAX, "sizes must fit in int32");
    return Ka;
}

struct CpuKernel { const char* name; CpuGemmFn fn; KernelFormats formats; };
const CpuKernel CPU_KERNELS[] = {
#define QG_CPU_KERNEL(name, wfmt, afmt) {#name, name, {wfmt, afmt}},
#include "cpu/kernels.def"
#undef QG_CPU_KERNEL
};

at::Tensor gemm_cpu(const at::Tensor& A, const at::Tensor& W, c10::string_view kernel_sv, int64_t sum_mode) {
    const std::string kernel(kernel_sv);
    const CpuKernel* k = nullptr;
    for (const auto& c : CPU_KERNELS) if (kernel == c.name) k = &c;
    QG_CHECK(k != nullptr, "no CPU kernel named '", kernel, "'");
    QG_CHECK(sum_mode == Q8_1_S_D_SUM_Q, "kernel '", kernel, "' reads A as given: choose Q8_1's s when "
             "quantizing A (quantize(A, 'q8_1', q8_1_sum=...)), not here");
    const int64_t K = check_gemm_inputs(A, W, k->formats);
    const int64_t N = A.size(0), M = W.size(0);
    at::Tensor C = at::empty({N, M}, A.options().dtype(at::kFloat));
    if (N == 0 || M == 0) return C;
    GemmProblem p{A.data_ptr(), W.data_ptr(), C.data_ptr<float>(), (int)N, (int)M, (int)K};
    // Split the output features across threads; each chunk is a whole number of 8 columns.
    const int64_t grain = std::max<int64_t>(8, (M / (8 * at::get_num_threads())) / 8 * 8);
    at::parallel_for(0, M, grain, [&](int64_t m0, int64_t m1) { k->fn(p, (int)m0, (int)m1); });
    return C;
}

#ifdef WITH_CUDA
struct CudaKernel { const char* name; void (*fn)(const GemmProblem&, cudaStream_t); KernelFormats formats; };
const CudaKernel CUDA_KERNELS[] = {
#define QG_CUDA_KERNEL(name, wfmt, afmt) {#name, name, {wfmt, afmt}},
#include "cuda/kernels.def"
#undef QG_CUDA_KERNEL
};

// A failed launch (bad configuration, or an error left by an earlier kernel) becomes an exception.
void check_launch() {
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) throw std::runtime_error(qg_str("CUDA launch failed: ", cudaGetErrorString(err)));
}

// Vectorised loads want 16-byte aligned rows; torch's allocations are, slices may not be.
void check_aligned(const at::Tensor& t, const char* what) {
    QG_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, what,
                      "'s data must start on a 16-byte boundary (a sliced view? pass a .clone())");
}

at::Tensor quantize_cuda(const at::Tensor& x, c10::string_view fmt_sv, int64_t sum_mode) {
    const FormatInfo& f = format_info(std::string(fmt_sv));
    check_float_rows(x, "x");
    QG_CHECK(sum_mode == Q8_1_S_D_SUM_Q || sum_mode == Q8_1_S_SUM_X, "bad q8_1 sum mode ", sum_mode);
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0), K = x.size(1);
    at::Tensor q = at::empty({rows, K / QK * f.block_bytes}, x.options().dtype(at::kByte));
    if (rows == 0) return q;
    cudaStream_t s = at::cuda::getCurrentCUDAStream();
    const float* xp = x.data_ptr<float>();
    void* qp = q.data_ptr();
    switch (f.fmt) {
        case QG_Q4_0: cuda_quantize_q4_0(xp, (block_q4_0*)qp, rows, K, s); break;
        case QG_Q8_0: cuda_quantize_q8_0(xp, (block_q8_0*)qp, rows, K, s); break;
        default: cuda_quantize_q8_1(xp, (block_q8_1*)qp, rows, K, (int)sum_mode, s); break;
    }
    check_launch();
    return q;
}

at::Tensor dequantize_cuda(const at::Tensor& q, c10::string_view fmt_sv) {
    const FormatInfo& f = format_info(std::string(fmt_sv));
    check_block_rows(q, f, "q");
    const c10::cuda::CUDAGuard guard(q.device());
    const int64_t rows = q.size(0), K = q.size(1) / f.block_bytes * QK;
    at::Tensor y = at::empty({rows, K}, q.options().dtype(at::kFloat));
    if (rows == 0) return y;
    cuda_dequantize(q.data_ptr(), f.fmt, y.data_ptr<float>(), rows, K, at::cuda::getCurrentCUDAStream());
    check_launch();
    return y;
}

// The kernels that quantize A themselves and can do it as llama.cpp's CUDA backend does for the same
// kernel kind (Q8_1_S_SUM_X): the decode kernels as quantize_q8_1 (s = sum(x), which MMVQ reads),
// the tensor-core kernels as MMQ's quantize_mmq_q8_1. decode_fused, a step of the ladder, cannot.
bool has_sum_mode(const std::string& kernel) {
    // Not the Q8_0 mma step: MMQ keeps d_a in float32 there, and mma's magic-number conversion is
    // exact only for a d_a of at most 22 significant bits (mma.cuh).
    return kernel.rfind("cuda_", 0) == 0 && kernel != "cuda_q4_0_q8_1_decode_fused" &&
           kernel != "cuda_q8_0_q8_1_mma" &&
           (kernel.find("_decode") != std::string::npos || kernel.find("_mma") != std::string::npos ||
            kernel.find("_wgmma") != std::string::npos);
}

at::Tensor gemm_cuda(const at::Tensor& A, const at::Tensor& W, c10::string_view kernel_sv, int64_t sum_mode) {
    const std::string kernel(kernel_sv);
    const CudaKernel* k = nullptr;
    for (const auto& c : CUDA_KERNELS) if (kernel == c.name) k = &c;
    QG_CHECK(k != nullptr, "no CUDA kernel named '", kernel, "'");
    QG_CHECK(sum_mode == Q8_1_S_D_SUM_Q || sum_mode == Q8_1_S_SUM_X, "bad q8_1 sum mode ", sum_mode);
    QG_CHECK(sum_mode == Q8_1_S_D_SUM_Q || has_sum_mode(kernel), "kernel '", kernel, "' has no choice of "
             "Q8_1's s (it quantizes A with the reference quantizer, or never reads s)");
    const int64_t K = check_gemm_inputs(A, W, k->formats);
    check_aligned(A, "A");
    check_aligned(W, "W");
    const c10::cuda::CUDAGuard guard(A.device());
    const int64_t N = A.size(0), M = W.size(0);
    at::Tensor C = at::empty({N, M}, A.options().dtype(at::kFloat));
    if (N == 0 || M == 0) return C;
    GemmProblem p{A.data_ptr(), W.data_ptr(), C.data_ptr<float>(), (int)N, (int)M, (int)K};
    p.q8_1_sum_mode = (int)sum_mode;
    at::Tensor workspace;  // chapter 6 kernels quantize A into it (freed when the call returns:
                           // the caching allocator keeps it for the next call, stream-ordered)
    if (k->formats.a == QG_F32_AS_Q8_1) {
        workspace = at::empty({(int64_t)act_workspace_bytes(N, K)}, A.options().dtype(at::kByte));
        p.workspace = workspace.data_ptr();
    }
    k->fn(p, at::cuda::getCurrentCUDAStream());
    check_launch();
    return C;
}
#endif

std::vector<std::string> kernel_names() {
    std::vector<std::string> names;
    for (const auto& k : CPU_KERNELS) names.push_back(k.name);
#ifdef WITH_CUDA
    for (const auto& k : CUDA_KERNELS) names.push_back(k.name);
#endif
    return names;
}

}  // namespace

TORCH_LIBRARY(quantgemm, m) {
    m.def("quantize(Tensor x, str fmt, int q8_1_sum_mode) -> Tensor");
    m.def("dequantize(Tensor q, str fmt) -> Tensor");
    m.def("gemm(Tensor A, Tensor W, str kernel, int q8_1_sum_mode=0) -> Tensor");
    m.def("kernel_names() -> str[]", &kernel_names);
}

TORCH_LIBRARY_IMPL(quantgemm, CPU, m) {
    m.impl("quantize", &quantize_cpu);
    m.impl("dequantize", &dequantize_cpu);
    m.impl("gemm", &gemm_cpu);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(quantgemm, CUDA, m) {
    m.impl("quantize", &quantize_cuda);
    m.impl("dequantize", &dequantize_cuda);
    m.impl("gemm", &gemm_cuda);
}
#endif

// ============================================================================================
// BEGIN appendix B section: the misaligned-load demonstration (cuda/misaligned_demo.cu).
// Two CUDA-only operators; the CPU build defines them without an implementation, so a call there
// raises NotImplementedError. quantgemm_kernels/misaligned.py is the only caller.
//   misaligned_block_sums(blocks, mode)                      modes 0-2: Q4_0 bytes as llama.cpp stores them
//   misaligned_block_sums_repacked(scales, quants, mode)     modes 3-4: scales and quants in two arrays
// Both return float32 [nb]: the sum of each block's 32 dequantized values.
// ============================================================================================
#ifdef WITH_CUDA
#include "cuda/misaligned_demo.h"

namespace qg_misaligned_demo {

at::Tensor block_sums_cuda(const at::Tensor& blocks, int64_t mode) {
    QG_CHECK(mode >= QG_MIS_NAIVE_B4 && mode <= QG_MIS_B1, "misaligned_block_sums: mode must be 0, 1 or 2, got ", mode);
    QG_CHECK(blocks.scalar_type() == at::kByte, "blocks must be uint8 Q4_0 bytes, got ", blocks.scalar_type());
    QG_CHECK(blocks.is_contiguous(), "blocks must be contiguous");
    QG_CHECK(blocks.numel() % 18 == 0, "blocks: ", blocks.numel(), " bytes is not a whole number of 18-byte Q4_0 blocks");
    // The demonstration needs the array itself aligned, so that the only misalignment left is the
    // one inside the blocks (block 0's quants at base + 2) and mode 0 fails the same way every time.
    QG_CHECK(reinterpret_cast<uintptr_t>(blocks.data_ptr()) % 16 == 0,
             "blocks must start on a 16-byte boundary (a sliced view? pass a .clone())");
    const c10::cuda::CUDAGuard guard(blocks.device());
    const int64_t nb = blocks.numel() / 18;
    at::Tensor y = at::empty({nb}, blocks.options().dtype(at::kFloat));
    cuda_misaligned_block_sums(blocks.data_ptr(), nullptr, nullptr, y.data_ptr<float>(), nb, (int)mode,
                               at::cuda::getCurrentCUDAStream());
    check_launch();  // catches a bad launch; mode 0's fault arrives later, at the next synchronisation
    return y;
}

at::Tensor block_sums_repacked_cuda(const at::Tensor& scales, const at::Tensor& quants, int64_t mode) {
    QG_CHECK(mode == QG_MIS_REPACKED_B4 || mode == QG_MIS_REPACKED_B16,
             "misaligned_block_sums_repacked: mode must be 3 or 4, got ", mode);
    QG_CHECK(scales.scalar_type() == at::kShort || scales.scalar_type() == at::kHalf,
             "scales must hold fp16 bits (int16 or float16), got ", scales.scalar_type());
    QG_CHECK(quants.scalar_type() == at::kByte, "quants must be uint8, got ", quants.scalar_type());
    QG_CHECK(scales.is_contiguous() && quants.is_contiguous(), "scales and quants must be contiguous");
    QG_CHECK(scales.device() == quants.device(), "scales and quants must be on the same device");
    const int64_t nb = scales.numel();
    QG_CHECK(quants.numel() == 16 * nb, "quants must hold 16 bytes per block: ", nb, " blocks need ", 16 * nb,
             " bytes, got ", quants.numel());
    QG_CHECK(reinterpret_cast<uintptr_t>(quants.data_ptr()) % 16 == 0,
             "quants must start on a 16-byte boundary (mode 4 reads 128-bit words)");
    const c10::cuda::CUDAGuard guard(quants.device());
    at::Tensor y = at::empty({nb}, quants.options().dtype(at::kFloat));
    cuda_misaligned_block_sums(nullptr, (const uint16_t*)scales.data_ptr(), quants.data_ptr<uint8_t>(),
                               y.data_ptr<float>(), nb, (int)mode, at::cuda::getCurrentCUDAStream());
    check_launch();
    return y;
}

}  // namespace qg_misaligned_demo
#endif

TORCH_LIBRARY_FRAGMENT(quantgemm, m) {
    m.def("misaligned_block_sums(Tensor blocks, int mode) -> Tensor");
    m.def("misaligned_block_sums_repacked(Tensor scales, Tensor quants, int mode) -> Tensor");
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(quantgemm, CUDA, m) {
    m.impl("misaligned_block_sums", &qg_misaligned_demo::block_sums_cuda);
    m.impl("misaligned_block_sums_repacked", &qg_misaligned_demo::block_sums_repacked_cuda);
}
#endif
// END appendix B section

// ============================================================================================
// BEGIN appendix C section: conv1d_silu_int8, an INT8 causal depthwise conv1d + SiLU + requant.
//   conv1d_silu_int8(x, w, x_scale, w_scale, bias?, out_scale, return_float, libm_exp) -> (q, z)
// q: int8 [batch, channels, time]; z: the float32 SiLU output before requantization ([0, C, T]
// unless return_float). Kernels: cpu/ and cuda/conv1d_silu_int8.*; the arithmetic, shared by
// both: conv1d_silu_int8.h. quantgemm_kernels/simulation.py is the caller and checks first.
// ============================================================================================
#include "conv1d_silu_int8.h"

#include <cmath>
#include <optional>
#include <tuple>

namespace qg_conv1d_silu {

// Checks every input and fills the kernel's problem; q (and z when return_float) are allocated here.
Conv1dSiluProblem conv1d_silu_problem(const at::Tensor& x, const at::Tensor& w, const at::Tensor& x_scale,
                                      const at::Tensor& w_scale, const std::optional<at::Tensor>& bias,
                                      double out_scale, bool return_float, bool libm_exp,
                                      at::Tensor& q, at::Tensor& z) {
    QG_CHECK(x.scalar_type() == at::kChar && x.dim() == 3, "x must be int8 [batch, channels, time], got ",
             x.scalar_type(), " with ", x.dim(), " dims");
    QG_CHECK(w.scalar_type() == at::kChar && w.dim() == 2, "w must be int8 [channels, width], got ",
             w.scalar_type(), " with ", w.dim(), " dims");
    const int64_t B = x.size(0), C = x.size(1), T = x.size(2), W = w.size(1);
    QG_CHECK(w.size(0) == C, "w has ", w.size(0), " channels, x has ", C);
    QG_CHECK(W >= 1 && W <= CONV1D_SILU_MAX_WIDTH, "width must be in [1, ", CONV1D_SILU_MAX_WIDTH, "], got ", W);
    auto check_vec = [&](const at::Tensor& t, const char* what, bool allow_one) {
        QG_CHECK(t.scalar_type() == at::kFloat && t.dim() == 1, what, " must be a 1-D float32 tensor, got ",
                 t.scalar_type(), " with ", t.dim(), " dims");
        QG_CHECK(t.size(0) == C || (allow_one && t.size(0) == 1), what, " must have ", C,
                 allow_one ? " (per channel) or 1 (per tensor)" : "", " values, got ", t.size(0));
        QG_CHECK(t.device() == x.device(), what, " is on ", t.device(), ", x on ", x.device());
        QG_CHECK(t.is_contiguous(), what, " must be contiguous");
    };
    check_vec(x_scale, "x_scale", true);
    check_vec(w_scale, "w_scale", false);
    if (bias) check_vec(*bias, "bias", false);
    QG_CHECK(w.device() == x.device(), "w is on ", w.device(), ", x on ", x.device());
    QG_CHECK(x.is_contiguous() && w.is_contiguous(), "x and w must be contiguous");
    const float out_scale_f = static_cast<float>(out_scale);
    QG_CHECK(std::isfinite(out_scale_f) && out_scale_f > 0.0f, "out_scale must be a positive float32, got ", out_scale);
    q = at::empty({B, C, T}, x.options());
    z = at::empty({return_float ? B : 0, C, T}, x.options().dtype(at::kFloat));
    return Conv1dSiluProblem{x.data_ptr<int8_t>(), w.data_ptr<int8_t>(), x_scale.data_ptr<float>(),
                             w_scale.data_ptr<float>(), bias ? bias->data_ptr<float>() : nullptr,
                             q.data_ptr<int8_t>(), return_float ? z.data_ptr<float>() : nullptr, out_scale_f,
                             x_scale.size(0) != 1, libm_exp, B, C, T, W};
}

std::tuple<at::Tensor, at::Tensor> conv1d_silu_int8_cpu_op(
        const at::Tensor& x, const at::Tensor& w, const at::Tensor& x_scale, const at::Tensor& w_scale,
        const std::optional<at::Tensor>& bias, double out_scale, bool return_float, bool libm_exp) {
    at::Tensor q, z;
    const Conv1dSiluProblem p =
        conv1d_silu_problem(x, w, x_scale, w_scale, bias, out_scale, return_float, libm_exp, q, z);
    const int64_t rows = p.batch * p.channels;
    if (rows > 0 && p.time > 0) {
        const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(p.time, 1));
        at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) { conv1d_silu_int8_cpu(p, r0, r1); });
    }
    return {q, z};
}

#ifdef WITH_CUDA
std::tuple<at::Tensor, at::Tensor> conv1d_silu_int8_cuda_op(
        const at::Tensor& x, const at::Tensor& w, const at::Tensor& x_scale, const at::Tensor& w_scale,
        const std::optional<at::Tensor>& bias, double out_scale, bool return_float, bool libm_exp) {
    // Before the guard: a CUDAGuard on a CPU device throws a c10::Error (see QG_CHECK's comment).
    QG_CHECK(x.is_cuda(), "x is on ", x.device(), ", but another input is on a CUDA device");
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor q, z;
    const Conv1dSiluProblem p =
        conv1d_silu_problem(x, w, x_scale, w_scale, bias, out_scale, return_float, libm_exp, q, z);
    conv1d_silu_int8_cuda(p, at::cuda::getCurrentCUDAStream());
    check_launch();
    return {q, z};
}
#endif

}  // namespace qg_conv1d_silu

TORCH_LIBRARY_FRAGMENT(quantgemm, m) {
    m.def("conv1d_silu_int8(Tensor x, Tensor w, Tensor x_scale, Tensor w_scale, Tensor? bias, float out_scale, "
          "bool return_float, bool libm_exp) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(quantgemm, CPU, m) { m.impl("conv1d_silu_int8", &qg_conv1d_silu::conv1d_silu_int8_cpu_op); }

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(quantgemm, CUDA, m) { m.impl("conv1d_silu_int8", &qg_conv1d_silu::conv1d_silu_int8_cuda_op); }
#endif
// END appendix C section
