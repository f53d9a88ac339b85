"""Bad input gets a clear error (TypeError / ValueError naming the argument), never a crash."""

import pytest
import torch

import quantgemm_kernels as qk
from quantgemm_kernels.testing import k_step

from conftest import HAS_CUDA

F32_KERNEL = "cpu_f32_f32_naive"


def bad_quantize_cases():
    x = torch.randn(4, 64)
    return [
        ("wrong dtype", lambda: qk.quantize(x.double(), "q4_0"), TypeError, "x must be torch.float32"),
        ("not a tensor", lambda: qk.quantize(x.numpy(), "q4_0"), TypeError, "x must be a torch.Tensor"),
        ("1-D", lambda: qk.quantize(x[0], "q4_0"), ValueError, "2-D"),
        (
            "K % 32",
            lambda: qk.quantize(torch.randn(4, 40), "q8_0"),
            ValueError,
            "K (40) must be a positive multiple of 32",
        ),
        ("K = 0", lambda: qk.quantize(torch.randn(4, 0), "q8_0"), ValueError, "K (0)"),
        ("non-contiguous", lambda: qk.quantize(torch.randn(64, 4).t(), "q4_0"), ValueError, "contiguous"),
        ("unknown format", lambda: qk.quantize(x, "q5_0"), ValueError, "fmt must be one of"),
        ("bad sum mode", lambda: qk.quantize(x, "q8_1", q8_1_sum="x"), ValueError, "q8_1_sum"),
        ("NaN", lambda: qk.quantize(torch.full((1, 32), float("nan")), "q4_0"), ValueError, "NaN or Inf"),
        ("Inf", lambda: qk.quantize(torch.full((1, 32), float("inf")), "q8_0"), ValueError, "NaN or Inf"),
        ("dequantize float", lambda: qk.dequantize(x, "q4_0"), TypeError, "q must be torch.uint8"),
        (
            "dequantize partial block",
            lambda: qk.dequantize(torch.zeros(2, 20, dtype=torch.uint8), "q4_0"),
            ValueError,
            "not a whole number of q4_0 blocks",
        ),
        (
            "K % 256 for a K-quant",
            lambda: qk.quantize(torch.randn(4, 288), "q4_k"),
            ValueError,
            "K (288) must be a positive multiple of 256",
        ),
        (
            "dequantize partial super-block",
            lambda: qk.dequantize(torch.zeros(2, 150, dtype=torch.uint8), "q6_k"),
            ValueError,
            "not a whole number of q6_k blocks (210 B each)",
        ),
    ]


@pytest.mark.parametrize("what,call,exc,msg", bad_quantize_cases(), ids=[c[0] for c in bad_quantize_cases()])
def test_quantize_rejects(what, call, exc, msg):
    with pytest.raises(exc, match=msg.replace("(", r"\(").replace(")", r"\)")):
        call()


def bad_gemm_cases():
    A, W = torch.randn(3, 64), torch.randn(5, 64)
    Wq = qk.quantize(W, "q4_0")
    q4_kernels = [k.name for k in qk.kernels(device="cpu", wfmt="q4_0")]
    cases = [
        ("unknown kernel", lambda: qk.gemm(A, W, "nope"), ValueError, "unknown kernel 'nope'"),
        ("A float64", lambda: qk.gemm(A.double(), W, F32_KERNEL), TypeError, "A must be torch.float32"),
        ("W float64", lambda: qk.gemm(A, W.double(), F32_KERNEL), TypeError, "W must be torch.float32"),
        ("K mismatch", lambda: qk.gemm(A, torch.randn(5, 96), F32_KERNEL), ValueError, "disagree on K"),
        ("K % 32", lambda: qk.gemm(torch.randn(3, 40), torch.randn(5, 40), F32_KERNEL), ValueError, "multiple of 32"),
        (
            "A non-contiguous",
            lambda: qk.gemm(torch.randn(64, 3).t(), W, F32_KERNEL),
            ValueError,
            "A must be contiguous",
        ),
        ("A 3-D", lambda: qk.gemm(A[None], W, F32_KERNEL), ValueError, "A must be 2-D"),
        # fp16 activations: only the fp16 step (afmt "f16") takes them
        ("A float16 for an f32 kernel", lambda: qk.gemm(A.half(), W, F32_KERNEL), TypeError, "only the fp16 step"),
        (
            "A float16 for a Q8_1 kernel",
            lambda: qk.gemm(A.half(), Wq, "cuda_q4_0_q8_1_decode"),
            TypeError,
            "only the fp16 step",
        ),
        ("K = 0", lambda: qk.gemm(torch.randn(3, 0), torch.randn(5, 0), F32_KERNEL), ValueError, "K \\(0\\)"),
    ]
    if q4_kernels:
        k = q4_kernels[0]
        cases += [
            ("float W for a q4_0 kernel", lambda: qk.gemm(A, W, k), TypeError, "W must be torch.uint8"),
            (
                "W of the wrong format",
                lambda: qk.gemm(A, qk.quantize(W, "q8_0")[:, :50].contiguous(), k),
                ValueError,
                "not a whole number of q4_0 blocks",
            ),
            ("bytes for an f32 kernel", lambda: qk.gemm(A, Wq, F32_KERNEL), TypeError, "W must be torch.float32"),
        ]
    if HAS_CUDA:
        cuda = next(k.name for k in qk.KERNELS.values() if k.device == "cuda")
        cases += [
            ("CPU tensors to a CUDA kernel", lambda: qk.gemm(A, W, cuda), ValueError, "runs on cuda"),
            ("mixed devices", lambda: qk.gemm(A.cuda(), W, cuda), ValueError, "same device"),
            (
                "CUDA tensors to a CPU kernel",
                lambda: qk.gemm(A.cuda(), W.cuda(), F32_KERNEL),
                ValueError,
                "runs on cpu",
            ),
            (
                "misaligned view",
                lambda: qk.gemm(torch.randn(3 * 64 + 1, device="cuda")[1:].view(3, 64), W.cuda(), cuda),
                ValueError,
                "16-byte boundary",
            ),
        ]
    return cases


@pytest.mark.parametrize("what,call,exc,msg", bad_gemm_cases(), ids=[c[0] for c in bad_gemm_cases()])
def test_gemm_rejects(what, call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


@pytest.mark.parametrize("kernel", [k.name for k in qk.kernels(device="cpu")])
def test_empty_batch_gives_empty_output(kernel):
    """N = 0 or M = 0 is a valid, empty product (as torch returns for it), not an error."""
    k = qk.KERNELS[kernel]
    K = 2 * k_step(k)  # two blocks (two super-blocks for the K-quants)
    W = torch.randn(5, K)
    Wk = W if k.wfmt == "f32" else qk.quantize(W, k.wfmt)
    assert qk.gemm(torch.randn(0, K), Wk, kernel).shape == (0, 5)
    W0 = torch.randn(0, K)
    W0k = W0 if k.wfmt == "f32" else qk.quantize(W0, k.wfmt)
    assert qk.gemm(torch.randn(3, K), W0k, kernel).shape == (3, 0)


COMPILED_OP_CHECKS = """
import pytest, torch, quantgemm_kernels as qk
qk.quantize(torch.randn(1, 32), "q8_0")  # builds/loads the extension
ops = torch.ops.quantgemm
# the C++ layer raises RuntimeError for everything (bindings.cpp, QG_CHECK, says why)
with pytest.raises(RuntimeError, match="multiple of 32"):
    ops.quantize(torch.randn(2, 40), "q8_0", 0)
with pytest.raises(RuntimeError, match="float32"):
    ops.gemm(torch.randn(2, 32).double(), torch.randn(2, 32), "cpu_f32_f32_naive")
with pytest.raises(RuntimeError, match="disagree on K"):
    ops.gemm(torch.randn(2, 32), torch.randn(2, 64), "cpu_f32_f32_naive")
with pytest.raises(RuntimeError, match="no CPU kernel"):
    ops.gemm(torch.randn(2, 32), torch.randn(2, 32), "cuda_nothing")
print("ALL RAISED")
"""


def test_compiled_ops_check_too():
    """Calling the operator directly, past the Python checks, still raises instead of crashing.
    In a child process, so that a crash (seen with one torch build) fails this test alone."""
    import os
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", COMPILED_OP_CHECKS], capture_output=True, text=True, timeout=900, env=dict(os.environ)
    )
    assert r.returncode == 0 and "ALL RAISED" in r.stdout, f"exit {r.returncode}: {r.stderr[-1500:]}"


@pytest.mark.parametrize("fmt,scale", [("q4_0", 1e6), ("q8_0", 1e9), ("q8_1", 1e9), ("q8_1", 3000.0)])
def test_fp16_overflow_warns_and_keeps_llama_cpp_bytes(fmt, scale):
    """A scale (or Q8_1's sum s) beyond fp16's range is stored as inf, as llama.cpp stores it."""
    import numpy as np
    from quantgemm_kernels import formats as F

    x = torch.full((1, 32), scale)
    with pytest.warns(RuntimeWarning, match="overflows fp16"):
        q = qk.quantize(x, fmt)
    with np.errstate(over="ignore"):
        assert np.array_equal(q.numpy(), F.quantize(x.numpy(), fmt))


K_SCALES = (3e5, 1e6, 3e6, 1e7, 3e7, 1e8, 3e8, 1e9)


@pytest.mark.parametrize(
    "fmt,scales", [("q4_k", K_SCALES), ("q6_k", K_SCALES), ("q4_1", (1e2, 1e3, 1e4, 3e4, 1e5, 1e6))]
)
def test_fp16_overflow_of_a_stored_field_warns_exactly_when_it_is_inf(fmt, scales):
    """The K-quants' d (and Q4_K's dmin) come from a search, with no closed form in max |x|, and
    Q4_1's min m overflows long before its d: the warning is decided on the stored fields, so it
    fires where one is inf and nowhere else. Measured on normal data: Q4_K's scales overflow from
    max |x| ~ 8e6, Q6_K's from ~ 4e8, Q4_1's min from 65504."""
    import warnings

    import numpy as np
    from quantgemm_kernels import formats as F

    rng = np.random.default_rng(0)
    seen = set()
    for scale in scales:
        x = (rng.standard_normal((16, 256)) * scale).astype(np.float32)
        with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
            warnings.simplefilter("always")
            q = qk.quantize(torch.from_numpy(x), fmt)
            want = F.quantize(x, fmt)
        b = F.as_blocks(want, fmt)
        inf = any(np.isinf(b[h].astype(np.float32)).any() for h in F.SPECS[fmt].header)
        assert np.array_equal(q.numpy(), want)
        assert any("overflows fp16" in str(w.message) for w in caught) == inf, (scale, inf)
        seen.add(inf)
    assert seen == {False, True}  # both outcomes were seen


def test_gemm_q8_1_sum_argument_is_checked():
    A, W = torch.randn(3, 64), torch.randn(5, 64)
    Wq = qk.quantize(W, "q4_0")
    with pytest.raises(ValueError, match="q8_1_sum must be one of"):
        qk.gemm(A, Wq, "cpu_q4_0_q8_1_naive", q8_1_sum="x")
    with pytest.raises(ValueError, match="q8_1_sum does not apply"):
        qk.gemm(A, Wq, "cpu_q4_0_f32_naive", q8_1_sum="sum_x")
    # a kernel that reads Q8_1 bytes takes either mode: gemm() quantizes A with it
    from quantgemm_kernels import formats as F
    from quantgemm_kernels import reference as R

    C = qk.gemm(A, Wq, "cpu_q4_0_q8_1_naive", q8_1_sum="sum_x").numpy()
    ref = R.gemm_wq_aq8_1(F.quantize(A.numpy(), "q8_1", q8_1_sum="sum_x"), Wq.numpy(), "q4_0")
    assert R.nmse(C, ref) < 1e-10
