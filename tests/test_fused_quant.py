"""Appendix D: fused per-token quantization + SlideSparse slide.

The torch reference is checked against a slow loop written independently of it (numpy float32
scalars, an FP8 encoder that searches all 256 codes), then against properties; the Triton
kernel is checked against the reference bit for bit on a GPU.
"""

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT, requires_cuda

from quantgemm_kernels.appendices import fused_quant as fq

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


# ---------------------------------------------------------------------------------------------
# An independent, slow implementation of the spec
# ---------------------------------------------------------------------------------------------


def _fp8_code_values() -> np.ndarray:
    """Value of each float8_e4m3fn code: 1 sign, 4 exponent (bias 7), 3 mantissa bits;
    exponent 0 is subnormal (m/8 * 2**-6); 0x7F and 0xFF are NaN; no infinities."""
    vals = np.empty(256)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> 3) & 0xF, code & 0x7
        if e == 0xF and m == 0x7:
            vals[code] = np.nan
        elif e == 0:
            vals[code] = sign * m / 8 * 2.0**-6
        else:
            vals[code] = sign * (1 + m / 8) * 2.0 ** (e - 7)
    return vals


FP8_VALUES = _fp8_code_values()


def _fp8_encode(v: float) -> int:
    """Nearest finite code, ties to the even code (mantissa LSB 0); the sign bit follows v's sign
    even when the result is zero, as IEEE conversion does."""
    best, best_d = None, None
    for code in range(128):  # magnitudes
        if np.isnan(FP8_VALUES[code]):
            continue
        d = abs(abs(v) - FP8_VALUES[code])
        if best is None or d < best_d or (d == best_d and code % 2 == 0):
            best, best_d = code, d
    return best | (0x80 if math.copysign(1.0, v) < 0 else 0)


def slow_quant_slide(x: torch.Tensor, L: int, fmt: str):
    """Loops over rows, groups, windows and positions; float32 arithmetic with numpy scalars."""
    xs = x.float().numpy()
    M, K = xs.shape
    nw = L // 2 - 1
    groups = -(-K // L)
    k_out = groups * nw * 4
    k_out_pad = -(-k_out // 32) * 32
    m_pad = -(-M // 16) * 16
    qmax = np.float32(127.0 if fmt == "int8" else 448.0)
    out = np.zeros((m_pad, k_out_pad), dtype=np.uint8)
    scales = np.ones(m_pad, dtype=np.float32)
    for m in range(M):
        amax = np.float32(0.0)
        for k in range(K):
            amax = max(amax, np.float32(abs(xs[m, k])))
        scale = max(np.float32(amax / qmax), np.float32(2.0**-126))
        inv = np.float32(np.float32(1.0) / scale)
        scales[m] = scale
        for g in range(groups):
            for w in range(nw):
                for j in range(4):
                    src = g * L + 2 * w + j
                    if src >= K:
                        continue  # zero padding of the last group: byte 0
                    v = np.float32(xs[m, src] * inv)
                    if fmt == "int8":
                        byte = int(np.clip(np.rint(v), -127, 127)) & 0xFF
                    else:
                        byte = _fp8_encode(float(np.clip(v, -448.0, 448.0)))
                    out[m, (g * nw + w) * 4 + j] = byte
    return out, scales


def _bytes(q: torch.Tensor) -> np.ndarray:
    return q.cpu().view(torch.uint8).numpy()


def _values(M, K, dtype, seed, spread=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g)
    if spread:  # rows of very different magnitudes
        x = x * torch.logspace(-3, 3, M)[:, None]
    return x.to(dtype)


# ---------------------------------------------------------------------------------------------
# The reference on the CPU
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", fq.FORMATS)
@pytest.mark.parametrize("L", [4, 6, 8, 10])
@pytest.mark.parametrize("M,K", [(1, 1), (1, 7), (3, 10), (2, 16), (5, 33), (17, 9)])
def test_reference_matches_slow_loop(M, K, L, fmt):
    for i, dtype in enumerate(DTYPES):
        x = _values(M, K, dtype, seed=M * 100 + K + i)
        q, scale = fq.quant_slide_reference(x, L, fmt)
        want_q, want_scale = slow_quant_slide(x, L, fmt)
        assert q.dtype == fq.OUT_DTYPE[fmt] and scale.dtype == torch.float32
        assert q.shape == want_q.shape, (q.shape, want_q.shape)
        np.testing.assert_array_equal(scale.numpy(), want_scale)
        np.testing.assert_array_equal(_bytes(q), want_q)


def test_reference_ties_and_signed_zeros():
    """Exact halves go to the even integer (INT8) and even code (FP8); -0.0 and tiny negatives
    keep their sign in FP8 (0x80), as the hardware conversion does."""
    # amax 127 -> scale 1, inv 1: the scaled values are the inputs themselves.
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -2.5, -0.0, 3.49]])
    q, _ = fq.quant_slide_reference(x, 4, "int8")
    assert q[0, :8].tolist() == [127, 0, 2, 2, 0, -2, 0, 3]
    # amax 448 -> scale 1: 100 lies halfway between 96 and 104 -> 96 (even mantissa).
    x = torch.tensor([[448.0, 100.0, -0.0, -1e-6, 1.0625, 0.001]])
    q, _ = fq.quant_slide_reference(x, 4, "fp8")  # L = 4: output column k is input column k
    got = _bytes(q)[0, :6].tolist()
    assert got == [_fp8_encode(v) for v in (448.0, 100.0, -0.0, -1e-6, 1.0625, 0.001)]
    assert got[1] == 0x6C and got[2] == 0x80 and got[3] == 0x80 and got[4] == 0x38


def test_seed_shapes():
    """The seed's table and example: NW = L/2 - 1, expand (2L - 4)/L, K = 2560 -> 3840."""
    assert [fq.num_windows(L) for L in (6, 8, 10)] == [2, 3, 4]
    assert [round(fq.expand_ratio(L), 3) for L in (6, 8, 10)] == [1.333, 1.5, 1.6]
    s = fq.slide_shape(1024, 2560, 8)
    assert (s.K_in_pad, s.K_out, s.num_groups, s.K_out_pad, s.M_pad) == (2560, 3840, 320, 3840, 1024)
    s = fq.slide_shape(5, 10, 8)
    assert (s.num_groups, s.K_in_pad, s.K_out, s.K_out_pad, s.M_pad) == (2, 16, 24, 32, 16)


def test_slide_index_worked_example():
    # The docstring's example: L = 8, K = 10 (16 after padding), windows start at 0, 2, 4.
    assert fq.slide_index(10, 8).tolist() == [
        0,
        1,
        2,
        3,
        2,
        3,
        4,
        5,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        10,
        11,
        12,
        13,
        12,
        13,
        14,
        15,
    ]
    assert fq.slide_index(8, 4).tolist() == list(range(8))  # L = 4 is plain 2:4: no copies
    for K, L in itertools.product([1, 5, 8, 13, 40], [4, 6, 8, 10]):
        src, dst = fq.slide_index(K, L), fq.first_copy_index(K, L)
        assert torch.equal(src[dst], torch.arange(K))  # the first copy of column k is column k
        counts = torch.bincount(src, minlength=fq.slide_shape(1, K, L).K_in_pad)
        # inside a group, the two first and two last positions appear once, the rest twice
        p = torch.arange(len(counts)) % L
        assert torch.equal(counts, torch.where((p < 2) | (p >= L - 2), 1, 2))


@pytest.mark.parametrize("fmt", fq.FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_properties(fmt, dtype):
    M, K, L = 21, 203, 8
    x = _values(M, K, dtype, seed=7)
    q, scale = fq.quant_slide_reference(x, L, fmt)
    s = fq.slide_shape(M, K, L)
    xf = x.float()
    qmax = fq.QMAX[fmt]
    # per-row scale: amax / QMAX, and the row's largest value uses the full range
    amax = xf.abs().amax(dim=1)
    assert torch.equal(scale[:M], (amax.double() / qmax).float())
    assert torch.equal(q[:M].float().abs().amax(dim=1), torch.full((M,), qmax))
    # padding: rows past M are zero with scale 1; columns past K_out are zero; so are the
    # columns that copy the zero padding of the last group
    qb = q.view(torch.int8)
    assert torch.all(qb[M:] == 0) and torch.all(scale[M:] == 1.0)
    assert torch.all(qb[:, s.K_out :] == 0)
    pad_cols = (fq.slide_index(K, L) >= K).nonzero().flatten()
    assert len(pad_cols) > 0 and torch.all(qb[:, pad_cols] == 0)
    # every output column is a copy of its source column
    src = fq.slide_index(K, L)
    live = src < K
    assert torch.equal(qb[:M, : s.K_out][:, live], qb[:M, fq.first_copy_index(K, L)][:, src[live]])
    # dequantized values within half a quantization step of x / scale (float32 product)
    v = xf * (1.0 / scale[:M, None])
    qv = q[:M].float()[:, fq.first_copy_index(K, L)]
    if fmt == "int8":
        step = torch.ones_like(v)
    else:  # FP8 spacing: 2**-9 below 2**-6 (subnormals), else 2**(floor(log2|q|) - 3)
        mag = torch.minimum(v.abs(), qv.abs()).clamp(min=2.0**-6)
        step = torch.exp2(torch.floor(torch.log2(mag)) - 3)
    assert torch.all((v - qv).abs() <= step / 2 * (1 + 1e-6) + 1e-30)
    recon = fq.dequantize_slid(q, scale, K, L, M)
    assert torch.all((recon - xf).abs() <= step * scale[:M, None] * 0.5001 + 1e-30)


def test_zero_and_extreme_rows():
    x = torch.zeros(4, 12)
    x[1, 3] = 3e38  # near float32's max
    x[2, :] = 1e-30  # tiny but normal
    x[3, 5] = -7.0
    for fmt in fq.FORMATS:
        q, scale = fq.quant_slide_reference(x, 6, fmt)
        assert torch.isfinite(scale).all() and torch.isfinite(q.float()).all()
        assert scale[0] == fq.MIN_SCALE and torch.all(q[0].float() == 0)
        recon = fq.dequantize_slid(q, scale, 12, 6, 4)
        assert recon[1, 3] == pytest.approx(3e38, rel=1e-6)
        assert recon[3, 5] == -7.0
        assert torch.allclose(recon[2], torch.full((12,), 1e-30), rtol=1e-6)


def test_slide_weight_keeps_the_dot_product():
    g = torch.Generator().manual_seed(3)
    for L, K in [(4, 16), (6, 30), (8, 64), (8, 13), (10, 50)]:
        w = fq.prune_to_pattern(torch.randn(7, K, generator=g, dtype=torch.float64), L)
        groups = torch.nn.functional.pad(w, (0, fq.slide_shape(1, K, L).K_in_pad - K)).view(7, -1, L)
        assert torch.all((groups != 0).sum(-1) <= L - 2)
        ws = fq.slide_weight(w, L)
        assert torch.all((ws.view(7, -1, 4) != 0).sum(-1) <= 2)  # every window is 2:4
        x = torch.randn(5, K, generator=g, dtype=torch.float64)
        assert torch.allclose(fq.slide_values(x, L) @ ws.T, x @ w.T, rtol=1e-12, atol=1e-12)


def test_slide_weight_rejects_a_denser_group():
    with pytest.raises(ValueError, match="nonzeros"):
        fq.slide_weight(torch.ones(1, 8), 8)


def test_bad_inputs():
    x = torch.randn(2, 8)
    with pytest.raises(TypeError):
        fq.quant_slide_reference(x.to(torch.int32), 8)
    with pytest.raises(ValueError):
        fq.quant_slide_reference(x[None], 8)
    with pytest.raises(ValueError):
        fq.quant_slide_reference(torch.empty(0, 8), 8)
    for L in (2, 7, 0):
        with pytest.raises(ValueError, match="even"):
            fq.quant_slide_reference(x, L)
    with pytest.raises(ValueError, match="fmt"):
        fq.quant_slide_reference(x, 8, "int4")
    with pytest.raises(ValueError, match="CUDA"):
        fq.quant_slide_triton(x, 8)  # checked before triton is imported


def test_reference_handles_noncontiguous_rows():
    x = _values(6, 40, torch.float32, 5)
    q1, s1 = fq.quant_slide_reference(x[:, ::2], 6, "int8")
    q2, s2 = fq.quant_slide_reference(x[:, ::2].contiguous(), 6, "int8")
    assert torch.equal(q1, q2) and torch.equal(s1, s2)


def test_imports_without_triton():
    """The package and the CPU path must work where triton is missing (or broken)."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, quantgemm_kernels\n"
        "from quantgemm_kernels.appendices import fused_quant as fq\n"
        "assert not fq.triton_available()\n"
        "q, s = fq.quant_slide(torch.randn(3, 20), 8, 'fp8')\n"
        "assert q.shape == (16, 64)  # 3 groups x 12 = 36 columns, padded to 64\n"
        "r = fq.bench_fused_quant(2, 64, device='cpu', reps=1, warmup=0)\n"
        "assert r[0]['status'] == 'skipped'\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr


def test_bench_rows_on_cpu():
    rows = fq.bench_fused_quant(3, 64, L=6, fmt="int8", device="cpu", warmup=0, reps=2)
    by = {r["impl"]: r for r in rows}
    assert by["triton"]["status"] == "skipped" and "GPU" in by["triton"]["reason"]
    assert by["reference"]["status"] == "ok" and by["reference"]["gbps"] > 0
    s = fq.slide_shape(3, 64, 6)
    assert by["reference"]["bytes"] == 3 * 64 * 2 + s.M_pad * s.K_out_pad + s.M_pad * 4
    assert by["copy"]["bytes"] == 2 * 3 * 64 * 2 and by["copy"]["frac_of_copy"] == 1.0


# ---------------------------------------------------------------------------------------------
# The Triton kernel on a GPU, bit for bit against the reference
# ---------------------------------------------------------------------------------------------


def _gpu_formats():
    return ["int8", "fp8"] if fq.fp8_supported() else ["int8"]


def _check_triton(x, L, fmt, **cfg):
    s = fq.slide_shape(*x.shape, L)
    # poison the outputs: every byte must be written by the kernel
    out = torch.full((s.M_pad, s.K_out_pad), 0x5A, dtype=torch.uint8, device=x.device).view(fq.OUT_DTYPE[fmt])
    scale = torch.full((s.M_pad,), float("nan"), device=x.device)
    q, sc = fq.quant_slide_triton(x, L, fmt, out=out, scale=scale, **cfg)
    want_q, want_sc = fq.quant_slide_reference(x, L, fmt)
    assert torch.equal(sc, want_sc), (sc - want_sc).abs().max()
    diff = (q.view(torch.uint8) != want_q.view(torch.uint8)).nonzero()
    assert len(diff) == 0, f"{len(diff)} bytes differ, first at {diff[0].tolist()}"
    return q, sc


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L", [4, 6, 8, 10])
def test_triton_matches_reference(dtype, L):
    pytest.importorskip("triton")
    # M across the three configurations of choose_config and their edges; K ragged and long
    shapes = [(1, 1), (1, 4096), (3, 10), (16, 4103), (64, 333), (65, 96), (1024, 520), (1025, 77), (2000, 4096)]
    for fmt in _gpu_formats():
        for i, (M, K) in enumerate(shapes):
            x = _values(M, K, dtype, seed=i, spread=M <= 64).cuda()
            _check_triton(x, L, fmt)


@requires_cuda
def test_reference_is_the_same_on_cpu_and_gpu():
    for fmt in _gpu_formats():
        for dtype in DTYPES:
            x = _values(300, 1001, dtype, seed=11)
            q_cpu, s_cpu = fq.quant_slide_reference(x, 8, fmt)
            q_gpu, s_gpu = fq.quant_slide_reference(x.cuda(), 8, fmt)
            assert torch.equal(s_cpu, s_gpu.cpu())
            assert np.array_equal(_bytes(q_cpu), _bytes(q_gpu))


@requires_cuda
@pytest.mark.parametrize(
    "cfg",
    [
        dict(block_out=1),
        dict(block_out=32, block_k=16),
        dict(block_out=1024, num_warps=2),
        dict(block_k=4096, num_warps=16),
    ],
)
def test_triton_other_block_sizes(cfg):
    pytest.importorskip("triton")
    for fmt in _gpu_formats():
        x = _values(37, 1234, torch.bfloat16, seed=2).cuda()
        _check_triton(x, 10, fmt, **cfg)


@requires_cuda
def test_triton_extreme_rows_and_strides():
    pytest.importorskip("triton")
    x = torch.randn(8, 700)
    x[0] = 0.0
    x[1, 17] = 3e38
    x[2] *= 1e-30
    x[3] = -0.0
    x[4, ::3] = 0.0
    x[5] = torch.tensor(65504.0)
    for fmt in _gpu_formats():
        _check_triton(x.cuda(), 8, fmt)
        x_half = x.clone()
        x_half[1, 17] = 60000.0  # 3e38 would be inf in float16, and inf has no scale
        _check_triton(x_half.cuda().half(), 8, fmt)
        big = torch.randn(8, 1400).cuda()
        q1, _ = fq.quant_slide_triton(big[:, :700], 8, fmt)  # rows 1400 apart
        q2, _ = fq.quant_slide_reference(big[:, :700].contiguous(), 8, fmt)
        assert torch.equal(q1.view(torch.uint8), q2.view(torch.uint8))


@requires_cuda
def test_bench_on_gpu():
    pytest.importorskip("triton")
    rows = fq.bench_fused_quant(256, 4096, reps=3, warmup=1)
    by = {r["impl"]: r for r in rows}
    assert all(r["status"] == "ok" and r["gbps"] > 0 for r in rows), rows
    assert by["copy"]["frac_of_copy"] == 1.0
