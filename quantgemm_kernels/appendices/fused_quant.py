"""Appendix D: per-token activation quantization fused with SlideSparse's "slide" rearrangement.

What one call does, for activations ``x [M, K]`` (M tokens, K features; float32, float16 or
bfloat16) and an even group size ``L >= 4``:

1. **Per-token scale.** For each row, ``amax = max|x|``, ``scale = max(amax / QMAX, MIN_SCALE)``
   with QMAX = 127 (INT8) or 448 (FP8 E4M3, the largest finite ``float8_e4m3fn``), in float32.
2. **Quantize.** ``v = x * inv_scale`` with ``inv_scale = 1 / scale`` (float32, each step rounded
   once, IEEE round-to-nearest). INT8: ``q = round_half_to_even(v)`` clamped to [-127, 127]
   (``torch.round``, CUDA's ``rint``). FP8: ``q = float8_e4m3fn(clamp(v, -448, 448))``, also
   rounded to nearest, ties to even. The clamps never bind (|v| <= QMAX up to rounding); they
   are a safety net. MIN_SCALE only keeps ``1 / scale`` finite for an all-zero row.
3. **Slide.** Cut the row into groups of L values (the last group padded with zeros) and replace
   each group by its ``L/2 - 1`` overlapping windows of 4 values, window ``w`` starting at
   ``2*w`` inside the group. Output column ``c`` holds input column

   ``src(c) = g*L + 2*w + j``  with  ``o = c // 4, j = c % 4, g = o // NW, w = o % NW``,
   ``NW = L/2 - 1``  (``src(c) >= K`` is the zero padding).

   Worked example, L = 8 (NW = 3), K = 10 (two groups, the second padded with six zeros)::

       input  x0 x1 x2 x3 x4 x5 x6 x7 | x8 x9  0  0  0  0  0  0
       output x0 x1 x2 x3  x2 x3 x4 x5  x4 x5 x6 x7 | x8 x9 0 0  0 0 0 0  0 0 0 0
              \\_window 0_/ \\_window 1_/ \\_window 2_/   \\_______ group 1 ________/

   Every group of 8 becomes 3 windows = 12 values: the row grows by (2L - 4) / L = 1.5x.
4. **Pad and pack.** ``K_out = num_groups * NW * 4`` is padded to a multiple of 32 (cuSPARSELt
   wants 32-aligned K) and ``M`` to a multiple of 16. Padding bytes are 0 and padding rows get
   ``scale = 1.0`` (a harmless value for the dequantization that follows the GEMM). Outputs:
   ``q [M_pad, K_out_pad]`` (``torch.int8`` or ``torch.float8_e4m3fn``) and ``scale [M_pad]``
   (float32). The Triton kernel writes each window's 4 bytes as one little-endian int32, so byte
   ``4*o + j`` of a row is value ``j`` of window ``o``, exactly the order of the reference.

Why: a weight row with at least 2 zeros in every group of L ((L-2):L sparsity, "2:L" in the
seed's naming, 6:8 in the SlideSparse paper's) can be split into the same NW windows so that
each window holds at most 2 nonzeros. That is the 2:4 pattern sparse tensor cores accelerate.
The dot product over the slid K_out columns equals the original one only if the activations
are slid the same way: :func:`slide_weight` and :func:`slide_values` show it.

Two implementations return identical bytes:

* :func:`quant_slide_reference`: readable torch (CPU or GPU), the spec.
* :func:`quant_slide_triton`: one Triton kernel, two passes per row (absmax, then
  quantize + slide + pack over tiles of output windows). ``triton`` is imported only inside it,
  so this module and the CPU path work without triton. No C++ extension: Triton compiles the
  kernel (``_fused_quant_triton.py``) on its first call.

:func:`bench_fused_quant` times both against a plain copy of ``x``; ``python -m
quantgemm_kernels.appendices.fused_quant --help`` runs a sweep and records it under
``bench_results/appendix_d/<machine>.csv``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import NamedTuple

import torch

FORMATS = ("int8", "fp8")  #: fp8 = float8_e4m3fn (E4M3, no infinities, max 448)
QMAX = {"int8": 127.0, "fp8": 448.0}
OUT_DTYPE = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}
#: The smallest normal float32, 2**-126. It keeps ``1 / scale`` finite (2**126) for an all-zero
#: row and binds only for rows with amax < QMAX * 2**-126, so it never costs a real row precision.
MIN_SCALE = 2.0**-126
M_ALIGN = 16  #: rows of the output: a multiple of 16 (the GEMM's M tile)
K_OUT_ALIGN = 32  #: columns of the output: a multiple of 32 (cuSPARSELt's K alignment)
INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# Shapes and the index mapping
# ---------------------------------------------------------------------------------------------


def num_windows(L: int) -> int:
    """Windows of 4 per group of L: ``L/2 - 1`` (L=4: 1, i.e. plain 2:4; L=6: 2; L=8: 3; L=10: 4)."""
    if not isinstance(L, int) or L < 4 or L % 2:
        raise ValueError(f"L must be an even integer >= 4, got {L!r}")
    return L // 2 - 1


def expand_ratio(L: int) -> float:
    """Output values per input value: ``4 * (L/2 - 1) / L = (2L - 4) / L``."""
    return 4 * num_windows(L) / L


class SlideShape(NamedTuple):
    M: int
    K: int
    L: int
    num_windows: int  #: windows per group, L/2 - 1
    num_groups: int  #: ceil(K / L)
    K_in_pad: int  #: num_groups * L
    K_out: int  #: num_groups * num_windows * 4
    K_out_pad: int  #: K_out rounded up to a multiple of 32
    M_pad: int  #: M rounded up to a multiple of 16


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def slide_shape(M: int, K: int, L: int) -> SlideShape:
    """All the sizes of one call (see the module docstring for the rules)."""
    nw = num_windows(L)
    if M < 1 or K < 1:
        raise ValueError(f"M and K must be positive, got M={M}, K={K}")
    groups = -(-K // L)
    k_out = groups * nw * 4
    return SlideShape(M, K, L, nw, groups, groups * L, k_out, _round_up(k_out, K_OUT_ALIGN), _round_up(M, M_ALIGN))


def slide_index(K: int, L: int, device="cpu") -> torch.Tensor:
    """``src [K_out]`` (int64): output column c is a copy of input column ``src[c]``.
    Values ``>= K`` point into the zero padding of the last group."""
    s = slide_shape(1, K, L)
    c = torch.arange(s.K_out, device=device)
    o, j = c // 4, c % 4  # window (over the whole row) and position inside it
    g, w = o // s.num_windows, o % s.num_windows  # group, and window inside the group
    return g * L + 2 * w + j


def first_copy_index(K: int, L: int, device="cpu") -> torch.Tensor:
    """``dst [K]``: the output column holding the first copy of each input column (for undoing
    the slide). Input position p of a group lies in windows ``p//2 - 1`` and ``p//2`` (those
    that exist); the first is ``w = max(p//2 - 1, 0)``, at offset ``p - 2w`` inside it."""
    nw = num_windows(L)
    k = torch.arange(K, device=device)
    g, p = k // L, k % L
    w = torch.clamp(p // 2 - 1, min=0)
    return (g * nw + w) * 4 + (p - 2 * w)


def slide_values(x: torch.Tensor, L: int) -> torch.Tensor:
    """The slide alone, on any 2-D tensor ``[rows, K]`` -> ``[rows, K_out]`` (no quantization,
    no alignment padding): the zero-padded groups replaced by their windows."""
    rows, K = x.shape
    src = slide_index(K, L, x.device)
    padded = torch.zeros(rows, slide_shape(1, K, L).K_in_pad, dtype=x.dtype, device=x.device)
    padded[:, :K] = x
    return padded[:, src]


def prune_to_pattern(w: torch.Tensor, L: int) -> torch.Tensor:
    """Magnitude pruning to SlideSparse's pattern: in each group of L consecutive values of a
    row, keep the L-2 largest |values| and zero the 2 smallest (the last group zero-padded)."""
    rows, K = w.shape
    s = slide_shape(1, K, L)
    padded = torch.zeros(rows, s.K_in_pad, dtype=w.dtype, device=w.device)
    padded[:, :K] = w
    groups = padded.view(rows, s.num_groups, L)
    smallest = groups.abs().topk(2, dim=-1, largest=False).indices
    return groups.scatter(-1, smallest, 0).view(rows, s.K_in_pad)[:, :K].clone()


def slide_weight(w: torch.Tensor, L: int) -> torch.Tensor:
    """Sliding-window decomposition of a weight ``[rows, K]`` with at most L-2 nonzeros in each
    group of L -> ``[rows, K_out]`` in which every window of 4 holds at most 2 nonzeros (2:4).

    Each nonzero goes to exactly one of the (at most two) windows that contain its position, so
    ``slide_values(x, L) @ slide_weight(w, L).T == x @ w.T`` (up to summation order). Greedy,
    left to right, earliest window with room: it always succeeds when the group has <= L-2
    nonzeros (a window's two slots are only contested by the positions just after it).
    """
    rows, K = w.shape
    s = slide_shape(1, K, L)
    nw = s.num_windows
    wp = torch.zeros(rows, s.K_in_pad, dtype=w.dtype)
    wp[:, :K] = w.detach().cpu()
    out = torch.zeros(rows, s.K_out, dtype=w.dtype)
    nonzero = (wp != 0).tolist()
    for r in range(rows):
        for g in range(s.num_groups):
            used = [0] * nw
            for p in range(L):
                if not nonzero[r][g * L + p]:
                    continue
                for win in (p // 2 - 1, p // 2):
                    if 0 <= win < nw and used[win] < 2:
                        used[win] += 1
                        out[r, (g * nw + win) * 4 + p - 2 * win] = wp[r, g * L + p]
                        break
                else:
                    count = sum(nonzero[r][g * L : (g + 1) * L])
                    raise ValueError(
                        f"row {r}, group {g}: {count} nonzeros in {L}; the pattern allows at "
                        f"most {L - 2} (prune_to_pattern makes a weight that fits)"
                    )
    return out.to(w.device)


# ---------------------------------------------------------------------------------------------
# The reference (the spec)
# ---------------------------------------------------------------------------------------------


def _check_input(x, L: int, fmt: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in INPUT_DTYPES:
        raise TypeError(f"x must be float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"x must be 2-D [M, K] with M, K >= 1, got shape {tuple(x.shape)}")
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    num_windows(L)


def row_scales(x: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale, inv_scale)``, float32 ``[M]``: ``scale = max(amax / QMAX, MIN_SCALE)`` and
    ``inv_scale = 1 / scale``, each a single correctly rounded float32 division.

    Both divide by a tensor, not by a Python number: on CUDA, PyTorch computes ``t / 127.0`` as
    ``t * (1/127.0)``, which can differ from the division in the last bit, and the Triton kernel
    (``tl.math.div_rn``) must agree with this function bit for bit on every device.
    """
    amax = x.float().abs().amax(dim=1)
    scale = torch.clamp(torch.div(amax, torch.full_like(amax, QMAX[fmt])), min=MIN_SCALE)
    inv_scale = torch.div(torch.ones_like(scale), scale)
    return scale, inv_scale


def quantize_values(v: torch.Tensor, fmt: str) -> torch.Tensor:
    """Scaled float32 values -> INT8 (round half to even, clamp +-127) or FP8 E4M3 (clamp +-448,
    then the cast, which rounds to nearest, ties to even)."""
    qmax = QMAX[fmt]
    if fmt == "int8":
        return torch.clamp(torch.round(v), -qmax, qmax).to(torch.int8)
    return torch.clamp(v, -qmax, qmax).to(torch.float8_e4m3fn)


def quant_slide_reference(x: torch.Tensor, L: int = 8, fmt: str = "int8") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token quantization + slide + padding, in plain torch on x's device (the spec).

    Returns ``q [M_pad, K_out_pad]`` (int8 or float8_e4m3fn) and ``scale [M_pad]`` (float32);
    ``q[m, c] * scale[m]`` approximates ``x[m, slide_index(K, L)[c]]`` (0 in the padding).
    """
    _check_input(x, L, fmt)
    M, K = x.shape
    s = slide_shape(M, K, L)
    scale, inv_scale = row_scales(x, fmt)
    q = quantize_values(x.float() * inv_scale[:, None], fmt)  # [M, K], one rounding per value
    # Quantizing is elementwise, so quantize-then-slide equals slide-then-quantize. The slide is
    # a gather on the raw bytes (indexing is not implemented for float8 on every device).
    q_bytes = torch.zeros(M, s.K_in_pad, dtype=torch.int8, device=x.device)
    q_bytes[:, :K] = q.view(torch.int8)
    out = torch.zeros(s.M_pad, s.K_out_pad, dtype=torch.int8, device=x.device)
    out[:M, : s.K_out] = q_bytes[:, slide_index(K, L, x.device)]
    scale_out = torch.ones(s.M_pad, dtype=torch.float32, device=x.device)
    scale_out[:M] = scale
    return out.view(OUT_DTYPE[fmt]), scale_out


def dequantize_slid(q: torch.Tensor, scale: torch.Tensor, K: int, L: int, M: int | None = None) -> torch.Tensor:
    """Undo a call: ``[M, K]`` float32 values ``q * scale`` read back from the first copy of each
    input column (``M`` defaults to all rows of q, padding rows included)."""
    M = q.shape[0] if M is None else M
    vals = q[:M].float() * scale[:M, None]
    return vals[:, first_copy_index(K, L, q.device)]


# ---------------------------------------------------------------------------------------------
# The Triton kernel
# ---------------------------------------------------------------------------------------------


def triton_available() -> bool:
    """True when ``import triton`` works (it does not check for a GPU)."""
    try:
        import triton  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken triton install counts as missing
        return False
    return True


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def fp8_supported(device=None) -> bool:
    """FP8 E4M3 conversion in hardware: compute capability 8.9 (Ada) or newer."""
    if not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def choose_config(M: int) -> tuple[int, int, int]:
    """``(BLOCK_OUT, num_warps, num_stages)`` by the number of rows, as the seed does.

    The grid has one program per row, so M is the parallelism. Few rows (M <= 64, decode):
    128-window tiles and 4 warps; a program's tile is small, but there are too few programs to
    fill the GPU anyway. Up to 1024 rows: 256-window tiles, 8 warps. More rows: 512-window
    tiles (2 KB of output per iteration), 8 warps, fewer loop trips per row. num_stages=2 is the
    seed's value; the loops hold no ``tl.dot``, so it has little to pipeline.
    """
    if M <= 64:
        return 128, 4, 2
    if M <= 1024:
        return 256, 8, 2
    return 512, 8, 2


def block_k_for(K: int) -> int:
    """Pass 1 reads the row in chunks of BLOCK_K values: a power of two, 16..4096."""
    return min(4096, max(16, 1 << (K - 1).bit_length()))


def quant_slide_triton(
    x: torch.Tensor,
    L: int = 8,
    fmt: str = "int8",
    *,
    block_out: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    block_k: int | None = None,
    out: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same result as :func:`quant_slide_reference`, from one Triton kernel (CUDA tensors).

    The kernel writes every byte of the output, padding included, so the output is allocated
    with ``torch.empty``: no separate zero-fill pass over memory. (The seed's wrapper allocates
    with ``torch.zeros``/``torch.ones`` and launches only M programs: same bytes, one extra write
    of the whole output.) Block sizes default to :func:`choose_config` and :func:`block_k_for`.
    ``out`` and ``scale`` may be given, preallocated (contiguous, the shapes and dtypes returned).
    """
    _check_input(x, L, fmt)
    if x.device.type != "cuda" and not _interpreting():
        raise ValueError(
            f"quant_slide_triton needs a CUDA tensor, got one on {x.device} "
            "(quant_slide_reference runs anywhere; TRITON_INTERPRET=1 runs Triton on the CPU)"
        )
    if fmt == "fp8" and x.device.type == "cuda" and not fp8_supported(x.device):
        raise ValueError(
            f"FP8 E4M3 needs compute capability >= 8.9, this GPU has {torch.cuda.get_device_capability(x.device)}"
        )
    from . import _fused_quant_triton as kt  # imports triton

    if x.stride(1) != 1:
        x = x.contiguous()
    M, K = x.shape
    s = slide_shape(M, K, L)
    auto = choose_config(M)
    block_out = block_out or auto[0]
    num_warps = num_warps or auto[1]
    num_stages = num_stages or auto[2]
    block_k = block_k or block_k_for(K)
    for name, v in (("block_out", block_out), ("block_k", block_k)):
        if v < 1 or v & (v - 1):
            raise ValueError(f"{name} must be a power of two, got {v}")
    if out is None:
        out = torch.empty(s.M_pad, s.K_out_pad, dtype=OUT_DTYPE[fmt], device=x.device)
    if scale is None:
        scale = torch.empty(s.M_pad, dtype=torch.float32, device=x.device)
    for name, t, shape, dtype in (
        ("out", out, (s.M_pad, s.K_out_pad), OUT_DTYPE[fmt]),
        ("scale", scale, (s.M_pad,), torch.float32),
    ):
        if tuple(t.shape) != shape or t.dtype != dtype or not t.is_contiguous() or t.device != x.device:
            raise ValueError(
                f"{name} must be a contiguous {dtype} tensor of shape {shape} on {x.device}, "
                f"got {t.dtype} {tuple(t.shape)} on {t.device}"
            )
    out32 = out.view(torch.int32)  # [M_pad, K_out_pad / 4]: one int32 per window of 4 bytes
    kt.quant_slide_kernel[(s.M_pad,)](
        x,
        out32,
        scale,
        M,
        K,
        x.stride(0),
        s.num_groups * s.num_windows,
        s.K_out_pad // 4,
        L=L,
        NUM_WINDOWS=s.num_windows,
        IS_FP8=(fmt == "fp8"),
        QMAX=QMAX[fmt],
        MIN_SCALE=MIN_SCALE,
        BLOCK_K=block_k,
        BLOCK_OUT=block_out,
        PORTABLE_RINT=_interpreting(),
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out, scale


def quant_slide(x: torch.Tensor, L: int = 8, fmt: str = "int8") -> tuple[torch.Tensor, torch.Tensor]:
    """The Triton kernel for CUDA tensors when triton is installed, the reference otherwise."""
    if x.device.type == "cuda" and triton_available():
        return quant_slide_triton(x, L, fmt)
    return quant_slide_reference(x, L, fmt)


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def bytes_moved(M: int, K: int, L: int, fmt: str = "int8", dtype=torch.bfloat16) -> int:
    """The fewest bytes one call must move: read x once, write q (padding included) and the scales.
    (The kernel reads each row twice, but the second read hits the cache: a row is K * 2 bytes.)"""
    s = slide_shape(M, K, L)
    itemsize = torch.empty((), dtype=dtype).element_size()
    return M * K * itemsize + s.M_pad * s.K_out_pad * 1 + s.M_pad * 4


def _time_us(fn, n_sets: int, device: str, warmup: int, reps: int, inner: int) -> tuple[float, str]:
    """Median microseconds of one ``fn(i)`` and how it was timed; call ``i`` of a sample uses
    buffer set ``i % n_sets``.

    On a GPU, ``inner`` back-to-back calls are captured in a CUDA graph and each timed sample is
    one replay between two CUDA events: launched one by one from Python, a kernel of a few
    microseconds would time the launch overhead instead. Where capture fails, the same
    ``inner`` calls run eagerly.
    """
    from ..bench import time_callable

    def many():
        for i in range(inner):
            fn(i % n_sets)

    how = "eager"
    run = many
    if device == "cuda":
        many()  # compiles the Triton kernel and fills the allocator's cache outside the capture
        torch.cuda.synchronize()
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                many()
            run, how = graph.replay, "cuda graph"
        except Exception:  # noqa: BLE001 - capture is an optimisation; eager timing still holds
            torch.cuda.synchronize()
    t = time_callable(run, device, warmup=warmup, reps=reps)
    return t.median_s / inner * 1e6, how


#: Bytes the rotating buffer sets of one GPU measurement add up to at least (where 64 sets
#: allow it): four times an H100's 50 MB L2, so repeated calls read HBM, not the cache.
ROTATE_BYTES = 200e6


def bench_fused_quant(
    M: int,
    K: int,
    L: int = 8,
    fmt: str = "int8",
    dtype=torch.bfloat16,
    device: str | None = None,
    warmup: int = 3,
    reps: int = 20,
    impls=("triton", "reference", "copy"),
    seed: int = 0,
) -> list[dict]:
    """Time the Triton kernel, the torch reference and a plain copy of x on one shape.

    One dict per implementation: ``impl, M, K, L, fmt, dtype, device, status, reason, us, bytes,
    gbps, frac_of_copy`` (this GB/s over the copy's) and ``timing``. Bytes are those each must
    move: :func:`bytes_moved` for the quantizers, read + write of x for the copy
    (``dst.copy_(x)`` into a preallocated tensor, so no allocation is timed).

    On a GPU each timed sample is a CUDA-graph replay of many back-to-back calls (see
    :func:`_time_us`), and the calls rotate over enough copies of the input and output buffers
    (up to 64 sets, :data:`ROTATE_BYTES` in all) that a shape which fits in L2 is not read back
    from the cache on the next call. The tiniest shapes still fit; they are bound by latency.
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn(M, K, generator=gen).to(device=device, dtype=dtype)
    s = slide_shape(M, K, L)
    per_call = bytes_moved(M, K, L, fmt, dtype)
    n_sets = min(64, max(1, math.ceil(ROTATE_BYTES / per_call))) if device == "cuda" else 1
    inner = max(20, n_sets) if device == "cuda" else 1
    xs = [x0] + [x0.clone() for _ in range(n_sets - 1)]
    rows = []
    for impl in impls:
        row = {
            "impl": impl,
            "M": M,
            "K": K,
            "L": L,
            "fmt": fmt,
            "dtype": str(dtype).replace("torch.", ""),
            "device": device,
            "status": "ok",
            "reason": "",
            "us": None,
            "gbps": None,
            "frac_of_copy": None,
            "timing": None,
            "bytes": 2 * x0.numel() * x0.element_size() if impl == "copy" else per_call,
        }
        if impl == "triton" and device != "cuda":
            row.update(status="skipped", reason="the Triton kernel needs an NVIDIA GPU")
        elif impl == "triton" and not triton_available():
            row.update(status="skipped", reason="triton is not installed")
        elif fmt == "fp8" and device == "cuda" and not fp8_supported():
            row.update(status="skipped", reason="FP8 needs compute capability >= 8.9")
        if row["status"] == "ok":
            if impl == "triton":
                qs = [torch.empty(s.M_pad, s.K_out_pad, dtype=OUT_DTYPE[fmt], device=device) for _ in xs]
                scales = [torch.empty(s.M_pad, dtype=torch.float32, device=device) for _ in xs]
                fn = lambda i: quant_slide_triton(xs[i], L, fmt, out=qs[i], scale=scales[i])  # noqa: E731
            elif impl == "copy":
                dsts = [torch.empty_like(x0) for _ in xs]
                fn = lambda i: dsts[i].copy_(xs[i])  # noqa: E731
            else:
                fn = lambda i: quant_slide_reference(xs[i], L, fmt)  # noqa: E731
            us, how = _time_us(fn, len(xs), device, warmup, reps, inner)
            row.update(us=us, gbps=row["bytes"] / us / 1e3, timing=how)
            fn = qs = scales = dsts = None  # free this implementation's buffers before the next
        rows.append(row)
        if device == "cuda":
            torch.cuda.synchronize()
    copy = next((r for r in rows if r["impl"] == "copy" and r["status"] == "ok"), None)
    for r in rows:
        if copy and r["status"] == "ok":
            r["frac_of_copy"] = r["gbps"] / copy["gbps"]
    return rows


def compare_configs(
    M: int,
    K: int,
    L: int = 8,
    fmt: str = "int8",
    dtype=torch.bfloat16,
    block_outs=(128, 256, 512, 1024),
    warps=(4, 8, 16),
    reps: int = 10,
) -> list[dict]:
    """Time the kernel (GPU) with every ``(BLOCK_OUT, num_warps)`` pair; rows sorted fastest first,
    each ``{"block_out", "num_warps", "us", "chosen"}`` (``chosen``: :func:`choose_config`'s pick).
    Timed as :func:`bench_fused_quant` times, rotating over buffer sets."""
    x0 = torch.randn(M, K, generator=torch.Generator().manual_seed(0)).to(device="cuda", dtype=dtype)
    n_sets = min(64, max(1, math.ceil(ROTATE_BYTES / bytes_moved(M, K, L, fmt, dtype))))
    xs = [x0] + [x0.clone() for _ in range(n_sets - 1)]
    chosen = choose_config(M)[:2]
    rows = []
    for bo in block_outs:
        for nw in warps:

            def fn(i, bo=bo, nw=nw):
                quant_slide_triton(xs[i], L, fmt, block_out=bo, num_warps=nw)

            us, _ = _time_us(fn, n_sets, "cuda", 3, reps, max(20, n_sets))
            rows.append({"block_out": bo, "num_warps": nw, "us": us, "chosen": (bo, nw) == chosen})
    return sorted(rows, key=lambda r: r["us"])


#: The sweep of the appendix: decode to prefill batch sizes on Llama-3-8B-like K values.
SWEEP_MS = (1, 16, 64, 256, 1024, 4096, 16384)
SWEEP_KS = (4096, 14336)


def run_sweep(
    Ms=SWEEP_MS,
    Ks=SWEEP_KS,
    L: int = 8,
    fmts=("int8", "fp8"),
    dtype=torch.bfloat16,
    device=None,
    reference_max_elems: int = 1 << 26,
    progress: bool = True,
    **kw,
) -> list[dict]:
    """:func:`bench_fused_quant` over shapes and formats. The torch reference is skipped above
    ``reference_max_elems`` values of x (its temporaries would take several GB)."""
    rows = []
    for fmt in fmts:
        for K in Ks:
            for M in Ms:
                impls = ("triton", "reference", "copy") if M * K <= reference_max_elems else ("triton", "copy")
                for r in bench_fused_quant(M, K, L, fmt, dtype, device, impls=impls, **kw):
                    rows.append(r)
                    if progress:
                        speed = f"{r['us']:9.1f} us {r['gbps']:7.1f} GB/s" if r["status"] == "ok" else r["reason"]
                        print(f"{fmt:5} M={M:6} K={K:6} {r['impl']:10} {speed}", flush=True)
    return rows


RESULTS_DIR = Path(__file__).resolve().parents[2] / "bench_results" / "appendix_d"
RESULT_COLUMNS = (
    "impl",
    "M",
    "K",
    "L",
    "fmt",
    "dtype",
    "device",
    "status",
    "reason",
    "us",
    "bytes",
    "gbps",
    "frac_of_copy",
    "timing",
)


def save_results(rows: list[dict], out_dir=RESULTS_DIR, device: str = "cuda") -> Path:
    """Write ``<machine-slug>.csv`` in the format of ``bench.write_results``: the header
    (:func:`bench.make_header`) as ``# key: value`` lines, then the rows. CSV, not JSON, so that
    ``bench.load_results("bench_results")``, which picks the newest JSON, never picks this."""
    import csv

    from .. import bench

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = bench.make_header(
        device,
        triton=_triton_version(),
        tool="quantgemm_kernels.appendices.fused_quant",
        timing="median over timed samples after warm-up; a sample is one CUDA-graph replay "
        "of back-to-back calls rotating over buffer sets (fused_quant.ROTATE_BYTES), "
        "between CUDA events; us = sample time / calls (eager perf_counter on a CPU)",
    )
    path = out / f"{header['machine_slug']}.csv"
    with open(path, "w", newline="") as f:
        for key, value in header.items():
            f.write(f"# {key}: {json.dumps(value, default=str)}\n")
        w = csv.DictWriter(f, fieldnames=RESULT_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in RESULT_COLUMNS})
    return path


def load_results(out_dir=RESULTS_DIR) -> list[dict]:
    """Every recorded sweep under ``out_dir``: ``[{"header", "rows", "path"}]``, newest last."""
    from .. import bench

    d = Path(out_dir)
    found = sorted(d.glob("*.csv"), key=lambda p: p.stat().st_mtime) if d.is_dir() else []
    results = []
    for p in found:
        res = bench.load_results(p)
        for r in res["rows"]:
            r["reason"] = r.get("reason") or ""
        results.append({"header": res["header"], "rows": res["rows"], "path": p.name})
    return results


def plot_bandwidth(rows: list[dict], title: str, K: int | None = None, fmt: str = "int8", ax=None):
    """GB/s against M (log scale) for each implementation, one shape K and one format."""
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["status"] == "ok" and r["fmt"] == fmt and (K is None or r["K"] == K)]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    style = {
        "triton": ("o-", "Triton fused kernel"),
        "reference": ("s--", "torch reference"),
        "copy": ("^:", "plain copy of x"),
    }
    for impl, (marker, label) in style.items():
        pts = sorted((r["M"], r["gbps"]) for r in rows if r["impl"] == impl)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("GB/s (bytes read + written / time)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax


def _triton_version():
    try:
        import triton

        return triton.__version__
    except Exception:  # noqa: BLE001
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m quantgemm_kernels.appendices.fused_quant",
        description="Time the fused quantize+slide kernel against the torch reference "
        "and a plain copy; write bench_results/appendix_d/<machine>.csv.",
    )
    p.add_argument("--Ms", default=",".join(map(str, SWEEP_MS)), help="comma-separated M values")
    p.add_argument("--Ks", default=",".join(map(str, SWEEP_KS)), help="comma-separated K values")
    p.add_argument("--L", type=int, default=8)
    p.add_argument("--fmts", default="int8,fp8")
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "float16", "bfloat16"))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out", default=str(RESULTS_DIR))
    p.add_argument("--no-save", action="store_true")
    p.add_argument(
        "--configs",
        action="store_true",
        help="instead of the sweep: time every (BLOCK_OUT, num_warps) pair for each M and the first K "
        "(INT8), against choose_config's pick",
    )
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    from ..bench import machine_name

    print(f"# {machine_name(device)}; triton {_triton_version()}")
    if args.configs:
        K = int(args.Ks.split(",")[0])
        for M in (int(v) for v in args.Ms.split(",")):
            rows = compare_configs(M, K, args.L, "int8", getattr(torch, args.dtype), reps=args.reps)
            pick = next(r for r in rows if r["chosen"])
            print(
                f"M={M:6} K={K}: best {rows[0]['block_out']:5}/{rows[0]['num_warps']:2} warps {rows[0]['us']:8.1f} us;"
                f" choose_config {pick['block_out']}/{pick['num_warps']} {pick['us']:8.1f} us;"
                f" worst {rows[-1]['block_out']}/{rows[-1]['num_warps']} {rows[-1]['us']:8.1f} us",
                flush=True,
            )
        return 0
    rows = run_sweep(
        [int(v) for v in args.Ms.split(",")],
        [int(v) for v in args.Ks.split(",")],
        args.L,
        tuple(args.fmts.split(",")),
        getattr(torch, args.dtype),
        device,
        reps=args.reps,
    )
    if not args.no_save:
        print("wrote", save_results(rows, args.out, device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
