"""llama.cpp's own quantizers, for byte comparisons: gguf's numpy code and ggml's C code.

ggml's quantizer lives in :mod:`quantgemm_kernels.llamacpp` (it reaches ggml through the
``ggml`` module, ggml-python or ggml-py); this file only re-exports it for the tests.
"""

import numpy as np

from quantgemm_kernels.formats import BLOCK_BYTES as SIZES  # noqa: F401 - kept for old imports
from quantgemm_kernels.llamacpp import ggml_dequantize, ggml_quantize  # noqa: F401


def gguf_quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """gguf.quants (llama.cpp's gguf-py): Q4_0, Q4_1 and Q8_0 (it has no Q8_1)."""
    import gguf.quants as gq
    from gguf import GGMLQuantizationType as T

    return gq.quantize(np.ascontiguousarray(x, np.float32), {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q8_0": T.Q8_0}[fmt])


#: formats gguf.quants can quantize (it dequantizes Q4_K and Q6_K but has no quantizer for them)
GGUF_QUANTIZERS = ("q4_0", "q4_1", "q8_0")
#: formats gguf.quants can dequantize (it has no Q8_1 or Q8_K: they never appear in a file)
GGUF_DEQUANTIZERS = ("q4_0", "q4_1", "q8_0", "q4_k", "q6_k")


def gguf_dequantize(q: np.ndarray, fmt: str) -> np.ndarray:
    """gguf.quants' numpy dequantizer (llama.cpp's gguf-py): uint8 blocks -> float32 ``[rows, K]``."""
    import gguf.quants as gq
    from gguf import GGMLQuantizationType as T

    types = {"q4_0": T.Q4_0, "q4_1": T.Q4_1, "q8_0": T.Q8_0, "q4_k": T.Q4_K, "q6_k": T.Q6_K}
    return gq.dequantize(np.ascontiguousarray(q, np.uint8), types[fmt]).astype(np.float32, copy=False)
