"""The chapters' exercises: kernels the reader writes, and the checkers of the numpy exercises.

**Kernel exercises.** The reader writes the body of one C++ function (a CUDA one for GPU readers)
inside a small program of the package, ``csrc/exercises/<name>.cpp`` or ``.cu``; the package
compiles it and checks its output against the CPU reference::

    exercises.show("ch3_nibbles")            # the function to complete, with the starter body
    body = r'''
        float sum = 0.0f;
        ...
    '''
    exercises.check("ch3_nibbles", body)     # compiles, runs, compares; prints what differs

:func:`check` prints a verdict and returns True or False; it never raises for the reader's
mistakes. A body that does not compile gives the compiler's messages with the lines counted in the
body (``your code:3:5: error: ...``); a body that crashes (a read out of bounds, a CUDA error) is
caught, because the code runs in a process of its own (``_exercise_runner.py``); a body that
computes wrong numbers gets the shape it fails on, the first wrong output (index, expected, got),
the NMSE against its threshold, and a hint where the mistake is a known one.

A scaffold is a complete, tiny program around the one function the reader writes: the part
between ``// [show]`` and ``// [/show]`` is what :func:`show` prints, and its entry point
``extern "C" int qgex_run(in, out, dims, err, err_len)`` runs one test case (``in`` and ``out`` its
arrays, ``dims`` its integer parameters; non-zero with a message in ``err`` on a CUDA error).

How it is built: the body replaces the ``// @BODY@`` line of the scaffold, after a ``#line``
directive that makes the compiler count its lines from 1; the result is compiled alone by
``torch.utils.cpp_extension.load`` with the core build's flags (``_build``), without torch
headers and without the package's extension, so a build takes seconds. Builds are cached under
``$QUANTGEMM_CACHE/exercises/``, keyed by a hash of the body, the scaffold, the headers it
includes, the flags and the torch version; a body that failed to compile is cached with its
messages too.

What the checks compare with: the GEMM exercises run on :data:`testing.SHAPES` (M = 1, N = 1,
K = one block, non-powers of two) with the values and seeds of ``testing.check_kernel`` and compare
with ``reference.py`` (float64) under :data:`testing.KERNEL_NMSE`, as every kernel of the package
is checked. Chapter 6's ring exercise is checked against a model of the producer, the consumers
and their mbarriers (:func:`simulate_ring`).

:func:`solution` returns an exercise's reference body; the tests use it, the book does not show it.

**Numpy exercises.** ``check_*`` functions (one per exercise of chapters 1 to 8) that the
chapters call on the reader's numpy code or numbers. They print what differs and return a bool.
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import formats as F
from . import reference as R

EXERCISES_DIR = Path(__file__).resolve().parent / "csrc" / "exercises"
CSRC = EXERCISES_DIR.parent
BODY_MARKER = "// @BODY@"
RUN_TIMEOUT_S = 120  #: a check that runs longer is stopped (an endless loop in the body)

# ---------------------------------------------------------------------------------------------
# Kernel exercises: the table
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelExercise:
    """One kernel exercise: its scaffold (a file of ``csrc/exercises/``), the bodies, the check."""

    name: str
    chapter: int
    device: str  #: "cpu" or "cuda"
    title: str
    source: str  #: file name under csrc/exercises/
    starter: str = field(repr=False)
    solution: str = field(repr=False)
    kind: str = "gemm"  #: "gemm" (C = A @ W^T of some formats) or "ring" (chapter 6's ring)
    formats: tuple[str, str] = ("f32", "f32")  #: (weights, activations) for kind "gemm"
    hints: tuple = ()  #: (name of a known wrong variant, hint) pairs, in the order tried; see _variant


_CH1_STARTER = """\
    // your code here: loops over i < tn, j < tm and k0 <= k < k0 + tk that add to acc[i][j]
"""
_CH1_SOLUTION = """\
    for (int i = 0; i < tn; i++) {
        for (int j = 0; j < tm; j++) {
            float s = acc[i][j];
            for (int k = k0; k < k0 + tk; k++) s += A[(long)(n0 + i) * K + k] * W[(long)(m0 + j) * K + k];
            acc[i][j] = s;
        }
    }
"""
_CH3_STARTER = """\
    float sum = 0.0f;
    // your code here: for j = 0..15, decode the low and the high nibble of b->qs[j] into two
    // values (nibble - 8) and add both products with their activations to sum
    return sum * fp16_to_fp32(b->d);
"""
_CH3_SOLUTION = """\
    float sum = 0.0f;
    for (int j = 0; j < 16; j++) {
        const int lo = (b->qs[j] & 0x0F) - 8;  // element j
        const int hi = (b->qs[j] >> 4) - 8;    // element j + 16
        sum += lo * x[j] + hi * x[j + 16];
    }
    return sum * fp16_to_fp32(b->d);
"""
_CH4_STARTER = """\
    int sumi = 0;
    // your code here: the integer dot product of the 32 raw nibbles of w with a->qs
    const float d_w = fp16_to_fp32(w->d), d_a = fp16_to_fp32(a->d), s_a = fp16_to_fp32(a->s);
    return 0.0f;  // your code here: the block's result from d_w, d_a, sumi and s_a
"""
_CH4_SOLUTION = """\
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
        sumi += (w->qs[j] & 0x0F) * a->qs[j];       // element j
        sumi += (w->qs[j] >> 4) * a->qs[j + 16];    // element j + 16
    }
    const float d_w = fp16_to_fp32(w->d), d_a = fp16_to_fp32(a->d), s_a = fp16_to_fp32(a->s);
    return d_w * (d_a * (float)sumi - 8.0f * s_a);
"""
_CH6_RING_STARTER = """\
    *stage = 0;         // your code here
    *full_parity = 0;   // your code here
    *empty_parity = 0;  // your code here
"""
_CH6_RING_SOLUTION = """\
    const int round = t / stages;   // how many times the stage has been used before step t
    *stage = t % stages;
    *full_parity = round & 1;       // the round-th completion of full[stage] (counting from 0)
    *empty_parity = (round & 1) ^ 1;  // the previous round's release; round 0: the fresh barrier's 1
"""
_CH1_CUDA_STARTER = """\
    // your code here: add the products of this thread's row of As and its row of Ws
    return acc;
"""
_CH1_CUDA_SOLUTION = """\
    for (int k = 0; k < TILE; k++) acc += As[ty][k] * Ws[tx][k];
    return acc;
"""
_CH4_CUDA_STARTER = """\
    int sumi = 0;
    // your code here: for i = 0..3, two __dp4a calls on the low and the high nibbles of w[i]
    return sumi;
"""
_CH4_CUDA_SOLUTION = """\
    int sumi = 0;
    for (int i = 0; i < 4; i++) {
        sumi = __dp4a(w[i] & 0x0F0F0F0F, a[i], sumi);            // elements 4i .. 4i+3
        sumi = __dp4a((w[i] >> 4) & 0x0F0F0F0F, a[i + 4], sumi);  // elements 4i+16 .. 4i+19
    }
    return sumi;
"""
_CH6_WARP_STARTER = """\
    float sum = 0.0f;
    // your code here: this lane's blocks, then the warp reduction
    if (lane == 0) y[m] = sum;
"""
_CH6_WARP_SOLUTION = """\
    float sum = 0.0f;
    for (int b = lane; b < nb; b += 32) sum += dot_q4_0_block(&W[(long)m * nb + b], x + 32 * b);
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) y[m] = sum;
"""

KERNEL_EXERCISES: dict[str, KernelExercise] = {
    e.name: e
    for e in (
        KernelExercise(
            "ch1_tile",
            1,
            "cpu",
            "The inner loop of a blocked GEMM",
            "ch1_tile.cpp",
            _CH1_STARTER,
            _CH1_SOLUTION,
            hints=(
                ("zeros", "Every output is 0: the body adds nothing to acc yet."),
                ("k_from_0", "Every K slice added the first tk values of the rows: the k loop starts at k0."),
                ("last_slice", "Only the last K slice counts: add to acc[i][j] (+=), do not overwrite it."),
            ),
        ),
        KernelExercise(
            "ch3_nibbles",
            3,
            "cpu",
            "W4A16: decode the nibble pairs inside the dot product",
            "ch3_nibbles.cpp",
            _CH3_STARTER,
            _CH3_SOLUTION,
            formats=("q4_0", "f32"),
            hints=(
                ("zeros", "Every output is 0: the body adds nothing to sum yet."),
                ("no_offset", "You used the nibbles 0..15 as they are: each value is (nibble - 8) * d."),
                (
                    "interleaved",
                    "Nibble order: byte j holds element j (low nibble) and element j + 16 (high), "
                    "not elements 2j and 2j + 1.",
                ),
                ("swapped", "Low and high nibble swapped: the low nibble (qs[j] & 0x0F) is element j."),
                ("no_scale", "The scale is missing: multiply by d = fp16_to_fp32(b->d)."),
            ),
        ),
        KernelExercise(
            "ch4_q8_1",
            4,
            "cpu",
            "W4A8: a Q4_0 x Q8_1 block pair in integers, with the compensation",
            "ch4_q8_1.cpp",
            _CH4_STARTER,
            _CH4_SOLUTION,
            formats=("q4_0", "q8_1"),
            hints=(
                ("zeros", "Every output is 0: the body returns 0 (the starter's return line)."),
                ("no_compensation", "That is d_w * d_a * sumi: the -8 * s_a term is missing."),
                ("plus_compensation", "The sign of the 8 * s_a term is flipped: d_w * (d_a * sumi - 8 * s_a)."),
                (
                    "signed",
                    "That is the signed formula d_w d_a sum((q - 8) q_a): right up to the fp16 rounding of "
                    "s_a, but this exercise (and chapter 4's kernels) keep the raw nibbles and subtract 8 * s_a once.",
                ),
                ("interleaved", "Nibble order: byte j holds element j (low nibble) and element j + 16 (high)."),
            ),
        ),
        KernelExercise(
            "ch6_ring",
            6,
            "cpu",
            "The ring of stages: stage index and mbarrier parities",
            "ch6_ring.cpp",
            _CH6_RING_STARTER,
            _CH6_RING_SOLUTION,
            kind="ring",
        ),
        KernelExercise(
            "ch1_tile_cuda",
            1,
            "cuda",
            "CUDA: the inner loop of a shared-memory tiled GEMM",
            "ch1_tile_cuda.cu",
            _CH1_CUDA_STARTER,
            _CH1_CUDA_SOLUTION,
            hints=(
                ("zeros", "Every output is 0: the body adds nothing to acc yet."),
                (
                    "transposed_tile",
                    "Thread (tx, ty) owns C[n0 + ty][m0 + tx]: its row of As is As[ty], its row of Ws is Ws[tx].",
                ),
            ),
        ),
        KernelExercise(
            "ch3_nibbles_cuda",
            3,
            "cuda",
            "CUDA: the nibble pairs decoded by every lane of a warp",
            "ch3_nibbles_cuda.cu",
            _CH3_STARTER,
            _CH3_SOLUTION,
            formats=("q4_0", "f32"),
            hints=(
                ("zeros", "Every output is 0: the body adds nothing to sum yet."),
                ("no_offset", "You used the nibbles 0..15 as they are: each value is (nibble - 8) * d."),
                ("interleaved", "Nibble order: byte j holds element j (low nibble) and element j + 16 (high)."),
                ("swapped", "Low and high nibble swapped: the low nibble (qs[j] & 0x0F) is element j."),
                ("no_scale", "The scale is missing: multiply by d = fp16_to_fp32(b->d)."),
            ),
        ),
        KernelExercise(
            "ch4_dp4a_cuda",
            4,
            "cuda",
            "CUDA: a block pair's sumi with 8 __dp4a",
            "ch4_dp4a_cuda.cu",
            _CH4_CUDA_STARTER,
            _CH4_CUDA_SOLUTION,
            formats=("q4_0", "q8_1"),
            hints=(
                (
                    "sumi_zero",
                    "sumi is 0: the body adds nothing yet (the scaffold's d_w * (d_a * sumi - 8 * s_a) then leaves "
                    "-8 d_w s_a per block).",
                ),
                (
                    "signed_then_compensated",
                    "That sumi is over nibble - 8: use the raw nibbles 0..15; the scaffold subtracts 8 * s_a.",
                ),
                (
                    "word_pairs",
                    "The high nibbles of word i are elements 4i+16..4i+19: pair them with a[i + 4], and the low "
                    "nibbles with a[i].",
                ),
            ),
        ),
        KernelExercise(
            "ch6_warp_dot_cuda",
            6,
            "cuda",
            "CUDA: a decode dot product, one warp per output",
            "ch6_warp_dot_cuda.cu",
            _CH6_WARP_STARTER,
            _CH6_WARP_SOLUTION,
            formats=("q4_0", "f32"),
            hints=(
                ("zeros", "Every output is 0: the lanes add nothing yet."),
                (
                    "lane0_only",
                    "Only lane 0's blocks (0, 32, 64, ...) are in the result: the warp reduction "
                    "is missing (__shfl_xor_sync with offsets 16, 8, 4, 2, 1).",
                ),
            ),
        ),
    )
}


def names(device: str | None = None) -> list[str]:
    """The kernel exercises' names (of one device, "cpu" or "cuda", if given), in chapter order."""
    return [
        e.name
        for e in sorted(KERNEL_EXERCISES.values(), key=lambda e: (e.chapter, e.device))
        if device is None or e.device == device
    ]


def _exercise(name: str) -> KernelExercise:
    if name not in KERNEL_EXERCISES:
        raise ValueError(f"no kernel exercise {name!r}: the exercises are {', '.join(names())}")
    return KERNEL_EXERCISES[name]


def starter(name: str) -> str:
    """The starter body of an exercise (it compiles; its result is wrong)."""
    return _exercise(name).starter


def solution(name: str) -> str:
    """The reference body of an exercise (for the tests; the book does not show it)."""
    return _exercise(name).solution


def available(name: str) -> tuple[bool, str]:
    """Whether exercise ``name`` can be compiled and run here, and if not, why."""
    ex = _exercise(name)
    if ex.device == "cpu":
        return True, ""
    from ._build import cuda_build_possible

    if cuda_build_possible():
        return True, ""
    if os.environ.get("QUANTGEMM_NO_CUDA") == "1":
        return False, f"{name} is a CUDA exercise and QUANTGEMM_NO_CUDA=1 is set"
    return False, f"{name} is a CUDA exercise: it needs an NVIDIA GPU, a CUDA build of PyTorch and nvcc"


def _scaffold(ex: KernelExercise) -> str:
    return (EXERCISES_DIR / ex.source).read_text()


def show(name: str) -> None:
    """Print what exercise ``name`` asks for: the function to complete, with the starter body
    between two marker lines, and how to check it."""
    ex = _exercise(name)
    text = _scaffold(ex)
    shown = text[text.index("// [show]\n") + len("// [show]\n") : text.index("// [/show]")]
    begin = "    // ---------- your code: begin (edit the string `body` below) ----------\n"
    end = "    // ---------- your code: end ----------\n"
    shown = shown.replace(f"    {BODY_MARKER}\n", begin + ex.starter + end)
    where = "CUDA, for a GPU" if ex.device == "cuda" else "C++, for the CPU"
    print(f"Exercise {name} (chapter {ex.chapter}, {where}): {ex.title}.\n")
    print(shown.rstrip())
    print(
        f'\nWrite the body as a string, body = r"""...""", then run exercises.check("{name}", body). '
        "printf works (stdio.h is included): what your code prints is shown after the verdict."
    )


# ---------------------------------------------------------------------------------------------
# Kernel exercises: building
# ---------------------------------------------------------------------------------------------


class ExerciseCompileError(RuntimeError):
    """The reader's body did not compile; the message holds the compiler's errors, lines counted in the body."""


class _CompilerFailed(Exception):
    def __init__(self, output: str):
        super().__init__("compiler failed")
        self.output = output


def _flags(cuda: bool) -> dict:
    from ._build import _cpu_arch_flags, _cuda_arch_list

    cflags = ["-O2", "-ffp-contract=off", *_cpu_arch_flags()]
    return {
        "cflags": cflags,
        "cuda_flags": ["-O2", "-lineinfo"] if cuda else [],
        "arch_list": _cuda_arch_list() if cuda else "",
    }


def _headers(text: str, where: Path) -> list[Path]:
    """The package headers a scaffold includes, directly or through other headers."""
    from ._build import files_read

    tmp = [where / inc for inc in re.findall(r'#\s*include\s*"([^"]+)"', text)]
    tmp = [p if p.is_file() else CSRC / p.name for p in tmp]
    return files_read([p for p in tmp if p.is_file()])


def _body_text(body: str) -> str:
    if not isinstance(body, str):
        raise TypeError(f"body must be a string of C++ code, got {type(body).__name__}")
    body = textwrap.dedent(body).strip("\n")
    return textwrap.indent(body, "    ") + "\n"


def _build_tag(ex: KernelExercise, body: str, flags: dict) -> str:
    import torch

    h = hashlib.sha256()
    scaffold = _scaffold(ex)
    # The scaffold's path is part of the key: the assembled source names it (#line), and so does a
    # failed build's stored compiler output, which is read back by replacing this checkout's paths.
    # Two checkouts sharing one cache (a CI clone beside an installed copy) would otherwise read each
    # other's messages with the other's paths left in them.
    parts = (scaffold, body, repr(sorted(flags.items())), torch.__version__, f"{sys.version_info[:2]}")
    for part in (*parts, EXERCISES_DIR.as_posix()):
        h.update(part.encode())
        h.update(b"\0")
    for f in _headers(scaffold, EXERCISES_DIR):
        h.update(f.read_bytes())
    if any(f.startswith("-march=native") or f.startswith("-mcpu=native") for f in flags["cflags"]):
        h.update(platform.node().encode())
    return f"{ex.name}-{h.hexdigest()[:16]}"


def _assemble(ex: KernelExercise, body: str, body_file: Path) -> str:
    """The scaffold with the body in place of its marker line, the body's lines counted from 1 in
    ``body_file`` (which holds the same lines, so that the compiler can quote them)."""
    lines = _scaffold(ex).splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if ln.strip() == BODY_MARKER)
    scaffold_path = (EXERCISES_DIR / ex.source).as_posix()
    return "".join(
        [
            *lines[:at],
            f'#line 1 "{body_file.as_posix()}"\n',
            body,
            f'#line {at + 2} "{scaffold_path}"\n',
            *lines[at + 1 :],
        ]
    )


def build(name: str, body: str) -> Path:
    """Compile exercise ``name`` with ``body`` (cached by a hash of both); return the library's path.

    Raises :class:`ExerciseCompileError` with the compiler's messages when the body does not compile,
    RuntimeError when the exercise cannot be built here (a CUDA exercise without CUDA)."""
    from ._build import _check_compiler, cache_root

    ex = _exercise(name)
    ok, why = available(name)
    if not ok:
        raise RuntimeError(why)
    cuda = ex.device == "cuda"
    body = _body_text(body)
    flags = _flags(cuda)
    tag = _build_tag(ex, body, flags)
    root = cache_root() / "exercises"
    build_dir = root / tag
    build_dir.mkdir(parents=True, exist_ok=True)
    lib_name = "qgex_" + tag.replace("-", "_")
    so_path = build_dir / f"{lib_name}.so"
    failed = build_dir / "compiler_output.txt"  # a body that did not compile: the compiler's raw output
    with open(root / f"{tag}.flock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the OS if this process dies
        try:
            if failed.exists():
                raise ExerciseCompileError(_readable_compiler_output(failed.read_text(), build_dir))
            if (build_dir / "built.ok").exists() and so_path.exists():
                return so_path
            _check_compiler(cuda)
            body_file = build_dir / "your_code.txt"
            body_file.write_text(body)
            src = build_dir / f"{ex.name}{'.cu' if cuda else '.cpp'}"
            src.write_text(_assemble(ex, body, body_file))
            stale = build_dir / "lock"  # torch's FileBaton, left by a killed build
            if stale.exists():
                stale.unlink()
            try:
                _compile(src, lib_name, build_dir, flags, cuda)
            except _CompilerFailed as e:
                failed.write_text(e.output)
                raise ExerciseCompileError(_readable_compiler_output(e.output, build_dir)) from None
            (build_dir / "built.ok").write_text(tag)
            return so_path
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _compile(src: Path, lib_name: str, build_dir: Path, flags: dict, cuda: bool) -> None:
    from torch.utils.cpp_extension import load

    saved_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if flags["arch_list"]:
        os.environ["TORCH_CUDA_ARCH_LIST"] = flags["arch_list"]

    # A C++ exercise compiles in about a second, silently; nvcc takes longer, so a CUDA one says so.
    def say(text, end=""):
        if cuda:
            print(text, end=end, file=sys.stderr, flush=True)

    say("quantgemm_kernels: compiling your CUDA code ...")
    t0 = time.perf_counter()
    try:
        load(
            name=lib_name,
            sources=[str(src)],
            extra_cflags=flags["cflags"],
            extra_cuda_cflags=flags["cuda_flags"],
            extra_include_paths=[str(EXERCISES_DIR), str(CSRC)],
            build_directory=str(build_dir),
            with_cuda=cuda,
            is_python_module=False,
            verbose=False,
        )
    except OSError:
        # Built, but load() could not also open it in this process (torch.ops.load_library): a CUDA
        # runtime library that only the runner's library path finds. The runner opens it, not we.
        if not (build_dir / f"{lib_name}.so").exists():
            raise
    except Exception as e:  # torch raises RuntimeError("Error building extension ...: <compiler output>")
        say(" failed", end="\n")
        raise _CompilerFailed(str(e)) from None
    finally:
        if saved_arch is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = saved_arch
    say(f" done in {time.perf_counter() - t0:.0f} s", end="\n")


_NOISE = re.compile(r"^(\[\d+/\d+\]|FAILED:|ninja: |Error building extension|subprocess\.CalledProcessError)")


def _readable_compiler_output(text: str, build_dir: Path) -> str:
    """The compiler's messages without ninja's command lines, the body's file named ``your code``."""
    body_file = (build_dir / "your_code.txt").as_posix()
    out = []
    for line in text.splitlines():
        line = re.sub(r"^Error building extension '[^']*':\s*", "", line)
        if not line.strip() or _NOISE.match(line):
            continue
        if re.search(r"(^|/)(c\+\+|g\+\+|gcc|clang\+\+|nvcc)\s.*\s-c\s", line):  # a compile command
            continue
        line = line.replace(body_file, "your code")
        line = line.replace(EXERCISES_DIR.as_posix() + "/", "scaffold ")
        line = line.replace(CSRC.as_posix() + "/", "csrc/")
        line = line.replace(build_dir.as_posix() + "/", "scaffold ")
        out.append(line)
    errors = [ln for ln in out if re.search(r"\berror\b", ln)]
    mine = any(re.match(r"your code[:(]", ln) for ln in errors)
    in_scaffold = any(ln.startswith("scaffold ") for ln in errors)
    head = f"Your body does not compile: {len(errors) or 'the'} error{'s' if len(errors) != 1 else ''}"
    head += " (lines counted from the first line of your body)." if mine else "."
    if in_scaffold:
        head += (
            "\nAn error the compiler places in the scaffold, after your code, usually means that your body is"
            " unfinished: a missing ';', or an unclosed brace, parenthesis or comment."
        )
    keep = out[:40] + ([f"... ({len(out) - 40} more lines)"] if len(out) > 40 else [])
    return head + "\n" + "\n".join(keep)


# ---------------------------------------------------------------------------------------------
# Kernel exercises: running and checking
# ---------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """The outcome of :func:`diagnose`: ``ok`` and the message :func:`check` prints."""

    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok


#: Cases beyond testing.SHAPES (normal values): awkward values at check_on_distributions' shape, and
#: a decode step at an LLM size (a Llama-3-8B attention projection).
EXTRA_CASES = (((37, 5, 320), "outliers"), ((37, 5, 320), "tiny"), ((4096, 1, 4096), "normal"))
_DIST_WORDS = {"outliers": "1% of the values 100x larger", "tiny": "values around 1e-6, scales near fp16's subnormals"}


def _gemm_cases(ex: KernelExercise):
    """(shape, inputs, reference, distribution) per case: testing.SHAPES with normal values, then
    EXTRA_CASES, the inputs made as testing.check_kernel makes them."""
    from .testing import SHAPES, kernel_inputs

    wfmt, afmt = ex.formats
    cases = []
    for (M, N, K), dist in [*((s, "normal") for s in SHAPES), *EXTRA_CASES]:
        A, W = kernel_inputs(None, M, N, K, dist, seed=M * 7 + N)
        if wfmt == "f32":
            ins, ref = [A, W], R.gemm_f32(A, W)
        elif afmt == "f32":
            Wq = F.quantize(W, wfmt)
            ins, ref = [A, Wq], R.gemm_wq_af32(A, Wq, wfmt)
        else:
            Wq, Aq = F.quantize(W, wfmt), F.quantize_q8_1(A)
            ins, ref = [Aq, Wq], R.gemm_wq_aq8_1(Aq, Wq, wfmt)
        cases.append(((M, N, K), ins, ref, dist))
    return cases


def _library_path() -> str:
    """LD_LIBRARY_PATH for the runner: torch's libraries and the CUDA runtime the build linked
    (``$CUDA_HOME/lib64``), which a process that has not imported torch may not find otherwise."""
    import torch
    from torch.utils import cpp_extension as ce

    dirs = [str(Path(torch.__file__).parent / "lib")]
    dirs += sorted(str(d) for d in Path(torch.__file__).parent.parent.glob("nvidia/*/lib"))  # pip CUDA wheels
    if ce.CUDA_HOME:
        dirs += [os.path.join(ce.CUDA_HOME, d) for d in ("lib64", "lib")]
    if os.environ.get("LD_LIBRARY_PATH"):
        dirs.append(os.environ["LD_LIBRARY_PATH"])
    return os.pathsep.join(d for d in dirs if d)


def _run(so_path: Path, cases: list[tuple[list[np.ndarray], list[np.ndarray], list[int]]], cuda: bool = False):
    """Run the library on ``cases`` ((inputs, output templates, dims) each) in a process of its
    own. Returns ``(outputs per case, None, printed)`` or ``(None, (case index or None, what, why),
    printed)``, ``printed`` being what the reader's code wrote to stdout (printf, for debugging)."""
    runner = Path(__file__).resolve().parent / "_exercise_runner.py"
    with tempfile.TemporaryDirectory(prefix="qgex-") as tmp:
        cases_path, out_path = Path(tmp) / "cases.npz", Path(tmp) / "out.npz"
        arrays = {"cases": np.array(len(cases))}
        for k, (ins, outs, dims) in enumerate(cases):
            arrays[f"c{k}_dims"] = np.asarray(dims, np.int64)
            arrays.update({f"c{k}_in{i}": a for i, a in enumerate(ins)})
            arrays.update({f"c{k}_out{i}": a for i, a in enumerate(outs)})
        np.savez(cases_path, **arrays)
        env = {**os.environ, "PYTHONFAULTHANDLER": "0", "LD_LIBRARY_PATH": _library_path()}
        try:
            p = subprocess.run(
                [sys.executable, str(runner), str(so_path), str(cases_path), str(out_path)]
                + (["--torch"] if cuda else []),
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S,
                env=env,
            )
        except subprocess.TimeoutExpired as e:
            done = re.findall(
                r"^case (\d+)$",
                (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""),
                re.M,
            )
            k = int(done[-1]) if done else None
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            return None, (k, f"did not finish within {RUN_TIMEOUT_S} s and was stopped", "an endless loop?"), out
        started = re.findall(r"^case (\d+)$", p.stderr, re.M)
        k = int(started[-1]) if started else None
        if p.returncode == 3:
            msg = re.search(r"^error in case \d+: (.*)$", p.stderr, re.M)
            return None, (k, "reported an error", msg.group(1) if msg else p.stderr.strip()[-500:]), p.stdout
        if p.returncode != 0:
            if p.returncode < 0:
                import signal

                try:
                    sig = signal.Signals(-p.returncode).name
                except ValueError:
                    sig = f"signal {-p.returncode}"
                why = {
                    "SIGSEGV": "a read or write outside the arrays?",
                    "SIGBUS": "a read or write outside the arrays?",
                    "SIGFPE": "an integer division by zero?",
                    "SIGILL": "a trap the compiler put where the code would do something undefined "
                    "(a null pointer, a missing return)?",
                }.get(sig, "")
                return None, (k, f"crashed ({sig})", why), p.stdout
            return None, (k, f"failed (exit status {p.returncode})", p.stderr.strip()[-500:]), p.stdout
        data = np.load(out_path)
        outs = [[data[f"c{k}_out{i}"] for i in range(len(c[1]))] for k, c in enumerate(cases)]
        return outs, None, p.stdout


def _with_printed(v: Verdict, printed: str, limit: int = 30) -> Verdict:
    """The verdict, followed by what the reader's code printed (its first ``limit`` lines)."""
    if not printed.strip():
        return v
    lines = printed.rstrip("\n").splitlines()
    more = f" (the first {limit} of {len(lines)} lines)" if len(lines) > limit else ""
    shown = "\n".join("  | " + ln[:200] for ln in lines[:limit])
    return Verdict(v.ok, f"{v.message}\nYour code printed{more}:\n{shown}")


def _first_wrong(got: np.ndarray, want: np.ndarray):
    """Index of the first output (row-major) that differs beyond float32 rounding, and how many do."""
    tol = 1e-4 * float(np.abs(want).max(initial=0.0)) + 1e-30
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(got.astype(np.float64) - want) <= tol)
    idx = np.argwhere(bad)
    return (tuple(int(i) for i in idx[0]) if len(idx) else None), int(bad.sum())


def _variant(ex: KernelExercise, which: str, shape, ins) -> np.ndarray | None:
    """What a body with a known mistake computes, for the hints."""
    M, N, K = shape
    wfmt, afmt = ex.formats
    if which == "zeros":
        return np.zeros((N, M))
    if wfmt == "f32":
        A, W = (np.asarray(a, np.float64) for a in ins)
        if which == "k_from_0":
            slices = -(-K // 64)
            return sum(A[:, : min(64, K - 64 * s)] @ W[:, : min(64, K - 64 * s)].T for s in range(slices))
        if which == "last_slice":
            k0 = 64 * ((K - 1) // 64)
            return A[:, k0:] @ W[:, k0:].T
        if which == "transposed_tile":  # CUDA tile of 16: thread (tx, ty) used A row n0 + tx and W row m0 + ty
            out = np.zeros((N, M))
            for n in range(N):
                for m in range(M):
                    a_row, w_row = n - n % 16 + m % 16, m - m % 16 + n % 16
                    if a_row < N and w_row < M:
                        out[n, m] = A[a_row] @ W[w_row]
            return out
        return None
    if afmt == "f32":
        A, Wq = ins
        b = F.as_blocks(Wq, "q4_0")
        d = b["d"].astype(np.float64)[..., None]
        q = np.concatenate([b["qs"] & 0x0F, b["qs"] >> 4], axis=-1).astype(np.float64)  # [M, nb, 32]
        if which == "no_offset":
            w = q * d
        elif which == "interleaved":
            w = (np.stack([b["qs"] & 0x0F, b["qs"] >> 4], axis=-1).reshape(*b.shape, 32) - 8.0) * d
        elif which == "swapped":
            w = (np.concatenate([b["qs"] >> 4, b["qs"] & 0x0F], axis=-1) - 8.0) * d
        elif which == "no_scale":
            w = q - 8.0
        elif which == "lane0_only":
            nb = b.shape[1]
            keep = (np.arange(nb) % 32 == 0)[None, :, None]
            w = (q - 8.0) * d * keep
        else:
            return None
        return np.asarray(A, np.float64) @ w.reshape(M, K).T
    Aq, Wq = ins
    wb, ab = F.as_blocks(Wq, "q4_0"), F.as_blocks(Aq, "q8_1")
    qw = np.concatenate([wb["qs"] & 0x0F, wb["qs"] >> 4], axis=-1).astype(np.int64)
    if which == "interleaved":
        qw = np.stack([wb["qs"] & 0x0F, wb["qs"] >> 4], axis=-1).reshape(*wb.shape, 32).astype(np.int64)
    qa = ab["qs"].astype(np.int64)
    dw, da = wb["d"].astype(np.float64)[None], ab["d"].astype(np.float64)[:, None]
    sa = ab["s"].astype(np.float64)[:, None]
    sumi = np.einsum("nbj,mbj->nmb", qa, qw)
    if which == "word_pairs":  # word i's low nibbles with a[2i], its high nibbles with a[2i + 1]
        lo, hi = wb["qs"][..., :16] & 0x0F, wb["qs"][..., :16] >> 4  # [M, nb, 16] bytes 4i + t
        q2 = np.stack([lo.reshape(*wb.shape, 4, 4), hi.reshape(*wb.shape, 4, 4)], axis=-2).reshape(*wb.shape, 32)
        sumi = np.einsum("nbj,mbj->nmb", qa, q2.astype(np.int64))
        return (dw * (da * sumi - 8.0 * sa)).sum(axis=2)
    if which == "sumi_zero":
        return (-8.0 * dw * sa).sum(axis=2)
    if which == "signed_then_compensated":
        sumi8 = np.einsum("nbj,mbj->nmb", qa, qw - 8)
        return (dw * (da * sumi8 - 8.0 * sa)).sum(axis=2)
    if which == "no_compensation":
        per = dw * da * sumi
    elif which == "plus_compensation":
        per = dw * (da * sumi + 8.0 * sa)
    elif which == "signed":
        return R.gemm_wq_aq8_1(Aq, Wq, "q4_0", "signed")
    elif which == "interleaved":
        per = dw * (da * sumi - 8.0 * sa)
    else:
        return None
    return per.sum(axis=2)


def _gemm_verdict(ex: KernelExercise, cases, outs) -> Verdict:
    from .testing import KERNEL_NMSE

    passed = []
    for (shape, ins, ref, dist), (got,) in zip(cases, outs):
        M, N, K = shape
        err = R.nmse(got, ref)
        if err <= KERNEL_NMSE:
            passed.append(shape)
            continue
        at, nbad = _first_wrong(got, ref)
        values = "" if dist == "normal" else f" with {dist} values ({_DIST_WORDS[dist]})"
        if not passed:
            before = f"the first of the {len(cases)} cases."
        elif len(passed) <= 4:
            before = f"after {', '.join(f'M={s[0]} N={s[1]} K={s[2]}' for s in passed)} passed."
        else:
            before = f"after {len(passed)} of the {len(cases)} cases passed."
        lines = [
            f"Not yet: wrong on M={M}, N={N}, K={K}{values} (C is [N, M] = [{N}, {M}]), {before}",
            f"  NMSE {err:.3g} > {KERNEL_NMSE:g} (testing.KERNEL_NMSE: float32 rounding of the same arithmetic "
            "stays far below it).",
        ]
        if at is not None:
            n, m = at
            g = got[n, m]
            gs = "NaN (never written: the output was filled with NaN before the run)" if np.isnan(g) else f"{g:.7g}"
            lines.append(
                f"  First wrong output C[{n}, {m}] (token n={n}, output m={m}): expected {ref[n, m]:.7g}, got {gs}; "
                f"{nbad} of {N * M} outputs wrong."
            )
        for which, hint in ex.hints:
            alt = _variant(ex, which, shape, ins)
            if alt is not None and R.nmse(got, alt) <= 1e-6 and R.nmse(alt, ref) > KERNEL_NMSE:
                lines.append(f"  Hint: {hint}")
                break
        return Verdict(False, "\n".join(lines))
    return Verdict(
        True,
        f"Correct: {ex.name} matches the reference on all {len(cases)} cases (the kernel tests' ragged shapes, "
        "M = 1, N = 1 and K = 32 included; outliers and tiny values; a decode step at M = K = 4096), "
        f"NMSE <= {max(R.nmse(o[0], c[2]) for c, o in zip(cases, outs)):.1e}.",
    )


# ---- chapter 6's ring: a model of the producer, the consumers and their mbarriers ----


def ring_reference(t: int, stages: int) -> tuple[int, int, int]:
    """The stage of K step ``t`` and the parities its waits use (full: consumers, empty: producer)."""
    r = t // stages
    return t % stages, r & 1, (r & 1) ^ 1


def simulate_ring(slots, stages: int, policy: str = "producer_first", seed: int = 0) -> str | None:
    """Run a producer and a consumer over ``len(slots)`` K steps through ``stages`` stages, each
    stage with a full and an empty mbarrier (one arrival completes a phase), using ``slots[t] =
    (stage, full_parity, empty_parity)``. A wait for parity p passes once the phase of parity p has
    completed: with c completed phases, when ``c & 1 != p`` (a fresh barrier passes a wait for 1).

    ``policy`` decides who moves when both can: "producer_first" (the producer runs as far ahead
    as its waits let it), "consumer_first", or "random". Returns None when every step is produced
    and consumed in order, else what went wrong: a deadlock, a consumer that read a stage before
    its step was in it, or a producer that refilled a stage whose step was not yet consumed."""
    steps = len(slots)
    full = [0] * stages  # completed phases
    empty = [0] * stages
    held = [None] * stages  # the K step a stage holds, None once consumed
    rng = np.random.default_rng(seed)
    p = c = 0
    while c < steps:
        can_p = p < steps and (empty[slots[p][0]] & 1) != slots[p][2]
        can_c = c < p + 1 and (full[slots[c][0]] & 1) != slots[c][1]
        if not can_p and not can_c:
            parts = []
            if p < steps:
                s, _, e = slots[p]
                parts.append(f"the producer, at step {p}, waits on empty[{s}] for parity {e} ({_phases(empty[s])})")
            s, f, _ = slots[c]
            parts.append(f"the consumer, at step {c}, waits on full[{s}] for parity {f} ({_phases(full[s])})")
            return "deadlock: " + "; ".join(parts) + "."
        move_p = can_p and (not can_c or policy == "producer_first" or (policy == "random" and rng.random() < 0.5))
        if move_p:
            s = slots[p][0]
            if held[s] is not None:
                return (
                    f"race: the producer refilled stage {s} with step {p} while it still held step {held[s]}, "
                    "which the consumer had not read yet."
                )
            held[s] = p
            full[s] += 1
            p += 1
        else:
            s = slots[c][0]
            if held[s] != c:
                has = "nothing" if held[s] is None else f"step {held[s]}"
                return (
                    f"race: the consumer passed full[{s}] at step {c} and found {has} in stage {s} "
                    f"(the producer is at step {p})."
                )
            held[s] = None
            empty[s] += 1
            c += 1
    return None


def _phases(completed: int) -> str:
    n = f"{completed} phase{'s' if completed != 1 else ''} completed"
    return f"{n}: only a wait for parity {(completed + 1) & 1} passes now"


def _ring_cases():
    return [(stages, 4 * stages + 3) for stages in (1, 2, 3, 4, 6)]


def _ring_verdict(outs) -> Verdict:
    for (stages, steps), (slots,) in zip(_ring_cases(), outs):
        slots = [tuple(int(v) for v in row) for row in slots]
        for t, (s, f, e) in enumerate(slots):
            if not (0 <= s < stages) or f not in (0, 1) or e not in (0, 1):
                return Verdict(
                    False,
                    f"Not yet: with {stages} stages, step {t} gives stage {s}, full parity {f}, "
                    f"empty parity {e}: a stage is 0..{stages - 1}, a parity 0 or 1.",
                )
        for policy in ("producer_first", "consumer_first", "random"):
            what = simulate_ring(slots, stages, policy)
            if what is not None:
                t = next(t for t in range(steps) if slots[t] != ring_reference(t, stages))
                order = {
                    "producer_first": "the producer running ahead",
                    "consumer_first": "the consumer keeping up",
                    "random": "a random order",
                }[policy]
                return Verdict(
                    False,
                    (
                        f"Not yet: with {stages} stage{'s' if stages > 1 else ''} and {order}, the model finds a {what}\n"
                        f"  First step that differs from the kernel's schedule: t = {t}, where your function gives "
                        f"(stage, full parity, empty parity) = {slots[t]}."
                    ),
                )
        t_bad = [t for t in range(steps) if slots[t] != ring_reference(t, stages)]
        if t_bad:  # runs in the model, but not the schedule (e.g. stages used in another order)
            t = t_bad[0]
            return Verdict(
                False,
                f"Not yet: with {stages} stages the model runs, but step {t} uses stage {slots[t][0]}; "
                f"the kernel cycles through the stages in order, step t in stage t mod stages.",
            )
    n = sum(s for _, s in _ring_cases())
    return Verdict(
        True,
        f"Correct: {n} K steps with 1, 2, 3, 4 and 6 stages run through the model of the "
        "mbarriers with the producer ahead, the consumer ahead and in random order: no deadlock, no race.",
    )


def diagnose(name: str, body: str) -> Verdict:
    """Compile ``body`` into exercise ``name``, run it and compare; return a :class:`Verdict`.
    Raises only for a misuse (an unknown exercise, a body that is not a string) or for an
    exercise that cannot run here (:func:`available`)."""
    ex = _exercise(name)
    ok, why = available(name)
    if not ok:
        raise RuntimeError(why)
    try:
        so = build(name, body)
    except ExerciseCompileError as e:
        return Verdict(False, str(e))
    if ex.kind == "ring":
        cases = _ring_cases()
        runs = [([], [np.full((steps, 3), -1, np.int32)], [stages, steps]) for stages, steps in cases]
        outs, err, printed = _run(so, runs)
        if err:
            k, what, why = err
            at = f" in the run with {cases[k][0]} stages" if k is not None else ""
            return _with_printed(Verdict(False, f"Your code {what}{at}" + (f": {why}" if why else ".")), printed)
        return _with_printed(_ring_verdict(outs), printed)
    cases = _gemm_cases(ex)
    runs = [(ins, [np.full((s[1], s[0]), np.nan, np.float32)], list(s)) for s, ins, _, _ in cases]
    outs, err, printed = _run(so, runs, cuda=ex.device == "cuda")
    if err:
        k, what, why = err
        at = f" on M={cases[k][0][0]}, N={cases[k][0][1]}, K={cases[k][0][2]}" if k is not None else ""
        v = Verdict(
            False,
            f"Your code {what}{at}" + (f": {why}" if why else ".") + "\n  (It ran in a process of its own: "
            "this Python session is unharmed.)",
        )
        return _with_printed(v, printed)
    return _with_printed(_gemm_verdict(ex, cases, outs), printed)


def check(name: str, body: str) -> bool:
    """Compile, run and check ``body`` for exercise ``name``; print the verdict, return whether it
    passed. A CUDA exercise where no GPU is available prints why and returns False."""
    ok, why = available(name)
    if not ok:
        print(f"Not checked here: {why}.")
        return False
    v = diagnose(name, body)
    print(v.message)
    return v.ok


# ---------------------------------------------------------------------------------------------
# Numpy exercises: the checkers the chapters call (chapters 1 to 8)
# ---------------------------------------------------------------------------------------------
# Each prints what differs (with a hint for the usual mistakes) and returns a bool. The data they
# use is made here with the recipes of the chapters' own cells (chapter 2's block x, chapter 5's
# tie block), and the facts they check against are computed here (dp4a, the MMQ schedule, the
# magic-number conversion) rather than taken from the notebook's namespace.


def _viz():
    from . import viz

    return viz


def _llamacpp():
    from . import llamacpp

    return llamacpp


def _ch2_x() -> np.ndarray:
    """Chapter 2's running example block."""
    r = np.random.default_rng(2)
    return np.clip(r.standard_normal(32) * 0.6, -1.9, 1.9).astype(np.float32)


def _ch2_x8() -> np.ndarray:
    """Chapter 2's Q8_0 tie block: d = 1, then values with ties at .5."""
    x8 = np.zeros(32, np.float32)
    x8[0] = 127.0
    x8[1:9] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5]
    return x8


def _ties() -> np.ndarray:
    """Chapter 5's tie block (the same values as chapter 2's), [1, 32]."""
    return _ch2_x8()[None, :].copy()


def _dp4a(a, b, c):
    """CUDA's __dp4a(a, b, c) on Python ints: c + the sum of the four signed-byte products."""
    a8 = np.array([a & 0xFFFFFFFF], dtype=np.uint32).view(np.int8).astype(np.int64)
    b8 = np.array([b & 0xFFFFFFFF], dtype=np.uint32).view(np.int8).astype(np.int64)
    return int(c + (a8 * b8).sum())


def _mmq_schedule(M, N, n_sm, mmq_y=128, mmq_x_max=128):
    """ggml-cuda's MMQ launch decision: (tiles, waves, % of SMs busy with plain tiling, stream-k used)."""
    tiles = -(-M // mmq_y) * -(-N // mmq_x_max)
    waves = -(-tiles // n_sm)
    efficiency = 100 * tiles // (n_sm * waves)
    return tiles, waves, efficiency, efficiency < 90


def _magic_to_float(sumi):
    """Chapter 6's conversion: sumi added to the int32 0x4B400000, the bits read as a float, minus 1.5 * 2^23."""
    bits = (np.int64(0x4B400000) + np.asarray(sumi, np.int64)).astype(np.uint32)
    return bits.view(np.float32) - np.float32(12582912.0)


# ---- chapter 01 ----


def check_decode_costs(flops, nbytes, intensity, M=4096, N=1, K=4096):
    """Exercise 1: FLOPs, fewest float32 bytes, arithmetic intensity of a decode GEMM."""
    if flops is None or nbytes is None or intensity is None:
        print("Not yet: fill in flops, nbytes and intensity.")
        return False
    want_flops = 2 * M * N * K
    want_bytes = 4 * (M * K + N * K + N * M)
    ok = True
    if flops != want_flops:
        ok = False
        hint = " You counted one operation per term: a multiply-add is 2 FLOPs." if flops == M * N * K else ""
        print(f"flops = {flops}, expected {want_flops} (2*M*N*K).{hint}")
    if nbytes != want_bytes:
        ok = False
        if nbytes == want_bytes // 4:
            hint = " You counted values; a float32 value is 4 bytes."
        elif nbytes == 4 * M * K:
            hint = " You counted W only: A and C move too."
        else:
            hint = " Count W [M,K], A [N,K] and C [N,M] once each, 4 bytes per value."
        print(f"nbytes = {nbytes}, expected {want_bytes}.{hint}")
    if not np.isclose(intensity, want_flops / want_bytes, rtol=1e-3):
        ok = False
        print(f"intensity = {intensity}, expected flops / nbytes = {want_flops / want_bytes:.4f} FLOP/byte.")
    if ok:
        print(f"Correct: {want_flops:,} FLOP over {want_bytes:,} bytes, {want_flops / want_bytes:.4f} FLOP/byte.")
    return ok


def check_gemm(my_gemm):
    """Exercise 2: my_gemm(A [N,K], W [M,K]) must return C [N,M] = A @ W.T."""
    for M_, N_, K_ in [(3, 2, 32), (7, 1, 64), (1, 5, 96), (33, 4, 160)]:
        r = np.random.default_rng(M_ + N_)
        A_ = r.standard_normal((N_, K_), dtype=np.float32)
        W_ = r.standard_normal((M_, K_), dtype=np.float32)
        got = my_gemm(A_, W_)
        if got is None:
            print("Not yet: my_gemm returned None.")
            return False
        got = np.asarray(got)
        want = R.gemm_f32(A_, W_)
        if got.shape != want.shape:
            hint = " That is C transposed: C is [N, M] = A @ W.T." if got.shape == (M_, N_) else ""
            print(f"M={M_}, N={N_}, K={K_}: shape {got.shape}, expected (N, M) = {want.shape}.{hint}")
            return False
        e = R.nmse(got, want)
        if not e < 1e-10:
            n_, m_ = np.unravel_index(np.argmax(np.abs(got - want)), want.shape)
            print(
                f"M={M_}, N={N_}, K={K_}: NMSE {e:.2e}; largest difference at "
                f"C[{n_}, {m_}]: got {got[n_, m_]:.5f}, expected {want[n_, m_]:.5f}."
            )
            return False
    print("Correct on 4 shapes, M = 1 and N = 1 included.")
    return True


def check_timer(timer):
    """Exercise 3: timer(fn, warmup, reps): call fn warmup + reps times, return the median s."""
    calls = []

    def fake_kernel():  # 3 cold calls (25 ms), then 2 ms, every 4th call hit by noise (40 ms)
        i = len(calls)
        calls.append(i)
        time.sleep(0.025 if i < 3 else (0.040 if i % 4 == 0 else 0.002))

    got = timer(fake_kernel, 3, 16)
    if got is None:
        print("Not yet: the timer returned None.")
        return False
    if len(calls) != 3 + 16:
        print(f"The timer called fn {len(calls)} times; expected warmup + reps = 19.")
        return False
    if got > 1.0:
        print(f"Got {got:.3g}: that looks like milliseconds; return seconds.")
        return False
    if got > 0.010:
        print(
            f"Got {got * 1e3:.1f} ms; a typical call takes 2 ms. A mean, or timing the "
            "warm-up calls, lets the slow calls pull the number up: use the median of the "
            "timed calls."
        )
        return False
    if got < 0.0019:
        print(f"Got {got * 1e3:.2f} ms, less than one call can take (2 ms): time each call on its own.")
        return False
    print(f"Correct: median {got * 1e3:.2f} ms per call, cold calls and noise ignored.")
    return True


# ---- chapter 02 ----


def _test_blocks():
    """Blocks the checkers use: random, a negative maximum, ties, a zero block."""
    r = np.random.default_rng(7)
    blocks = [r.standard_normal(32).astype(np.float32) for _ in range(3)]
    blocks += [_ch2_x(), _ch2_x8(), np.zeros(32, np.float32)]
    blocks.append((r.standard_t(3, 32) * 5).astype(np.float32))
    return blocks


def check_dequant_q4_0(my_dequant):
    """Exercise 1: my_dequant(18 bytes) -> 32 float32, as llama.cpp's dequantize_row_q4_0."""
    for b, xb in enumerate(_test_blocks()):
        raw = bytes(F.quantize(xb[None, :], "q4_0")[0])
        want = F.dequantize(np.frombuffer(raw, np.uint8)[None, :], "q4_0")[0]
        got = my_dequant(raw)
        if got is None:
            print("Not yet: the function returned None.")
            return False
        got = np.asarray(got, dtype=np.float32).reshape(-1)
        if got.shape != (32,):
            print(f"Block {b}: expected 32 values, got shape {got.shape}.")
            return False
        if not np.array_equal(got, want):
            j = int(np.argmax(got != want))
            dd = float(np.frombuffer(raw[:2], "<f2")[0])
            hints = []
            if np.allclose(got, want + 8 * dd):
                hints.append("every value is 8*d too large: subtract 8 from each nibble")
            inter = np.empty(32, np.float32)
            inter[0::2], inter[1::2] = want[:16], want[16:]
            if np.array_equal(got, inter):
                hints.append(
                    "you read the nibbles as neighbours (2j, 2j+1); value j is the "
                    "low nibble and value j+16 the high nibble of byte 2+j"
                )
            print(
                f"Block {b}: value {j} is {got[j]}, expected {want[j]} (d = {dd})."
                + (" Hint: " + "; ".join(hints) + "." if hints else "")
            )
            return False
    print("Correct on 7 blocks, the zero block included.")
    return True


def check_quantize_q8_0(my_quantize):
    """Exercise 2: my_quantize(32 float32) -> 34 bytes, as quantize_row_q8_0_ref."""
    for b, xb in enumerate(_test_blocks()):
        want = F.quantize(xb[None, :], "q8_0")[0]
        got = my_quantize(xb.copy())
        if got is None:
            print("Not yet: the function returned None.")
            return False
        got = np.frombuffer(bytes(got), np.uint8)
        if got.shape != (34,):
            print(f"Block {b}: expected 34 bytes, got {got.size}.")
            return False
        if not np.array_equal(got[:2], want[:2]):
            got_d, want_d = got[:2].view("<u2")[0], want[:2].view("<u2")[0]
            print(
                f"Block {b}: d differs: got fp16 bits 0x{got_d:04x}, expected 0x{want_d:04x} "
                "(d = max|x| / 127, stored as little-endian float16)."
            )
            return False
        if not np.array_equal(got, want):
            j = int(np.argmax(got[2:] != want[2:]))
            xd = xb[j] * (np.float32(1) / np.float32(np.abs(xb).max() / np.float32(127)))
            hint = (
                " x/d is a tie (.5): C's roundf rounds half away from zero; np.round rounds half to even."
                if abs(abs(xd) % 1 - 0.5) < 1e-6
                else ""
            )
            got_q, want_q = got[2:].view(np.int8)[j], want[2:].view(np.int8)[j]
            print(f"Block {b}: quant {j} is {got_q}, expected {want_q} (x = {xb[j]}, x/d = {xd}).{hint}")
            return False
    print("Correct on 7 blocks, ties and the zero block included.")
    return True


def check_block_dot(my_block_dot):
    """Exercise 3: my_block_dot(Q4_0 bytes, Q8_1 bytes) -> float, with the compensation."""
    for b in range(5):
        w = _viz().sample_values("normal", (1, 32), seed=100 + b)
        a = _viz().sample_values("student_t", (1, 32), seed=200 + b)
        wq, aq = F.quantize(w, "q4_0"), F.quantize(a, "q8_1")
        want = float(R.gemm_wq_aq8_1(aq, wq, "q4_0")[0, 0])
        got = my_block_dot(bytes(wq[0]), bytes(aq[0]))
        if got is None:
            print("Not yet: the function returned None.")
            return False
        if not np.isclose(got, want, rtol=1e-6, atol=1e-9):
            wb = F.as_blocks(wq, "q4_0")[0, 0]
            ab = F.as_blocks(aq, "q8_1")[0, 0]
            qw_, qa_ = F.unpack_quants(wq, "q4_0")[0], F.unpack_quants(aq, "q8_1")[0]
            sumi = int(np.sum(qw_ * qa_))
            no_comp = float(wb["d"]) * float(ab["d"]) * sumi
            plus = float(wb["d"]) * (float(ab["d"]) * sumi + 8 * float(ab["s"]))
            if np.isclose(got, no_comp):
                hint = " That is d_w*d_a*sumi: the -8*s term is missing."
            elif np.isclose(got, plus):
                hint = " The sign of the 8*s term is flipped."
            else:
                hint = ""
            print(f"Block pair {b}: got {got:.6f}, expected {want:.6f}.{hint}")
            return False
    print("Correct on 5 block pairs.")
    return True


# ---- chapter 03 ----


def check_w4a16_bytes(nbytes, intensity_, M=4096, N=1, K=4096):
    """Exercise 1: fewest bytes and arithmetic intensity of a W4A16 decode GEMM (Q4_0 W, f32 A and C)."""
    if nbytes is None or intensity_ is None:
        print("Not yet: fill in nbytes and intensity.")
        return False
    want = M * (K // 32) * 18 + 4 * N * K + 4 * N * M
    ok = True
    if nbytes != want:
        ok = False
        if nbytes == M * K // 2 + 4 * N * K + 4 * N * M:
            hint = " You counted half a byte per weight: each block of 32 also stores its 2-byte scale."
        elif nbytes == M * (K // 32) * 18:
            hint = " You counted W only: A and C are float32 and move too."
        elif nbytes == 4 * (M * K + N * K + N * M):
            hint = " That is float32 weights; Q4_0 stores 18 bytes per 32 weights."
        else:
            hint = " Count W (18 bytes per block of 32), A and C (4 bytes per value) once each."
        print(f"nbytes = {nbytes}, expected {want}.{hint}")
    if not np.isclose(intensity_, 2 * M * N * K / want, rtol=1e-3):
        ok = False
        print(f"intensity = {intensity_}, expected 2*M*N*K / nbytes = {2 * M * N * K / want:.4f} FLOP/byte.")
    if ok:
        print(f"Correct: {want:,} bytes, {2 * M * N * K / want:.3f} FLOP/byte (float32: 0.500).")
    return ok


def check_w4a16_dot(my_dot):
    """Exercise 2: my_dot(a [K] float32, w_bytes [K/32*18] uint8) must return one W4A16 output."""
    r = np.random.default_rng(5)
    for case in range(4):
        K_ = 32 * (case + 1) * 3
        a = r.standard_normal(K_).astype(np.float32)
        w = (r.standard_t(3, (1, K_)) * 0.1).astype(np.float32)
        if case == 2:
            w[:, :32] = 0.0  # a block of zeros: d = 0
        wq = F.quantize(w, "q4_0")
        want = float(R.gemm_wq_af32(a[None, :], wq, "q4_0")[0, 0])
        got = my_dot(a.copy(), wq[0].copy())
        if got is None:
            print("Not yet: my_dot returned None.")
            return False
        got = float(got)
        if abs(got - want) <= 1e-5 * (np.abs(a).sum() * np.abs(F.dequantize(wq, "q4_0")).max() + 1e-30):
            continue
        deq = F.dequantize(wq, "q4_0")[0].astype(np.float64)
        d_per = np.repeat(F.as_blocks(wq, "q4_0")["d"][0].astype(np.float64), 32)
        blocks32 = deq.reshape(-1, 32)
        inter = np.stack([blocks32[:, :16], blocks32[:, 16:]], axis=2).reshape(-1)  # nibbles read as neighbours
        if np.isclose(got, float(a @ (deq + 8 * d_per)), rtol=1e-5):
            hint = " You used the nibbles 0..15 as they are: subtract 8 (or subtract 8 * d * sum(a) per block)."
        elif np.isclose(got, float(a @ inter), rtol=1e-5):
            hint = " The nibbles are in the wrong order: byte j holds element j (low) and element j + 16 (high)."
        else:
            hint = ""
        print(f"K = {K_}: got {got:.6f}, expected {want:.6f}.{hint}")
        return False
    print("Correct on 4 rows, a zero block included.")
    return True


def w4a16_intensity(M, N, K):
    """FLOP per byte of a W4A16 GEMM (Q4_0 W, f32 A and C), as in the text."""
    return 2.0 * M * N * K / (M * (K // 32) * 18 + 4 * N * K + 4 * N * M)


def check_ridge_n(my_ridge_n):
    """Exercise 3: my_ridge_n(M, K, balance) = smallest N whose W4A16 intensity reaches `balance`."""
    for M_, K_, bal in [
        (4096, 4096, 20.0),
        (4096, 14336, 20.0),
        (4096, 4096, 295.0),
        (11008, 4096, 3.0),
        (4096, 4096, 3.5),
    ]:
        want = next(n for n in range(1, 1 << 20) if w4a16_intensity(M_, n, K_) >= bal)
        got = my_ridge_n(M_, K_, bal)
        if got is None:
            print("Not yet: my_ridge_n returned None.")
            return False
        if got != want:
            hint = ""
            if got == want - 1:
                hint = f" At N = {got} the intensity is {w4a16_intensity(M_, got, K_):.2f}, still below {bal}."
            elif got == want + 1:
                hint = f" N = {want} already reaches {w4a16_intensity(M_, want, K_):.2f} >= {bal}: the smallest N."
            print(f"M={M_}, K={K_}, balance {bal}: got N = {got}, expected {want}.{hint}")
            return False
    print("Correct on 5 cases.")
    return True


# ---- chapter 04 ----


def _i32(u):
    """A 32-bit pattern as a signed Python int, as a C `int` holds it."""
    return int(np.array([u & 0xFFFFFFFF], dtype=np.uint32).view(np.int32)[0])


def check_dp4a(my_dp4a):
    """Exercise 1: my_dp4a(a, b, c) must equal CUDA's __dp4a on signed 32-bit ints."""
    r = np.random.default_rng(9)
    cases = [
        (0x01020304, 0x01010101, 0),
        (_i32(0xFFFFFFFF), 0x01010101, 0),
        (_i32(0x80808080), _i32(0x80808080), 5),
        (0x7F7F7F7F, _i32(0x81818181), -7),
    ]
    cases += [
        (_i32(int(r.integers(0, 2**32))), _i32(int(r.integers(0, 2**32))), int(r.integers(-1000, 1000)))
        for _ in range(20)
    ]
    for a, b, c in cases:
        want = _dp4a(a, b, c)
        got = my_dp4a(a, b, c)
        if got is None:
            print("Not yet: my_dp4a returned None.")
            return False
        if got != want:
            hint = ""
            if got == c + sum(((a >> 8 * t) & 0xFF) * ((b >> 8 * t) & 0xFF) for t in range(4)):
                hint = " The bytes are signed: 0xFF is -1, 0x80 is -128."
            elif got == want - c:
                hint = " Add the accumulator c."
            print(f"my_dp4a(0x{a & 0xFFFFFFFF:08x}, 0x{b & 0xFFFFFFFF:08x}, {c}) = {got}, expected {want}.{hint}")
            return False
    print(f"Correct on {len(cases)} cases, negative bytes included.")
    return True


def check_block_sumi(my_block_sumi):
    """Exercise 2: my_block_sumi(w_words, a_words, dp4a) = sumi of one Q4_0 x Q8_1 block pair, 8 dp4a calls."""
    r = np.random.default_rng(10)
    for case in range(6):
        nib = r.integers(0, 16, 32)
        qa = r.integers(-127, 128, 32)
        w_bytes = (nib[:16] | (nib[16:] << 4)).astype(np.uint8)  # byte j: element j low, j + 16 high
        w_words = [int(v) for v in w_bytes.view("<u4")]
        a_words = [_i32(int(v)) for v in qa.astype(np.int8).view("<u4")]
        calls = []

        def counting_dp4a(a, b, c):
            calls.append(1)
            return _dp4a(a, b, c)

        got = my_block_sumi(list(w_words), list(a_words), counting_dp4a)
        want = int((nib * qa).sum())
        if got is None:
            print("Not yet: my_block_sumi returned None.")
            return False
        if got != want:
            lo = [(w & 0x0F0F0F0F) for w in w_words]
            hi = [((w >> 4) & 0x0F0F0F0F) for w in w_words]
            neighbours = sum(_dp4a(lo[i], a_words[2 * i], 0) + _dp4a(hi[i], a_words[2 * i + 1], 0) for i in range(4))
            unmasked = sum(
                _dp4a(lo[i], a_words[i], 0) + _dp4a(_i32(w_words[i] >> 4), a_words[i + 4], 0) for i in range(4)
            )
            if got == neighbours:
                hint = " The high nibbles of word i are elements 4i+16..4i+19: pair them with activation word i + 4."
            elif got == unmasked:
                hint = (
                    " Mask after the shift: (v >> 4) & 0x0F0F0F0F; v >> 4 alone keeps bits of the neighbouring nibble."
                )
            elif got == int(((nib - 8) * qa).sum()):
                hint = " That is the compensated dot product: sumi uses the raw nibbles 0..15."
            else:
                hint = ""
            print(f"Block pair {case}: got {got}, expected {want}.{hint}")
            return False
        if len(calls) != 8:
            print(f"Right value, but dp4a was called {len(calls)} times; a block pair is 4 weight words x 2 = 8 calls.")
            return False
    print("Correct on 6 block pairs, with 8 dp4a each.")
    return True


def check_overflow_c(c):
    """Exercise 3: the smallest integer c whose block of 32 copies has s = inf in Q8_1 (s = d * sum(q))."""
    if c is None:
        print("Not yet: set c.")
        return False

    def s_of(v):
        with warnings.catch_warnings(), np.errstate(over="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            return float(F.as_blocks(F.quantize(np.full((1, 32), v, np.float32), "q8_1"), "q8_1")[0, 0]["s"])

    if not np.isinf(s_of(c)):
        print(f"c = {c}: s = {s_of(c):g}, still finite. fp16 rounds to inf only from 65520 on.")
        return False
    if np.isinf(s_of(c - 1)):
        print(f"c = {c} overflows, but so does c - 1 = {c - 1} (s = inf): look lower.")
        return False
    print(f"Correct: c = {c} gives s = inf, c - 1 gives s = {s_of(c - 1):g}.")
    return True


# ---- chapter 05 ----


def _exercise_blocks():
    """Block pairs for the checkers: random, heavy-tailed, a tie block, a zero weight block."""
    r = np.random.default_rng(11)
    ws = [r.standard_normal(32).astype(np.float32) for _ in range(4)] + [np.zeros(32, np.float32)]
    acts = [
        r.standard_normal(32).astype(np.float32),
        (r.standard_t(3, 32) * 4).astype(np.float32),
        _ties()[0].copy(),
        r.uniform(-1, 1, 32).astype(np.float32),
        r.standard_normal(32).astype(np.float32),
    ]
    return list(zip(ws, acts))


def check_vec_dot_q4_0_q8_0(my_dot):
    """Exercise 1: my_dot(Q4_0 bytes, Q8_0 bytes) -> float, checked against ggml's CPU vec_dot."""
    for i, (w, a) in enumerate(_exercise_blocks()):
        w_raw = F.quantize(w[None, :], "q4_0")[0]
        a_raw = _llamacpp().ggml_quantize(a[None, :], "q8_0", ref=False)[0]  # what ggml's vec_dot sees
        want = _llamacpp().ggml_vec_dot("q4_0", w_raw, a)
        got = my_dot(bytes(w_raw), bytes(a_raw))
        if got is None:
            print("Not yet: the function returned None.")
            return False
        if not np.isclose(got, want, rtol=1e-5, atol=1e-6):
            d_w = float(np.frombuffer(bytes(w_raw[:2]), "<f2")[0])
            d_a = float(np.frombuffer(bytes(a_raw[:2]), "<f2")[0])
            qs = np.frombuffer(bytes(w_raw[2:18]), np.uint8)
            q_a = np.frombuffer(bytes(a_raw[2:34]), np.int8).astype(np.int64)
            nib = np.concatenate([qs & 0x0F, qs >> 4]).astype(np.int64)
            hint = ""
            if np.isclose(got, d_w * d_a * int(np.dot(nib, q_a))):
                hint = " You multiplied the raw nibbles: subtract 8 from each first (Q8_0 has no s to compensate)."
            elif np.isclose(got, d_w * d_a * int(np.dot(np.stack([qs & 0x0F, qs >> 4], 1).reshape(-1) - 8, q_a))):
                hint = " Nibble order: value j is the low nibble and value j+16 the high nibble of byte 2+j."
            print(f"Block pair {i}: got {got:.6g}, ggml's vec_dot gives {want:.6g}.{hint}")
            return False
    print("Correct: equal to ggml's ggml_vec_dot_q4_0_q8_0 on 5 block pairs.")
    return True


def check_mmq_schedule(my_schedule):
    """Exercise 2: my_schedule(M, N, n_sm) -> (tiles, stream_k) as ggml-cuda's MMQ decides them."""
    cases = [
        (4096, 512, 132),
        (4096, 512, 114),
        (4096, 64, 132),
        (14336, 512, 132),
        (4096, 9, 132),
        (11008, 300, 108),
        (512, 4096, 132),
        (128, 128, 1),
    ]
    for M, N, n_sm in cases:
        tiles, _, _, stream_k = _mmq_schedule(M, N, n_sm)
        got = my_schedule(M, N, n_sm)
        if got is None:
            print("Not yet: the function returned None.")
            return False
        got_tiles, got_sk = got
        if got_tiles != tiles:
            hint = " Round up: a partial tile is a tile." if got_tiles == (M // 128) * (N // 128) else ""
            print(f"M={M}, N={N}: {got_tiles} tiles, expected {tiles} (128 x 128 tiles).{hint}")
            return False
        if bool(got_sk) != stream_k:
            waves = -(-tiles // n_sm)
            print(
                f"M={M}, N={N}, {n_sm} SMs: stream_k={bool(got_sk)}, expected {stream_k}: {tiles} tiles in "
                f"{waves} wave(s) keep {100 * tiles // (n_sm * waves)}% of the SMs busy; stream-k runs below 90%."
            )
            return False
    print(f"Correct on {len(cases)} shapes and GPUs.")
    return True


def check_quantize_q8_0_simd(my_quantize):
    """Exercise 3: my_quantize(32 float32) -> 34 bytes equal to ggml's CPU mul_mat quantizer (from_float)."""
    for i, (_, a) in enumerate(_exercise_blocks()):
        want = _llamacpp().ggml_quantize(a[None, :], "q8_0", ref=False)[0]
        got = my_quantize(a.copy())
        if got is None:
            print("Not yet: the function returned None.")
            return False
        got = np.frombuffer(bytes(got), np.uint8)
        if got.shape != (34,):
            print(f"Block {i}: expected 34 bytes, got {got.size}.")
            return False
        if not np.array_equal(got, want):
            j = int(np.argmax(got != want))
            ref = F.quantize(a[None, :], "q8_0")[0]
            hint = (
                " That is the reference quantizer's byte (roundf); the vectorized one rounds ties to even."
                if got[j] == ref[j] and j >= 2
                else ""
            )
            print(f"Block {i}: byte {j} is {got[j]}, ggml's from_float gives {want[j]}.{hint}")
            return False
    print("Correct: the bytes of ggml's vectorized quantize_row_q8_0 on 5 blocks, ties included.")
    return True


# ---- chapter 06 ----


def check_bank(my_bank):
    """Exercise 1: my_bank(lane, block, pad) = the first bank of the lane's 16-byte read in the decode kernel."""
    cases = [(u, i, p) for p in (0, 1, 2, 3) for u in (0, 1, 2, 5, 7, 8, 13, 31) for i in (0, 3, 7)]
    for lane_, block, pad in cases:
        want = ((lane_ * (16 + pad) + 2 * block) * 16 // 4) % 32
        got = my_bank(lane_, block, pad)
        if got is None:
            print("Not yet: the function returned None.")
            return False
        if got != want:
            hint = ""
            if got == ((lane_ * 16 + 2 * block) * 16 // 4) % 32:
                hint = " That is the bank without the pad: a unit takes 16 + pad vectors."
            elif got == (lane_ * (16 + pad) + 2 * block) % 32:
                hint = " That counts 16-byte vectors; a bank is 4 bytes wide: multiply by 16, divide by 4."
            elif got == ((lane_ * (16 + pad) + block) * 16 // 4) % 32:
                hint = " A block's 32 quants take two 16-byte vectors: block i starts at vector 2i."
            print(f"lane {lane_}, block {block}, pad {pad}: got bank {got}, expected {want}.{hint}")
            return False
    print(f"Correct on {len(cases)} cases.")
    return True


def check_unit(my_unit):
    """Exercise 2: my_unit(block_bytes) = (blocks per 16-byte-aligned unit, 16-byte loads per unit)."""
    for bb in (18, 34, 36, 20, 22, 24, 16):  # Q4_0, Q8_0, Q8_1, Q4_1, Q5_0, Q5_1, a 16-byte block
        want = (math.lcm(bb, 16) // bb, math.lcm(bb, 16) // 16)
        got = my_unit(bb)
        if got is None:
            print("Not yet: the function returned None.")
            return False
        if tuple(got) != want:
            hint = ""
            if tuple(got) == (16, bb):
                hint = " 16 blocks always work, but fewer do: the smallest common multiple of the block and 16 bytes."
            elif got[0] == math.lcm(bb, 16):
                hint = " That is the unit in bytes; count it in blocks."
            print(f"{bb}-byte blocks: got {tuple(got)}, expected {want}.{hint}")
            return False
    print("Correct for blocks of 18 (Q4_0), 34 (Q8_0), 36 (Q8_1), 20 (Q4_1), 22 (Q5_0), 24 (Q5_1) and 16 bytes.")
    return True


def check_magic_range(lo, hi):
    """Exercise 3: the smallest and largest int32 sumi for which the 0x4B400000 trick is exact."""
    if lo is None or hi is None:
        print("Not yet: set lo and hi.")
        return False
    if _magic_to_float(lo) != lo or _magic_to_float(hi) != hi:
        bad = lo if _magic_to_float(lo) != lo else hi
        print(f"sumi = {bad}: the trick gives {_magic_to_float(bad):.1f}, not exact. The range is narrower.")
        return False
    x = np.arange(lo, hi + 1)
    if not np.array_equal(_magic_to_float(x), x.astype(np.float32)):
        print(f"Some values between {lo} and {hi} come out wrong.")
        return False
    for edge in (lo - 1, hi + 1):
        if _magic_to_float(edge) == edge:
            print(f"sumi = {edge} is exact too: the range is wider than [{lo}, {hi}].")
            return False
    print(
        f"Correct: exact on [{lo}, {hi}] ({x.size:,} values), wrong just outside. The mma kernel's Q4_0 "
        f"sums need |sumi| <= {16 * 8 * 127 * 32}, Q8_0 {32 * 127 * 127}: both fit."
    )
    return True


def _fragment_values(raw: np.ndarray, fmt: str) -> np.ndarray:
    """The int8 values [16 rows, 32 k] a warp's wgmma A fragment must hold for one block per row: the
    format's quants less its offset, Q4_0's times 16 (the nibble at the top of its byte, as the
    kernels store it)."""
    from . import formats as F

    if fmt not in ("q8_0", "q4_0"):
        raise ValueError(f"the fragment exercise takes q8_0 or q4_0, not {fmt!r}")
    spec = F.spec(fmt)
    q = spec.quants(raw.view(spec.dtype)[:, 0]).astype(np.int32) - spec.offset
    return (q * (16 if fmt == "q4_0" else 1)).astype(np.int8)


def _fragment_registers(vals: np.ndarray, lane: int, swapped: bool = False) -> list[int]:
    """Lane's 4 registers in step 7's layout (register i: row g + 8 (i % 2), k = 4t + 16 (i // 2) + byte),
    or with the roles of i % 2 and i // 2 exchanged (swapped)."""
    g, t = lane // 4, lane % 4
    regs = []
    for i in range(4):
        hi_row, hi_k = (i // 2, i % 2) if swapped else (i % 2, i // 2)
        row, k0 = g + 8 * hi_row, 4 * t + 16 * hi_k
        regs.append(int.from_bytes(vals[row, k0 : k0 + 4].tobytes(), "little"))
    return regs


def check_fragment(my_fragment, fmt: str = "q8_0"):
    """Exercise 6: my_fragment(raw, lane) = the 4 32-bit registers of lane `lane` in the A fragment of
    step 7's wgmma (11_wgmma_small.cu), for a warp's 16 rows of one block each (raw: 16 x block bytes)."""
    from . import formats as F

    rng = np.random.default_rng(6)
    for trial in range(3):
        W = rng.standard_normal((16, 32)).astype(np.float32) * (10.0**trial)
        raw = F.quantize_q8_0(W) if fmt == "q8_0" else F.quantize_q4_0(W)
        vals = _fragment_values(raw, fmt)
        for lane in range(32):
            got = my_fragment(raw.copy(), lane)
            if got is None:
                print("Not yet: the function returned None.")
                return False
            got = [int(x) & 0xFFFFFFFF for x in got]
            if len(got) != 4:
                print(f"Lane {lane}: {len(got)} registers; a lane holds 4 of the fragment (16 of its 512 values).")
                return False
            want = _fragment_registers(vals, lane)
            if got == want:
                continue
            g, t = lane // 4, lane % 4
            i = next(j for j in range(4) if got[j] != want[j])
            v0 = next(b for b in range(4) if (got[i] >> 8 * b) & 0xFF != (want[i] >> 8 * b) & 0xFF)
            row, k = g + 8 * (i % 2), 4 * t + 16 * (i // 2) + v0
            byte = np.array([(got[i] >> 8 * v0) & 0xFF], np.uint8).view(np.int8)[0]
            hint = ""
            if got == _fragment_registers(vals, lane, swapped=True):
                hint = " Registers 1 and 2 are exchanged: register 1 is the second row (g + 8), register 2 the k + 16 half."
            elif [int.from_bytes(r.to_bytes(4, "little")[::-1], "little") for r in got] == want:
                hint = " The bytes of each register are reversed: value k sits in byte k % 4 from the low end (little-endian)."
            print(
                f"Lane {lane} (g = {g}, t = {t}), register {i}, byte {v0}: got {byte}, expected {vals[row, k]}, "
                f"the value of row {row}, k = {k} (the block's quants start at byte 2, after d).{hint}"
            )
            return False
    where = "its two rows' words at quants bytes 4t and 16 + 4t" if fmt == "q8_0" else "one word per row, bytes 4t"
    print(f"Correct: all 32 lanes' 4 registers, {fmt.upper()} blocks of three value ranges; each lane reads {where}.")
    return True


def _f16_fragment_values(raw: np.ndarray, fmt: str) -> np.ndarray:
    """The fp16 values [16 rows, 32 k] of step 8's A fragment for one block per row: d (q - offset),
    the product rounded once to fp16 (llama.cpp's dequantization, rounded to fp16)."""
    from . import formats as F

    if fmt not in ("q8_0", "q4_0"):
        raise ValueError(f"the fragment exercise takes q8_0 or q4_0, not {fmt!r}")
    spec = F.spec(fmt)
    blocks = raw.view(spec.dtype)[:, 0]
    q = spec.quants(blocks).astype(np.float32) - spec.offset
    return (blocks["d"].astype(np.float32)[:, None] * q).astype(np.float16)


def _f16_fragment_registers(vals: np.ndarray, lane: int, half: int, swapped=False, flipped=False) -> list[int]:
    """Lane's 4 registers of k16 step ``half`` in the fp16 mma layout (register i: row g + 8 (i % 2),
    k = 16 half + 2t + 8 (i // 2), the lower k in the low 16 bits); ``swapped`` exchanges the roles of
    i % 2 and i // 2, ``flipped`` the two halves of each register."""
    g, t = lane // 4, lane % 4
    bits = vals.view(np.uint16)
    regs = []
    for i in range(4):
        hi_row, hi_k = (i // 2, i % 2) if swapped else (i % 2, i // 2)
        row, k0 = g + 8 * hi_row, 16 * half + 2 * t + 8 * hi_k
        lo, hi = int(bits[row, k0]), int(bits[row, k0 + 1])
        regs.append((lo << 16 | hi) if flipped else (hi << 16 | lo))
    return regs


def check_f16_fragment(my_f16_fragment, fmt: str = "q8_0"):
    """Exercise 7: my_f16_fragment(raw, lane, half) = the 4 32-bit registers (two fp16 each) of lane
    `lane` in the A fragment of step 8's wgmma (12_wgmma_f16.cu) for k16 step `half` (0: values 0..15
    of the block, 1: values 16..31), for a warp's 16 rows of one block each (raw: 16 x block bytes)."""
    from . import formats as F

    rng = np.random.default_rng(7)
    for trial in range(3):
        W = rng.standard_normal((16, 32)).astype(np.float32) * (10.0 ** (2 * trial - 2))
        raw = F.quantize_q8_0(W) if fmt == "q8_0" else F.quantize_q4_0(W)
        vals = _f16_fragment_values(raw, fmt)
        for half in (0, 1):
            for lane in range(32):
                got = my_f16_fragment(raw.copy(), lane, half)
                if got is None:
                    print("Not yet: the function returned None.")
                    return False
                got = [int(x) & 0xFFFFFFFF for x in got]
                if len(got) != 4:
                    print(
                        f"Lane {lane}: {len(got)} registers; a lane holds 4 of a k16 step's fragment (8 fp16 values)."
                    )
                    return False
                want = _f16_fragment_registers(vals, lane, half)
                if got == want:
                    continue
                g, t = lane // 4, lane % 4
                i = next(j for j in range(4) if got[j] != want[j])
                e = 0 if (got[i] & 0xFFFF) != (want[i] & 0xFFFF) else 1
                row, k = g + 8 * (i % 2), 16 * half + 2 * t + 8 * (i // 2) + e
                value = np.array([(got[i] >> 16 * e) & 0xFFFF], np.uint16).view(np.float16)[0]
                hint = ""
                if got == _f16_fragment_registers(vals, lane, half, swapped=True):
                    hint = " Registers 1 and 2 are exchanged: register 1 is the second row (g + 8), register 2 k + 8."
                elif got == _f16_fragment_registers(vals, lane, half, flipped=True):
                    hint = " The two values of each register are exchanged: the lower k goes in the low 16 bits."
                elif float(value) == float(np.float16(raw[row, 2:].view(np.int8)[k] if fmt == "q8_0" else 0)) != 0:
                    hint = " That is the quant itself: each value is d times it, rounded once to fp16."
                print(
                    f"Lane {lane} (g = {g}, t = {t}), k16 step {half}, register {i}, {'low' if e == 0 else 'high'} "
                    f"half: got {float(value):.6g}, expected {float(vals[row, k]):.6g}, fp16(d (q - offset)) of row {row}, "
                    f"k = {k}.{hint}"
                )
                return False
    print(f"Correct: all 32 lanes, both k16 steps, {fmt.upper()} blocks of three value ranges, bit for bit.")
    return True


def check_tile_tokens(my_tile_tokens):
    """Exercise 8: my_tile_tokens(N, M, K, sms) = the tokens per tile that step 8's launcher takes
    (gemm.h's f16_tile_tokens), compared with the launcher's own function through the f16_plan
    operator on Llama-sized and ragged layers, N from 1 to 4096, on 132 and 114 SMs."""
    from . import api

    plan = api._ops().f16_plan
    ns = [1, 5, 16, 17, 32, 33, 64, 65, 100, 128, 129, 160, 200, 256, 257, 300, 384, 500, 512, 640, 768, 1000, 1024]
    ns += [1100, 1500, 2048, 3000, 4096]
    layers = [(4096, 4096), (4096, 14336), (14336, 4096), (1024, 4096), (8192, 28672), (2100, 8192), (2100, 4096)]
    checked = 0
    for sms in (132, 114):
        for M, K in layers:
            for N in ns:
                want = plan(N, M, K, sms)[0]
                got = my_tile_tokens(N, M, K, sms)
                if got is None:
                    print("Not yet: the function returned None.")
                    return False
                checked += 1
                if got == want:
                    continue
                rows = -(-M // 128)
                t128, t256 = rows * -(-N // 128), rows * -(-N // 256)
                w128, w256 = -(-t128 // sms), -(-t256 // sms)
                why = (
                    f" Tiles of 128 tokens: {t128} in {w128} wave(s) of {sms}; of 256: {t256} in {w256} "
                    f"(x 1.7 = {1.7 * w256:.1f})."
                )
                if N <= 128:
                    why = " Up to 128 tokens the launcher rounds N up to the next of 16, 32, 64, 128."
                elif w128 == w256 == 1:
                    split = f16_tile_splits_reference(t256, K, sms), f16_tile_splits_reference(t128, K, sms)
                    why += (
                        f" Both fit one wave: 256-token tiles would split K in {split[0]}, 128-token ones in "
                        f"{split[1]}; N {'pads no more' if 2 * -(-N // 256) == -(-N // 128) else 'pads more'} "
                        f"with 256, K = {K}."
                    )
                print(f"N = {N}, M = {M}, K = {K}, {sms} SMs: got {got}, the launcher takes {want}.{why}")
                return False
    print(f"Correct: the launcher's width in all {checked} cases (7 layers, 28 token counts, 2 GPUs' SMs).")
    return True


def check_last_wave(my_last_wave):
    """Exercise 9: my_last_wave(tiles, K, sms) = (splits, whole), how step 8's launcher splits a
    launch of ``tiles`` tiles over K (gemm.h's f16_plan): every tile in ``splits`` when the tiles
    leave SMs idle (whole = 0), else the tiles of a last wave that is part full, the others whole;
    compared with the launcher's own plan through the f16_plan operator on Llama-sized and ragged
    layers, N from 1 to 4096, on 132, 114 and 78 SMs."""
    from . import api

    plan = api._ops().f16_plan
    ns = [1, 16, 17, 64, 100, 128, 129, 256, 300, 512, 640, 1000, 1024, 1100, 2048, 2100, 3000, 4096]
    layers = [(4096, 4096), (4096, 14336), (14336, 4096), (1024, 4096), (2099, 2048), (4098, 1056), (28672, 4096)]
    checked = 0
    for sms in (132, 114, 78):
        for M, K in layers:
            for N in ns:
                nt, splits, tiles, whole = plan(N, M, K, sms)
                got = my_last_wave(tiles, K, sms)
                if got is None:
                    print("Not yet: the function returned None.")
                    return False
                checked += 1
                if tuple(got) == (splits, whole):
                    continue
                full, left = divmod(tiles, sms)
                why = (
                    f" {tiles} tiles on {sms} SMs: {full} full wave(s) and {left} tile(s) left; splits of K "
                    f"for all {tiles}: {f16_tile_splits_reference(tiles, K, sms)}, for the {left} left: "
                    f"{f16_tile_splits_reference(left, K, sms) if left else '-'}."
                )
                print(
                    f"N = {N}, M = {M}, K = {K} ({nt}-token tiles): got {tuple(got)}, the launcher takes "
                    f"({splits}, {whole}).{why}"
                )
                return False
    print(f"Correct: the launcher's plan in all {checked} cases (7 layers, 18 token counts, 3 GPUs' SMs).")
    return True


def f16_tile_splits_reference(tiles: int, K: int, sms: int) -> int:
    """gemm.h's f16_tile_splits: CTAs per tile, sms // tiles, at most 8 and at most the K steps of 8
    blocks over 2 (each split keeps 2 steps), at least 1."""
    return max(1, min(sms // max(tiles, 1), ((K // 32 + 7) // 8) // 2, 8))


# ---- chapter 07 ----


def check_q4_1_block(my_q4_1_block, tensors):
    """Exercise 1: my_q4_1_block(raw) = the 32 float32 values of one 20-byte Q4_1 block (``tensors``: the
    chapter's SmolLM2 tensors by name)."""
    W_raw = np.asarray(tensors["blk.7.attn_v.weight"].data)
    cases = [W_raw[r, 20 * b : 20 * b + 20] for r, b in ((0, 0), (5, 3), (100, 17), (191, 8))]
    synthetic = F.quantize(np.linspace(-1.0, 3.0, 32, dtype=np.float32)[None, :], "q4_1")[0]
    for raw in [*cases, synthetic]:
        want = F.dequantize(raw[None, :], "q4_1")[0]
        got = my_q4_1_block(raw.copy())
        if got is None:
            print("Not yet: the function returned None.")
            return False
        got = np.asarray(got, dtype=np.float32).reshape(-1)
        if got.shape != (32,):
            print(f"Expected 32 values, got {got.shape[0]}.")
            return False
        if not np.array_equal(got, want):
            d, m = (float(v) for v in raw[:4].view("<f2"))
            q = np.concatenate([raw[4:] & 15, raw[4:] >> 4]).astype(np.float32)
            hint = ""
            if np.allclose(got, want - m):
                hint = " The min m is missing: value = q * d + m."
            elif np.allclose(got, (q - 8) * d + m) or np.allclose(got, (q - 8) * d):
                hint = " Q4_1 subtracts nothing from a nibble (that is Q4_0's 8): value = q * d + m."
            elif np.allclose(got, np.stack([raw[4:] & 15, raw[4:] >> 4], 1).reshape(-1) * d + m):
                hint = " Element j is the low nibble of byte j and element j + 16 its high nibble, not alternating."
            elif np.allclose(got, want, rtol=1e-6):
                hint = " Almost: round q * d to float32 before adding m, as ggml does."
            i = int(np.argmax(got != want))
            print(f"Value {i} is {got[i]!r}, expected {want[i]!r}.{hint}")
            return False
    print(f"Correct on {len(cases) + 1} blocks, bit for bit.")
    return True


def check_gemm_q4_1(my_gemm_q4_1, tensors):
    """Exercise 2: my_gemm_q4_1(Aq, Wq) = C [N, M] for Q8_1 activation bytes and Q4_1 weight bytes."""
    r = np.random.default_rng(21)
    Wq = np.asarray(tensors["blk.3.ffn_up.weight"].data)[:48]  # 48 rows of real Q4_1 weights, K = 576
    Aq = F.quantize(r.standard_normal((3, 576)).astype(np.float32), "q8_1")
    want = R.gemm_wq_aq8_1(Aq, Wq, "q4_1")
    got = my_gemm_q4_1(Aq, Wq)
    if got is None:
        print("Not yet: the function returned None.")
        return False
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        print(f"C must be [N, M] = {list(want.shape)}, got {list(got.shape)}.")
        return False
    e = R.nmse(got, want)
    if e < 1e-12:
        print(f"Correct: NMSE {e:.1e} against R.gemm_wq_aq8_1.")
        return True
    wb, ab = F.as_blocks(Wq, "q4_1"), F.as_blocks(Aq, "q8_1")
    qw = F.unpack_quants(Wq, "q4_1").reshape(*wb.shape, 32).astype(np.float64)
    qa = F.unpack_quants(Aq, "q8_1").reshape(*ab.shape, 32).astype(np.float64)
    sumi = np.einsum("nbj,mbj->nmb", qa, qw)
    dw, mw = wb["d"].astype(np.float64)[None], wb["m"].astype(np.float64)[None]
    da, sa = ab["d"].astype(np.float64)[:, None], ab["s"].astype(np.float64)[:, None]
    suspects = {
        "the m_w * s_a term is missing": (dw * da * sumi).sum(2),
        "the min multiplies sum(q_a) without d_a: s_a already holds d_a * sum(q_a)": (
            dw * da * sumi + mw * sa / da
        ).sum(2),
        "that is Q4_0's compensation (- 8 s_a); Q4_1 adds m_w * s_a": (dw * (da * sumi - 8 * sa)).sum(2),
    }
    hint = next((h for h, C_bad in suspects.items() if R.nmse(C_bad, want) < 1e-12 or R.nmse(got, C_bad) < 1e-12), "")
    print(f"NMSE {e:.2e} against the reference (needs < 1e-12). {hint}")
    return False


def check_tensor_types(my_tensor_types, reader):
    """Exercise 3: my_tensor_types(reader) = {tensor name: GGML type name} for every tensor of the file."""
    want = {t.name: t.tensor_type.name for t in reader.tensors}
    got = my_tensor_types(reader)
    if got is None:
        print("Not yet: the function returned None.")
        return False
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        print(
            f"{len(missing)} tensors missing (first: {missing[:1]}), {len(extra)} unknown names (first: {extra[:1]})."
        )
        return False
    wrong = [n for n in want if got[n] != want[n]]
    if wrong:
        print(f"{len(wrong)} types differ; {wrong[0]!r} is {want[wrong[0]]}, you said {got[wrong[0]]!r}.")
        return False
    by = collections.defaultdict(list)
    for n, ty in want.items():
        by[ty].append(n)
    print("Correct. " + "; ".join(f"{ty}: {len(ns)} tensors" for ty, ns in sorted(by.items())))
    print(
        "Q8_0:",
        by["Q8_0"],
        " F32, e.g.:",
        by["F32"][:3],
        " Q4_1 in every layer:",
        sorted({n.split(".", 2)[2] for n in by["Q4_1"]}),
    )
    return True


# ---- chapter 8: K-quants --------------------------------------------------------------------


def _ch8_q4_k_blocks() -> np.ndarray:
    """Q4_K blocks [n] (structured) for chapter 8's checkers: normal rows, rows whose sub-blocks
    have very different ranges (so that the 6-bit scales and mins use their top bits), and random
    bytes (every bit pattern of the 12 scale bytes)."""
    r = np.random.default_rng(8)
    x = r.standard_normal((6, 512)).astype(np.float32)
    x[3:] *= np.repeat(np.geomspace(0.05, 4.0, 16), 32)[None, :].astype(np.float32)  # ranges per sub-block
    x[4:] += np.repeat(r.uniform(0.0, 3.0, 16), 32)[None, :].astype(np.float32)  # values off centre: mins
    quantized = F.as_blocks(F.quantize(x, "q4_k"), "q4_k").reshape(-1)
    rand = r.integers(0, 256, (8, F.BLOCK_BYTES["q4_k"]), dtype=np.uint8)
    rand[:, :4] = F.quantize(np.ones((1, 256), np.float32), "q4_k")[0, :4]  # finite d and dmin
    return np.concatenate([quantized, rand.view(F.BLOCK_DTYPES["q4_k"]).reshape(-1)])


def check_q4_k_scale_min(my_scale_min):
    """Chapter 8, exercise 1: my_scale_min(scales, j) = (sc, m), the 6-bit scale and min of sub-block
    j (0..7) from the 12 ``scales`` bytes (uint8) of a Q4_K block, as ggml's get_scale_min_k4."""
    blocks = _ch8_q4_k_blocks()
    for n, blk in enumerate(blocks):
        q = np.array(blk["scales"], np.uint8)
        want_sc, want_m = F.q4_k_scale_min(q)
        for j in range(8):
            got = my_scale_min(q.copy(), j)
            if got is None:
                print("Not yet: the function returned None.")
                return False
            try:
                sc, m = (int(v) for v in got)
            except (TypeError, ValueError):
                print(f"Return two integers (sc, m); got {got!r}.")
                return False
            if (sc, m) == (int(want_sc[j]), int(want_m[j])):
                continue
            hint = ""
            if j >= 4 and (sc, m) == (q[j + 4] & 0xF, q[j + 4] >> 4):
                hint = " For j >= 4 the nibbles of byte j + 4 are only the low 4 bits; the top 2 bits are bits 6-7 of bytes j - 4 (scale) and j (min)."
            elif j >= 4 and (sc, m) == (q[j + 4] >> 4 | (q[j - 4] >> 6) << 4, q[j + 4] & 0xF | (q[j] >> 6) << 4):
                hint = " The scale takes the low nibble of byte j + 4, the min its high nibble."
            elif j >= 4 and (sc, m) == (q[j + 4] & 0xF | (q[j - 4] >> 6) << 4, q[j + 4] >> 4 | (q[j - 4] >> 6) << 4):
                hint = " The min's top 2 bits are bits 6-7 of byte j (a min byte), not of byte j - 4."
            elif j < 4 and (sc, m) == (int(q[j]), int(q[j + 4])):
                hint = " Bytes 0-7 hold 6-bit fields in bits 0-5: mask with 63 (bits 6-7 belong to sub-block j + 4)."
            what = f"block {n}" + (" (random bytes)" if n >= len(blocks) - 8 else "")
            print(
                f"Sub-block {j} of {what}, scales {q.tobytes().hex(' ')}: got (sc, m) = ({sc}, {m}), "
                f"expected ({int(want_sc[j])}, {int(want_m[j])}).{hint}"
            )
            return False
    print(f"Correct on all 8 sub-blocks of {len(blocks)} blocks (real super-blocks and random bytes).")
    return True


def check_q4_k_dot(my_q4_k_dot):
    """Chapter 8, exercise 2: my_q4_k_dot(w, a) = the dot product of one Q4_K super-block ``w`` and
    one Q8_K super-block ``a`` (structured numpy blocks, ``formats.as_blocks``), computed as the
    kernel does: integer dots per sub-block times its 6-bit scale, and the min term from ``bsums``."""
    r = np.random.default_rng(81)
    W = _ch8_q4_k_blocks()
    A = F.as_blocks(F.quantize(r.standard_normal((len(W), 256)).astype(np.float32) * 3, "q8_k"), "q8_k")[:, 0]
    for n in range(len(W)):
        w, a = W[n : n + 1].copy(), A[n : n + 1].copy()  # [1] arrays of one block each
        want = float(R.gemm_wk_aq8_k(a.view(np.uint8)[None], w.view(np.uint8)[None], "q4_k")[0, 0])
        w, a = w[0], a[0]
        got = my_q4_k_dot(w.copy(), a.copy())
        if got is None:
            print("Not yet: the function returned None.")
            return False
        got = float(got)
        if abs(got - want) <= 1e-5 * max(1.0, abs(want)):
            continue
        sc, m = (v.astype(np.float64) for v in F.q4_k_scale_min(w["scales"]))
        q = F._q4_k_quants(w).astype(np.float64).reshape(8, 32)
        qa = a["qs"].astype(np.float64).reshape(8, 32)
        d, dmin, da = float(w["d"]), float(w["dmin"]), float(a["d"])
        dots = (q * qa).sum(1)
        bsum = a["bsums"].astype(np.float64).reshape(8, 2).sum(1)
        first, summ = d * da * (sc * dots).sum(), (m * bsum).sum()
        one_bsum = (m * a["bsums"].astype(np.float64)[:8]).sum()
        suspects = {
            "The min term is missing: subtract dmin * d_a * sum_s m_s * (bsums[2s] + bsums[2s+1]).": first,
            "The min term is subtracted, not added: a value is d*sc*q - dmin*m.": first + dmin * da * summ,
            "The min term needs d_a too: bsums are sums of activation quants, not of values.": first - dmin * summ,
            "A sub-block of 32 has two bsums (16 quants each): bsums[2s] + bsums[2s+1].": first - dmin * da * one_bsum,
        }
        hint = next((h for h, v in suspects.items() if abs(got - v) <= 1e-5 * max(1.0, abs(v))), "")
        print(f"Block pair {n}: got {got!r}, expected {want!r}. {hint}")
        return False
    print(f"Correct on {len(W)} block pairs (relative error < 1e-5 against reference.gemm_wk_aq8_k).")
    return True
