"""Formats as data, QTensor and linear: every registered format through the whole pipeline.

A format is one :class:`formats.Format` in ``formats.SPECS`` (and one row of ``csrc/formats.def``);
these tests walk every registered one through quantize -> dequantize -> gemm against the numpy
reference, on every device here, so a newly added format is covered without a new test.
"""

import subprocess
import sys

import numpy as np
import pytest
import torch

import quantgemm_kernels as qk
from quantgemm_kernels import formats as F
from quantgemm_kernels import reference as R
from quantgemm_kernels.testing import make_values, quantize_weights

from conftest import DEVICES, ROOT, kernel_param

#: weight formats that have kernels (a format is added first, its kernels next)
WEIGHT_FORMATS = [f for f in F.FORMATS if any(k.wfmt == f for k in qk.KERNELS.values())]


def test_spec_imports_without_torch():
    """The numpy spec is usable where torch is not installed: importing it must not import torch."""
    code = "import sys, quantgemm_kernels.formats, quantgemm_kernels.reference; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("fmt", F.FORMATS)
def test_spec_fields_agree(fmt):
    f = F.SPECS[fmt]
    assert f.block_bytes == F.BLOCK_BYTES[fmt] == f.dtype.itemsize
    # the scale fields validate_blocks checks: fp16 (Q8_K's d: float32), at the block's start but for Q6_K's d
    assert all(f.dtype.fields[h][0] in (np.float16, np.float32) for h in f.header) and "d" in f.header
    assert f.row_bytes(3 * f.block_size) == 3 * f.block_bytes and f.k_of(3 * f.block_bytes) == 3 * f.block_size
    with pytest.raises(ValueError, match="multiple"):
        f.row_bytes(f.block_size + 1)
    with pytest.raises(ValueError, match="whole number"):
        f.k_of(f.block_bytes + 1)


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="unknown format"):
        F.spec("q5_0")
    with pytest.raises(ValueError, match="fmt must be one of"):
        qk.quantize(torch.zeros(1, 32), "q5_0")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", F.FORMATS)
def test_every_format_quantize_dequantize(fmt, device):
    """The package's quantizer and dequantizer give the spec's bytes and values on every device."""
    x = make_values((7, 5 * F.SPECS[fmt].block_size), "normal", seed=3)
    if device == "cuda" and not F.SPECS[fmt].cuda:
        with pytest.raises(ValueError, match="no CUDA quantizer"):
            qk.quantize(torch.from_numpy(x).to(device), fmt)
        return
    q = qk.quantize(torch.from_numpy(x).to(device), fmt)
    assert np.array_equal(q.cpu().numpy(), F.quantize(x, fmt))
    back = qk.dequantize(q, fmt).cpu().numpy()
    assert np.array_equal(back, F.dequantize(F.quantize(x, fmt), fmt))


@pytest.mark.parametrize("kernel", [kernel_param(k) for k in qk.KERNELS.values() if k.wfmt in WEIGHT_FORMATS])
def test_every_weight_format_through_gemm(kernel):
    """quantize -> QTensor -> gemm against the reference, for every kernel of every weight format
    (NMSE against the exact product of the dequantized operands, 5e-4 as llama.cpp's MUL_MAT test)."""
    k = qk.KERNELS[kernel]
    M, N, K = 40, 3, 4 * F.SPECS[k.wfmt].block_size
    W = make_values((M, K), "normal", seed=1)
    A = make_values((N, K), "normal", seed=2)
    Wq = qk.QTensor(quantize_weights(torch.from_numpy(W).to(k.device), k.wfmt), k.wfmt)
    assert Wq.shape == (M, K) and Wq.fmt == k.wfmt
    C = qk.gemm(torch.from_numpy(A).to(k.device), Wq, k.name).cpu().numpy()
    want = R.gemm_f32(A, F.dequantize(Wq.data.cpu().numpy(), k.wfmt))
    assert R.nmse(C, want) < 5e-4


def test_qtensor_refuses_bytes_that_are_not_blocks():
    with pytest.raises(ValueError, match="whole number of q4_0 blocks"):
        qk.QTensor(torch.zeros(2, 35, dtype=torch.uint8), "q4_0")
    with pytest.raises(TypeError, match="uint8"):
        qk.QTensor(torch.zeros(2, 36), "q8_1")


def test_qtensor_tells_formats_apart_where_bytes_cannot():
    """306-byte rows are Q8_0 with K=288 or Q4_0 with K=544: the QTensor knows which."""
    W8 = qk.QTensor.quantize(torch.randn(4, 288), "q8_0")
    W4 = qk.QTensor.quantize(torch.randn(4, 544), "q4_0")
    assert W8.data.shape == W4.data.shape == (4, 306)
    assert (W8.shape, W4.shape) == ((4, 288), (4, 544))
    with pytest.raises(ValueError, match="reads q4_0 weights, W is a q8_0 QTensor"):
        qk.gemm(torch.randn(1, 288), W8, "cpu_q4_0_q8_1_simd")
    with pytest.raises(ValueError, match="reads q8_0 weights, W holds q4_0"):
        qk.linear(torch.randn(1, 544), W4, kernel="cpu_q8_0_q8_1_naive")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wfmt", WEIGHT_FORMATS)
@pytest.mark.parametrize("lead", [(1,), (5,), (2, 3), ()])
def test_linear_matches_the_kernel_it_picks(wfmt, device, lead):
    if not qk.kernels(device=device, wfmt=wfmt):
        pytest.skip(f"no {device} kernel reads {wfmt} yet")
    M, K = 72, 3 * F.SPECS[wfmt].block_size
    Wq = qk.QTensor(quantize_weights(torch.randn(M, K, device=device), wfmt), wfmt)
    x = torch.randn(*lead, K, device=device)
    y = qk.linear(x, Wq)
    assert y.shape == (*lead, M)
    n = int(np.prod(lead)) if lead else 1
    k = qk.pick_kernel(device, wfmt, n, M)
    assert k.wfmt == wfmt and k.device == torch.device(device).type
    assert torch.equal(y.reshape(n, M), qk.gemm(x.reshape(n, K), Wq, k))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wfmt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("n", [1, 5, 40, 300])
def test_linear_takes_half_precision_activations(wfmt, device, n):
    """float16 and bfloat16 x give, bit for bit, what their float32 values give: the fp16 step (which
    the picker takes on Hopper from WGMMA_F16_MIN_N tokens) reads float16 x itself, every other
    kernel gets it as float32."""
    M, K = 136, 1024
    Wq = qk.QTensor(quantize_weights(torch.randn(M, K, device=device), wfmt), wfmt)
    x = torch.randn(n, K, device=device)
    for dt in (torch.float16, torch.bfloat16):
        xh = x.to(dt)
        y = qk.linear(xh, Wq)
        assert y.dtype == torch.float32 and y.shape == (n, M)
        assert torch.equal(y, qk.linear(xh.float(), Wq)), dt


def test_linear_bad_input_gets_clear_errors():
    Wq = qk.QTensor.quantize(torch.randn(8, 64), "q4_0")
    for dt in (torch.float64, torch.int32):
        with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
            qk.linear(torch.zeros(2, 64, dtype=dt), Wq)
    with pytest.raises(ValueError, match="K=32 in its last dimension, W \\[M, K\\] has K=64"):
        qk.linear(torch.randn(2, 32), Wq)
    with pytest.raises(TypeError, match="torch.Tensor"):
        qk.linear(np.zeros((2, 64), np.float32), Wq)
    with pytest.raises(ValueError, match="unknown kernel"):
        qk.linear(torch.randn(2, 64), Wq, kernel="cpu_q4_0_q8_1_fastest")


def test_pick_kernel_on_the_cpu():
    # one token: chapter 7's one-token step where its SIMD path compiled (x86), else the stationary step
    from quantgemm_kernels import api

    one = "gemv" if api._cpu_gemv_simd() else "stationary"
    assert qk.pick_kernel("cpu", "q4_0", 1).name == f"cpu_q4_0_q8_1_{one}"
    assert qk.pick_kernel("cpu", "q8_0", 1).name == f"cpu_q8_0_q8_1_{one}"
    assert qk.pick_kernel("cpu", "q4_0", 3).name == "cpu_q4_0_q8_1_stationary"
    assert qk.pick_kernel("cpu", "q8_0", 512).name == "cpu_q8_0_q8_1_stationary"
    assert qk.pick_kernel("cpu", "q4_1", 8).name == "cpu_q4_1_q8_1_stationary"
    assert qk.pick_kernel("cpu", "f32", 7).name == "cpu_f32_f32_blocked"
    assert qk.pick_kernel("cpu", "q4_k", 1).wfmt == "q4_k" and qk.pick_kernel("cpu", "q6_k", 9).afmt == "q8_k"
    with pytest.raises(ValueError, match="no cpu kernel reads q8_k"):
        qk.pick_kernel("cpu", "q8_k", 1)


def test_the_gpu_choice_follows_the_measured_crossovers(monkeypatch):
    """api.pick_cuda_kernel without a GPU: on Hopper the decode kernel to N = 3 (Q4_0, rows of
    K <= 4096), 4 (longer rows, and rows of K <= 4096 where M / 128 < SMs / 2) or 5 (Q8_0, rows of
    K <= 4096; 6 where M / 128 < SMs / 2), then the fp16 step (from
    api.WGMMA_F16_MIN_N: 4 for Q4_0, 5 for Q8_0, so the small-batch wgmma step runs nowhere on
    Hopper); with thresholds given instead, the small step between; with WGMMA_F16_MIN_N None (Q8_1 activations
    throughout) the small step to N = 32, then the split-K wgmma kernel in its 64-token-tile form
    (the narrow step) to 64 and the fifth step past it (the narrow kernel's own launcher); on Ampere and Ada the decode kernel at
    every N (the mma steps' shared memory does not fit there); DP4A before them; Q4_1, Q4_K and Q6_K (no wgmma kernel) the
    decode kernel to their own crossovers (N = 8, 16 and 16 on the H100 record api.py cites), then
    the split-K mma step, on Hopper too."""
    from quantgemm_kernels import api

    pick = api.pick_cuda_kernel
    h100 = ((9, 0), 132)
    assert pick("q4_0", 1, 4096, *h100).name == "cuda_q4_0_q8_1_decode"
    assert pick("q4_0", 4, 4096, *h100).name == "cuda_q4_0_q8_1_decode"  # 32 row tiles: few
    assert pick("q4_0", 5, 4096, *h100).name == "cuda_q4_0_f16_wgmma"
    assert pick("q4_0", 4, None, *h100).name == "cuda_q4_0_f16_wgmma"  # M unknown: not few tiles
    assert pick("q4_0", 3, 14336, *h100, K=4096).name == "cuda_q4_0_q8_1_decode"
    assert pick("q4_0", 4, 14336, *h100, K=4096).name == "cuda_q4_0_f16_wgmma"
    assert pick("q4_0", 4, 4096, *h100, K=14336).name == "cuda_q4_0_q8_1_decode"
    assert pick("q4_0", 5, 4096, *h100, K=14336).name == "cuda_q4_0_f16_wgmma"
    assert pick("q4_0", 16, 4096, *h100, K=14336).name == "cuda_q4_0_f16_wgmma"
    assert pick("q4_0", 4, 4096, *h100, K=4096).name == "cuda_q4_0_q8_1_decode"
    assert pick("q4_0", 5, 4096, *h100, K=4096).name == "cuda_q4_0_f16_wgmma"
    assert pick("q8_0", 5, 4096, *h100, K=14336).name == "cuda_q8_0_f16_wgmma"
    assert pick("q4_0", 33, 4096, *h100, K=14336).name == "cuda_q4_0_f16_wgmma"
    assert pick("q4_0", 4096, 4096, *h100, K=14336).name == "cuda_q4_0_f16_wgmma"
    assert pick("q8_0", 512, 14336, *h100, K=4096).name == "cuda_q8_0_f16_wgmma"
    assert pick("q8_0", 6, 4096, *h100, K=4096).name == "cuda_q8_0_q8_1_decode"
    assert pick("q8_0", 7, 4096, *h100, K=4096).name == "cuda_q8_0_f16_wgmma"
    assert pick("q8_0", 5, 14336, *h100, K=4096).name == "cuda_q8_0_q8_1_decode"
    assert pick("q4_0", 8, 4096, (8, 0), 108).name == "cuda_q4_0_q8_1_decode"
    assert pick("q4_0", 8, 14336, (8, 0), 108).name == "cuda_q4_0_q8_1_decode"
    assert pick("q4_0", 16, 4096, (8, 0), 108).name == "cuda_q4_0_q8_1_decode"  # no wgmma there
    assert pick("q8_0", 4, 4096, *h100, K=14336).name == "cuda_q8_0_q8_1_decode"
    assert pick("q8_0", 6, 14336, *h100, K=4096).name == "cuda_q8_0_f16_wgmma"
    assert pick("q4_1", 1, 4096, *h100).name == "cuda_q4_1_q8_1_decode"
    assert pick("q4_1", 8, 4096, *h100).name == "cuda_q4_1_q8_1_decode"
    assert pick("q4_1", 16, 4096, *h100).name == "cuda_q4_1_q8_1_mma_splitk"
    assert pick("q4_1", 64, 4096, *h100).name == "cuda_q4_1_q8_1_mma_splitk"
    assert pick("q4_1", 512, 4096, *h100).name == "cuda_q4_1_q8_1_mma_splitk"
    assert pick("q4_1", 64, 4096, (8, 0), 108).name == "cuda_q4_1_q8_1_decode"
    assert pick("q4_1", 8, 4096, (8, 0), 108).name == "cuda_q4_1_q8_1_decode"
    assert pick("q4_k", 16, 4096, *h100).name == "cuda_q4_k_q8_1_decode"
    assert pick("q4_k", 32, 4096, *h100).name == "cuda_q4_k_q8_1_mma_splitk"
    assert pick("q4_k", 512, 4096, *h100).name == "cuda_q4_k_q8_1_mma_splitk"
    assert pick("q6_k", 16, 4096, *h100).name == "cuda_q6_k_q8_1_decode"
    assert pick("q6_k", 17, 4096, *h100).name == "cuda_q6_k_q8_1_mma_splitk"
    assert pick("q6_k", 512, 4096, *h100).name == "cuda_q6_k_q8_1_mma_splitk"
    assert pick("q4_0", 512, 4096, (8, 9), 58).name == "cuda_q4_0_q8_1_decode"
    assert pick("q4_0", 1, 4096, (7, 5), 40).name == "cuda_q4_0_q8_1_vec_dp4a"
    with pytest.raises(ValueError, match="no CUDA kernel for q4_1 weights on compute capability 7.5"):
        pick("q4_1", 1, 4096, (7, 5), 40)
    table = api.choice_table((9, 0), 132, ns=(1, 4, 8, 32, 64))
    assert "f16_wgmma" in table and "wgmma_small" not in table and "decode" in table and "q4_1" in table
    assert pick("q4_0", 33, 4096, *h100, K=14336, q8_1_only=True).name == "cuda_q4_0_q8_1_wgmma_narrow"
    assert pick("q8_0", 16, 4096, *h100, K=14336, q8_1_only=True).name == "cuda_q8_0_q8_1_wgmma_small"
    before = {"q4_0": (3, 3, 4), "q8_0": (5, 5, 4)}  # decode thresholds given instead of DECODE_MAX_N_HOPPER
    assert pick("q4_0", 4, 4096, *h100, K=4096, decode_max_n=before).name == "cuda_q4_0_f16_wgmma"
    assert pick("q8_0", 6, 4096, *h100, K=4096, decode_max_n=before).name == "cuda_q8_0_f16_wgmma"
    with pytest.raises(ValueError, match="decode thresholds for q8_0"):
        pick("q8_0", 6, 4096, *h100, K=4096, decode_max_n={"q4_0": (3, 3, 4)})  # no entry for q8_0
    with pytest.raises(ValueError, match=r"three integers, got \(5, 4\)"):
        pick("q8_0", 6, 4096, *h100, K=4096, decode_max_n={"q8_0": (5, 4)})  # the two-entry form of before
    # The H200's own thresholds (api.DECODE_MAX_N_BY_GPU): Q8_0's rows of 4096 leave the decode kernel
    # sooner there on 14336 x 4096 (at 5 tokens, not 6), as late on 4096 x 4096 (after 6); another name,
    # or none, gets the H100's.
    h200 = dict(gpu="NVIDIA H200")
    assert pick("q8_0", 6, 4096, *h100, K=4096, **h200).name == "cuda_q8_0_q8_1_decode"
    assert pick("q8_0", 7, 4096, *h100, K=4096, **h200).name == "cuda_q8_0_f16_wgmma"
    assert pick("q8_0", 4, 14336, *h100, K=4096, **h200).name == "cuda_q8_0_q8_1_decode"
    assert pick("q8_0", 5, 14336, *h100, K=4096, **h200).name == "cuda_q8_0_f16_wgmma"
    assert pick("q8_0", 5, 14336, *h100, K=4096, gpu="NVIDIA H100 80GB HBM3").name == "cuda_q8_0_q8_1_decode"
    assert pick("q8_0", 6, 4096, *h100, K=4096, gpu="NVIDIA H100 80GB HBM3").name == "cuda_q8_0_q8_1_decode"
    assert pick("q8_0", 4, 4096, *h100, K=14336, **h200).name == "cuda_q8_0_q8_1_decode"
    assert pick("q4_0", 4, 4096, *h100, K=4096, **h200).name == "cuda_q4_0_q8_1_decode"
    assert pick("q4_0", 4, 14336, *h100, K=4096, **h200).name == "cuda_q4_0_f16_wgmma"
    # thresholds given explicitly win over the device's own
    assert (
        pick("q8_0", 7, 4096, *h100, K=4096, decode_max_n={"q8_0": (7, 5, 4)}, **h200).name == "cuda_q8_0_q8_1_decode"
    )
    t200 = api.choice_table((9, 0), 132, formats=["q8_0"], ns=(4, 5, 6, 7), gpu="NVIDIA H200").splitlines()
    assert t200[0].startswith("kernel picked on NVIDIA H200, compute capability 9.0")
    assert t200[2].split()[3:] == ["decode", "decode", "decode", "f16_wgmma"]  # 4096 x 4096
    assert t200[3].split()[3:] == ["decode", "f16_wgmma", "f16_wgmma", "f16_wgmma"]  # 14336 x 4096
    then = {"q4_0": 17, "q8_0": 12}  # thresholds given instead of WGMMA_F16_MIN_N
    assert pick("q4_0", 4, 14336, *h100, K=4096, f16_min_n=then).name == "cuda_q4_0_q8_1_wgmma_small"
    assert pick("q8_0", 7, 4096, *h100, K=14336, f16_min_n=then).name == "cuda_q8_0_q8_1_wgmma_small"
    assert pick("q4_0", 16, 4096, *h100, K=14336, f16_min_n=then).name == "cuda_q4_0_q8_1_wgmma_small"
    assert pick("q4_0", 17, 4096, *h100, K=14336, f16_min_n=then).name == "cuda_q4_0_f16_wgmma"
    monkeypatch.setattr(api, "WGMMA_F16_MIN_N", None)  # Q8_1 activations at every N
    assert pick("q4_0", 16, 4096, *h100).name == "cuda_q4_0_q8_1_wgmma_small"
    assert pick("q4_0", 32, 4096, *h100, K=14336).name == "cuda_q4_0_q8_1_wgmma_small"
    assert pick("q4_0", 33, 4096, *h100, K=14336).name == "cuda_q4_0_q8_1_wgmma_narrow"
    assert pick("q4_0", 64, 4096, *h100).name == "cuda_q4_0_q8_1_wgmma_narrow"
    assert pick("q4_0", 512, 4096, *h100, K=14336).name == "cuda_q4_0_q8_1_wgmma_narrow"
    assert "wgmma_narrow" in api.choice_table((9, 0), 132, ns=(1, 16, 64))


def test_split_k_fills_the_sms_once():
    """gemm.h's wgmma_splits (the split-K step's CTAs per tile), through its operator: as many as
    give each of the 132 SMs one CTA, at most 8, each CTA keeping at least 4 K steps of 8 blocks."""
    from quantgemm_kernels import api

    splits = api._ops().wgmma_splits
    assert splits(64, 4096, 14336, 132) == 4  # 32 tiles x 4 = 128 CTAs
    assert splits(64, 4096, 4096, 132) == 4  # 16 K steps: 4 per split
    assert splits(256, 4096, 14336, 132) == 2  # 64 tiles
    assert splits(64, 14336, 4096, 132) == 1  # 112 tiles already
    assert splits(1, 1024, 4096, 132) == 4  # 8 tiles could take 16, K has 16 steps
    assert splits(1, 128, 14336, 132) == 8  # at most 8
    assert splits(300, 300, 512, 132) == 1  # 2 K steps
    with pytest.raises(RuntimeError, match="must be positive"):
        splits(0, 4096, 4096, 132)


def test_fp16_step_takes_256_token_tiles_where_they_paid():
    """gemm.h's f16_plan (the fp16 step's tokens per tile, splits of K, and tiles run whole),
    through its operator, on 132 SMs: N rounded up to 16, 32, 64 or 128 up to 128 tokens; past
    that 256 where its waves of CTAs are more than 1.7 times fewer, or where both fit one wave, N
    pads no more and K is long (then the 256-token tiles split K, whether or not 128-token ones
    would); splits only where the tiles, or the last wave's tiles, leave at least half the SMs idle.
    The cells are the measured ones (gemm.h)."""
    from quantgemm_kernels import api

    plan = api._ops().f16_plan
    small = (1, 16, 17, 33, 65, 128, 129, 256)
    assert [plan(n, 4096, 4096, 132)[0] for n in small] == [16, 16, 32, 64, 128, 128, 128, 128]
    ns = (300, 384, 512, 640, 768, 1024, 1100, 2048, 4096)
    assert [plan(n, 4096, 14336, 132)[0] for n in ns] == [128, 128, 256, 256, 256, 256, 128, 256, 256]
    assert [plan(n, 4096, 4096, 132)[0] for n in ns] == [128, 128, 128, 256, 256, 256, 128, 256, 256]
    assert [plan(n, 14336, 4096, 132)[0] for n in ns] == [128, 128, 256, 128, 256, 256, 128, 256, 256]
    # [tokens per tile, splits of a split tile, tiles, tiles run whole]
    assert plan(512, 4096, 4096, 132) == [128, 1, 128, 128]  # 128 tiles fill the SMs; 256 would split K = 4096
    assert plan(512, 4096, 14336, 132) == [256, 2, 64, 0]  # the same, over K = 14336: 64 tiles, all split in 2
    assert plan(384, 4096, 14336, 132)[:2] == [128, 1]  # 256-token tiles would pad 384 to 512
    assert plan(640, 4096, 4096, 132)[:2] == [256, 1]  # 96 tiles, one wave, against 160 (two)
    assert [plan(n, 14336, 4096, 132)[0] for n in (129, 160, 192, 256)] == [256] * 4  # 112 tiles, not 224
    # both widths split K: 256-token tiles (half the weights dequantized per CTA) where K is long
    assert [plan(n, 4096, 14336, 132)[:2] for n in (129, 192, 256)] == [[256, 4]] * 3  # 32 tiles in 4, not 64 in 2
    assert [plan(n, 4096, 4096, 132)[:2] for n in (129, 192, 256)] == [[128, 2]] * 3  # K = 4096: 64 tiles in 2
    # the last wave part full: its tiles split as many ways as fill the SMs, the others whole
    assert plan(1024, 14336, 4096, 132) == [256, 2, 448, 396]  # 3 waves of 132, then 52 tiles as 104 CTAs
    assert plan(2100, 2099, 2048, 132) == [128, 4, 289, 264]  # 25 tiles as 100 CTAs
    assert plan(512, 14336, 4096, 132) == [256, 1, 224, 224]  # 92 left over: more than half the SMs, no split
    assert plan(2048, 14336, 4096, 132) == [256, 1, 896, 896]  # 104 left over
    assert plan(1024, 14336, 4096, 114) == [256, 1, 448, 448]  # H100 PCIe: 448 = 3 x 114 + 106
    for n, m, k in [(512, 4096, 14336), (16, 4096, 4096), (700, 257, 1056), (1100, 2000, 2048), (512, 2100, 8224)]:
        for sms in (132, 114, 78):
            nt, s, tiles, whole = plan(n, m, k, sms)
            assert tiles == -(-m // 128) * -(-n // nt), (n, m, k, sms)
            if s == 1:
                assert whole == tiles
            else:  # the split tiles' CTAs fit one wave; whole tiles are whole waves
                assert whole % sms == 0 and (tiles - whole) * s <= sms, (n, m, k, sms, nt, s, whole)
    assert plan(512, 4096, 14336, 114)[:2] == [256, 1]  # H100 PCIe: 128-token tiles would take two waves of 114
    with pytest.raises(RuntimeError, match="must be positive"):
        plan(0, 4096, 4096, 132)
    with pytest.raises(RuntimeError, match="a multiple of 32"):
        plan(16, 4096, 4010, 132)
