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

**Numpy exercises.** ``check_*`` functions (one per exercise of chapters 1 to 7) that the
chapters call on the reader's numpy code or numbers. They print what differs and return a bool.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import time
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
    hints: tuple = ()  #: (name of a wrong variant, hint) pairs, see _VARIANTS


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
                ("transposed_tile", "acc[i][j] belongs to A's row n0 + i and W's row m0 + j, not the other way round."),
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
                    "no_compensation",
                    "sumi is 0: the body adds nothing yet (the scaffold then gives -8 d_w s_a per block).",
                ),
                ("signed", "That sumi is over nibble - 8: use the raw nibbles 0..15; the scaffold subtracts 8 * s_a."),
                ("interleaved", "The high nibbles of word i are elements 4i+16..4i+19: pair them with a[i + 4]."),
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
    print(f'\nWrite the body as a string, body = r"""...""", then run exercises.check("{name}", body).')


# ---------------------------------------------------------------------------------------------
# Kernel exercises: building
# ---------------------------------------------------------------------------------------------


class ExerciseCompileError(RuntimeError):
    """The reader's body did not compile; the message holds the compiler's errors, lines counted in the body."""


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
    for part in (scaffold, body, repr(sorted(flags.items())), torch.__version__, f"{sys.version_info[:2]}"):
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
    failed = build_dir / "compile_error.txt"
    with open(root / f"{tag}.flock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the OS if this process dies
        try:
            if failed.exists():
                raise ExerciseCompileError(failed.read_text())
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
            except ExerciseCompileError as e:
                failed.write_text(str(e))
                raise
            (build_dir / "built.ok").write_text(tag)
            return so_path
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _compile(src: Path, lib_name: str, build_dir: Path, flags: dict, cuda: bool) -> None:
    from torch.utils.cpp_extension import load

    saved_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if flags["arch_list"]:
        os.environ["TORCH_CUDA_ARCH_LIST"] = flags["arch_list"]
    print("quantgemm_kernels: compiling your code ...", end="", file=sys.stderr, flush=True)
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
    except Exception as e:  # torch raises RuntimeError("Error building extension ...: <compiler output>")
        print(" failed", file=sys.stderr, flush=True)
        raise ExerciseCompileError(_readable_compiler_output(str(e), build_dir)) from None
    finally:
        if saved_arch is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = saved_arch
    print(f" done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)


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
        line = line.replace(build_dir.as_posix() + "/", "scaffold ")
        out.append(line)
    mine = [ln for ln in out if ln.startswith("your code:")]
    errors = [ln for ln in out if re.search(r"\berror\b", ln)]
    head = f"Your body does not compile: {len(errors) or 'the'} error{'s' if len(errors) != 1 else ''}"
    if errors and not any(ln.startswith("your code:") and "error" in ln for ln in errors):
        head += " (none reported on your lines: an unclosed brace, parenthesis or comment in your body?)"
    if mine:
        head += " (lines counted from the first line of your body)"
    keep = out[:40] + ([f"... ({len(out) - 40} more lines)"] if len(out) > 40 else [])
    return head + ".\n" + "\n".join(keep)


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


def _gemm_cases(ex: KernelExercise, shapes=None):
    """(shape, inputs, reference) per shape of testing.SHAPES, as testing.check_kernel makes them."""
    from .testing import SHAPES, kernel_inputs

    wfmt, afmt = ex.formats
    cases = []
    for M, N, K in shapes or SHAPES:
        A, W = kernel_inputs(None, M, N, K, "normal", seed=M * 7 + N)
        if wfmt == "f32":
            ins, ref = [A, W], R.gemm_f32(A, W)
        elif afmt == "f32":
            Wq = F.quantize(W, wfmt)
            ins, ref = [A, Wq], R.gemm_wq_af32(A, Wq, wfmt)
        else:
            Wq, Aq = F.quantize(W, wfmt), F.quantize_q8_1(A)
            ins, ref = [Aq, Wq], R.gemm_wq_aq8_1(Aq, Wq, wfmt)
        cases.append(((M, N, K), ins, ref))
    return cases


def _run(so_path: Path, cases: list[tuple[list[np.ndarray], list[np.ndarray], list[int]]]):
    """Run the library on ``cases`` ((inputs, output templates, dims) each) in a process of its
    own. Returns ``(outputs per case, None)`` or ``(None, (case index or None, what, why))``."""
    runner = Path(__file__).resolve().parent / "_exercise_runner.py"
    with tempfile.TemporaryDirectory(prefix="qgex-") as tmp:
        cases_path, out_path = Path(tmp) / "cases.npz", Path(tmp) / "out.npz"
        arrays = {"cases": np.array(len(cases))}
        for k, (ins, outs, dims) in enumerate(cases):
            arrays[f"c{k}_dims"] = np.asarray(dims, np.int64)
            arrays.update({f"c{k}_in{i}": a for i, a in enumerate(ins)})
            arrays.update({f"c{k}_out{i}": a for i, a in enumerate(outs)})
        np.savez(cases_path, **arrays)
        env = {**os.environ, "PYTHONFAULTHANDLER": "0"}
        try:
            p = subprocess.run(
                [sys.executable, str(runner), str(so_path), str(cases_path), str(out_path)],
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
            return None, (k, f"did not finish within {RUN_TIMEOUT_S} s and was stopped", "an endless loop?")
        started = re.findall(r"^case (\d+)$", p.stderr, re.M)
        k = int(started[-1]) if started else None
        if p.returncode == 3:
            msg = re.search(r"^error in case \d+: (.*)$", p.stderr, re.M)
            return None, (k, "reported an error", msg.group(1) if msg else p.stderr.strip()[-500:])
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
                }.get(sig, "")
                return None, (k, f"crashed ({sig})", why)
            return None, (k, f"failed (exit status {p.returncode})", p.stderr.strip()[-500:])
        data = np.load(out_path)
        outs = [[data[f"c{k}_out{i}"] for i in range(len(c[1]))] for k, c in enumerate(cases)]
        return outs, None


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
        if which == "transposed_tile":
            return None  # no closed form; the index message says enough
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
    for (shape, ins, ref), (got,) in zip(cases, outs):
        M, N, K = shape
        err = R.nmse(got, ref)
        if err <= KERNEL_NMSE:
            passed.append(shape)
            continue
        at, nbad = _first_wrong(got, ref)
        lines = [
            f"Not yet: wrong on M={M}, N={N}, K={K} (C is [N, M] = [{N}, {M}]), "
            + (
                f"after {len(passed)} of the {len(cases)} shapes passed ("
                + ", ".join(f"M={s[0]} N={s[1]} K={s[2]}" for s in passed)
                + ")."
                if passed
                else f"the first of the {len(cases)} shapes."
            ),
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
        f"Correct: {ex.name} matches the reference on all {len(cases)} shapes "
        f"(M = 1, N = 1 and K = 32 included), NMSE <= {max(R.nmse(o[0], c[2]) for c, o in zip(cases, outs)):.1e}.",
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
        outs, err = _run(so, runs)
        if err:
            k, what, why = err
            at = f" in the run with {cases[k][0]} stages" if k is not None else ""
            return Verdict(False, f"Your code {what}{at}" + (f": {why}" if why else "."))
        return _ring_verdict(outs)
    cases = _gemm_cases(ex)
    runs = [(ins, [np.full((s[1], s[0]), np.nan, np.float32)], list(s)) for s, ins, _ in cases]
    outs, err = _run(so, runs)
    if err:
        k, what, why = err
        at = f" on M={cases[k][0][0]}, N={cases[k][0][1]}, K={cases[k][0][2]}" if k is not None else ""
        return Verdict(
            False,
            f"Your code {what}{at}" + (f": {why}" if why else ".") + "\n  (It ran in a process of its own: "
            "this Python session is unharmed.)",
        )
    return _gemm_verdict(ex, cases, outs)


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
