"""The chapter-8 CPU kernels (Q4_K and Q6_K x Q8_K) on every instruction set their source chooses
between at compile time, against the numpy reference: x86 AVX2 and the portable loop on this machine,
and ARM (NEON with and without the dot-product extension) cross-compiled and run under emulation.

tests/cpu_harness/k_quants_harness.cpp compiles the torch-free step files of csrc/cpu/08_k_quants/
alone for each target; this test writes the inputs (the package's numpy quantizers), runs the
harness, and compares its outputs with reference.gemm_wk_aq8_k on the same bytes: NMSE <=
testing.KERNEL_NMSE over the ragged shapes (K in super-blocks of 256), a Llama-3-8B row length and
the awkward value distributions, non-finite outputs exactly where the reference has them. ARM needs
``aarch64-linux-gnu-g++`` and ``qemu-aarch64`` (Debian/Ubuntu: ``apt-get install
g++-aarch64-linux-gnu qemu-user``) or an aarch64 host. (tests/test_cpu_cross.py does the same for
chapter 4's kernels.)
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_cross import build_harness, check_outputs, run_harness, variants

import quantgemm_kernels as qk
from quantgemm_kernels import formats as F
from quantgemm_kernels import reference as R
from quantgemm_kernels.registry import CSRC
from quantgemm_kernels.testing import DISTRIBUTIONS, SHAPES, make_values, shape_for

STEP_DIR = CSRC / "cpu" / "08_k_quants"
VARIANTS = variants(avx512_vnni=False)  # 2_simd.cpp's x86 path is AVX2

#: the chapter-8 CPU kernels the harness holds: every registered kernel whose step file is in 08_k_quants/
KERNELS = [k.name for k in qk.KERNELS.values() if k.device == "cpu" and k.file.startswith("08_k_quants/")]
#: ragged shapes (testing.SHAPES, K scaled to super-blocks), a Llama-3-8B row, every distribution
CASES = [(*shape_for(KERNELS[0], *s), "normal") for s in SHAPES] + [(19, 3, 14336, "normal")]
CASES += [(*shape_for(KERNELS[0], 37, 5, 320), d) for d in DISTRIBUTIONS]


@pytest.fixture(scope="module", params=list(VARIANTS))
def harness(request, tmp_path_factory):
    """The harness built for one variant: (command prefix, variant name)."""
    name = request.param
    folder = tmp_path_factory.mktemp(name)
    return build_harness("k_quants_harness.cpp", STEP_DIR, KERNELS, VARIANTS[name], name, folder), name


def _inputs(kernel: str):
    """Every case's float inputs, quantized by the package's numpy quantizers, and the reference."""
    k = qk.KERNELS[kernel]
    blob, refs = bytearray(), []
    for i, (M, N, K, dist) in enumerate(CASES):
        A = make_values((N, K), dist, seed=11 * i + 1)
        W = make_values((M, K), dist, seed=11 * i + 2)
        with np.errstate(all="ignore"):
            Aq, Wq = F.quantize(A, k.afmt), F.quantize(W, k.wfmt)
        blob += np.array([N, M, K], np.int32).tobytes() + Aq.tobytes() + Wq.tobytes()
        refs.append(R.gemm_wk_aq8_k(Aq, Wq, k.wfmt))
    return bytes(blob), refs


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_on_each_instruction_set(harness, kernel, tmp_path):
    prefix, variant = harness
    blob, refs = _inputs(kernel)
    check_outputs(run_harness(prefix, variant, kernel, blob, tmp_path), CASES, refs, f"{variant} {kernel}")
