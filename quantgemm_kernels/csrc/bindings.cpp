// bindings.cpp: the only file that sees torch::Tensor.
//
// It registers the core operators under torch.ops.quantgemm (quantize, dequantize, gemm, and the
// kernel and format tables the tests compare with registry.py and formats.py), checks every input before a kernel sees
// a pointer (dtype, device, shape, contiguity, alignment), allocates the output and calls the
// kernel: CPU kernels split over threads with at::parallel_for (parallel.h), CUDA launchers on the current
// stream with a launch check. The Python layer (quantgemm_kernels/api.py) checks the same things
// first with friendlier messages; these checks are the last line before memory is touched.
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/all.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "check.h"
#include "cuda/06_decode_tensor_cores/decode_plan.h"
#include "model/decode_layer.h"
#include "gemm.h"
#include "parallel.h"

#define QG_CPU_KERNEL(name, wfmt, afmt) void name(const GemmProblem& p, int m_begin, int m_end);
#include "cpu/kernels.def"
#undef QG_CPU_KERNEL
const char* simd_path_04_w4a8();
bool cpu_gemv_simd();

#ifdef WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include "cuda/launchers.h"
#endif

namespace {

// qg_str, QG_CHECK and check_launch come from check.h (no iostreams in error messages: see there).

// The formats, from formats.def: name, id, values and bytes per block, whether CUDA code exists.
struct FormatInfo {
    const char* name;
    QgFormat fmt;
    int64_t block_values, block_bytes;
    bool on_cuda;
};
const FormatInfo FORMATS[] = {
#define QG_FORMAT(name, id, block, qk)          {#name, id, qk, (int64_t)sizeof(block), true},
#define QG_FORMAT_CPU_ONLY(name, id, block, qk) {#name, id, qk, (int64_t)sizeof(block), false},
#include "formats.def"
#undef QG_FORMAT_CPU_ONLY
#undef QG_FORMAT
};

std::string format_names() {
    std::string s;
    for (const auto& f : FORMATS) s += (s.empty() ? "" : ", ") + std::string(f.name);
    return s;
}

const FormatInfo& format_info(const std::string& fmt) {
    for (const auto& f : FORMATS)
        if (fmt == f.name) return f;
    throw std::runtime_error(qg_str("unknown format '", fmt, "': expected one of ", format_names()));
}

const FormatInfo* format_info(QgFormat fmt) {
    for (const auto& f : FORMATS)
        if (fmt == f.fmt) return &f;
    return nullptr;
}

void check_float_rows(const at::Tensor& x, const char* what, int64_t block_values) {
    QG_CHECK(x.scalar_type() == at::kFloat, what, " must be float32, got ", x.scalar_type());
    QG_CHECK(x.dim() == 2, what, " must be 2-D [rows, K], got ", x.dim(), "-D");
    QG_CHECK(x.is_contiguous(), what, " must be contiguous (call .contiguous())");
    QG_CHECK(x.size(1) > 0 && x.size(1) % block_values == 0, what, ": K (", x.size(1),
             ") must be a positive multiple of ", block_values);
}

void check_block_rows(const at::Tensor& q, const FormatInfo& f, const char* what) {
    QG_CHECK(q.scalar_type() == at::kByte, what, " must be uint8 blocks, got ", q.scalar_type());
    QG_CHECK(q.dim() == 2, what, " must be 2-D [rows, K/", f.block_values, "*", f.block_bytes, "], got ", q.dim(),
             "-D");
    QG_CHECK(q.is_contiguous(), what, " must be contiguous");
    QG_CHECK(q.size(1) > 0 && q.size(1) % f.block_bytes == 0, what, ": row of ", q.size(1),
             " bytes is not a whole number of ", f.name, " blocks (", f.block_bytes, " B)");
}

// ---------------------------------------------------------------- quantize / dequantize
at::Tensor quantize_cpu(const at::Tensor& x, c10::string_view fmt_sv, int64_t sum_mode) {
    const FormatInfo& f = format_info(std::string(fmt_sv));
    check_float_rows(x, "x", f.block_values);
    QG_CHECK(sum_mode == Q8_1_S_D_SUM_Q || sum_mode == Q8_1_S_SUM_X, "bad q8_1 sum mode ", sum_mode);
    const int64_t rows = x.size(0), K = x.size(1);
    const int64_t row_bytes = K / f.block_values * f.block_bytes;
    at::Tensor q = at::empty({rows, row_bytes}, x.options().dtype(at::kByte));
    if (rows == 0) return q;
    const float* xp = x.data_ptr<float>();
    uint8_t* qp = q.data_ptr<uint8_t>();
    qg_parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
        const float* xs = xp + r0 * K;
        void* ys = qp + r0 * row_bytes;
        switch (f.fmt) {
#define QG_FORMAT(name, id, block, qk) \
    case id: quantize_rows_##name(xs, (block*)ys, r1 - r0, K, (int)sum_mode); break;
#include "formats.def"
#undef QG_FORMAT
            default: break;
        }
    });
    return q;
}

at::Tensor dequantize_cpu(const at::Tensor& q, c10::string_view fmt_sv) {
    const FormatInfo& f = format_info(std::string(fmt_sv));
    check_block_rows(q, f, "q");
    const int64_t rows = q.size(0), K = q.size(1) / f.block_bytes * f.block_values;
    at::Tensor y = at::empty({rows, K}, q.options().dtype(at::kFloat));
    if (rows == 0) return y;
    const uint8_t* qp = q.data_ptr<uint8_t>();
    float* yp = y.data_ptr<float>();
    switch (f.fmt) {
#define QG_FORMAT(name, id, block, qk) \
    case id: dequantize_rows_##name((const block*)qp, yp, rows, K); break;
#include "formats.def"
#undef QG_FORMAT
        default: break;
    }
    return y;
}

// ---------------------------------------------------------------- GEMM
struct KernelFormats {
    QgFormat w, a;
};

// Checks A [N, K or K/32 blocks] and W [M, ...] against the kernel's formats; returns K.
int64_t check_gemm_inputs(const at::Tensor& A, const at::Tensor& W, const KernelFormats& kf) {
    QG_CHECK(A.dim() == 2 && W.dim() == 2, "A and W must be 2-D");
    QG_CHECK(A.device() == W.device(), "A and W must be on the same device, got ", A.device(), " and ", W.device());
    QG_CHECK(A.is_contiguous() && W.is_contiguous(), "A and W must be contiguous");
    auto k_of = [](const at::Tensor& t, QgFormat f, const char* what) -> int64_t {
        if (f == QG_F32_AS_F16) {  // the fp16 step: float32, or float16 it reads as it is
            QG_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf, what,
                     " must be float32 or float16, got ", t.scalar_type());
            return t.size(1);
        }
        if (f == QG_F32 || f == QG_F32_AS_Q8_1) {
            QG_CHECK(t.scalar_type() == at::kFloat, what, " must be float32, got ", t.scalar_type());
            return t.size(1);
        }
        QG_CHECK(t.scalar_type() == at::kByte, what, " must be uint8 blocks, got ", t.scalar_type());
        const FormatInfo* fi = format_info(f);
        QG_CHECK(fi != nullptr, what, ": format ", f, " is not in formats.def");
        QG_CHECK(t.size(1) % fi->block_bytes == 0, what, ": row of ", t.size(1), " bytes is not a whole number of ",
                 fi->block_bytes, "-byte ", fi->name, " blocks");
        return t.size(1) / fi->block_bytes * fi->block_values;
    };
    const int64_t Ka = k_of(A, kf.a, "A"), Kw = k_of(W, kf.w, "W");
    QG_CHECK(Ka == Kw, "A and W disagree on K: A has K=", Ka, ", W has K=", Kw);
    // K a multiple of 32 also for float32 operands: every kernel of the course steps K by 32
    QG_CHECK(Ka > 0 && Ka % 32 == 0, "K (", Ka, ") must be a positive multiple of 32");
    QG_CHECK(A.size(0) <= INT32_MAX && W.size(0) <= INT32_MAX && Ka <= INT32_MAX, "sizes must fit in int32");
    return Ka;
}

struct CpuKernel {
    const char* name;
    CpuGemmFn fn;
    KernelFormats formats;
};
const CpuKernel CPU_KERNELS[] = {
#define QG_CPU_KERNEL(name, wfmt, afmt) {#name, name, {wfmt, afmt}},
#include "cpu/kernels.def"
#undef QG_CPU_KERNEL
};

// The entry of a kernel table (CPU_KERNELS, CUDA_KERNELS) with this name, or nullptr.
template <class K, size_t N>
const K* find_kernel(const K (&table)[N], const std::string& name) {
    for (const auto& k : table)
        if (name == k.name) return &k;
    return nullptr;
}

at::Tensor gemm_cpu(const at::Tensor& A, const at::Tensor& W, c10::string_view kernel_sv, int64_t sum_mode) {
    const std::string kernel(kernel_sv);
    const CpuKernel* k = find_kernel(CPU_KERNELS, kernel);
    QG_CHECK(k != nullptr, "no CPU kernel named '", kernel, "'");
    QG_CHECK(sum_mode == Q8_1_S_D_SUM_Q, "kernel '", kernel,
             "' reads A as given: choose Q8_1's s when "
             "quantizing A (quantize(A, 'q8_1', q8_1_sum=...)), not here");
    const int64_t K = check_gemm_inputs(A, W, k->formats);
    const int64_t N = A.size(0), M = W.size(0);
    at::Tensor C = at::empty({N, M}, A.options().dtype(at::kFloat));
    if (N == 0 || M == 0) return C;
    GemmProblem p{A.data_ptr(), W.data_ptr(), C.data_ptr<float>(), (int)N, (int)M, (int)K};
    // Split the output features across threads (decode_layer.h's cpu_gemm_grain: chunks of whole
    // multiples of 8 columns and at least 2^17 multiply-adds; a 32 x 32 product runs on the calling thread).
    const int64_t grain = cpu_gemm_grain(N, M, K, at::get_num_threads());
    qg_parallel_for(0, M, grain, [&](int64_t m0, int64_t m1) { k->fn(p, (int)m0, (int)m1); });
    return C;
}

// ---------------------------------------------------------------- one Llama layer, one token
// decode_layer (decode_layer.h): x [1, dim] updated in place; the KV cache gets this token's keys
// and values at pos. weights/kernels/sum_modes: the Q/K/V parts (n_qkv: 1 fused or 3), the output
// projection, the gate/up parts (n_gate_up: 1 or 2), the down projection. cos/sin [>= capacity,
// n_rot/2]: the RoPE tables, whose row pos is taken. pos: int64 [1], a tensor (a CUDA graph's step
// keeps it on the device).
void check_float_vector(const at::Tensor& t, const char* what, int64_t n) {
    QG_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == n, what,
             " must be a contiguous float32 tensor of ", n, " values");
}

// Checks everything but the kernels' names and the value of pos, and fills the layer (its
// pointers, sizes and parts) except DecodeLinear::fn and ::afmt. `formats[i]`: kernel i's formats.
DecodeLayer check_decode_layer(const at::Tensor& x, const at::Tensor& attn_norm, const at::Tensor& ffn_norm,
                               const std::vector<at::Tensor>& weights, const std::vector<KernelFormats>& formats,
                               const std::vector<int64_t>& sum_modes, int64_t n_qkv, int64_t n_gate_up,
                               const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& cos,
                               const at::Tensor& sin, const at::Tensor& pos, int64_t n_heads, double eps,
                               bool float_activations, std::vector<DecodeLinear>& parts) {
    QG_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2 && x.size(0) == 1 && x.size(1) > 0 && x.is_contiguous(),
             "x must be contiguous float32 [1, dim] (one token)");
    QG_CHECK(n_qkv == 1 || n_qkv == 3, "n_qkv must be 1 (fused Q/K/V) or 3, got ", n_qkv);
    QG_CHECK(n_gate_up == 1 || n_gate_up == 2, "n_gate_up must be 1 (fused) or 2, got ", n_gate_up);
    const size_t n = (size_t)(n_qkv + n_gate_up + 2);
    QG_CHECK(weights.size() == n && formats.size() == n && sum_modes.size() == n, "expected ", n,
             " weights, kernels and sum modes (", n_qkv, " Q/K/V, output, ", n_gate_up, " gate/up, down), got ",
             weights.size(), ", ", formats.size(), ", ", sum_modes.size());
    QG_CHECK(k_cache.scalar_type() == at::kFloat && k_cache.dim() == 3 && k_cache.is_contiguous() &&
                 v_cache.sizes() == k_cache.sizes() && v_cache.scalar_type() == at::kFloat && v_cache.is_contiguous(),
             "k_cache and v_cache must be contiguous float32 [n_kv_heads, capacity, head_dim] of one shape");
    DecodeLayer L{};
    L.dim = x.size(1);
    L.n_heads = n_heads;
    L.n_kv_heads = k_cache.size(0);
    L.capacity = k_cache.size(1);
    L.head_dim = k_cache.size(2);
    const int64_t H = L.n_heads, Hkv = L.n_kv_heads, D = L.head_dim;
    QG_CHECK(Hkv > 0 && L.capacity > 0 && D > 0 && H > 0 && H % Hkv == 0, "n_heads (", H,
             ") must be a positive multiple of the cache's n_kv_heads (", Hkv, ")");
    QG_CHECK(cos.scalar_type() == at::kFloat && cos.dim() == 2 && cos.is_contiguous() && sin.sizes() == cos.sizes() &&
                 sin.scalar_type() == at::kFloat && sin.is_contiguous(),
             "cos and sin must be contiguous float32 [positions, n_rot/2] of one shape");
    L.n_rot = 2 * cos.size(1);
    QG_CHECK(L.n_rot > 0 && L.n_rot <= D, "n_rot (", L.n_rot, ") must be 2 to head_dim (", D, ")");
    QG_CHECK(cos.size(0) >= L.capacity, "the RoPE tables hold ", cos.size(0), " positions, the cache ", L.capacity);
    QG_CHECK(pos.scalar_type() == at::kLong && pos.numel() == 1, "pos must be one int64 (a tensor of shape [1])");
    check_float_vector(attn_norm, "attn_norm", L.dim);
    check_float_vector(ffn_norm, "ffn_norm", L.dim);
    QG_CHECK(eps > 0, "eps must be positive, got ", eps);
    L.eps = (float)eps;
    const at::Tensor* all[] = {&attn_norm, &ffn_norm, &k_cache, &v_cache, &cos, &sin, &pos};
    for (const at::Tensor* t : all)
        QG_CHECK(t->device() == x.device(), "every tensor must be on x's device (", x.device(), "), one is on ",
                 t->device());

    // the linear layers: K of each from its bytes and its kernel's weight format
    parts.assign(n, DecodeLinear{});
    for (size_t i = 0; i < n; i++) {
        const at::Tensor& W = weights[i];
        QG_CHECK(W.device() == x.device(), "weight ", i, " is on ", W.device(), ", x on ", x.device());
        // the CPU: kernels of quantized activations (quantized here first); CUDA: kernels that
        // take float32 activations and quantize them themselves
        QG_CHECK(
            formats[i].w != QG_F32 && (float_activations ? formats[i].a == QG_F32_AS_Q8_1
                                                         : formats[i].a != QG_F32 && formats[i].a != QG_F32_AS_Q8_1 &&
                                                               formats[i].a != QG_F32_AS_F16),
            "kernel ", i, ": decode_layer takes kernels of quantized weights and ",
            float_activations ? "float32 activations they quantize themselves (fused_quant)" : "quantized activations");
        QG_CHECK(W.scalar_type() == at::kByte && W.dim() == 2 && W.size(0) > 0 && W.is_contiguous(), "weight ", i,
                 " must be contiguous uint8 blocks [M, bytes per row]");
        const FormatInfo* fi = format_info(formats[i].w);
        QG_CHECK(fi != nullptr && W.size(1) > 0 && W.size(1) % fi->block_bytes == 0, "weight ", i,
                 ": rows are not whole blocks of its kernel's format");
        QG_CHECK(sum_modes[i] == Q8_1_S_D_SUM_Q || sum_modes[i] == Q8_1_S_SUM_X, "bad q8_1 sum mode ", sum_modes[i]);
        parts[i].W = W.data_ptr();
        parts[i].M = W.size(0);
        parts[i].K = W.size(1) / fi->block_bytes * fi->block_values;
        parts[i].afmt = formats[i].a;
        parts[i].sum_mode = (int)sum_modes[i];
        QG_CHECK(parts[i].M <= INT32_MAX && parts[i].K <= INT32_MAX, "weight ", i, ": sizes must fit in int32");
    }
    // their shapes against the layer's
    L.qkv = parts.data();
    L.n_qkv = (int)n_qkv;
    L.o = parts[n_qkv];
    L.gate_up = parts.data() + n_qkv + 1;
    L.n_gate_up = (int)n_gate_up;
    L.down = parts[n - 1];
    L.ffn_dim = L.down.K;
    const int64_t want_qkv[3] = {H * D, Hkv * D, Hkv * D};
    int64_t rows = 0;
    for (int i = 0; i < L.n_qkv; i++) {
        QG_CHECK(L.qkv[i].K == L.dim, "Q/K/V weight ", i, ": K is ", L.qkv[i].K, ", dim is ", L.dim);
        if (n_qkv == 3)
            QG_CHECK(L.qkv[i].M == want_qkv[i], "Q/K/V weight ", i, ": ", L.qkv[i].M, " rows, the heads need ",
                     want_qkv[i]);
        rows += L.qkv[i].M;
    }
    QG_CHECK(rows == (H + 2 * Hkv) * D, "Q/K/V: ", rows, " rows, (n_heads + 2 n_kv_heads) x head_dim is ",
             (H + 2 * Hkv) * D);
    QG_CHECK(L.o.K == H * D && L.o.M == L.dim, "output projection: [", L.o.M, ", ", L.o.K, "], the layer needs [",
             L.dim, ", ", H * D, "]");
    rows = 0;
    for (int i = 0; i < L.n_gate_up; i++) {
        QG_CHECK(L.gate_up[i].K == L.dim, "gate/up weight ", i, ": K is ", L.gate_up[i].K, ", dim is ", L.dim);
        if (n_gate_up == 2)
            QG_CHECK(L.gate_up[i].M == L.ffn_dim, "gate/up weight ", i, ": ", L.gate_up[i].M, " rows, ffn_dim is ",
                     L.ffn_dim);
        rows += L.gate_up[i].M;
    }
    QG_CHECK(rows == 2 * L.ffn_dim, "gate/up: ", rows, " rows, 2 x ffn_dim (down's K) is ", 2 * L.ffn_dim);
    QG_CHECK(L.down.M == L.dim, "down projection: ", L.down.M, " rows, dim is ", L.dim);
    L.attn_norm = attn_norm.data_ptr<float>();
    L.ffn_norm = ffn_norm.data_ptr<float>();
    L.k_cache = k_cache.data_ptr<float>();
    L.v_cache = v_cache.data_ptr<float>();
    L.cos = cos.data_ptr<float>();
    L.sin = sin.data_ptr<float>();
    return L;
}

void decode_layer_cpu_op(const at::Tensor& x, const at::Tensor& attn_norm, const at::Tensor& ffn_norm,
                         at::TensorList weights, std::vector<std::string> kernels, at::IntArrayRef sum_modes,
                         int64_t n_qkv, int64_t n_gate_up, const at::Tensor& k_cache, const at::Tensor& v_cache,
                         const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& pos, int64_t n_heads,
                         double eps) {
    std::vector<KernelFormats> formats;
    std::vector<CpuGemmFn> fns;
    for (const auto& name : kernels) {
        const CpuKernel* k = find_kernel(CPU_KERNELS, name);
        QG_CHECK(k != nullptr, "no CPU kernel named '", name, "'");
        formats.push_back(k->formats);
        fns.push_back(k->fn);
    }
    std::vector<DecodeLinear> parts;
    DecodeLayer L = check_decode_layer(x, attn_norm, ffn_norm, weights.vec(), formats, sum_modes.vec(), n_qkv,
                                       n_gate_up, k_cache, v_cache, cos, sin, pos, n_heads, eps, false, parts);
    QG_CHECK(x.device().is_cpu(), "decode_layer's CPU implementation got a tensor on ", x.device());
    for (size_t i = 0; i < parts.size(); i++) parts[i].fn = fns[i];
    L.o.fn = parts[n_qkv].fn;
    L.down.fn = parts.back().fn;
    L.pos = pos.item<int64_t>();
    QG_CHECK(L.pos >= 0 && L.pos < L.capacity, "pos (", L.pos, ") must be 0 to the cache's capacity - 1 (",
             L.capacity - 1, ")");
    L.cos += L.pos * (L.n_rot / 2);  // this position's row of the tables
    L.sin += L.pos * (L.n_rot / 2);
    const DecodeParallelFor pfor = [](int64_t b, int64_t e, int64_t g, const std::function<void(int64_t, int64_t)>& f) {
        qg_parallel_for(b, e, g, f);
    };
    decode_layer_cpu(L, x.data_ptr<float>(), pfor, at::get_num_threads());
}

#ifdef WITH_CUDA
// sum_x: the kernel quantizes A itself and can do it as llama.cpp's CUDA backend does for the same
// kernel kind (Q8_1_S_SUM_X): the decode kernels as quantize_q8_1 (s = sum(x), which MMVQ reads),
// the tensor-core kernels as MMQ's quantize_mmq_q8_1 (cuda/kernels.def marks them).
struct CudaKernel {
    const char* name;
    void (*fn)(const GemmProblem&, cudaStream_t);
    KernelFormats formats;
    bool sum_x;
};
const CudaKernel CUDA_KERNELS[] = {
#define QG_CUDA_KERNEL(name, wfmt, afmt, sum_x) {#name, name, {wfmt, afmt}, sum_x != 0},
#include "cuda/kernels.def"
#undef QG_CUDA_KERNEL
};

// Vectorised loads want 16-byte aligned rows; torch's allocations are, slices may not be.
void check_aligned(const at::Tensor& t, const char* what) {
    QG_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, what,
             "'s data must start on a 16-byte boundary (a sliced view? pass a .clone())");
}

at::Tensor quantize_cuda(const at::Tensor& x, c10::string_view fmt_sv, int64_t sum_mode) {
    const FormatInfo& f = format_info(std::string(fmt_sv));
    check_float_rows(x, "x", f.block_values);
    QG_CHECK(sum_mode == Q8_1_S_D_SUM_Q || sum_mode == Q8_1_S_SUM_X, "bad q8_1 sum mode ", sum_mode);
    QG_CHECK(f.on_cuda, "format ", f.name, " has no CUDA quantizer yet: quantize on the CPU");
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0), K = x.size(1);
    at::Tensor q = at::empty({rows, K / f.block_values * f.block_bytes}, x.options().dtype(at::kByte));
    if (rows == 0) return q;
    cudaStream_t s = at::cuda::getCurrentCUDAStream();
    const float* xp = x.data_ptr<float>();
    void* qp = q.data_ptr();
    switch (f.fmt) {
#define QG_FORMAT(name, id, block, qk) \
    case id: cuda_quantize_##name(xp, (block*)qp, rows, K, (int)sum_mode, s); break;
#define QG_FORMAT_CPU_ONLY(name, id, block, qk)
#include "formats.def"
#undef QG_FORMAT_CPU_ONLY
#undef QG_FORMAT
        default: QG_CHECK(false, "format ", f.name, " has no CUDA quantizer");
    }
    check_launch();
    return q;
}

at::Tensor dequantize_cuda(const at::Tensor& q, c10::string_view fmt_sv) {
    const FormatInfo& f = format_info(std::string(fmt_sv));
    check_block_rows(q, f, "q");
    QG_CHECK(f.on_cuda, "format ", f.name, " has no CUDA dequantizer yet: dequantize on the CPU");
    const c10::cuda::CUDAGuard guard(q.device());
    const int64_t rows = q.size(0), K = q.size(1) / f.block_bytes * f.block_values;
    at::Tensor y = at::empty({rows, K}, q.options().dtype(at::kFloat));
    if (rows == 0) return y;
    cuda_dequantize(q.data_ptr(), f.fmt, y.data_ptr<float>(), rows, K, at::cuda::getCurrentCUDAStream());
    check_launch();
    return y;
}

at::Tensor gemm_cuda(const at::Tensor& A, const at::Tensor& W, c10::string_view kernel_sv, int64_t sum_mode) {
    const std::string kernel(kernel_sv);
    const CudaKernel* k = find_kernel(CUDA_KERNELS, kernel);
    QG_CHECK(k != nullptr, "no CUDA kernel named '", kernel, "'");
    QG_CHECK(sum_mode == Q8_1_S_D_SUM_Q || sum_mode == Q8_1_S_SUM_X, "bad q8_1 sum mode ", sum_mode);
    QG_CHECK(sum_mode == Q8_1_S_D_SUM_Q || k->sum_x, "kernel '", kernel,
             "' has no choice of "
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
    p.a_f16 = A.scalar_type() == at::kHalf;  // only the fp16 step accepts it (check_gemm_inputs)

    at::Tensor workspace;  // chapter 6 kernels quantize A into it (freed when the call returns:
                           // the caching allocator keeps it for the next call, stream-ordered)
    if (k->formats.a == QG_F32_AS_Q8_1) {
        // The split-K steps (8_wgmma_splitk.cu, 9_wgmma_narrow.cu, 11_wgmma_small.cu) keep their partial sums there too,
        // after the activations.
        auto ends_with = [&](const char* s) {
            const size_t n = std::strlen(s);
            return kernel.size() > n && kernel.compare(kernel.size() - n, n, s) == 0;
        };
        const bool splitk = ends_with("_splitk") || ends_with("_narrow") || ends_with("_small");
        const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
        const size_t bytes = splitk ? splitk_workspace_bytes(N, M, K, sms) : act_workspace_bytes(N, K);
        workspace = at::empty({(int64_t)bytes}, A.options().dtype(at::kByte));
        p.workspace = workspace.data_ptr();
    } else if (k->formats.a == QG_F32_AS_F16) {  // the fp16 step: A as fp16, then split-K partial sums
        const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
        workspace = at::empty({(int64_t)f16_workspace_bytes(N, M, K, sms, p.a_f16)}, A.options().dtype(at::kByte));
        p.workspace = workspace.data_ptr();
    }
    k->fn(p, at::cuda::getCurrentCUDAStream());
    check_launch();
    return C;
}

// decode_layer on the GPU: the kernels of model/decode_layer.cu around the GEMMs, which are
// the fused-quant kernels gemm_cuda runs (the same problem, workspace and sum mode). pos stays on
// the device: nothing here waits for the GPU, so a CUDA graph can capture the call.
void decode_layer_cuda_op(const at::Tensor& x, const at::Tensor& attn_norm, const at::Tensor& ffn_norm,
                          at::TensorList weights, std::vector<std::string> kernels, at::IntArrayRef sum_modes,
                          int64_t n_qkv, int64_t n_gate_up, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& pos, int64_t n_heads,
                          double eps) {
    std::vector<KernelFormats> formats;
    std::vector<const CudaKernel*> ks;
    for (const auto& name : kernels) {
        const CudaKernel* k = find_kernel(CUDA_KERNELS, name);
        QG_CHECK(k != nullptr, "no CUDA kernel named '", name, "'");
        formats.push_back(k->formats);
        ks.push_back(k);
    }
    std::vector<DecodeLinear> parts;
    const DecodeLayer L = check_decode_layer(x, attn_norm, ffn_norm, weights.vec(), formats, sum_modes.vec(), n_qkv,
                                             n_gate_up, k_cache, v_cache, cos, sin, pos, n_heads, eps, true, parts);
    QG_CHECK(x.is_cuda(), "decode_layer's CUDA implementation got a tensor on ", x.device());
    QG_CHECK(L.head_dim <= cuda_decode_max_head_dim(), "head_dim ", L.head_dim, " is more than the attention kernel's ",
             cuda_decode_max_head_dim());
    for (size_t i = 0; i < parts.size(); i++) {
        QG_CHECK(sum_modes[i] == Q8_1_S_D_SUM_Q || ks[i]->sum_x, "kernel '", kernels[i], "' has no choice of Q8_1's s");
        check_aligned(weights[i], "a weight");
    }
    const c10::cuda::CUDAGuard guard(x.device());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    // Scratch, each piece on a 64-float boundary (the GEMMs load A in 16-byte vectors)
    auto up64 = [](int64_t n) { return (n + 63) / 64 * 64; };
    const int64_t H = L.n_heads, Hkv = L.n_kv_heads, D = L.head_dim;
    const int64_t o_h = 0, o_qkv = o_h + up64(L.dim), o_att = o_qkv + up64((H + 2 * Hkv) * D);
    const int64_t o_out = o_att + up64(H * D), o_gu = o_out + up64(L.dim), total = o_gu + up64(2 * L.ffn_dim);
    at::Tensor scratch = at::empty({total}, x.options());
    float* base = scratch.data_ptr<float>();
    float *h = base + o_h, *qkv = base + o_qkv, *att = base + o_att, *out = base + o_out, *gu = base + o_gu;
    size_t ws_bytes = 0;
    for (const auto& p : parts) ws_bytes = std::max(ws_bytes, act_workspace_bytes(1, p.K));
    at::Tensor workspace = at::empty({(int64_t)ws_bytes}, x.options().dtype(at::kByte));
    auto gemv = [&](size_t i, const float* a, float* c) {
        GemmProblem p{a, parts[i].W, c, 1, (int)parts[i].M, (int)parts[i].K};
        p.workspace = workspace.data_ptr();
        p.q8_1_sum_mode = parts[i].sum_mode;
        ks[i]->fn(p, stream);
    };
    float* xp = x.data_ptr<float>();
    cuda_decode_add_rms_norm(xp, nullptr, L.attn_norm, h, (int)L.dim, L.eps, stream);
    size_t i = 0;
    for (int64_t off = 0; i < (size_t)n_qkv; off += parts[i].M, i++) gemv(i, h, qkv + off);
    cuda_decode_attention(qkv, L.k_cache, L.v_cache, L.cos, L.sin, pos.data_ptr<int64_t>(), att, (int)H, (int)Hkv,
                          (int)D, (int)L.n_rot, L.capacity, stream);
    gemv(i++, att, out);
    cuda_decode_add_rms_norm(xp, out, L.ffn_norm, h, (int)L.dim, L.eps, stream);
    for (int64_t off = 0; i < parts.size() - 1; off += parts[i].M, i++) gemv(i, h, gu + off);
    cuda_decode_silu_mul(gu, (int)L.ffn_dim, stream);
    gemv(i, gu, out);
    cuda_decode_add(xp, out, (int)L.dim, stream);
    check_launch();
}
#endif

// The split-K step's number of splits (gemm.h) for a shape on a GPU of `sms` SMs: chapter 6 prints
// it for the shapes of a model, on any machine.
int64_t wgmma_splits_op(int64_t N, int64_t M, int64_t K, int64_t sms) {
    QG_CHECK(N > 0 && M > 0 && K > 0 && sms > 0, "wgmma_splits: N, M, K and sms must be positive");
    return wgmma_splits(N, M, K, (int)sms);
}

// The fp16 step's launch (gemm.h's f16_plan, what its launcher takes) for a shape on a GPU of `sms`
// SMs: [tokens per tile, splits of K of a split tile, tiles, tiles run whole]. On any machine.
std::vector<int64_t> f16_plan_op(int64_t N, int64_t M, int64_t K, int64_t sms) {
    QG_CHECK(N > 0 && M > 0 && K > 0 && K % QK == 0 && sms > 0 && sms <= 4096, "f16_plan: N, M, K (a multiple of ", QK,
             ") and sms must be positive, got N = ", N, ", M = ", M, ", K = ", K, ", sms = ", sms);
    const F16Plan pl = f16_plan(N, M, K, (int)sms);
    return {pl.tokens, pl.splits, pl.tiles, pl.whole};
}

// The decode kernel's plan of a pass of T tokens (cuda/06_decode_tensor_cores/decode_plan.h) on a GPU
// of `sms` SMs allowing `smem_optin` bytes of shared memory per CTA: [packed, rows per step, ring
// stages, bytes of shared memory per CTA, blocks of K per launch] of the pass's first launch, the one
// over its longest K chunk. On any machine: chapter 6 prints it, the tests check it for many GPUs.
std::vector<int64_t> decode_plan_op(c10::string_view fmt_sv, int64_t T, int64_t M, int64_t K, int64_t sms,
                                    int64_t smem_optin) {
    const std::string fmt(fmt_sv);
    QG_CHECK(fmt == "q4_0" || fmt == "q4_1" || fmt == "q8_0",
             "decode_plan: decode.cuh's kernel reads q4_0, q4_1 or q8_0 weights, not '", fmt, "'");
    QG_CHECK(T >= 1 && T <= decode_plan::MAX_T, "decode_plan: T is the tokens of one pass, 1 to ", decode_plan::MAX_T,
             ", got ", T);
    QG_CHECK(M > 0 && M <= INT32_MAX && K > 0 && K <= INT32_MAX && K % QK == 0,
             "decode_plan: M and K must be positive (K a multiple of ", QK, "), got M = ", M, ", K = ", K);
    QG_CHECK(sms > 0 && sms <= 4096 && smem_optin > 0 && smem_optin <= INT32_MAX,
             "decode_plan: sms and smem_optin must be positive, got ", sms, " and ", smem_optin);
    const FormatInfo& f = format_info(fmt);
    const decode_plan::DecodeFormat df{8 * (int)f.block_bytes / 16, fmt == "q4_0", fmt == "q8_0"};
    const int nb_total = (int)(K / QK);
    const int chunk = decode_plan::decode_chunk_blocks(df, (int)T, nb_total, (int)smem_optin);
    const decode_plan::DecodeLaunch l =
        decode_plan::decode_launch(df, (int)T, (int)M, nb_total, 0, chunk, (int)sms, (int)smem_optin);
    return {l.packed ? 1 : 0, l.rg, l.stages, (int64_t)l.smem, chunk};
}

// Caps the shared memory per CTA the decode kernel plans for on this process's GPUs (0: no cap) and
// returns the cap before: a GPU with more then runs the plans of a GPU with less (the tests).
int64_t decode_smem_cap_op(int64_t bytes) {
    QG_CHECK(bytes >= 0 && bytes <= INT32_MAX, "decode_smem_cap: bytes must be 0 (no cap) or positive, got ", bytes);
    return decode_plan::smem_cap().exchange((int)bytes);
}

// The formats table as "name:values per block:bytes per block", for the test that compares it with
// formats.SPECS.
std::vector<std::string> format_table() {
    std::vector<std::string> rows;
    for (const auto& f : FORMATS) rows.push_back(qg_str(f.name, ":", f.block_values, ":", f.block_bytes));
    return rows;
}

// The CUDA kernels whose sum_x flag is set (empty in a CPU build), for the test against registry.py.
std::vector<std::string> sum_x_kernel_names() {
    std::vector<std::string> names;
#ifdef WITH_CUDA
    for (const auto& k : CUDA_KERNELS)
        if (k.sum_x) names.push_back(k.name);
#endif
    return names;
}

std::vector<std::string> kernel_names() {
    std::vector<std::string> names;
    for (const auto& k : CPU_KERNELS) names.push_back(k.name);
#ifdef WITH_CUDA
    for (const auto& k : CUDA_KERNELS) names.push_back(k.name);
#endif
    return names;
}

// How CPU kernels are split over threads (parallel.h): the mode, and how many threads ran the chunks
// of [0, range) in steps of grain (tests/test_threads.py: torch.set_num_threads is honoured).
std::string parallel_mode() { return qg_parallel_mode(); }
// The instruction set chapter 4's SIMD step compiled for (cpu/04_w4a8/3_simd.cpp).
std::string cpu_simd_path() { return simd_path_04_w4a8(); }
int64_t parallel_threads_used(int64_t range, int64_t grain) {
    std::mutex mu;
    std::vector<std::thread::id> ids;
    qg_parallel_for(0, range, grain, [&](int64_t, int64_t) {
        std::lock_guard<std::mutex> lock(mu);
        if (std::find(ids.begin(), ids.end(), std::this_thread::get_id()) == ids.end())
            ids.push_back(std::this_thread::get_id());
    });
    return (int64_t)ids.size();
}

}  // namespace

TORCH_LIBRARY(quantgemm, m) {
    m.def("quantize(Tensor x, str fmt, int q8_1_sum_mode) -> Tensor");
    m.def("dequantize(Tensor q, str fmt) -> Tensor");
    m.def("gemm(Tensor A, Tensor W, str kernel, int q8_1_sum_mode=0) -> Tensor");
    m.def(
        "decode_layer(Tensor(a!) x, Tensor attn_norm, Tensor ffn_norm, Tensor[] weights, str[] kernels, "
        "int[] sum_modes, int n_qkv, int n_gate_up, Tensor(b!) k_cache, Tensor(c!) v_cache, Tensor cos, "
        "Tensor sin, Tensor pos, int n_heads, float eps) -> ()");
    m.def("kernel_names() -> str[]", &kernel_names);
    m.def("sum_x_kernel_names() -> str[]", &sum_x_kernel_names);
    m.def("format_table() -> str[]", &format_table);
    m.def("parallel_mode() -> str", &parallel_mode);
    m.def("cpu_simd_path() -> str", &cpu_simd_path);
    m.def("cpu_gemv_simd() -> bool", &cpu_gemv_simd);
    m.def("parallel_threads_used(int range, int grain) -> int", &parallel_threads_used);
    m.def("wgmma_splits(int N, int M, int K, int sms) -> int", &wgmma_splits_op);
    m.def("f16_plan(int N, int M, int K, int sms) -> int[]", &f16_plan_op);
    m.def("decode_plan(str fmt, int T, int M, int K, int sms, int smem_optin) -> int[]", &decode_plan_op);
    m.def("decode_smem_cap(int bytes) -> int", &decode_smem_cap_op);
}

TORCH_LIBRARY_IMPL(quantgemm, CPU, m) {
    m.impl("quantize", &quantize_cpu);
    m.impl("dequantize", &dequantize_cpu);
    m.impl("gemm", &gemm_cpu);
    m.impl("decode_layer", &decode_layer_cpu_op);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(quantgemm, CUDA, m) {
    m.impl("quantize", &quantize_cuda);
    m.impl("dequantize", &dequantize_cuda);
    m.impl("gemm", &gemm_cuda);
    m.impl("decode_layer", &decode_layer_cuda_op);
}
#endif
