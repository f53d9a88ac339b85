"""What tests/test_cpu_cross.py (chapter 4's kernels) and tests/test_cpu_cross_k_quants.py
(chapter 8's) share: the instruction-set variants this host can build and run (ARM cross-compiled
and run under qemu-aarch64), building a torch-free harness of tests/cpu_harness/ with a step folder's
files for one variant, running it on the inputs a test wrote, and checking its outputs against the
reference case by case."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from quantgemm_kernels import reference as R
from quantgemm_kernels.registry import CSRC
from quantgemm_kernels.testing import KERNEL_NMSE

HARNESS_DIR = Path(__file__).resolve().parent / "cpu_harness"
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


def variants(avx512_vnni: bool) -> dict:
    """name: (compiler, flags, how to run the binary, the SIMD path the harness must report, why it
    cannot run here or None). ``avx512_vnni``: whether the step files have such a path."""
    arm_cxx, arm_runner = ("c++", []) if ON_ARM else (CROSS_CXX, [QEMU])
    v = {
        "aarch64-dotprod": (
            arm_cxx,
            ["-march=armv8.2-a+dotprod"],
            arm_runner,
            "neon-dotprod",
            ARM_MISSING or (None if not ON_ARM or "asimddp" in FLAGS else "this ARM CPU has no dot product"),
        ),
        "aarch64-armv8.0": (arm_cxx, ["-march=armv8-a"], arm_runner, "neon", ARM_MISSING),
    }
    if avx512_vnni:
        v["x86-avx512-vnni"] = (
            "c++",
            ["-march=x86-64-v4", "-mavx512vnni"],
            [],
            "avx512-vnni",
            None if ON_X86 and {"avx512_vnni", "avx512vl", "avx512bw"} <= FLAGS else "no AVX-512 VNNI on this CPU",
        )
    v["x86-avx2"] = ("c++", ["-march=x86-64-v3"], [], "avx2", None if ON_X86 and "avx2" in FLAGS else "no AVX2 here")
    v["x86-portable"] = ("c++", ["-march=x86-64"], [], "portable", None if ON_X86 else "not an x86 host")
    return v


def build_harness(harness: str, step_dir: Path, kernels: list[str], variant: tuple, name: str, folder: Path) -> list:
    """Compile ``tests/cpu_harness/<harness>`` with every .cpp of ``step_dir`` for one variant; check
    that it reports the variant's SIMD path and holds ``kernels``. Returns the command prefix that
    runs it (skips the test where the variant cannot run here)."""
    cxx, flags, runner, path, missing = variant
    if missing:
        pytest.skip(f"{name}: {missing}")
    if shutil.which(cxx) is None:
        pytest.skip(f"{name}: no C++ compiler ({cxx})")
    exe = folder / Path(harness).stem
    sources = [HARNESS_DIR / harness, *sorted(step_dir.glob("*.cpp"))]
    cmd = [cxx, "-O3", "-ffp-contract=off", *flags, f"-I{CSRC}", *map(str, sources), "-o", str(exe)]
    if runner:  # emulated: a static binary needs no aarch64 libraries at run time
        cmd.insert(1, "-static")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{name}: compiling the harness failed:\n{' '.join(cmd)}\n{r.stderr[-4000:]}"
    prefix = [*runner, str(exe)]
    listed = subprocess.run([*prefix, "--list"], capture_output=True, text=True, timeout=120, check=True)
    lines = listed.stdout.split()
    assert lines[:2] == ["simd", path], f"{name}: the harness reports {lines[:2]}, expected the {path} path"
    assert sorted(lines[2:]) == sorted(kernels), (
        f"tests/cpu_harness/{harness} should list every kernel of {step_dir.name}"
    )
    return prefix


def run_harness(prefix: list, variant: str, kernel: str, blob: bytes, tmp_path: Path) -> np.ndarray:
    """Run the harness on the problems in ``blob``; the float32 outputs, back to back."""
    (tmp_path / "in.bin").write_bytes(blob)
    r = subprocess.run(
        [*prefix, kernel, str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{variant} {kernel}: harness failed: {r.stderr[-2000:]}"
    return np.fromfile(tmp_path / "out.bin", np.float32)


def check_outputs(out: np.ndarray, cases: list, refs: list, where: str) -> None:
    """Each case's C [N, M] against its reference: non-finite exactly where the reference is,
    NMSE <= KERNEL_NMSE, zeros for zero inputs."""
    assert out.size == sum(M * N for M, N, _, _ in cases), f"{where}: {out.size} outputs"
    at = 0
    for (M, N, K, dist), ref in zip(cases, refs):
        C = out[at : at + N * M].reshape(N, M)
        at += N * M
        here = f"{where} M={M} N={N} K={K} {dist}"
        assert np.array_equal(np.isfinite(C), np.isfinite(ref)), f"{here}: non-finite outputs differ"
        err = R.nmse(C, ref)
        assert err <= KERNEL_NMSE, f"{here}: NMSE {err:.3g} > {KERNEL_NMSE}"
        if dist == "zeros":
            assert (C == 0).all(), here
