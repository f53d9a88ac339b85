"""NaN and Inf: what llama.cpp does (measured through its own code), and what we do.

llama.cpp's reference quantizers do not check their input. Measured through ggml:
* a NaN in the middle of a block is skipped by the max scan (``MAX(a, b)`` with a comparison that
  is false for NaN), so d is finite and silently wrong, and the NaN's quant is whatever the C cast
  of NaN gives (undefined behaviour; 0 on x86, which for Q4_0 decodes to -8*d, not NaN);
* a NaN in the last position becomes the Q8_0 scale itself (d = NaN);
* an Inf makes d infinite and every other quant 0.
It rejects such data later, when a model is loaded (ggml_validate_row_data: non-finite d).

We reject non-finite input to ``quantize`` (ValueError) and offer ``validate_blocks`` for bytes
from elsewhere. The float kernels propagate NaN like IEEE arithmetic (and like torch and ggml's
F32 path): a NaN in one activation row makes that output row NaN and leaves the others alone.
"""

import numpy as np
import pytest
import torch

import quantgemm_kernels as qk
from quantgemm_kernels import formats as F

from ggml_ref import ggml_quantize


def block_with(value, pos, size=32):
    x = np.linspace(-1, 1, size, dtype=np.float32).reshape(1, size)
    x[0, pos] = value
    return x


def test_llama_cpp_drops_a_nan_from_the_scale():
    with np.errstate(invalid="ignore"):
        q = ggml_quantize(block_with(np.nan, 5), "q8_0")
    b = F.as_blocks(q, "q8_0")
    assert np.isfinite(b["d"][0, 0]) and b["d"][0, 0] == np.float16(1 / 127)  # scale of the others
    with np.errstate(invalid="ignore"):
        q4 = F.dequantize(ggml_quantize(block_with(np.nan, 5), "q4_0"), "q4_0")
    assert np.isfinite(q4).all()  # the NaN is gone without a trace


def test_llama_cpp_makes_a_last_nan_the_scale_and_an_inf_infinite():
    with np.errstate(invalid="ignore"):
        assert np.isnan(F.as_blocks(ggml_quantize(block_with(np.nan, 31), "q8_0"), "q8_0")["d"][0, 0])
        assert np.isinf(F.as_blocks(ggml_quantize(block_with(np.inf, 5), "q8_0"), "q8_0")["d"][0, 0])


@pytest.mark.parametrize("fmt", F.FORMATS)
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_we_reject_non_finite_input(fmt, value):
    with pytest.raises(ValueError, match="NaN or Inf"):
        qk.quantize(torch.from_numpy(block_with(value, 5, F.SPECS[fmt].block_size)), fmt)


@pytest.mark.parametrize("fmt", F.FORMATS)
def test_validate_blocks_rejects_non_finite_scales(fmt):
    f = F.SPECS[fmt]
    q = qk.quantize(torch.randn(3, 2 * f.block_size), fmt)
    qk.validate_blocks(q, fmt)  # fine
    bad = q.clone()
    bb = F.BLOCK_BYTES[fmt]
    ftype, off = f.dtype.fields["d"][:2]  # +inf as the d of block 3 (fp16; float32 for Q8_K)
    inf = [0x00, 0x7C] if ftype == np.float16 else [0x00, 0x00, 0x80, 0x7F]
    bad[1, bb + off : bb + off + len(inf)] = torch.tensor(inf, dtype=torch.uint8)
    with pytest.raises(ValueError, match="block 3 \\(row 1\\) has a non-finite scale"):
        qk.validate_blocks(bad, fmt)


@pytest.mark.parametrize("kernel", [k.name for k in qk.kernels(device="cpu", afmt="f32")])
def test_float_kernels_propagate_nan_to_its_row_only(kernel):
    k = qk.KERNELS[kernel]
    A = torch.randn(3, 64)
    A[1, 7] = float("nan")
    W = torch.randn(5, 64)
    C = qk.gemm(A, W if k.wfmt == "f32" else qk.quantize(W, k.wfmt), kernel)
    assert torch.isnan(C[1]).all() and torch.isfinite(C[[0, 2]]).all()
