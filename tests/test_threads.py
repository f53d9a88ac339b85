"""CPU threads and CPU builds.

* The CPU kernels run on torch's intra-op threads (csrc/parallel.h): torch.set_num_threads decides
  how many, and the result is the same bits for any number of threads.
* ``QUANTGEMM_CPU_ARCH=x86-64-v3`` builds the AVX2-only variant on an AVX-512 machine, and
  ``QUANTGEMM_OPENMP=0`` the std::thread fallback that a compiler without OpenMP (Apple clang) gets:
  one extra build, in its own cache, whose SIMD kernels pass the same checks against the reference
  and hold no AVX-512 instruction.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cpu_cross import FLAGS  # /proc/cpuinfo's flags (Features on ARM)
import torch

import quantgemm_kernels as qk
from quantgemm_kernels import _build
from quantgemm_kernels.api import pick_kernel
from quantgemm_kernels.testing import shape_for

ROOT = Path(__file__).resolve().parent.parent
CPU_KERNELS = [k.name for k in qk.KERNELS.values() if k.device == "cpu"]
#: the fastest CPU kernel of each chapter-4 weight format (what api.pick_kernel takes on the CPU)
FASTEST = [pick_kernel("cpu", f, 1).name for f in ("q4_0", "q8_0", "q4_1")]
#: chapter 4's last step, with the weights kept in cache
STATIONARY = [k.name for k in qk.KERNELS.values() if k.name.endswith("_q8_1_stationary")]


@pytest.fixture
def threads():
    saved = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(saved)


def _ops():
    _build.load_extension()
    return torch.ops.quantgemm


def test_set_num_threads_decides_the_threads(threads):
    ops = _ops()
    torch_openmp = "OpenMP" in torch.__config__.parallel_info().split("ATen parallel backend:")[-1].split("\n")[0]
    if torch_openmp:
        openmp_build = "-fopenmp" in _build.build_config(False)["cflags"]
        assert ops.parallel_mode() == ("openmp" if openmp_build else "std::thread")
    for t in (1, 2, 3):
        threads(t)
        assert ops.parallel_threads_used(4096, 256) == t  # as many threads as torch is told
        assert ops.parallel_threads_used(100, 256) == 1  # one chunk: no more threads than chunks


@pytest.mark.skipif(os.environ.get("QUANTGEMM_CPU_ARCH", "native") != "native", reason="QUANTGEMM_CPU_ARCH is set")
def test_native_build_takes_the_best_simd_path():
    """-march=native gives chapter 4's SIMD step the best instructions this CPU has."""
    flags = FLAGS
    if {"avx512_vnni", "avx512vl"} <= flags:
        want = "avx512-vnni"
    elif "avx_vnni" in flags:
        want = "avx-vnni"
    elif {"avx2", "fma", "f16c"} <= flags:
        want = "avx2"
    elif "asimddp" in flags:
        want = "neon-dotprod"
    elif "asimd" in flags:
        want = "neon"
    else:
        pytest.skip("no SIMD path for this CPU, or no /proc/cpuinfo to tell")
    assert _ops().cpu_simd_path() == want


@pytest.mark.parametrize("kernel", CPU_KERNELS)
def test_same_bits_for_any_thread_count(kernel, threads):
    M, N, K = shape_for(kernel, 203, 5, 320)  # 203 columns: uneven chunks for 2 and 3 threads
    k = qk.KERNELS[kernel]
    A = torch.randn(N, K, generator=torch.Generator().manual_seed(0))
    W = torch.randn(M, K, generator=torch.Generator().manual_seed(1))
    Wk = W if k.wfmt == "f32" else qk.quantize(W, k.wfmt)
    results = []
    for t in (1, 2, 3):
        threads(t)
        results.append(qk.gemm(A, Wk, kernel))
    assert all(torch.equal(results[0], r) for r in results[1:])


VARIANT_CHECK = textwrap.dedent("""
    import subprocess, sys, torch
    import quantgemm_kernels as qk
    from quantgemm_kernels import _build
    from quantgemm_kernels.testing import check_on_shapes, check_on_distributions
    info = _build.load_extension()
    ops = torch.ops.quantgemm
    assert "-march=x86-64-v3" in _build.build_config(False)["cflags"]
    assert ops.parallel_mode() == "std::thread", ops.parallel_mode()
    assert ops.cpu_simd_path() == "avx2", ops.cpu_simd_path()
    torch.set_num_threads(2)
    assert ops.parallel_threads_used(4096, 256) == 2
    for name in sys.argv[2:]:
        check_on_shapes(name)
        check_on_distributions(name)
    same_bits = torch.load(sys.argv[1])  # the in-process build's outputs of the stationary step
    for name, (A, Wq, C) in same_bits.items():
        assert torch.equal(qk.gemm(A, Wq, name), C), f"{name}: not the bits of the AVX-512 build"
    asm = subprocess.run(["objdump", "-d", info["path"]], capture_output=True, text=True, check=True).stdout
    assert "vpmaddubsw" in asm, "no AVX2 int8 dot product in the AVX2 build"
    assert "vpdpbusd" not in asm and "zmm" not in asm, "AVX-512 code in the AVX2 build"
    print("OK")
""")


@pytest.mark.skipif(not {"avx2", "fma", "f16c"} <= FLAGS, reason="the AVX2 variant needs an x86 CPU with AVX2")
def test_avx2_build_without_openmp(tmp_path):
    """The AVX2-only build (``QUANTGEMM_CPU_ARCH=x86-64-v3``) with the std::thread fallback
    (``QUANTGEMM_OPENMP=0``), built into its own cache: its fastest Q4_0, Q8_0 and Q4_1 kernels against
    the reference on the ragged shapes and every distribution, the stationary step with this build's
    bits, its objects free of AVX-512."""
    env = dict(
        os.environ,
        QUANTGEMM_CACHE=str(tmp_path / "cache"),
        QUANTGEMM_CPU_ARCH="x86-64-v3",
        QUANTGEMM_OPENMP="0",
        QUANTGEMM_NO_CUDA="1",
        PYTHONPATH=str(ROOT),
    )
    # The stationary step does the same float operations on every instruction set: the AVX2 build
    # must reproduce this (native) build's bits.
    same_bits = {}
    for name in STATIONARY:
        A = torch.randn(7, 14336, generator=torch.Generator().manual_seed(1))
        Wq = qk.quantize(torch.randn(37, 14336, generator=torch.Generator().manual_seed(2)), qk.KERNELS[name].wfmt)
        same_bits[name] = (A, Wq, qk.gemm(A, Wq, name))
    torch.save(same_bits, tmp_path / "same_bits.pt")
    r = subprocess.run(
        [sys.executable, "-c", VARIANT_CHECK, str(tmp_path / "same_bits.pt"), *dict.fromkeys(FASTEST + STATIONARY)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stderr[-4000:]
