"""Chapter 6's kernels beyond the shared kernel tests (test_kernels.py runs them on the ragged
shapes and awkward values like every other kernel): the code paths only bigger shapes reach
(several CTA tiles, K chunks, passes over N), and what fusing the activation quantization changes
(float32 in, NaN out for non-finite activations instead of an error)."""

import re

import numpy as np
import pytest
import torch

import quantgemm_kernels as qk
from quantgemm_kernels import reference as R
from quantgemm_kernels.testing import KERNEL_NMSE, check_kernel, quantize_weights, shape_for

from conftest import kernel_param, requires_cuda

FUSED = [k.name for k in qk.KERNELS.values() if k.fused_quant]
FUSED_HERE = [kernel_param(qk.KERNELS[n]) for n in FUSED]  #: skipped where they cannot run


def test_chapter_6_kernels_are_registered_as_fused():
    assert FUSED, "chapter 6 registers its kernels"
    for name in FUSED:
        k = qk.KERNELS[name]
        # chapter 7 adds Q4_1 weights to chapter 6's decode step, chapter 8 the K-quants' decode
        # kernels; the fp16 step rounds A to fp16 instead of quantizing it
        assert k.device == "cuda" and (k.afmt == "q8_1" or (k.afmt == "f16" and name.endswith("_f16_wgmma")))
        assert k.chapter == 6 or (k.chapter, k.wfmt) in ((7, "q4_1"), (8, "q4_k"), (8, "q6_k"))


@pytest.mark.parametrize("kernel", FUSED)
def test_fused_kernels_refuse_pre_quantized_activations(kernel):
    with pytest.raises(ValueError, match="takes float32 activations"):
        qk.gemm_quantized(torch.zeros(1, 36, dtype=torch.uint8), torch.zeros(1, 18, dtype=torch.uint8), kernel)


# (M, N, K): several 128 x 128 tiles with ragged edges; K % 256 == 0 (16-byte units) and != 0
# (block-by-block staging); N over one decode pass (8) and over two; K longer than one shared-
# memory chunk of the decode kernel (672 blocks on a 227 KB GPU), aligned and not.
BIG_SHAPES = [(300, 261, 512), (130, 300, 1056), (257, 9, 2048), (33, 17, 21760), (40, 3, 21536), (129, 1, 4096)]


@requires_cuda
@pytest.mark.parametrize("kernel", FUSED_HERE)
@pytest.mark.parametrize("M,N,K", BIG_SHAPES, ids=[f"M{m}N{n}K{k}" for m, n, k in BIG_SHAPES])
def test_fused_kernels_on_multi_tile_shapes(kernel, M, N, K):
    if K % qk.formats.SPECS[qk.KERNELS[kernel].wfmt].block_size:
        pytest.skip("K is not a whole number of this format's blocks (K-quants: 256); the list's other shapes are")
    err, C, ref = check_kernel(kernel, M, N, K, "normal", seed=K)
    assert err <= KERNEL_NMSE, f"{kernel} M={M} N={N} K={K}: NMSE {err:.3g}"


@requires_cuda
@pytest.mark.parametrize("kernel", FUSED_HERE)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_activations_give_nan_for_their_token_only(kernel, bad):
    k = qk.KERNELS[kernel]
    rng = np.random.default_rng(1)
    A = rng.standard_normal((5, 512)).astype(np.float32)
    W = rng.standard_normal((19, 512)).astype(np.float32)
    A[2, 300] = bad
    Wq = quantize_weights(torch.from_numpy(W).cuda(), k.wfmt)
    C = qk.gemm(torch.from_numpy(A).cuda(), Wq, kernel).cpu().numpy()
    if k.afmt == "f16":  # fp16 carries inf through: inf x w is +-inf, or NaN where w is 0 or signs meet
        assert not np.isfinite(C[2]).any(), "the token holding a non-finite value gives no finite output"
        with np.errstate(invalid="ignore"):
            want = R.gemm(A[2:3], Wq.cpu().numpy(), k.wfmt, "f16")[0]
        assert np.array_equal(np.isnan(C[2]), np.isnan(want)), "NaN exactly where the reference has it"
        assert np.array_equal(C[2][np.isinf(want)], want[np.isinf(want)]), "and inf of the same sign"
    else:
        assert np.isnan(C[2]).all(), "the token holding a non-finite value gives NaN everywhere"
    ok = [0, 1, 3, 4]
    ref = R.gemm(A[ok], Wq.cpu().numpy(), k.wfmt, k.afmt, q4_0_formula=k.q4_0_formula)
    assert R.nmse(C[ok], ref) <= KERNEL_NMSE, "the other tokens are untouched"


@requires_cuda
@pytest.mark.parametrize("kernel", FUSED_HERE)
def test_fused_kernels_are_deterministic_on_a_large_shape(kernel):
    k = qk.KERNELS[kernel]
    g = torch.Generator().manual_seed(0)
    A = torch.randn(8 if "decode" in kernel else 200, 4096, generator=g).cuda()
    Wq = quantize_weights(torch.randn(1000, 4096, generator=g).cuda(), k.wfmt)
    C1, C2 = qk.gemm(A, Wq, kernel), qk.gemm(A, Wq, kernel)
    assert torch.equal(C1, C2)


SPLITK = [k for k in qk.KERNELS.values() if k.name.endswith(("_splitk", "_narrow", "_small"))]


def one_cta_per_tile(kernel: str) -> str:
    """The step a split-K kernel splits: the fourth wgmma step (wgmma_ws) or the mma step."""
    return re.sub(r"_wgmma_(splitk|narrow|small)$", "_wgmma_ws", kernel).removesuffix("_splitk")


NARROW = [k for k in qk.KERNELS.values() if k.name.endswith("_narrow")]
SMALL = [k for k in qk.KERNELS.values() if k.name.endswith("_small")]
WGMMA = [k for k in qk.KERNELS.values() if "wgmma" in k.name and k not in SPLITK and k.afmt == "q8_1"]
F16 = [k for k in qk.KERNELS.values() if k.afmt == "f16"]


@requires_cuda
@pytest.mark.parametrize("kernel", [kernel_param(k) for k in WGMMA])
@pytest.mark.parametrize("dist", ["normal", "outliers", "tiny", "huge", "zeros"])
@pytest.mark.parametrize(
    "M,N,K", [(300, 261, 512), (130, 300, 1056), (129, 1, 4096), (33, 17, 21760)], ids=lambda v: str(v)
)
def test_wgmma_equals_mma_bit_for_bit(kernel, dist, M, N, K):
    """The wgmma steps compute every product and rounding of the mma step (the offset 2^19 and the
    scaled constants only move the exponent, see 06_decode_tensor_cores/6_wgmma.cu), so the outputs are identical."""
    from quantgemm_kernels.testing import kernel_inputs

    k = qk.KERNELS[kernel]
    A, W = kernel_inputs(k, M, N, K, dist, seed=M + K)
    At, Wq = torch.from_numpy(A).cuda(), qk.quantize(torch.from_numpy(W).cuda(), k.wfmt)
    C = qk.gemm(At, Wq, kernel)
    C_mma = qk.gemm(At, Wq, re.sub(r"wgmma.*", "mma", kernel))
    assert torch.equal(C, C_mma), f"{(C != C_mma).sum().item()} of {C.numel()} outputs differ"


@requires_cuda
@pytest.mark.parametrize("kernel", [kernel_param(k) for k in SPLITK])
@pytest.mark.parametrize("dist", ["normal", "outliers", "tiny", "huge", "zeros"])
@pytest.mark.parametrize(
    "M,N,K",
    [(300, 261, 512), (256, 100, 14336), (33, 17, 21760), (4096, 64, 4096), (131, 1, 8192), (1000, 3, 14336)],
    ids=lambda v: str(v),
)
def test_splitk_regroups_the_fourth_steps_sums(kernel, dist, M, N, K):
    """The split-K steps (wgmma: 8_wgmma_splitk.cu and the narrow step; mma: 10_mma_splitk.cu) add
    the block products of the step they split (the fourth wgmma step, the mma step) in other groups
    (one per split, then the splits in order): below K = 2048 (8 K steps) there is one split and the bits are the same;
    above, outputs differ by float32 regrouping only: 2e-6 of the largest |output|, where the
    products' rounding is already about 1e-7 of each partial sum."""
    from quantgemm_kernels.testing import kernel_inputs, quantize_weights

    k = qk.KERNELS[kernel]
    A, W = kernel_inputs(k, M, N, K, dist, seed=M + N + K)
    At, Wq = torch.from_numpy(A).cuda(), quantize_weights(torch.from_numpy(W).cuda(), k.wfmt)
    C = qk.gemm(At, Wq, kernel)
    C_ws = qk.gemm(At, Wq, one_cta_per_tile(kernel))
    if K < 2048:
        assert torch.equal(C, C_ws), f"{(C != C_ws).sum().item()} of {C.numel()} outputs differ with one split"
        return
    fin = torch.isfinite(C_ws)
    assert torch.equal(torch.isfinite(C), fin), "the splits make other outputs non-finite"
    scale = C_ws[fin].abs().max().item() if fin.any() else 0.0
    err = (C[fin] - C_ws[fin]).abs().max().item() if fin.any() else 0.0
    assert err <= 2e-6 * scale, f"max |split-K - one CTA per tile| = {err:.3g}, largest |output| {scale:.3g}"


@requires_cuda
@pytest.mark.parametrize("kernel", [kernel_param(k) for k in NARROW])
@pytest.mark.parametrize("dist", ["normal", "outliers", "zeros"])
@pytest.mark.parametrize(
    "M,N,K",
    [(300, 64, 512), (256, 33, 14336), (4096, 16, 14336), (131, 1, 8192), (1000, 3, 4352), (200, 65, 8192)],
    ids=lambda v: str(v),
)
def test_narrow_tiles_compute_the_fifth_steps_bits(kernel, dist, M, N, K):
    """The sixth step (64-token tiles for N <= 64) multiplies the same blocks in the same splits and
    order as the fifth, with one consumer warpgroup instead of two: every output bit is the same,
    at N <= 64 (the narrow kernel) and past it (the fifth step itself)."""
    from quantgemm_kernels.testing import kernel_inputs

    k = qk.KERNELS[kernel]
    A, W = kernel_inputs(k, M, N, K, dist, seed=M + N + K)
    At, Wq = torch.from_numpy(A).cuda(), qk.quantize(torch.from_numpy(W).cuda(), k.wfmt)
    C = qk.gemm(At, Wq, kernel)
    C_splitk = qk.gemm(At, Wq, kernel.replace("_narrow", "_splitk"))
    assert torch.equal(C, C_splitk), f"{(C != C_splitk).sum().item()} of {C.numel()} outputs differ"


@requires_cuda
@pytest.mark.parametrize("kernel", [kernel_param(k) for k in SMALL])
@pytest.mark.parametrize("dist", ["normal", "outliers", "tiny", "zeros"])
@pytest.mark.parametrize(
    "M,N,K",
    [
        (4096, 16, 14336),
        (4096, 1, 4096),
        (300, 64, 512),
        (256, 33, 14336),
        (131, 8, 8192),
        (1000, 3, 4352),
        (77, 9, 2048),
        (129, 17, 256),
        (200, 65, 8192),
        (130, 5, 1056),
    ],
    ids=lambda v: str(v),
)
def test_small_tiles_compute_the_narrow_steps_bits(kernel, dist, M, N, K):
    """The seventh step (weights as the wgmma's M, from registers; tokens as its N) multiplies the
    same blocks in the same splits and order as the sixth, with the int32 results read the same
    way: every output bit is the same, for tiles of 8, 16, 32 and 64 tokens, ragged M and N, one
    split or several; past 64 tokens and where K / 32 is not a multiple of 8 (1056) it runs the
    sixth step itself."""
    from quantgemm_kernels.testing import kernel_inputs

    k = qk.KERNELS[kernel]
    A, W = kernel_inputs(k, M, N, K, dist, seed=M + N + K)
    At, Wq = torch.from_numpy(A).cuda(), qk.quantize(torch.from_numpy(W).cuda(), k.wfmt)
    C = qk.gemm(At, Wq, kernel)
    C_narrow = qk.gemm(At, Wq, kernel.replace("_small", "_narrow"))
    assert torch.equal(C, C_narrow), f"{(C != C_narrow).sum().item()} of {C.numel()} outputs differ"


@requires_cuda
@pytest.mark.parametrize("kernel", [k.name for k in WGMMA + F16])
def test_wgmma_kernels_refuse_other_gpus(kernel, monkeypatch):
    """sm_90a code runs on compute capability 9.0 only: other GPUs get a clear error, not a launch failure."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (10, 0))
    A, W = torch.zeros(2, 64, device="cuda"), torch.zeros(3, 64, device="cuda")
    with pytest.raises(ValueError, match="runs on compute capability 9.0 only"):
        qk.gemm(A, qk.quantize(W, qk.KERNELS[kernel].wfmt), kernel)


def test_kernels_know_the_gpus_they_run_on():
    k = qk.KERNELS["cuda_q4_0_q8_1_wgmma"]
    assert k.runs_on((9, 0)) and not k.runs_on((8, 9)) and not k.runs_on((10, 0))
    m = qk.KERNELS["cuda_q4_0_q8_1_mma"]
    assert m.runs_on((8, 0)) and m.runs_on((12, 0)) and not m.runs_on((7, 5))


SUM_X = [k for k in qk.KERNELS.values() if k.sum_x]


DECODE_SUM_X = [k for k in SUM_X if "decode" in k.name]
MMQ_SUM_X = [k for k in SUM_X if "mma" in k.name]  # mma and wgmma steps: MMQ's quantizer


def test_every_chapter_6_kernel_but_a_ladder_step_offers_the_sum_x_mode():
    """All but decode_fused (a ladder step) and the mma steps whose activation scale MMQ keeps in
    float32 (Q8_0, Q6_K: the magic-number conversion needs d_a in 22 significant bits at most)."""
    assert {k.name for k in SUM_X} == {
        n
        for n in FUSED
        if n
        not in (
            "cuda_q4_0_q8_1_decode_fused",
            "cuda_q8_0_q8_1_mma",
            "cuda_q6_k_q8_1_mma",
            "cuda_q8_0_q8_1_mma_splitk",
            "cuda_q6_k_q8_1_mma_splitk",
        )
        and qk.KERNELS[n].afmt == "q8_1"  # the fp16 step has no Q8_1 activations at all
    }
    assert {k.name for k in DECODE_SUM_X} == {
        "cuda_q4_0_q8_1_decode",
        "cuda_q8_0_q8_1_decode",
        "cuda_q4_1_q8_1_decode",
        "cuda_q4_k_q8_1_decode",
        "cuda_q6_k_q8_1_decode",
    }
    assert all(k.fused_quant for k in SUM_X)


@pytest.mark.parametrize("kernel", [n for n in FUSED if not qk.KERNELS[n].sum_x])
def test_kernels_without_the_mode_refuse_it_before_launching(kernel):
    match = (
        "no sum_x mode"
        if qk.KERNELS[kernel].afmt == "q8_1"
        else "rounds float32 A to fp16 itself \\(no Q8_1\\): q8_1_sum does not apply"
    )
    with pytest.raises(ValueError, match=match):
        qk.gemm(torch.zeros(1, 32), torch.zeros(1, 18, dtype=torch.uint8), kernel, q8_1_sum="sum_x")


# The fp16 step on LLM sizes and on the paths only they reach: split K (few tiles), one split (512
# tokens), many token tiles, every tile width, rows with no TMA box (K / 32 = 33, 45: weights read
# from global memory), one token, ragged everything.
F16_SHAPES = [
    (4096, 512, 14336),
    (4096, 256, 4096),
    (14336, 300, 4096),
    (1000, 129, 14336),
    (257, 700, 1056),
    (130, 1, 256),
    (33, 17, 21760),
    (77, 260, 1440),
    (4096, 48, 14336),  # 64-token tiles with split K (the picker's N = 33 to 64 on M = 4096)
    (14336, 24, 4096),  # 32-token tiles, one split
    (256, 20, 1056),  # 32-token tiles, weights from global memory, split
    (256, 40, 1440),  # 64-token tiles, the same
    (256, 9, 1056),  # 16-token tiles, the same
    (2000, 1100, 2048),  # 256-token tiles, unsplit, the last one 76 tokens
    (1000, 2100, 1056),  # 256-token tiles, weights from global memory
    (2100, 512, 8192),  # 256-token tiles splitting a long K (as 4096 x 512 x 14336 above)
    (2100, 512, 8224),  # the same, weights from global memory
    (8500, 256, 2048),  # 256-token tiles at 256 tokens: 67 tiles in one wave, not 134 in two
    (14336, 200, 1056),  # the same at 200 tokens, weights from global memory
    (14336, 1024, 4096),  # 448 tiles of 256 on 132 SMs: 396 whole, the last wave's 52 split in 2
    (2099, 2100, 2048),  # 289 tiles of 128: 264 whole, 25 split in 4; M % 4 != 0 (the sum's scalar stores)
    (4098, 1100, 1056),  # 297 tiles of 128: 264 whole, 33 split in 2, weights from global memory
    (1000, 200, 8192),  # 256-token tiles at 200 tokens, 8 tiles in 8 splits (128-token ones would split too)
    (1000, 200, 8224),  # the same, weights from global memory
]


@requires_cuda
@pytest.mark.parametrize("kernel", [kernel_param(k) for k in F16])
@pytest.mark.parametrize("dist", ["normal", "outliers", "tiny"])
@pytest.mark.parametrize("M,N,K", F16_SHAPES, ids=lambda v: str(v))
def test_fp16_step_on_llm_sizes(kernel, dist, M, N, K):
    err, C, ref = check_kernel(kernel, M, N, K, dist, seed=M + N)
    assert err <= KERNEL_NMSE, f"{kernel} M={M} N={N} K={K} {dist}: NMSE {err:.3g}"


@requires_cuda
@pytest.mark.parametrize("kernel", [kernel_param(k) for k in F16])
@pytest.mark.parametrize(
    "M,N,K",
    [(4096, 512, 14336), (14336, 300, 4096), (4096, 16, 4096), (130, 1, 256), (33, 17, 21760), (257, 100, 1056)],
    ids=lambda v: str(v),
)
def test_fp16_step_takes_fp16_activations(kernel, M, N, K):
    """Given float16 A, the fp16 step skips its conversion pass and reads A as it is: the result is
    bit for bit that of the same values as float32 (whose conversion to fp16 is then exact), on
    tiles of 16 to 256 tokens, split K or not, weights by TMA box or from global memory; NaN and inf
    in A land where they do through the float32 path."""
    k = qk.KERNELS[kernel]
    g = torch.Generator().manual_seed(M + N)
    A16 = (torch.randn(N, K, generator=g) * 3).half().cuda()
    if N >= 3:  # one token with an inf, one with a NaN, the others finite
        A16[N // 2, K // 3] = float("inf")
        A16[N - 1, 0] = float("nan")
    Wq = quantize_weights(torch.randn(M, K, generator=g).cuda(), k.wfmt)
    C16 = qk.gemm(A16, Wq, kernel)
    C32 = qk.gemm(A16.float(), Wq, kernel)
    assert C16.dtype == torch.float32 and C16.shape == (N, M)
    assert torch.equal(C16.isnan(), C32.isnan())
    assert torch.equal(torch.nan_to_num(C16, nan=0.0), torch.nan_to_num(C32, nan=0.0))
    assert C16.isfinite().any()


@requires_cuda
@pytest.mark.parametrize("kernel", [kernel_param(k) for k in DECODE_SUM_X])
@pytest.mark.parametrize("dist", ["normal", "outliers", "tiny", "zeros"])
@pytest.mark.parametrize("M,N,K", [(1, 1, 32), (33, 5, 160), (257, 9, 2048), (129, 3, 4096)], ids=lambda v: str(v))
def test_sum_x_mode_computes_with_ggml_cudas_activation_bytes(kernel, dist, M, N, K):
    """In the sum_x mode the decode kernels quantize A as ggml-cuda's quantize_q8_1 does (q = x / d,
    s = sum(x) in warp order): the result is the reference on exactly those bytes (formats.py's
    "sum_x" quantizer), and the same as the plain Q8_1 kernel given our GPU quantizer's sum_x bytes."""
    from quantgemm_kernels import formats as F
    from quantgemm_kernels.testing import kernel_inputs

    k = qk.KERNELS[kernel]
    M, N, K = shape_for(k, M, N, K)  # K x 8 for the K-quant kernels (whole super-blocks)
    A, W = kernel_inputs(k, M, N, K, dist, seed=M + K)
    At, Wq = torch.from_numpy(A).cuda(), quantize_weights(torch.from_numpy(W).cuda(), k.wfmt)
    C = qk.gemm(At, Wq, kernel, q8_1_sum="sum_x").cpu().numpy()
    Aq = F.quantize(A, "q8_1", q8_1_sum="sum_x")
    ref = R.gemm_wq_aq8_1(Aq, Wq.cpu().numpy(), k.wfmt, q4_0_formula=k.q4_0_formula)
    assert R.nmse(C, ref) <= KERNEL_NMSE if np.any(ref) else not np.any(C)
    plain_name = f"cuda_{k.wfmt}_q8_1_vec_dp4a"  # chapter 4's kernel on the same bytes (none for Q4_1)
    if plain_name in qk.KERNELS:
        plain = qk.gemm_quantized(qk.quantize(At, "q8_1", q8_1_sum="sum_x"), Wq, plain_name)
        assert R.nmse(C, plain.cpu().numpy()) <= KERNEL_NMSE if np.any(ref) else not np.any(C)
    default = qk.gemm(At, Wq, kernel).cpu().numpy()
    ref_default = R.gemm_wq_aq8_1(F.quantize(A, "q8_1"), Wq.cpu().numpy(), k.wfmt, q4_0_formula=k.q4_0_formula)
    assert R.nmse(default, ref_default) <= KERNEL_NMSE if np.any(ref) else not np.any(default)


def _ggml_cuda():
    from quantgemm_kernels import llamacpp

    return llamacpp.available()["cuda_backend"]


# ggml-cuda runs MMVQ for N <= 8 and MMQ above (on tensor-core GPUs): each kind of ours against its
# counterpart
SUM_X_CASES = [
    (k, s) for k in DECODE_SUM_X for s in [(4096, 1, 14336), (1000, 3, 4096), (257, 8, 2048), (130, 5, 256)]
] + [(k, s) for k in MMQ_SUM_X for s in [(4096, 16, 14336), (1000, 64, 4096), (257, 300, 2048), (130, 9, 256)]]


@requires_cuda
@pytest.mark.parametrize(
    "kernel,shape", [pytest.param(k.name, s, marks=kernel_param(k).marks, id=f"{k.name}-{s}") for k, s in SUM_X_CASES]
)
def test_sum_x_mode_matches_llamacpps_cuda_mul_mat(kernel, shape):
    """The same bytes give llama.cpp's numbers: in the sum_x mode our decode kernels' output and
    MMVQ's, our tensor-core kernels' and MMQ's, differ by float rounding only (NMSE <= 1e-9), where
    the default mode differs by s's fp16 rounding (decode, ~1e-4) or MMQ's own quantizer (~5e-8)."""
    M, N, K = shape
    if not _ggml_cuda():
        pytest.skip("no ggml CUDA backend here (QUANTGEMM_GGML_LIB or ggml-py built with CUDA)")
    from quantgemm_kernels import llamacpp

    k = qk.KERNELS[kernel]
    g = torch.Generator().manual_seed(K + N)
    A, W = torch.randn(N, K, generator=g), torch.randn(M, K, generator=g)
    Wq = quantize_weights(W.cuda(), k.wfmt)
    ours = qk.gemm(A.cuda(), Wq, kernel, q8_1_sum="sum_x").cpu().numpy()
    theirs = llamacpp.ggml_mul_mat(Wq.cpu().numpy(), A.numpy(), k.wfmt, backend="cuda")
    if k.wfmt == "q4_1" and "decode" in k.name:  # (MMQ, the mma step's counterpart, keeps them in float32)
        # MMVQ's vec_dot_q4_1_q8_1_impl multiplies (d_w, m_w) by (d_a, s_a) with __hmul2 where the
        # GPU has fast fp16 (FAST_FP16_AVAILABLE): both products rounded to fp16. Ours keeps them in
        # float32. Emulating that rounding gives llama.cpp's numbers; ours differ by it alone.
        from quantgemm_kernels import formats as F

        Aq, Wn = F.quantize(A.numpy(), "q8_1", q8_1_sum="sum_x"), Wq.cpu().numpy()
        ab, wb = F.as_blocks(Aq, "q8_1"), F.as_blocks(Wn, "q4_1")
        nb = wb.shape[1]
        sumi = np.einsum(
            "nbj,mbj->nmb",
            F.unpack_quants(Aq, "q8_1").reshape(N, nb, 32).astype(np.int64),
            F.unpack_quants(Wn, "q4_1").reshape(M, nb, 32).astype(np.int64),
        )
        half = lambda x, y: (x.astype(np.float32)[None] * y.astype(np.float32)[:, None]).astype(np.float16)  # noqa: E731
        emulated = (half(wb["d"], ab["d"]).astype(np.float64) * sumi + half(wb["m"], ab["s"])).sum(axis=2)
        assert R.nmse(theirs, emulated) <= 1e-9
        assert R.nmse(ours, theirs) <= 1e-5
        return
    assert R.nmse(ours, theirs) <= 1e-9


#: LLM layer sizes for the Q4_1, Q4_K and Q6_K prefill kernels: Llama-3-8B's down projection at prefill
#: and a ragged batch, its up projection with 9 tokens; too big for the numpy reference ([N, M, K/32]
#: integers)
MMA_LLM_SHAPES = [(4096, 512, 14336), (4096, 77, 14336), (14336, 9, 4096)]
MMA_WITH_A_DECODE_TWIN = [
    "cuda_q4_1_q8_1_mma",
    "cuda_q4_k_q8_1_mma",
    "cuda_q6_k_q8_1_mma",
    "cuda_q4_1_q8_1_mma_splitk",
    "cuda_q4_k_q8_1_mma_splitk",
    "cuda_q6_k_q8_1_mma_splitk",
]


@requires_cuda
@pytest.mark.parametrize("kernel", [kernel_param(qk.KERNELS[n]) for n in MMA_WITH_A_DECODE_TWIN])
@pytest.mark.parametrize("M,N,K", MMA_LLM_SHAPES, ids=lambda v: str(v))
def test_late_format_mma_steps_equal_their_decode_kernels_on_llm_sizes(kernel, M, N, K):
    """At LLM sizes the Q4_1 mma step is checked against chapter 7's decode kernel, itself checked
    against the reference on the ragged shapes: both quantize A to the same Q8_1 bytes (the
    reference quantizer's) and add d_w d_a sumi + m_w s_a per block in float32, in other orders,
    so they differ by float32 rounding only (NMSE ~1e-14; the threshold is testing.KERNEL_NMSE).
    The Q4_K mma step likewise against chapter 8's decode kernel: both add d sc_j d_a sumi and
    -dmin m_j d_a sum(q_a) per block of 32 (the scale and min products exact in float32); the Q6_K
    mma step too: both add d sc_t d_a sumi per 16 values, the mma step with each 16-value sum from
    its own k = 16 mma."""
    k = qk.KERNELS[kernel]
    g = torch.Generator().manual_seed(M + N)
    A, W = torch.randn(N, K, generator=g).cuda(), torch.randn(M, K, generator=g).cuda()
    Wq = quantize_weights(W, k.wfmt)  # Q4_K: on the CPU
    C = qk.gemm(A, Wq, kernel).cpu().double().numpy()
    C_decode = qk.gemm(A, Wq, f"cuda_{k.wfmt}_q8_1_decode").cpu().double().numpy()
    assert np.isfinite(C).all()
    assert R.nmse(C, C_decode) <= KERNEL_NMSE, f"NMSE {R.nmse(C, C_decode):.3g}"


@requires_cuda
@pytest.mark.parametrize("kernel", [kernel_param(k) for k in WGMMA if k.wfmt == "q4_0"])
@pytest.mark.parametrize("dist", ["normal", "outliers", "tiny", "zeros"])
def test_wgmma_equals_mma_in_the_sum_x_mode_too(kernel, dist):
    """MMQ's quantizer in both layouts: the same quants and scales (d in fp16 for Q4_0), so the same
    bits. (The Q8_0 mma step has no such mode: MMQ's float32 d breaks its magic-number conversion.)"""
    from quantgemm_kernels.testing import kernel_inputs

    k = qk.KERNELS[kernel]
    A, W = kernel_inputs(k, 300, 261, 1056, dist, seed=7)
    At, Wq = torch.from_numpy(A).cuda(), qk.quantize(torch.from_numpy(W).cuda(), k.wfmt)
    C = qk.gemm(At, Wq, kernel, q8_1_sum="sum_x")
    C_mma = qk.gemm(At, Wq, re.sub(r"wgmma.*", "mma", kernel), q8_1_sum="sum_x")
    assert torch.equal(C, C_mma)


@requires_cuda
@pytest.mark.parametrize("kernel", [kernel_param(k) for k in MMQ_SUM_X])
@pytest.mark.parametrize("dist", ["normal", "outliers", "tiny", "zeros"])
def test_mmq_mode_is_as_accurate_as_the_reference_quantizer(kernel, dist):
    """MMQ's quantizer (x * 127/amax, approximate divisions) moves a quant by one step now and then,
    and for Q8_0 keeps d unrounded (tiny activations then keep scales that fp16 would flush to zero).
    Against the product with float activations, which both approximate, it is no less accurate than
    the reference quantizer's bytes, and it writes every output.

    Q4_1 weights compare with the reference quantizer in the same meaning of s (sum(x), ggml-cuda's
    quantize_q8_1), not with its bytes (s = d sum(q)): the meaning of s, not the quantizer, decides
    their accuracy. With s = d sum(q) the min term m_w s_a carries the activations' quantization
    error e = d_a q_a - x, and the result is the product of the two dequantized matrices, error
    e . w per block; with s = sum(x) the min term is exact and nothing cancels the d term's error
    e . (w - m_w), whose weights d_w q_w all have the sign of -m_w: about 1 + m_w^2 / E[w^2] times
    the variance (about 5x for normal blocks of 32). H100, commit ff62949: NMSE 1.28e-4 against the bytes'
    2.84e-5 ('normal'), 1.58e-3 against 7.0e-5 ('outliers'), as the numpy model gives
    (test_q4_1_sum_x_error_is_the_activation_error_times_the_weights_above_their_min); the sum_x mode
    is still llama.cpp's MMQ (test_sum_x_mode_matches_llamacpps_cuda_mul_mat).

    Q4_K weights likewise (MMQ's min term reads s = sum(x) too, where the reference and MMVQ take
    d_a sum(q_a)): against _q4_k_with_s, the reference with the min term on the sum_x bytes' s."""
    from quantgemm_kernels.testing import kernel_inputs

    k = qk.KERNELS[kernel]
    A, W = kernel_inputs(k, 129, 33, 4096, dist, seed=3)
    At, Wq = torch.from_numpy(A).cuda(), quantize_weights(torch.from_numpy(W).cuda(), k.wfmt)
    C = qk.gemm(At, Wq, kernel, q8_1_sum="sum_x").cpu().numpy()
    if k.wfmt == "q4_1":  # the reference quantizer with s = sum(x): only the quantizers differ
        C_ref_quantizer = R.gemm(A, Wq.cpu().numpy(), "q4_1", "q8_1", q8_1_sum="sum_x")
    elif k.wfmt == "q4_k":
        C_ref_quantizer = _q4_k_with_s(A, Wq.cpu().numpy())
    else:
        C_ref_quantizer = qk.gemm(At, Wq, kernel).cpu().numpy()
    exact = R.gemm_wq_af32(A, Wq.cpu().numpy(), k.wfmt)
    assert np.isfinite(C).all()
    if not np.any(exact):
        assert not np.any(C)
    else:
        assert R.nmse(C, exact) <= 1.5 * R.nmse(C_ref_quantizer, exact) + 1e-12


def _q4_k_with_s(A, Wq):
    """Q4_K x Q8_1 as llama.cpp's MMQ means it: the reference quantizer with s = sum(x) (ggml-cuda's
    quantize_q8_1) and the min term -dmin m_j s per block, where reference.gemm_wk_aq8_1 (MMVQ's
    pairing) takes -dmin m_j d_a sum(q_a): the reference plus the difference of the two."""
    from quantgemm_kernels import formats as F

    Aq = F.quantize(A, "q8_1", q8_1_sum="sum_x")
    ab, wb = F.as_blocks(Aq, "q8_1"), F.as_blocks(Wq, "q4_k")
    N, nb = A.shape[0], wb.shape[1]
    qa = F.unpack_quants(Aq, "q8_1").reshape(N, nb, 8, 32).astype(np.int64)
    d_sum_q = ab["d"].astype(np.float64).reshape(N, nb, 8) * qa.sum(axis=3)
    s = ab["s"].astype(np.float64).reshape(N, nb, 8)
    dmin_m = wb["dmin"].astype(np.float64)[..., None] * F.q4_k_scale_min(wb["scales"])[1]  # [M, nb, 8]
    return R.gemm_wk_aq8_1(Aq, Wq, "q4_k") - np.einsum("nbs,mbs->nm", s - d_sum_q, dmin_m)


def test_the_q4_k_reference_with_s_is_the_dequantized_product_with_sum_x():
    """CPU, numpy: _q4_k_with_s is the product of the dequantized operands with the min term's
    d_a sum(q_a) replaced by s = sum(x), per block of 32:
    sum_j (d sc q_j - dmin m) (d_a q_a,j) + dmin m (d_a sum(q_a) - s)   (to float64 rounding)."""
    from quantgemm_kernels import formats as F
    from quantgemm_kernels.testing import make_values

    A, W = make_values((3, 512), "normal", seed=1), make_values((5, 512), "normal", seed=2)
    Wq = F.quantize(W, "q4_k")
    Aq = F.quantize(A, "q8_1", q8_1_sum="sum_x")
    ab, wb = F.as_blocks(Aq, "q8_1"), F.as_blocks(Wq, "q4_k")
    s = ab["s"].astype(np.float64).reshape(3, 2, 8)
    Ad = F.dequantize(Aq, "q8_1").astype(np.float64).reshape(3, 2, 8, 32)
    dmin_m = wb["dmin"].astype(np.float64)[..., None] * F.q4_k_scale_min(wb["scales"])[1]
    want = R.gemm_f32(Ad.reshape(3, 512), F.dequantize(Wq, "q4_k").astype(np.float64))
    want -= np.einsum("nbs,mbs->nm", s - Ad.sum(axis=3), dmin_m)
    assert R.nmse(_q4_k_with_s(A, Wq), want) < 1e-12
    assert R.nmse(_q4_k_with_s(A, Wq), R.gemm_wk_aq8_1(Aq, Wq, "q4_k")) > 1e-9  # s is not d_a sum(q_a)


@pytest.mark.parametrize(
    "dist,nmse_sum_x,nmse_bytes", [("normal", 1.281e-4, 2.836e-5), ("outliers", 1.581e-3, 7.028e-5)]
)
def test_q4_1_sum_x_error_is_the_activation_error_times_the_weights_above_their_min(dist, nmse_sum_x, nmse_bytes):
    """CPU, numpy: why Q4_1's sum_x mode (llama.cpp's MMQ) is 4.5x ('normal') and 22x ('outliers')
    less accurate than the reference bytes against float activations, on the inputs of the GPU test
    above. Per block the product is d_w d_a sumi + m_w s_a and the exact one d_w q_w . x + m_w sum(x);
    with A_hat the dequantized activations, up to the fp16 roundings of d_a and s:
        s = d_a sum(q_a)  (reference bytes):  C - exact = (A_hat - A) W^T            W dequantized
        s = sum(x)        (sum_x, MMQ):       C - exact = (A_hat - A) (W - m_w)^T    W's distance above its block min
    W - m_w = d_w q_w >= 0 in every block: the activations' errors add up instead of cancelling.
    These numbers are the H100's (commit ff62949: 1.28e-4, 2.84e-5; 1.58e-3, 7.0e-5), so the kernel
    has no bug there: a wrong s (the last token's from its neighbour, or zero; two blocks' swapped)
    gives NMSE 0.1 to 5."""
    from quantgemm_kernels import formats as F
    from quantgemm_kernels.testing import kernel_inputs

    A, W = kernel_inputs(qk.KERNELS["cuda_q4_1_q8_1_mma"], 129, 33, 4096, dist, seed=3)
    Wq = F.quantize(W, "q4_1")
    exact = R.gemm_wq_af32(A, Wq, "q4_1")
    Wd = F.dequantize(Wq, "q4_1").astype(np.float64)
    W_above_min = Wd - np.repeat(F.as_blocks(Wq, "q4_1")["m"].astype(np.float64), F.QK, axis=1)
    for mode, want, W_err, W_other in [
        ("d_sum_q", nmse_bytes, Wd, W_above_min),
        ("sum_x", nmse_sum_x, W_above_min, Wd),
    ]:
        C = R.gemm(A, Wq, "q4_1", "q8_1", q8_1_sum=mode)
        A_err = F.dequantize(F.quantize(A, "q8_1", q8_1_sum=mode), "q8_1").astype(np.float64) - A
        err = C - exact
        unexplained = lambda W_model: ((err - A_err @ W_model.T) ** 2).sum() / (err**2).sum()  # noqa: E731
        assert unexplained(W_err) <= 0.03, mode  # the rest: fp16 roundings of s and d (2 % at most here)
        assert unexplained(W_other) > 0.5, mode  # the other mode's model is far off
        assert R.nmse(C, exact) == pytest.approx(want, rel=0.01), mode
