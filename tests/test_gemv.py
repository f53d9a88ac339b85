"""Chapter 7's one-token CPU kernels (csrc/cpu/07_model/1_gemv.cpp) against chapter 4's stationary step,
whose arithmetic they repeat operation for operation: the same bits, on ragged shapes, at the N where
the model uses them and past it. (Both against the reference: tests/test_kernels.py, as every kernel.)"""

import pytest
import torch

from quantgemm_kernels import api
from quantgemm_kernels.registry import KERNELS

SHAPES = [(1, 1, 32), (1, 37, 64), (2, 8, 32), (3, 64, 576), (5, 19, 96), (1, 960, 576), (2, 1031, 1536), (9, 24, 256)]


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0", "q4_1"])
@pytest.mark.parametrize("N,M,K", SHAPES)
def test_gemv_has_the_stationary_steps_bits(fmt, N, M, K):
    g = torch.Generator().manual_seed(N * 7919 + M * 31 + K)
    W = api.QTensor.quantize(torch.randn(M, K, generator=g) * 3, fmt)
    x = torch.randn(N, K, generator=g)
    x[0, :32] *= 1e3  # one large block among ordinary ones (its s still fits in fp16)
    A = api.quantize(x, "q8_1")
    ops = api._ops()
    got = ops.gemm(A, W.data, f"cpu_{fmt}_q8_1_gemv")
    want = ops.gemm(A, W.data, f"cpu_{fmt}_q8_1_stationary")
    assert torch.equal(got, want)


def test_pick_kernel_takes_it_for_one_or_two_tokens():
    simd = api._cpu_gemv_simd()
    for fmt in ("q4_0", "q8_0", "q4_1"):
        for N in (1, api.CPU_GEMV_MAX_N):
            want = f"cpu_{fmt}_q8_1_gemv" if simd else f"cpu_{fmt}_q8_1_stationary"
            assert api.pick_kernel("cpu", fmt, N).name == want
        assert api.pick_kernel("cpu", fmt, api.CPU_GEMV_MAX_N + 1).name == f"cpu_{fmt}_q8_1_stationary"
        # long rows keep the stationary step (the record's K limits)
        assert api.pick_kernel("cpu", fmt, 1, K=14336).name == f"cpu_{fmt}_q8_1_stationary"
        assert api.pick_kernel("cpu", fmt, 2, K=4096).name == f"cpu_{fmt}_q8_1_stationary"
        if simd:
            assert api.pick_kernel("cpu", fmt, 1, K=4096).name == f"cpu_{fmt}_q8_1_gemv"
            assert api.pick_kernel("cpu", fmt, 2, K=576).name == f"cpu_{fmt}_q8_1_gemv"
    assert all(KERNELS[f"cpu_{f}_q8_1_gemv"].chapter == 7 for f in ("q4_0", "q8_0", "q4_1"))
