"""llama.cpp's own quantizers, for byte comparisons: gguf's numpy code and ggml's C code.

ggml comes through the ``ggml-python`` binding, which compiles ggml from source at install.
"""
import ctypes

import numpy as np

SIZES = {"q4_0": 18, "q8_0": 34, "q8_1": 36}


def gguf_quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """gguf.quants (llama.cpp's gguf-py): Q4_0 and Q8_0 only (it has no Q8_1)."""
    import gguf.quants as gq
    from gguf import GGMLQuantizationType as T

    return gq.quantize(np.ascontiguousarray(x, np.float32), {"q4_0": T.Q4_0, "q8_0": T.Q8_0}[fmt])


def ggml_quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    """ggml's reference quantizer through ggml-python.

    Q4_0/Q8_0: ``ggml_quantize_chunk`` (what llama-quantize calls); Q8_1, which is never stored
    in a file, has no chunk quantizer: its type traits' ``from_float_ref``, quantize_row_q8_1_ref.
    """
    import ggml

    x = np.ascontiguousarray(x, np.float32)
    rows, K = x.shape
    out = np.zeros(rows * K // 32 * SIZES[fmt], np.uint8)
    src = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    dst = out.ctypes.data_as(ctypes.c_void_p)
    if fmt == "q8_1":
        traits = ggml.ggml_get_type_traits(ggml.GGML_TYPE_Q8_1).contents
        traits.from_float_ref(src, dst, rows * K)
    else:
        t = {"q4_0": ggml.GGML_TYPE_Q4_0, "q8_0": ggml.GGML_TYPE_Q8_0}[fmt]
        ggml.ggml_quantize_chunk(t, src, dst, 0, rows, K, None)
    return out.reshape(rows, -1)
