// appendix_c/bindings.cpp: the operator of appendix C, conv1d_silu_int8, an INT8 causal
// depthwise conv1d + SiLU + requantization.
//
// Its own small extension (quantgemm_kernels/_build.py, load_appendix_c), built on first use: the
// CPU kernel always, the CUDA kernel where CUDA is. One operator under torch.ops.quantgemm_appendix_c:
//   conv1d_silu_int8(x, w, x_scale, w_scale, bias?, out_scale, return_float, libm_exp) -> (q, z)
// q: int8 [batch, channels, time]; z: the float32 SiLU output before requantization ([0, C, T]
// unless return_float). Kernels: conv1d_silu_int8.cpp and .cu; the arithmetic, shared by both:
// conv1d_silu_int8.h. quantgemm_kernels/appendices/simulation.py is the caller and checks first.
#include <ATen/Parallel.h>
#include <torch/all.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

#ifdef WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include "../check.h"
#include "conv1d_silu_int8.h"

namespace qg_conv1d_silu {

// Checks every input and fills the kernel's problem; q (and z when return_float) are allocated here.
Conv1dSiluProblem conv1d_silu_problem(const at::Tensor& x, const at::Tensor& w, const at::Tensor& x_scale,
                                      const at::Tensor& w_scale, const std::optional<at::Tensor>& bias,
                                      double out_scale, bool return_float, bool libm_exp, at::Tensor& q,
                                      at::Tensor& z) {
    QG_CHECK(x.scalar_type() == at::kChar && x.dim() == 3, "x must be int8 [batch, channels, time], got ",
             x.scalar_type(), " with ", x.dim(), " dims");
    QG_CHECK(w.scalar_type() == at::kChar && w.dim() == 2, "w must be int8 [channels, width], got ", w.scalar_type(),
             " with ", w.dim(), " dims");
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
    return Conv1dSiluProblem{x.data_ptr<int8_t>(),
                             w.data_ptr<int8_t>(),
                             x_scale.data_ptr<float>(),
                             w_scale.data_ptr<float>(),
                             bias ? bias->data_ptr<float>() : nullptr,
                             q.data_ptr<int8_t>(),
                             return_float ? z.data_ptr<float>() : nullptr,
                             out_scale_f,
                             x_scale.size(0) != 1,
                             libm_exp,
                             B,
                             C,
                             T,
                             W};
}

std::tuple<at::Tensor, at::Tensor> conv1d_silu_int8_cpu_op(const at::Tensor& x, const at::Tensor& w,
                                                           const at::Tensor& x_scale, const at::Tensor& w_scale,
                                                           const std::optional<at::Tensor>& bias, double out_scale,
                                                           bool return_float, bool libm_exp) {
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
std::tuple<at::Tensor, at::Tensor> conv1d_silu_int8_cuda_op(const at::Tensor& x, const at::Tensor& w,
                                                            const at::Tensor& x_scale, const at::Tensor& w_scale,
                                                            const std::optional<at::Tensor>& bias, double out_scale,
                                                            bool return_float, bool libm_exp) {
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

TORCH_LIBRARY(quantgemm_appendix_c, m) {
    m.def(
        "conv1d_silu_int8(Tensor x, Tensor w, Tensor x_scale, Tensor w_scale, Tensor? bias, float out_scale, "
        "bool return_float, bool libm_exp) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(quantgemm_appendix_c, CPU, m) {
    m.impl("conv1d_silu_int8", &qg_conv1d_silu::conv1d_silu_int8_cpu_op);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(quantgemm_appendix_c, CUDA, m) {
    m.impl("conv1d_silu_int8", &qg_conv1d_silu::conv1d_silu_int8_cuda_op);
}
#endif
