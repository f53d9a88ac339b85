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

import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import quantgemm_kernels as qk
from quantgemm_kernels import formats as F
from quantgemm_kernels import reference as R
from quantgemm_kernels.registry import CSRC
from quantgemm_kernels.testing import DISTRIBUTIONS, KERNEL_NMSE, SHAPES, make_values

HARNESS = Path(__file__).resolve().parent / "cpu_harness" / "harness.cpp"
STEP_DIR = CSRC / "cpu" / "04_w4a8"
MACHINE = platform.machine().lower()
ON_X86 = MACHINE in ("x86_64", "amd64")
ON_ARM = MACHINE in ("aarch64", "arm64")


def _cpu_flags() -> set:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


FLAGS = _cpu_flags()
CROSS_CXX, QEMU = shutil.which("aarch64-linux-gnu-g++"), shutil.which("qemu-aarch64")
ARM_MISSING = (
    None
    if ON_ARM or (CROSS_CXX and QEMU)
    else "no ARM toolchain: needs aarch64-linux-gnu-g++ and qemu-aarch64 "
    "(apt-get install g++-aarch64-linux-gnu qemu-user) or an aarch64 host"
)

#: name: (compiler, flags, how to run the binary, the SIMD path the harness must report, why it cannot run here)
VARIANTS = {
    "aarch64-dotprod": (
        "c++" if ON_ARM else CROSS_CXX,
        ["-march=armv8.2-a+dotprod"],
        [] if ON_ARM else [QEMU],
        "neon-dotprod",
        ARM_MISSING or (None if not ON_ARM or "asimddp" in FLAGS else "this ARM CPU has no dot product"),
    ),
    "aarch64-armv8.0": (
        "c++" if ON_ARM else CROSS_CXX,
        ["-march=armv8-a"],
        [] if ON_ARM else [QEMU],
        "neon",
        ARM_MISSING,
    ),
    "x86-avx512-vnni": (
        "c++",
        ["-march=x86-64-v4", "-mavx512vnni"],
        [],
        "avx512-vnni",
        None if ON_X86 and {"avx512_vnni", "avx512vl", "avx512bw"} <= FLAGS else "no AVX-512 VNNI on this CPU",
    ),
    "x86-avx2": ("c++", ["-march=x86-64-v3"], [], "avx2", None if ON_X86 and "avx2" in FLAGS else "no AVX2 here"),
    "x86-portable": ("c++", ["-march=x86-64"], [], "portable", None if ON_X86 else "not an x86 host"),
}

#: the chapter-4 kernels the harness holds: every registered kernel whose step file is in 04_w4a8/
KERNELS = [k.name for k in qk.KERNELS.values() if k.device == "cpu" and k.file.startswith("04_w4a8/")]
#: ragged shapes (testing.SHAPES), an LLM-sized K, and every distribution at one shape
CASES = [(M, N, K, "normal") for M, N, K in SHAPES] + [(19, 3, 14336, "normal")]
CASES += [(37, 5, 320, d) for d in DISTRIBUTIONS]


_BUILT: dict = {}


def _build(name: str, tmp_path_factory) -> list:
    """The harness built for one variant (once per session): the command prefix that runs it."""
    if name in _BUILT:
        return _BUILT[name]
    cxx, flags, runner, path, missing = VARIANTS[name]
    if missing:
        pytest.skip(f"{name}: {missing}")
    if shutil.which(cxx) is None:
        pytest.skip(f"{name}: no C++ compiler ({cxx})")
    exe = tmp_path_factory.mktemp(name) / "harness"
    sources = [HARNESS, *sorted(STEP_DIR.glob("*.cpp"))]
    cmd = [cxx, "-O3", "-ffp-contract=off", *flags, f"-I{CSRC}", *map(str, sources), "-o", str(exe)]
    if runner:  # emulated: a static binary needs no aarch64 libraries at run time
        cmd.insert(1, "-static")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{name}: compiling the harness failed:\n{' '.join(cmd)}\n{r.stderr[-4000:]}"
    prefix = [*runner, str(exe)]
    listed = subprocess.run([*prefix, "--list"], capture_output=True, text=True, timeout=120, check=True)
    lines = listed.stdout.split()
    assert lines[:2] == ["simd", path], f"{name}: the harness reports {lines[:2]}, expected the {path} path"
    assert sorted(lines[2:]) == sorted(KERNELS), "tests/cpu_harness/harness.cpp should list every 04_w4a8 kernel"
    _BUILT[name] = prefix
    return prefix


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


def _run(prefix, variant, kernel, blob, tmp_path) -> np.ndarray:
    (tmp_path / "in.bin").write_bytes(blob)
    r = subprocess.run(
        [*prefix, kernel, str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{variant} {kernel}: harness failed: {r.stderr[-2000:]}"
    return np.fromfile(tmp_path / "out.bin", np.float32)


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_on_each_instruction_set(harness, kernel, tmp_path):
    prefix, variant = harness
    blob, refs = _inputs(kernel)
    out = _run(prefix, variant, kernel, blob, tmp_path)
    assert out.size == sum(M * N for M, N, _, _ in CASES), f"{variant} {kernel}: {out.size} outputs"
    at = 0
    for (M, N, K, dist), ref in zip(CASES, refs):
        C = out[at : at + N * M].reshape(N, M)
        at += N * M
        where = f"{variant} {kernel} M={M} N={N} K={K} {dist}"
        assert np.array_equal(np.isfinite(C), np.isfinite(ref)), f"{where}: non-finite outputs differ"
        err = R.nmse(C, ref)
        assert err <= KERNEL_NMSE, f"{where}: NMSE {err:.3g} > {KERNEL_NMSE}"
        if dist == "zeros":
            assert (C == 0).all(), where


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
    ours = _run(prefix, variant, kernel, blob, tmp_path)
    theirs = _run(_build(portable, tmp_path_factory), portable, kernel, blob, tmp_path)
    assert ours.tobytes() == theirs.tobytes(), f"{variant} {kernel}: not the bits of the {portable} build"
