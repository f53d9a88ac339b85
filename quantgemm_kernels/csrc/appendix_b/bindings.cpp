// appendix_b/bindings.cpp: the operators of appendix B's misaligned-load demonstration.
//
// Its own small extension (quantgemm_kernels/_build.py, load_appendix_b), built on first use and
// only where CUDA is: the kernels are CUDA only (misaligned_demo.cu), so there is no CPU build.
// Two operators under torch.ops.quantgemm_appendix_b; quantgemm_kernels/appendices/misaligned.py is
// the only caller and checks first.
//   misaligned_block_sums(blocks, mode)                      modes 0-2: Q4_0 bytes as llama.cpp stores them
//   misaligned_block_sums_repacked(scales, quants, mode)     modes 3-4: scales and quants in two arrays
// Both return float32 [nb]: the sum of each block's 32 dequantized values.
#ifndef WITH_CUDA
#error "appendix B's extension is CUDA only: build it with WITH_CUDA and its .cu file"
#endif

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/all.h>
#include <torch/library.h>

#include <cstdint>

#include "../check.h"
#include "misaligned_demo.h"

namespace qg_misaligned_demo {

at::Tensor block_sums_cuda(const at::Tensor& blocks, int64_t mode) {
    QG_CHECK(mode >= QG_MIS_NAIVE_B4 && mode <= QG_MIS_B1, "misaligned_block_sums: mode must be 0, 1 or 2, got ", mode);
    QG_CHECK(blocks.scalar_type() == at::kByte, "blocks must be uint8 Q4_0 bytes, got ", blocks.scalar_type());
    QG_CHECK(blocks.is_contiguous(), "blocks must be contiguous");
    QG_CHECK(blocks.numel() % 18 == 0, "blocks: ", blocks.numel(),
             " bytes is not a whole number of 18-byte Q4_0 blocks");
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

TORCH_LIBRARY(quantgemm_appendix_b, m) {
    m.def("misaligned_block_sums(Tensor blocks, int mode) -> Tensor");
    m.def("misaligned_block_sums_repacked(Tensor scales, Tensor quants, int mode) -> Tensor");
}

TORCH_LIBRARY_IMPL(quantgemm_appendix_b, CUDA, m) {
    m.impl("misaligned_block_sums", &qg_misaligned_demo::block_sums_cuda);
    m.impl("misaligned_block_sums_repacked", &qg_misaligned_demo::block_sums_repacked_cuda);
}
