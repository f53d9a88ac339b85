"""Every registered kernel against the numpy reference of its formats, over ragged shapes and
awkward values. Metric: NMSE (llama.cpp's), threshold testing.KERNEL_NMSE (its docstring says why).
"""

import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

import quantgemm_kernels as qk
from quantgemm_kernels import formats as F
from quantgemm_kernels import reference as R
from quantgemm_kernels.registry import CSRC
from quantgemm_kernels.testing import DISTRIBUTIONS, KERNEL_NMSE, SHAPES, check_kernel, quantize_weights, shape_for

from conftest import HAS_CUDA, kernel_param

KERNEL_PARAMS = [kernel_param(k) for k in qk.KERNELS.values()]


def test_registry_matches_compiled_table():
    """KERNELS (Python) and kernels.def (C++) list the same kernels; every source file exists."""
    built = set(torch.ops.quantgemm.kernel_names()) if _load() else set()
    for k in qk.KERNELS.values():
        assert k.source.exists(), k.source
        assert (
            k.device in ("cpu", "cuda") and k.wfmt in ("f32", *F.FORMATS) and k.afmt in ("f32", "f16", "q8_1", "q8_k")
        )
        if k.device == "cpu" or HAS_CUDA:
            assert k.name in built, k.name
    expected = {k.name for k in qk.KERNELS.values() if k.device == "cpu" or HAS_CUDA}
    assert built == expected


LAUNCHER = re.compile(r"^void ((?:cpu|cuda)_\w+)\(const GemmProblem&", re.M)


def test_every_step_file_is_a_kernel_source():
    """Every .cpp under csrc/cpu and .cu under csrc/cuda in a chapter folder (``04_w4a8/``) is the
    source of registered kernels, and it defines the launchers of exactly those kernels (one step
    file per step, every weight format of the step in it). Not step files: the headers and the
    quantizers at the device folder's root (cpu/quantize.cpp, cuda/quantize.cu)."""
    by_file: dict = {}
    for k in qk.KERNELS.values():
        by_file.setdefault(k.source.resolve(), set()).add(k.name)
    for device, ext in (("cpu", ".cpp"), ("cuda", ".cu")):
        root = CSRC / device
        assert not [f.name for f in root.glob("*" + ext) if f.stem != "quantize"], f"kernel files at {root}'s root"
        step_files = sorted(f.resolve() for f in root.rglob("*" + ext) if f.parent != root)
        assert step_files, root
        for f in step_files:
            assert re.fullmatch(r"\d\d_\w+", f.parent.name), f"{f}: not in a chapter folder (NN_topic)"
            assert re.fullmatch(r"\d+_\w+", f.stem), f"{f}: a step file's name starts with its number"
            assert f in by_file, f"{f} is no registered kernel's source"
    for f, names in by_file.items():
        assert set(LAUNCHER.findall(f.read_text())) == names, f"{f} should define the launchers of {sorted(names)}"


def test_format_and_sum_x_tables_match_python():
    """csrc/formats.def and formats.SPECS list the same formats with the same block sizes; the
    sum_x column of cuda/kernels.def is registry.py's Kernel.sum_x."""
    from quantgemm_kernels import formats as F

    _load()
    assert list(torch.ops.quantgemm.format_table()) == [
        f"{f.name}:{f.block_size}:{f.block_bytes}" for f in F.SPECS.values()
    ]
    want = {k.name for k in qk.KERNELS.values() if k.sum_x} if HAS_CUDA else set()
    assert set(torch.ops.quantgemm.sum_x_kernel_names()) == want


def _load():
    from quantgemm_kernels._build import load_extension

    load_extension()
    return True


@pytest.mark.parametrize("kernel", KERNEL_PARAMS)
@pytest.mark.parametrize("M,N,K", SHAPES, ids=[f"M{m}N{n}K{k}" for m, n, k in SHAPES])
def test_kernel_matches_reference_on_ragged_shapes(kernel, M, N, K):
    M, N, K = shape_for(kernel, M, N, K)  # K in blocks of 32: x8 for the K-quants' 256
    err, C, ref = check_kernel(kernel, M, N, K, "normal", seed=M * 7 + N)
    assert C.shape == (N, M)
    assert err <= KERNEL_NMSE, f"{kernel} M={M} N={N} K={K}: NMSE {err:.3g} > {KERNEL_NMSE}"


@pytest.mark.parametrize("kernel", KERNEL_PARAMS)
@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_kernel_matches_reference_on_awkward_values(kernel, dist):
    err, C, ref = check_kernel(kernel, *shape_for(kernel, 37, 5, 320), dist, seed=3)
    # "huge" overflows fp16 in places: a Q8_1 block of |x| ~ 1e5 stores s = d*sum(q) > 65504 as
    # inf, in llama.cpp as in our reference. The kernel must then give inf exactly where the
    # reference does (nmse() returns inf otherwise) and finite values everywhere else.
    if qk.KERNELS[kernel].afmt == "f16" and dist == "huge":
        # the fp16 step: |x| > 65504 is inf in fp16 (weights d (q - 8) as well), and inf meets
        # -inf or 0 in the sums: NaN and inf must then be exactly where the reference has them
        assert np.array_equal(np.isnan(C), np.isnan(ref))
        fin = np.isfinite(ref)
        assert np.array_equal(C[np.isinf(ref)], ref[np.isinf(ref)])
        C, ref = C[fin], ref[fin]
        err = R.nmse(C, ref)
    assert np.array_equal(np.isfinite(C), np.isfinite(ref))
    assert err <= KERNEL_NMSE, f"{kernel} on {dist}: NMSE {err:.3g}"
    if dist == "zeros":
        assert (C == 0).all()


@pytest.mark.parametrize("kernel", KERNEL_PARAMS)
def test_kernel_writes_every_output(kernel):
    """Poison-free check: two different inputs must give two different complete outputs."""
    e1, C1, _ = check_kernel(kernel, *shape_for(kernel, 19, 3, 64), "uniform", seed=1)
    e2, C2, _ = check_kernel(kernel, *shape_for(kernel, 19, 3, 64), "uniform", seed=2)
    assert (C1 != C2).all()


@pytest.mark.parametrize("kernel", KERNEL_PARAMS)
def test_kernel_is_deterministic(kernel):
    k = qk.KERNELS[kernel]
    A = torch.randn(9, 256, generator=torch.Generator().manual_seed(0)).to(k.device)
    W = torch.randn(40, 256, generator=torch.Generator().manual_seed(1)).to(k.device)
    Wk = W if k.wfmt == "f32" else quantize_weights(W, k.wfmt)
    C1, C2 = qk.gemm(A, Wk, kernel), qk.gemm(A, Wk, kernel)
    assert torch.equal(C1, C2)


@pytest.mark.parametrize("kernel", [p for p in KERNEL_PARAMS if qk.KERNELS[p.values[0]].afmt != "f32"])
def test_quantized_activation_kernels_are_close_to_float(kernel):
    """Quantizing activations and weights costs accuracy, within the format budget."""
    k = qk.KERNELS[kernel]
    rng = np.random.default_rng(0)
    A = rng.standard_normal((8, 1024)).astype(np.float32)
    W = rng.standard_normal((64, 1024)).astype(np.float32)
    Wq = quantize_weights(torch.from_numpy(W).to(k.device), k.wfmt)
    C = qk.gemm(torch.from_numpy(A).to(k.device), Wq, kernel).cpu().numpy()
    err = R.nmse(C, R.gemm_f32(A, W))
    # Q6_K on normal data costs ~3e-4 (Q4_K ~5e-3, Q4_0 ~7e-3): 2e-3 fails a 4-bit-quality result
    assert err < {"q4_0": 2e-2, "q4_1": 2e-2, "q8_0": 1e-3, "q4_k": 2e-2, "q6_k": 2e-3}[k.wfmt]


#: LLM layer sizes for the K-quant kernels (K a multiple of 256: Llama-3-8B's 4096 and 14336),
#: with M cut so that the numpy reference stays small on a 2-core CI machine
K_QUANT_LLM_SHAPES = [(512, 3, 4096), (96, 2, 14336), (4096, 1, 4096)]
#: and for the CUDA ones (no CPU kernel runs them), a whole 4096 x 14336 layer: 9 tokens are a pass
#: of 8 and a pass of 1
K_QUANT_CUDA_LLM_SHAPES = [(4096, 1, 14336), (4096, 9, 14336)]
K_QUANT_PARAMS = [p for p in KERNEL_PARAMS if qk.KERNELS[p.values[0]].wfmt in ("q4_k", "q6_k")]
K_QUANT_SHAPE_PARAMS = [
    pytest.param(p.values[0], *shape, marks=p.marks, id=f"{p.values[0]}-M{shape[0]}N{shape[1]}K{shape[2]}")
    for p in K_QUANT_PARAMS
    for shape in K_QUANT_LLM_SHAPES + (K_QUANT_CUDA_LLM_SHAPES if qk.KERNELS[p.values[0]].device == "cuda" else [])
]


@pytest.mark.parametrize("kernel,M,N,K", K_QUANT_SHAPE_PARAMS)
def test_k_quant_kernels_on_llm_sizes(kernel, M, N, K):
    err, C, ref = check_kernel(kernel, M, N, K, "normal", seed=5)
    assert C.shape == (N, M)
    assert err <= KERNEL_NMSE, f"{kernel} M={M} N={N} K={K}: NMSE {err:.3g} > {KERNEL_NMSE}"


#: Rows a decode step packs into one warp step (K = 256 nu, nu = 1, 2, 4, 8, 16 units of 8 blocks:
#: decode.cuh's PACKED layout, 16 / nu rows per step, two lanes per unit): M leaves the last step
#: partly past the end, N = 9 makes a pass of 8 tokens and a pass of 1
PACKED_SHAPES = [(m, n, 256 * nu) for nu in (1, 2, 4, 8, 16) for m, n in ((37, 1), (130, 3), (21, 9))]
#: and rows of 16 units in groups of four rows a step (decode.cuh: Q8_0 from 4 tokens, Q4_0 at 2 to 4
#: tokens where 4096 rows fill the SMs once), the last group partly past the end; 12 tokens are a
#: pass of 8 and one of 4
PACKED_SHAPES += [(4094, 2, 4096), (4093, 3, 4096), (4095, 12, 4096)]
PACKED_PARAMS = [
    pytest.param(p.values[0], *shape, marks=p.marks, id=f"{p.values[0]}-M{shape[0]}N{shape[1]}K{shape[2]}")
    for p in KERNEL_PARAMS
    if "decode" in p.values[0] and qk.KERNELS[p.values[0]].wfmt in ("q4_0", "q4_1", "q8_0")
    for shape in PACKED_SHAPES
]


@pytest.mark.parametrize("kernel,M,N,K", PACKED_PARAMS)
def test_decode_kernels_on_packed_short_rows(kernel, M, N, K):
    err, C, ref = check_kernel(kernel, M, N, K, "normal", seed=M + N + K)
    assert C.shape == (N, M)
    assert err <= KERNEL_NMSE, f"{kernel} M={M} N={N} K={K}: NMSE {err:.3g} > {KERNEL_NMSE}"


#: Shapes whose plans change on GPUs with less shared memory (test_decode_plan.py): rows of 4096 at
#: 2 to 4 tokens (four rows a step on Hopper), long rows at 3, 4 and 8 tokens (shallower rings,
#: shorter K chunks), a pass of 8 and one of 1, K not whole units
SMALL_SMEM_SHAPES = [(4096, 2, 4096), (4093, 4, 4096), (300, 3, 14336), (129, 9, 14336), (37, 8, 4096), (65, 5, 4128)]
SMALL_SMEM_PARAMS = [
    pytest.param(
        p.values[0], cap, *shape, marks=p.marks, id=f"{p.values[0]}-{cap // 1024}KB-M{shape[0]}N{shape[1]}K{shape[2]}"
    )
    for p in KERNEL_PARAMS
    if "q8_1_decode" in p.values[0] and qk.KERNELS[p.values[0]].wfmt in ("q4_0", "q4_1", "q8_0")
    for cap in (99 * 1024, 163 * 1024)
    for shape in SMALL_SMEM_SHAPES
]


@pytest.mark.parametrize("kernel,cap,M,N,K", SMALL_SMEM_PARAMS)
def test_decode_kernels_within_less_shared_memory(kernel, cap, M, N, K):
    """The decode kernels with their plan capped to the shared memory of a GPU with less than this
    one (99 KB: sm_86, sm_89, sm_120; 163 KB: A100): the shallower rings and shorter K chunks of
    decode_plan.h, run here, against the reference."""
    from quantgemm_kernels import api

    ops = api._ops()
    before = ops.decode_smem_cap(cap)
    try:
        err, C, ref = check_kernel(kernel, M, N, K, "normal", seed=M + N + K)
    finally:
        ops.decode_smem_cap(before)
    assert C.shape == (N, M)
    assert err <= KERNEL_NMSE, f"{kernel} within {cap} bytes, M={M} N={N} K={K}: NMSE {err:.3g} > {KERNEL_NMSE}"


def test_q4_0_formulas_of_llama_cpp():
    """reference.gemm_wq_aq8_1's two Q4_0 formulas: "signed" is the exact integer dot of (q - 8) and
    the activation quants; "compensated" replaces sum(a) by s_a / d_a (s_a rounded to fp16), so the
    two differ by 8 d_w (s_a - d_a sum(a)) per block, and only by that."""
    from quantgemm_kernels import formats as F
    from quantgemm_kernels import reference as R
    from quantgemm_kernels.testing import make_values

    A, W = make_values((5, 256), "normal", seed=3), make_values((7, 256), "normal", seed=4)
    Aq, Wq = F.quantize_q8_1(A), F.quantize(W, "q4_0")
    signed = R.gemm_wq_aq8_1(Aq, Wq, "q4_0", q4_0_formula="signed")
    comp = R.gemm_wq_aq8_1(Aq, Wq, "q4_0", q4_0_formula="compensated")
    wb, ab = F.as_blocks(Wq, "q4_0"), F.as_blocks(Aq, "q8_1")
    qw = F.unpack_quants(Wq, "q4_0").reshape(7, 8, 32).astype(np.int64) - 8
    qa = F.unpack_quants(Aq, "q8_1").reshape(5, 8, 32).astype(np.int64)
    dw, da = wb["d"].astype(np.float64), ab["d"].astype(np.float64)
    exact = np.einsum("nbj,mbj,mb,nb->nm", qa, qw, dw, da)
    assert np.allclose(signed, exact, rtol=1e-12, atol=0)
    s_err = ab["s"].astype(np.float64) - da * qa.sum(axis=2)  # the fp16 rounding of s_a, per block
    assert np.allclose(comp - signed, -8.0 * (s_err @ dw.T), rtol=1e-9, atol=1e-12)
    assert not np.array_equal(comp, signed)  # the rounding of s_a is visible
    with pytest.raises(ValueError, match="q4_0_formula"):
        R.gemm_wq_aq8_1(Aq, Wq, "q4_0", q4_0_formula="mmq")


@pytest.mark.parametrize("wfmt", ["q4_k", "q6_k"])
def test_k_quant_reference_is_the_product_of_the_dequantized_operands(wfmt):
    """reference.gemm_wk_aq8_k (integer sub-block dots, Q4_K's min through Q8_K's bsums) is the
    product of the dequantized operands: they differ by the float32 rounding of the dequantized
    values only (NMSE ~1e-14). And Q8_K's bsums are the sums of its 16-quant groups."""
    from quantgemm_kernels.testing import make_values

    A, W = make_values((5, 2048), "normal", seed=3), make_values((7, 2048), "normal", seed=4)
    Aq, Wq = F.quantize(A, "q8_k"), F.quantize(W, wfmt)
    blocks = F.as_blocks(Aq, "q8_k")
    assert np.array_equal(blocks["bsums"], blocks["qs"].reshape(*blocks.shape, 16, 16).astype(np.int64).sum(axis=3))
    ref = R.gemm_wk_aq8_k(Aq, Wq, wfmt)
    exact = R.gemm_f32(F.dequantize(Aq, "q8_k"), F.dequantize(Wq, wfmt))
    assert R.nmse(ref, exact) < 1e-12
    with pytest.raises(ValueError, match="no W x Q8_K reference"):
        R.gemm_wk_aq8_k(Aq, F.quantize(W, "q8_0"), "q8_0")


@pytest.mark.parametrize("kernel", [k.name for k in qk.kernels(device="cuda") if k.wfmt in ("q4_k", "q6_k")])
def test_k_quant_cuda_kernels_refuse_a_k_that_is_not_whole_super_blocks(kernel):
    """W holds whole super-blocks, so its K is a multiple of 256; an A of another K (here 288, a
    multiple of 32) and a W row of partial blocks are refused with a ValueError before any launch."""
    k = qk.KERNELS[kernel]
    W = torch.zeros(4, F.SPECS[k.wfmt].block_bytes, dtype=torch.uint8)  # K = 256
    with pytest.raises(ValueError, match="disagree on K"):
        qk.gemm(torch.zeros(1, 288), W, kernel)
    with pytest.raises(ValueError, match=f"not a whole number of {k.wfmt} blocks"):
        qk.gemm(torch.zeros(1, 256), W[:, :-2].contiguous(), kernel)


NVCC = shutil.which("nvcc")
# the step files of the chapter 7 and 8 CUDA kernels (Q4_1, Q4_K, Q6_K weights): 2_decode.cu, 4_mma.cu
# with its Q4_1, Q4_K and Q6_K policies, 08_k_quants/1_decode.cu
LATE_FORMAT_CUDA_FILES = sorted({k.source for k in qk.kernels(device="cuda") if k.wfmt in ("q4_1", "q4_k", "q6_k")})


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("src", LATE_FORMAT_CUDA_FILES, ids=lambda p: p.parent.name + "/" + p.name)
def test_late_format_cuda_step_files_compile_without_warnings(src, arch, tmp_path):
    """Compile only (no GPU needed): the step file alone includes CUDA headers and ours, no torch,
    so nvcc builds it here; any warning fails (host warnings too, -Wall)."""
    cmd = [
        NVCC,
        "-std=c++17",
        "-O3",
        f"-arch={arch}",
        "-Xcompiler",
        "-Wall",
        "-c",
        str(src),
        "-o",
        str(tmp_path / "x.o"),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "warning" not in (p.stdout + p.stderr).lower(), p.stdout + p.stderr
