"""The chapter-4 CPU kernels on every instruction set their source chooses between at compile time,
against the numpy reference: x86 AVX-512 VNNI, AVX2 and the portable loop on this machine, and ARM
(NEON with and without the dot-product extension) cross-compiled and run under emulation.

The kernel files are torch-free, so tests/cpu_harness/harness.cpp compiles them alone for any
target; this test writes the inputs (the package's numpy quantizers), runs the harness, and compares
its outputs with reference.gemm_wq_aq8_1 on the same bytes: NMSE <= testing.KERNEL_NMSE over the
ragged shapes and the awkward value distributions, non-finite outputs exactly where the reference
has them. ARM needs ``aarch64-linux-gnu-g++`` and ``qemu-aarch64`` (Debian/Ubuntu:
``apt-get install g++-aarch64-linux-gnu qemu-user``; .ci/run installs them) or an aarch64 host.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cross import ON_ARM, build_harness, check_outputs, run_harness, variants

import quantgemm_kernels as qk
from quantgemm_kernels import formats as F
from quantgemm_kernels import reference as R
from quantgemm_kernels.registry import CSRC
from quantgemm_kernels.testing import DISTRIBUTIONS, SHAPES, make_values

STEP_DIR = CSRC / "cpu" / "04_w4a8"
VARIANTS = variants(avx512_vnni=True)
#: the chapter-4 kernels the harness holds: every registered kernel whose step file is in 04_w4a8/
KERNELS = [k.name for k in qk.KERNELS.values() if k.device == "cpu" and k.file.startswith("04_w4a8/")]
#: ragged shapes (testing.SHAPES), an LLM-sized K, and every distribution at one shape
CASES = [(M, N, K, "normal") for M, N, K in SHAPES] + [(19, 3, 14336, "normal")]
CASES += [(37, 5, 320, d) for d in DISTRIBUTIONS]


_BUILT: dict = {}


def _build(name: str, tmp_path_factory) -> list:
    """The harness built for one variant (once per session): the command prefix that runs it."""
    if name not in _BUILT:
        _BUILT[name] = build_harness(
            "harness.cpp", STEP_DIR, KERNELS, VARIANTS[name], name, tmp_path_factory.mktemp(name)
        )
    return _BUILT[name]


@pytest.fixture(scope="module", params=list(VARIANTS))
def harness(request, tmp_path_factory):
    """The harness built for one variant: (command prefix, variant name)."""
    return _build(request.param, tmp_path_factory), request.param


def _inputs(kernel: str):
    """Every case's float inputs, quantized by the package's numpy quantizers, and the reference."""
    k = qk.KERNELS[kernel]
    blob, refs = bytearray(), []
    for i, (M, N, K, dist) in enumerate(CASES):
        A = make_values((N, K), dist, seed=11 * i + 1)
        W = make_values((M, K), dist, seed=11 * i + 2)
        Aq, Wq = F.quantize_q8_1(A, k.q8_1_sum), F.quantize(W, k.wfmt)
        blob += np.array([N, M, K], np.int32).tobytes() + Aq.tobytes() + Wq.tobytes()
        refs.append(R.gemm_wq_aq8_1(Aq, Wq, k.wfmt, k.q4_0_formula))
    return bytes(blob), refs


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_on_each_instruction_set(harness, kernel, tmp_path):
    prefix, variant = harness
    blob, refs = _inputs(kernel)
    check_outputs(run_harness(prefix, variant, kernel, blob, tmp_path), CASES, refs, f"{variant} {kernel}")


@pytest.mark.parametrize("kernel", [k for k in KERNELS if k.endswith("_stationary")])
def test_stationary_step_gives_the_same_bits_on_every_instruction_set(harness, kernel, tmp_path, tmp_path_factory):
    """4_stationary.cpp does the same float operations on every output whatever the instruction set
    (integer dot products, then one FMA per block in block order): every build gives the bits of the
    portable loop."""
    prefix, variant = harness
    portable = "aarch64-armv8.0" if ON_ARM else "x86-portable"
    if variant == portable:
        pytest.skip("the portable build is the one compared with")
    blob, _ = _inputs(kernel)
    ours = run_harness(prefix, variant, kernel, blob, tmp_path)
    theirs = run_harness(_build(portable, tmp_path_factory), portable, kernel, blob, tmp_path)
    assert ours.tobytes() == theirs.tobytes(), f"{variant} {kernel}: not the bits of the {portable} build"
