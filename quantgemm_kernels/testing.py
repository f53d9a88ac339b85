"""Test helpers shared by the tests, the notebooks and appendix A: value generators, ragged shapes,
the thresholds with their reasons, ``check_kernel`` (run a kernel, compare with the reference) and
the checks the notebooks run on every kernel (``check_on_shapes``, ``check_on_distributions``).

Two error budgets, never mixed up:

* **kernel vs reference of the same format** (``KERNEL_NMSE``): the kernel and the numpy
  reference do the same arithmetic on the same bytes and differ only in the order of float32
  additions. Rounding then gives NMSE of order K * 2^-48 (about 1e-11 at K = 4096); 1e-8 leaves
  a wide margin, while a single wrong block out of K/32 (or one wrong output of M*N) lands far
  above it. llama.cpp's test-backend-ops allows 5e-4 for MUL_MAT because it compares different
  quantization paths; we compare identical ones and can be much stricter.
* **format vs float32 truth** (``FORMAT_NMSE``): what quantization itself costs, measured in
  chapter 2 (on normal data Q8_0 ~ 3e-5 and Q4_0 ~ 7e-3; on uniform data in [-1, 1] about half
  that).
"""

from __future__ import annotations

import numpy as np

from . import reference as R

KERNEL_NMSE = 1e-8  #: kernel vs same-format reference (see module docstring)
FORMAT_NMSE = {"q8_0": 1e-4, "q8_1": 1e-4, "q4_0": 2e-2}  #: quantized vs float32 truth, smooth data

#: Ragged GEMM shapes (M, N, K): M=1, N=1, K=32, primes and non-powers of two, decode and prefill-like.
#: K is for 32-value blocks; :func:`shape_for` scales it for a kernel with larger blocks (K-quants).
SHAPES = [
    (1, 1, 32),
    (1, 7, 64),
    (7, 1, 96),
    (33, 5, 160),
    (64, 3, 256),
    (83, 9, 128),
    (45, 77, 64),
    (130, 2, 1024),
    (17, 33, 288),
    (256, 64, 512),
]


def k_step(kernel) -> int:
    """The K granularity of a kernel: the largest block of its formats (32; 256 for the K-quants)."""
    from . import formats as F
    from .registry import KERNELS

    k = KERNELS[kernel] if isinstance(kernel, str) else kernel
    return max(F.SPECS[f].block_size if f in F.SPECS else F.QK for f in (k.wfmt, k.afmt))


def shape_for(kernel, M: int, N: int, K: int) -> tuple[int, int, int]:
    """A shape of :data:`SHAPES` (K counted in 32-value blocks) for ``kernel``: K scaled by
    ``k_step(kernel) / 32``, so that K = 32 stays one block (256 for the K-quants), 96 three, 160 five."""
    return M, N, K * k_step(kernel) // 32


DISTRIBUTIONS = ("uniform", "normal", "heavy_tailed", "outliers", "zeros", "tiny", "huge", "sparse")


def make_values(shape, dist: str = "normal", seed: int = 0, plant_edge_blocks: bool = True) -> np.ndarray:
    """float32 test values of a named distribution.

    ``plant_edge_blocks`` overwrites, in each row long enough, one 32-value block with zeros and
    another with a large-magnitude block, so every tensor also exercises d = 0 and a big scale.
    """
    rng = np.random.default_rng(seed)
    if dist == "uniform":
        x = rng.uniform(-1, 1, shape)
    elif dist == "normal":
        x = rng.standard_normal(shape)
    elif dist == "heavy_tailed":
        x = rng.standard_t(2, shape)
    elif dist == "outliers":
        x = rng.standard_normal(shape)
        mask = rng.random(shape) < 0.01
        x[mask] *= 100.0
    elif dist == "zeros":
        x = np.zeros(shape)
    elif dist == "tiny":
        x = rng.standard_normal(shape) * 1e-6  # fp16 scales underflow to subnormals or zero
    elif dist == "huge":
        x = rng.standard_normal(shape) * 1e3
    elif dist == "sparse":
        x = rng.standard_normal(shape) * (rng.random(shape) < 0.05)
    else:
        raise ValueError(f"unknown distribution {dist!r}: expected one of {DISTRIBUTIONS}")
    x = x.astype(np.float32)
    if plant_edge_blocks and x.ndim == 2 and x.shape[1] >= 96 and dist != "zeros":
        x[:, 32:64] = 0.0
        x[:, 64:96] *= 50.0
    return x


def kernel_inputs(kernel, M: int, N: int, K: int, dist: str = "normal", seed: int = 0):
    """float32 A [N, K] and W [M, K] (numpy) for a kernel test."""
    A = make_values((N, K), dist, seed)
    W = make_values((M, K), dist, seed + 1)
    return A, W


def quantize_weights(W, fmt: str):
    """``api.quantize(W, fmt)`` on W's device, or on the CPU and copied there for a format with no
    CUDA quantizer (the K-quants: their CUDA kernels read bytes quantized on the CPU)."""
    from . import api
    from . import formats as F

    if W.device.type == "cuda" and not F.SPECS[fmt].cuda:
        return api.quantize(W.cpu(), fmt).to(W.device)
    return api.quantize(W, fmt)


def check_kernel(kernel, M: int, N: int, K: int, dist: str = "normal", seed: int = 0, device=None):
    """Run ``kernel`` (a name or a ``Kernel``) on fresh inputs; return ``(nmse, result, reference)``.

    The weights are quantized with the package's quantizer on the kernel's device (the tests check
    separately that those bytes equal llama.cpp's), the reference is the numpy spec on the same bytes.
    """
    import torch

    from . import api
    from .registry import KERNELS

    k = KERNELS[kernel] if isinstance(kernel, str) else kernel
    device = device or k.device
    A, W = kernel_inputs(k, M, N, K, dist, seed)
    At = torch.from_numpy(A).to(device)
    Wt = torch.from_numpy(W).to(device)
    Wk = Wt if k.wfmt == "f32" else quantize_weights(Wt, k.wfmt)
    C = api.gemm(At, Wk, k).cpu().numpy()
    Wref = W if k.wfmt == "f32" else Wk.cpu().numpy()
    ref = R.gemm(A, Wref, k.wfmt, k.afmt, k.q8_1_sum, k.q4_0_formula)
    return R.nmse(C, ref), C, ref


def check_on_shapes(kernel, shapes=None, dist: str = "normal") -> list[float]:
    """NMSE of ``kernel`` against the reference of its own formats on every ragged shape
    (:data:`SHAPES` unless given), each with its own seed; asserts that the result is ``[N, M]``
    and every NMSE is within :data:`KERNEL_NMSE`. Returns the NMSEs (chapters 1, 3 and 4)."""
    from .registry import KERNELS

    k = KERNELS[kernel] if isinstance(kernel, str) else kernel
    errs = []
    for M, N, K in [shape_for(k, *s) for s in SHAPES] if shapes is None else shapes:
        err, C, ref = check_kernel(k, M, N, K, dist, seed=M * 7 + N)
        assert C.shape == (N, M), f"{k.name} M={M} N={N} K={K}: result shape {C.shape}, expected {(N, M)}"
        assert err <= KERNEL_NMSE, f"{k.name} M={M} N={N} K={K}: NMSE {err:.3g} > {KERNEL_NMSE:g}"
        errs.append(err)
    return errs


def check_on_distributions(kernel, shape=None) -> int:
    """``kernel`` against the reference on every value distribution (:data:`DISTRIBUTIONS`) at one
    shape (default ``shape_for(kernel, 37, 5, 320)``): inf/NaN exactly where the reference has
    them, NMSE within :data:`KERNEL_NMSE`. Returns the number of distributions checked (chapters 3 and 4)."""
    import warnings

    from .registry import KERNELS

    k = KERNELS[kernel] if isinstance(kernel, str) else kernel
    shape = shape or shape_for(k, 37, 5, 320)
    for dist in DISTRIBUTIONS:
        with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # "huge": fp16 overflow, on purpose
            err, C, ref = check_kernel(k, *shape, dist, seed=3)
        assert np.array_equal(np.isfinite(C), np.isfinite(ref)), f"{k.name} on {dist}: inf/nan differ"
        assert err <= KERNEL_NMSE, f"{k.name} on {dist}: NMSE {err:.3g}"
    return len(DISTRIBUTIONS)


# ---------------------------------------------------------------------------------------------
# Appendix A helpers: sanitizer shapes, poisoned outputs, raw timing samples
# ---------------------------------------------------------------------------------------------

#: Small ragged shapes (M, N, K) for runs under compute-sanitizer (10-100x slower than normal):
#: one block, a tile edge in every dimension, K of 4 blocks, a longer K, and a long row: 264 blocks,
#: 33 of the decode kernel's 8-block units, so its warp steps end ragged (one row a step: 32 units,
#: then 1; Q4_0 at 5 tokens, 4 rows a step: 8 units each, the fifth of 1), and 37 rows leave a
#: partial group of rows. tools/sanitize.sh uses them.
#: K counts 32-value blocks: run them through :func:`shape_for` (x8 for the K-quant kernels).
SANITIZE_SHAPES = [(1, 1, 32), (7, 3, 96), (83, 9, 128), (130, 2, 1024), (37, 5, 8448)]


def poisoned_call(fn, out_shape, device: str, poison: float = float("nan")):
    """Call ``fn()`` (which allocates and returns a float32 tensor of ``out_shape``) right after
    filling and freeing a tensor of the same size, so that the allocator hands the kernel memory
    full of ``poison``. Returns ``(result, reused)``; ``reused`` says whether the result really
    landed on the poisoned memory (then an output the kernel forgot to write is still ``poison``).

    Why: a freshly allocated output often holds the previous call's correct answer (the allocator
    returns the block just freed), so a kernel that skips some outputs can pass a test by luck.
    """
    import torch

    bait = torch.full(tuple(out_shape), poison, dtype=torch.float32, device=device)
    ptr = bait.data_ptr()
    del bait
    out = fn()
    return out, out.data_ptr() == ptr


def timing_samples(fn, device: str = "cpu", warmup: int = 3, reps: int = 30, min_time_s: float = 0.0) -> np.ndarray:
    """Every individual time (seconds) of ``fn()``, measured as ``bench.time_callable`` measures
    (warm-up calls first; CUDA events on a GPU, perf_counter on a CPU; at least ``reps`` calls and
    at least ``min_time_s`` seconds). For plots of the spread; report the median."""
    from .bench import time_samples

    times = time_samples(fn, device, warmup, reps, min_time_s)
    return np.asarray(times)
