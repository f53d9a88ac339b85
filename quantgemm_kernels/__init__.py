"""quantgemm_kernels: the kernels of "Quantized GEMM from Scratch".

Public API (chapters, tests and benchmarks use these names):

* :func:`quantize` / :func:`dequantize`: llama.cpp's Q4_0, Q8_0 and Q8_1 bytes, CPU or CUDA.
* :data:`KERNELS`: every GEMM kernel in teaching order (name, device, formats, chapter).
* :func:`gemm`: ``C [N, M] = A [N, K] @ W [M, K]^T`` with a kernel named in ``KERNELS``.
* :func:`gemm_quantized`: the GEMM step alone on pre-quantized activations.
* :func:`validate_blocks`: reject blocks with non-finite scales (llama.cpp's load-time check).
* :mod:`.formats` and :mod:`.reference`: the numpy spec every kernel is checked against.

The C++/CUDA sources compile on first use (not at import) into ``~/.cache/quantgemm_kernels``.
"""
from . import formats, reference
from .api import cuda_kernels_built, dequantize, gemm, gemm_quantized, quantize, validate_blocks
from .reference import nmse
from .registry import KERNELS, Kernel, kernels

__all__ = ["KERNELS", "Kernel", "cuda_kernels_built", "dequantize", "formats", "gemm", "gemm_quantized",
           "kernels", "nmse", "quantize", "reference", "validate_blocks"]
