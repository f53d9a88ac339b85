"""quantgemm_kernels: the kernels of "Quantized GEMM from Scratch".

Public API (chapters, tests and benchmarks use these names):

* :func:`quantize` / :func:`dequantize`: llama.cpp's Q4_0, Q8_0 and Q8_1 bytes, CPU or CUDA.
* :class:`QTensor` and :func:`linear`: a quantized weight that knows its format, and the entry
  point a model calls (``y = linear(x, W)``): it checks once and picks the kernel.
* :data:`KERNELS`: every GEMM kernel in teaching order (name, device, formats, chapter).
* :func:`gemm`: ``C [N, M] = A [N, K] @ W [M, K]^T`` with a kernel named in ``KERNELS``.
* :func:`gemm_quantized`: the GEMM step alone on pre-quantized activations.
* :func:`validate_blocks`: reject blocks with non-finite scales (llama.cpp's load-time check).
* :mod:`.formats` and :mod:`.reference`: the numpy spec every kernel is checked against. They need
  numpy only: ``import quantgemm_kernels.formats`` does not import torch.

The C++/CUDA sources compile on first use (not at import) into ``~/.cache/quantgemm_kernels``.
The appendices' code lives apart, in :mod:`quantgemm_kernels.appendices`.
"""

from . import formats, reference
from .reference import nmse
from .registry import KERNELS, Kernel, kernels

# The torch-facing names load on first use, so that the numpy spec imports without torch.
_API = (
    "QTensor",
    "cuda_kernels_built",
    "dequantize",
    "gemm",
    "gemm_quantized",
    "linear",
    "pick_kernel",
    "quantize",
    "validate_blocks",
)

__all__ = ["KERNELS", "Kernel", "formats", "kernels", "nmse", "reference", *_API]


def __getattr__(name):
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'quantgemm_kernels' has no attribute {name!r}")
