"""Property-based tests (hypothesis): random shapes and values, not just the ones we thought of.

* quantizers: our bytes == llama.cpp's (ggml's C reference; gguf's numpy) for any finite rows;
* kernels: every registered kernel on this machine == the numpy reference (NMSE <= KERNEL_NMSE).
"""

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import quantgemm_kernels as qk
from quantgemm_kernels import formats as F
from quantgemm_kernels import reference as R
from quantgemm_kernels.testing import KERNEL_NMSE, k_step, quantize_weights

from conftest import runs_here
from ggml_ref import GGUF_QUANTIZERS, ggml_quantize, gguf_quantize
from test_formats import _zero_block_d_sign

# Finite float32 values, zeros included, magnitudes from 2^-66 (1.4e-20) to 2^20. Blocks whose largest
# magnitude is below ~3.7e-37 are excluded: llama.cpp's C code has undefined behaviour there
# (test_formats.py::test_blocks_where_llama_cpp_is_undefined covers them).
magnitude = st.floats(min_value=2.0**-66, max_value=2.0**20, width=32)
value = st.one_of(st.just(0.0), magnitude, magnitude.map(lambda v: -v))


@st.composite
def fmt_and_rows(draw):
    """A format and rows of whole blocks of it (1-4 blocks of 32; 1-2 super-blocks of 256)."""
    fmt = draw(st.sampled_from(F.FORMATS))
    size = F.SPECS[fmt].block_size
    rows = draw(st.integers(1, 4))
    blocks = draw(st.integers(1, 4 if size == 32 else 2))
    vals = draw(st.lists(value, min_size=rows * blocks * size, max_size=rows * blocks * size))
    return fmt, np.array(vals, dtype=np.float32).reshape(rows, blocks * size)


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(fx=fmt_and_rows())
def test_quantizers_match_ggml_on_any_finite_rows(fx):
    fmt, x = fx
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        ours = F.quantize(x, fmt)
        np.testing.assert_array_equal(ours, ggml_quantize(x, fmt))
        if (
            fmt in GGUF_QUANTIZERS
        ):  # no Q8_1 or K-quants there; for Q4_0 allow the one known difference (sign of a zero d)
            np.testing.assert_array_equal(_zero_block_d_sign(ours, fmt), _zero_block_d_sign(gguf_quantize(x, fmt), fmt))
    got = qk.quantize(torch.from_numpy(x), fmt, check_finite=False)
    np.testing.assert_array_equal(got.numpy(), ours)


def _kernels_here():
    return [k.name for k in qk.KERNELS.values() if runs_here(k)]


@SETTINGS
@given(
    kernel=st.sampled_from(_kernels_here()),
    M=st.integers(1, 40),
    N=st.integers(1, 12),
    nb=st.integers(1, 10),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
)
def test_every_kernel_matches_reference_on_random_problems(kernel, M, N, nb, seed, scale):
    k = qk.KERNELS[kernel]
    K = nb * k_step(k)  # blocks of 32, or super-blocks of 256 for the K-quants
    rng = np.random.default_rng(seed)
    A = (rng.standard_normal((N, K)) * scale).astype(np.float32)
    W = rng.standard_normal((M, K)).astype(np.float32)
    Wt = torch.from_numpy(W).to(k.device)
    Wk = Wt if k.wfmt == "f32" else quantize_weights(Wt, k.wfmt)
    C = qk.gemm(torch.from_numpy(A).to(k.device), Wk, kernel).cpu().numpy()
    ref = R.gemm(A, W if k.wfmt == "f32" else Wk.cpu().numpy(), k.wfmt, k.afmt, k.q8_1_sum, k.q4_0_formula)
    assert R.nmse(C, ref) <= KERNEL_NMSE
