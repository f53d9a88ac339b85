"""llama.cpp's own mul_mat, vec_dot and quantizers, reached through the ``ggml`` module or, where
``QUANTGEMM_GGML_LIB`` names one, a standalone ggml build (``tools/build_ggml.sh``), against our
numpy reference. Skipped where neither is there (no ggml-python / ggml-py installed, variable unset).

Two comparisons per case, with different budgets:

* ggml's C against the reference run on **the same activation bytes** (A quantized to Q8_0 by
  ggml's own CPU quantizer, which mul_mat applies to A inside the op): the same numbers summed
  in a different order, so ``KERNEL_NMSE`` (1e-8) applies. Measured here: at most 3e-13 on
  normal data, 1.2e-10 on uniform data whose outputs nearly cancel.
* ggml's C against our **W4A16/W8A16 reference** (float activations): the difference is the
  error of quantizing A to Q8_0, which ggml's CPU backend always does for Q4_0 and Q8_0
  weights. Q8_0 rounds each value to a step d = amax/127; the error variance d^2/12 relative to
  the values' variance is about 3e-5 for normal data, and more on short rows where one block
  decides the result. Measured on these shapes (normal data, 5 seeds): at most 1.3e-4 (Q4_0)
  and 9e-5 (Q8_0); the threshold 1e-3 leaves a margin of about 8x, and is still 5x below what
  quantizing the weights to Q4_0 costs (~5e-3), so a wrong weight layout cannot pass.
"""

import ctypes
import math
import os
import platform
import subprocess
from pathlib import Path

import numpy as np
import pytest

from quantgemm_kernels import formats as F
from quantgemm_kernels import llamacpp as L
from quantgemm_kernels import reference as R
from quantgemm_kernels.testing import KERNEL_NMSE, make_values

INFO = L.available()
# A standalone build named by QUANTGEMM_GGML_LIB that does not work fails the tests instead of skipping them.
pytestmark = pytest.mark.skipif(
    not INFO["cpu_backend"] and not os.environ.get("QUANTGEMM_GGML_LIB"),
    reason=f"ggml CPU backend not available: {INFO['error']}",
)

STANDALONE_PACKAGE = "ggml (standalone build, ctypes)"
ACT_QUANT_NMSE = 1e-3  #: ggml (Q8_0 activations) vs our float-activation reference; see the docstring
# M=1, N=1, K=32 (one block), primes, non-powers of two, one row over a GEMV-friendly size
SHAPES = [(1, 1, 32), (1, 7, 64), (7, 1, 96), (33, 5, 160), (83, 9, 128), (130, 2, 1024), (17, 33, 288)]


def _case(M, N, K, seed=0):
    return make_values((M, K), "normal", seed), make_values((N, K), "normal", seed + 100)


@pytest.mark.parametrize("wfmt", L.MUL_MAT_FORMATS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_ggml_mul_mat_matches_the_reference(wfmt, shape):
    M, N, K = shape
    K = K * (F.SPECS[wfmt].block_size if wfmt in F.SPECS else F.QK) // F.QK  # K-quants: K in super-blocks of 256
    W, A = _case(M, N, K)
    Wb = W if wfmt == "f32" else F.quantize(W, wfmt)  # our bytes: ggml gets exactly these
    C = L.ggml_mul_mat(Wb, A, wfmt, n_threads=2)
    assert C.shape == (N, M) and C.dtype == np.float32
    if wfmt == "f32":
        # F32 x F32: no quantization anywhere, float32 rounding only
        assert R.nmse(C, R.gemm_f32(A, W)) < KERNEL_NMSE
        return
    # the CPU backend's activation format: Q8_0 for Q4_0 and Q8_0 weights (no s needed), Q8_1 for
    # Q4_1, whose min enters through s, Q8_K for the K-quants (its bsums carry Q4_K's min term)
    vdt = L.ggml_vec_dot_type(wfmt)
    assert vdt == {"q4_1": "q8_1", "q4_k": "q8_k", "q6_k": "q8_k"}.get(wfmt, "q8_0")
    Aq_ggml = L.ggml_quantize(A, vdt, ref=False)
    if vdt == "q8_k":  # super-block formula: integer sub-block dots, scales once per 256
        assert R.nmse(C, R.gemm_wk_aq8_k(Aq_ggml, Wb, wfmt)) < KERNEL_NMSE
    elif wfmt == "q4_1":  # the min enters through s, rounded to fp16: the block formula, not the values
        assert R.nmse(C, R.gemm_wq_aq8_1(Aq_ggml, Wb, wfmt)) < KERNEL_NMSE
    else:
        assert R.nmse(C, R.gemm_f32(F.dequantize(Aq_ggml, vdt), F.dequantize(Wb, wfmt))) < KERNEL_NMSE
    assert R.nmse(C, R.gemm(A, Wb, wfmt, "f32")) < ACT_QUANT_NMSE


def test_float_weights_are_quantized_by_ggml():
    W, A = _case(9, 3, 64)
    np.testing.assert_array_equal(L.ggml_mul_mat(W, A, "q4_0"), L.ggml_mul_mat(F.quantize(W, "q4_0"), A, "q4_0"))


def test_threads_do_not_change_the_result():
    W, A = _case(130, 5, 256)
    Wb = F.quantize(W, "q4_0")
    np.testing.assert_array_equal(
        L.ggml_mul_mat(Wb, A, "q4_0", n_threads=1), L.ggml_mul_mat(Wb, A, "q4_0", n_threads=2)
    )


@pytest.mark.skipif(not INFO["type_traits"], reason="this ggml binding cannot reach the type traits")
@pytest.mark.parametrize("wfmt", L.WEIGHT_FORMATS)
def test_vec_dot_is_one_output_of_mul_mat(wfmt):
    W, A = _case(3, 2, 160)
    Wb = W if wfmt == "f32" else F.quantize(W, wfmt)
    C = L.ggml_mul_mat(Wb, A, wfmt)
    for m in range(3):
        for n in range(2):
            d = L.ggml_vec_dot(wfmt, Wb[m], A[n])
            assert math.isclose(d, C[n, m], rel_tol=1e-5, abs_tol=1e-5), (m, n, d, C[n, m])


@pytest.mark.skipif(not INFO["type_traits"], reason="this ggml binding cannot reach the type traits")
def test_our_q4_1_kernels_compute_ggml_cpus_q4_1_product():
    """Q4_1 x Q8_1 is where ggml's CPU backend reads Q8_1's s (d_w d_a sumi + m_w s_a, s = d * sum(q)):
    our chapter-7 CPU kernels on ggml's own activation bytes give its mul_mat to float rounding."""
    import torch

    import quantgemm_kernels as qk

    W, A = _case(67, 5, 256)
    Wb = F.quantize(W, "q4_1")
    C = L.ggml_mul_mat(Wb, A, "q4_1", n_threads=2)
    Aq = L.ggml_quantize(A, "q8_1", ref=False)  # the bytes ggml's CPU backend quantizes A to
    for k in qk.kernels(device="cpu", wfmt="q4_1"):
        ours = qk.gemm_quantized(torch.from_numpy(Aq), torch.from_numpy(Wb), k.name).numpy()
        assert R.nmse(ours, C) < 1e-12, k.name


@pytest.mark.skipif(not INFO["type_traits"], reason="this ggml binding cannot reach the type traits")
@pytest.mark.parametrize("wfmt", ["q4_k", "q6_k"])
def test_our_k_quant_kernels_compute_ggml_cpus_product(wfmt):
    """Q4_K and Q6_K x Q8_K: our chapter-8 CPU kernels on ggml's own activation bytes (its CPU
    backend's Q8_K quantizer, which mul_mat applies to A) give its mul_mat to float rounding, on
    ragged shapes with K a multiple of 256 and a Llama-3-8B row length."""
    import torch

    import quantgemm_kernels as qk

    for M, N, K in [(1, 1, 256), (67, 5, 2304), (33, 3, 14336)]:
        W, A = _case(M, N, K)
        Wb = F.quantize(W, wfmt)
        C = L.ggml_mul_mat(Wb, A, wfmt, n_threads=2)
        Aq = L.ggml_quantize(A, "q8_k", ref=False)
        # on x86 ggml-cpu's quantize_row_q8_K is quantize_row_q8_K_ref, the quantizer gemm() applies
        # to A: there the whole product from float activations is ggml's (other CPUs have SIMD ones)
        x86 = platform.machine().lower() in ("x86_64", "amd64")
        assert np.array_equal(Aq, F.quantize(A, "q8_k")) or not x86
        for k in qk.kernels(device="cpu", wfmt=wfmt):
            ours = qk.gemm_quantized(torch.from_numpy(Aq), torch.from_numpy(Wb), k.name).numpy()
            assert R.nmse(ours, C) < 1e-12, (k.name, M, N, K)
            if x86:
                ours = qk.gemm(torch.from_numpy(A), torch.from_numpy(Wb), k.name).numpy()
                assert R.nmse(ours, C) < 1e-12, (k.name, M, N, K, "float A")


@pytest.mark.skipif(not INFO["type_traits"], reason="this ggml binding cannot reach the type traits")
@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q8_0", "q8_1", "q4_k", "q6_k", "q8_k"])
def test_ggml_reference_quantizers_give_our_bytes(fmt):
    x = make_values((5, 256), "normal", 3)
    np.testing.assert_array_equal(L.ggml_quantize(x, fmt), F.quantize(x, fmt))


def test_time_ggml_mul_mat_returns_seconds_per_op():
    W, A = _case(64, 2, 128)
    s = L.time_ggml_mul_mat(F.quantize(W, "q8_0"), A, "q8_0", reps=3, warmup=1, computes=2)
    assert math.isfinite(s) and s > 0
    assert L.perf_repeats(4096, 1, 14336) == 69  # test-backend-ops: 8 GFLOP / 117 MFLOP, plus one
    assert L.perf_repeats(4096, 512, 14336) == 1


def test_bad_inputs_raise_clearly():
    W, A = _case(4, 2, 64)
    Wq = F.quantize(W, "q4_0")
    with pytest.raises(ValueError, match="disagree on K"):
        L.ggml_mul_mat(Wq, A[:, :32], "q4_0")
    with pytest.raises(ValueError, match="wfmt"):
        L.ggml_mul_mat(Wq, A, "q5_0")
    with pytest.raises(ValueError, match="whole number"):
        L.ggml_mul_mat(Wq[:, :17], A, "q4_0")
    with pytest.raises(TypeError):
        L.ggml_mul_mat(W.astype(np.float64), A, "f32")
    with pytest.raises(ValueError, match="backend"):
        L.ggml_mul_mat(Wq, A, "q4_0", backend="tpu")
    if not INFO["cuda_backend"]:
        with pytest.raises(L.GgmlUnavailable):
            L.ggml_mul_mat(Wq, A, "q4_0", backend="cuda")


def test_available_reports_the_package():
    assert INFO["importable"] and INFO["package"] in ("ggml-python", "ggml-py", "unknown", STANDALONE_PACKAGE)
    assert INFO["ggml_version"] is None or INFO["ggml_version"].count(".") == 2
    assert "ggml" in L.info_line()


# ---------------------------------------------------------------------------------------------
# MulMatRunner: C copies of the weights in one graph (cold-cache timing)
# ---------------------------------------------------------------------------------------------


def _copies(M, N, K, C, wfmt):
    Ws = [make_values((M, K), "normal", 10 + i) for i in range(C)]
    return [W if wfmt == "f32" else F.quantize(W, wfmt) for W in Ws], make_values((N, K), "normal", 99)


def _graph_nodes(run):
    count = L._c_function(L._ggml(), "ggml_graph_n_nodes", [ctypes.c_void_p], ctypes.c_int)
    return None if count is None else count(run._mm.graph)


@pytest.mark.parametrize("wfmt", L.WEIGHT_FORMATS)
def test_runner_copy_i_is_ggml_mul_mat_on_copy_i(wfmt):
    Ws, A = _copies(33, 5, 160, 3, wfmt)
    with L.MulMatRunner(Ws, A, wfmt, n_threads=2) as run:
        assert (run.copies, run.repeats, run.n_mul_mats) == (3, 1, 3)
        assert _graph_nodes(run) in (None, 3)
        run.compute()
        outs = [run.result(i) for i in range(3)]
    for W, C in zip(Ws, outs):
        assert C.shape == (5, 33) and C.dtype == np.float32
        np.testing.assert_array_equal(C, L.ggml_mul_mat(W, A, wfmt, n_threads=2))
    assert not np.array_equal(outs[0], outs[1])  # each copy reads its own weights


def test_runner_repeats_the_sequence():
    Ws, A = _copies(17, 3, 96, 3, "q8_0")
    with L.MulMatRunner(Ws, A, "q8_0", repeats=4, n_threads=2) as run:
        assert (run.copies, run.repeats, run.n_mul_mats) == (3, 4, 12)
        assert _graph_nodes(run) in (None, 12)
        for _ in range(2):  # computes again on the same buffers
            run.compute()
        for i, W in enumerate(Ws):
            np.testing.assert_array_equal(run.result(i), L.ggml_mul_mat(W, A, "q8_0", n_threads=2))


def test_runner_takes_one_matrix_float_weights_and_torch():
    torch = pytest.importorskip("torch")
    W, A = _case(9, 3, 64)
    with L.MulMatRunner(W, torch.from_numpy(A), "q4_0", repeats=2, n_threads=2) as run:  # ggml quantizes W
        assert (run.copies, run.n_mul_mats) == (1, 2)
        run.compute()
        np.testing.assert_array_equal(run.result(), L.ggml_mul_mat(F.quantize(W, "q4_0"), A, "q4_0", n_threads=2))


def test_runner_bad_inputs_raise_clearly():
    Ws, A = _copies(8, 2, 64, 2, "q4_0")
    with pytest.raises(ValueError, match="empty"):
        L.MulMatRunner([], A, "q4_0")
    with pytest.raises(ValueError, match="same shape"):
        L.MulMatRunner([Ws[0], Ws[1][:5]], A, "q4_0")
    with pytest.raises(ValueError, match="same shape"):
        L.MulMatRunner([Ws[0], F.quantize(make_values((8, 96), "normal", 1), "q4_0")], A, "q4_0")
    with pytest.raises(TypeError, match=r"Ws\[1\]"):
        L.MulMatRunner([Ws[0], Ws[1].astype(np.int16)], A, "q4_0")
    with pytest.raises(ValueError, match="disagree on K"):
        L.MulMatRunner(Ws, A[:, :32], "q4_0")
    with pytest.raises(ValueError, match="wfmt"):
        L.MulMatRunner(Ws, A, "q5_0")
    with pytest.raises(ValueError, match="repeats"):
        L.MulMatRunner(Ws, A, "q4_0", repeats=0)
    with pytest.raises(TypeError, match="repeats"):
        L.MulMatRunner(Ws, A, "q4_0", repeats=1.5)
    with pytest.raises(ValueError, match="backend"):
        L.MulMatRunner(Ws, A, "q4_0", backend="tpu")
    with pytest.raises(TypeError, match="MulMatRunner"):
        L.ggml_mul_mat(Ws, A, "q4_0")  # one matrix only; lists are for the runner
    run = L.MulMatRunner(Ws, A, "q4_0", n_threads=1)
    with pytest.raises(IndexError):
        run.result(2)
    run.close()
    with pytest.raises(RuntimeError, match="closed"):
        run.compute()


def test_a_bad_library_folder_is_an_error_not_a_fallback(monkeypatch, tmp_path):
    monkeypatch.setenv("QUANTGEMM_GGML_LIB", str(tmp_path))
    info = L.available()
    assert not info["importable"] and "QUANTGEMM_GGML_LIB" in info["error"]
    W, A = _case(4, 2, 64)
    with pytest.raises(L.GgmlUnavailable, match="QUANTGEMM_GGML_LIB"):
        L.ggml_mul_mat(W, A, "f32")


# ---------------------------------------------------------------------------------------------
# The standalone ggml build (tools/build_ggml.sh) through ctypes: QUANTGEMM_GGML_LIB=PREFIX/lib
# ---------------------------------------------------------------------------------------------

needs_standalone = pytest.mark.skipif(
    not os.environ.get("QUANTGEMM_GGML_LIB"),
    reason="QUANTGEMM_GGML_LIB is not set: no standalone ggml build to test (tools/build_ggml.sh SRC PREFIX, "
    "then QUANTGEMM_GGML_LIB=PREFIX/lib)",
)


@needs_standalone
def test_standalone_build_is_reported():
    assert INFO["package"] == STANDALONE_PACKAGE and INFO["error"] is None
    assert INFO["ggml_version"] == INFO["version"] == "0.25.3"  # the llama-cpp-python 0.3.36 sdist's ggml
    assert INFO["lib_dir"] == str(os.path.realpath(os.environ["QUANTGEMM_GGML_LIB"]))
    assert INFO["build"]["ggml_version"] == "0.25.3" and INFO["ggml_commit"] not in (None, "")
    assert "-DBUILD_SHARED_LIBS=ON" in INFO["cmake_flags"]  # the flags the build recorded, whatever they are
    assert INFO["type_traits"] and INFO["cpu_backend"]
    assert "0.25.3" in L.info_line() and "standalone" in L.info_line()


@needs_standalone
@pytest.mark.parametrize("wfmt", L.WEIGHT_FORMATS)
def test_standalone_mul_mat_matches_the_reference(wfmt):
    assert L._package_name(L._ggml()) == STANDALONE_PACKAGE
    for shape in SHAPES:  # the checks of test_ggml_mul_mat_matches_the_reference, on this build
        test_ggml_mul_mat_matches_the_reference(wfmt, shape)


@needs_standalone
def test_standalone_build_and_the_ggml_module_in_one_process(monkeypatch):
    pytest.importorskip("ggml")
    W, A = _case(64, 3, 256)
    Wq = F.quantize(W, "q4_0")
    ours = L.ggml_mul_mat(Wq, A, "q4_0", n_threads=2)
    monkeypatch.delenv("QUANTGEMM_GGML_LIB")
    module = L.available()
    if not module["cpu_backend"]:
        pytest.skip(f"the ggml module does not work here: {module['error']}")
    theirs = L.ggml_mul_mat(Wq, A, "q4_0", n_threads=2)
    assert module["package"] != STANDALONE_PACKAGE and module["ggml_version"] != INFO["ggml_version"]
    # each library keeps its own symbols (not RTLD_GLOBAL); both compute the same Q4_0 x Q8_0 products
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)
    assert L._package_name(L._ggml()) != STANDALONE_PACKAGE


def _cpu_has(feature: str) -> bool:
    fn = L._c_function(L._ggml(), f"ggml_cpu_has_{feature}", [], ctypes.c_int, prefer_package=False)
    return bool(fn and fn())


@pytest.mark.skipif(not INFO["cpu_backend"], reason="no ggml CPU backend")
def test_repacked_weights_as_llama_cpp_loads_them():
    """MulMatRunner(repack=True) puts the weights in ggml-cpu's CPU_REPACK buffer, as llama.cpp's
    loader does: the result is ggml's plain mul_mat's to float rounding (another kernel, the same
    Q8_0 activations); types and shapes ggml does not repack are refused with a message."""
    if not (_cpu_has("avx2") or (_cpu_has("neon") and _cpu_has("dotprod"))):
        pytest.skip("ggml repacks Q4_0 only with AVX2, or NEON with the dot product")
    W, A = make_values((64, 512), "normal", seed=1), make_values((9, 512), "normal", seed=2)
    Wq = F.quantize(W, "q4_0")
    plain = L.ggml_mul_mat(Wq, A, "q4_0")
    repacked = L.ggml_mul_mat(Wq, A, "q4_0", repack=True)
    assert R.nmse(repacked, plain) < 1e-10
    with pytest.raises(L.GgmlUnavailable, match="multiple"):
        L.ggml_mul_mat(Wq[:60], A, "q4_0", repack=True)
    if _cpu_has("avx2") and not _cpu_has("neon"):
        with pytest.raises(L.GgmlUnavailable, match="repacks no q8_0"):
            L.ggml_mul_mat(F.quantize(W, "q8_0"), A, "q8_0", repack=True)
    with pytest.raises(ValueError, match="CPU backend"):
        L._repack_buffer_type(L._ggml(), L._type(L._ggml(), "q4_0"), 64, "cuda")


def test_build_ggml_checks_a_cublas_dir_before_building(tmp_path):
    """tools/build_ggml.sh with GGML_CUBLAS_DIR (a CUDA build without a driver or cuBLAS installed):
    a folder without cuBLAS's header, or without its libraries, stops the script with a message
    naming what is missing, before CMake runs."""
    script = Path(__file__).resolve().parent.parent / "tools" / "build_ggml.sh"
    src = tmp_path / "ggml"
    (src / "include").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(
        "set(GGML_VERSION_MAJOR 0)\nset(GGML_VERSION_MINOR 25)\nset(GGML_VERSION_PATCH 3)\n"
    )
    (src / "include" / "ggml.h").write_text("")
    cublas, tools = tmp_path / "cublas", tmp_path / "bin"
    cublas.mkdir()
    tools.mkdir()
    fake = tools / "patchelf"  # present, never reached: the checks stop the script first
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    env = {**os.environ, "GGML_CUBLAS_DIR": str(cublas), "PATH": f"{tools}:{os.environ['PATH']}"}

    def run():
        return subprocess.run(
            ["bash", str(script), str(src), str(tmp_path / "prefix"), "cuda"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    r = run()
    assert r.returncode == 2 and "has no include/cublas_v2.h" in r.stderr, r.stderr
    (cublas / "include").mkdir()
    (cublas / "include" / "cublas_v2.h").write_text("")
    r = run()
    assert r.returncode == 2 and "has no lib/libcublas.so.N" in r.stderr, r.stderr
