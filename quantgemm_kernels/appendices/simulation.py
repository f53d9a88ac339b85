"""Appendix C: simulating a quantized kernel faithfully.

The op is an INT8 causal depthwise conv1d followed by SiLU and a requantization to INT8, the short
convolution of a quantized Mamba block (Quamba's ``quant_causal_conv1d`` with ``silu_activation``).
For int8 ``x [batch, channels, time]`` and ``w [channels, width]``, in this order:

.. code-block:: text

    acc[b,c,t] = sum_k w[c,k] * x[b,c,t-(width-1)+k]       int32, zeros before t = 0
    s[c]       = x_scale[c or 0] * w_scale[c]              float32
    y          = float32(acc) * s[c] + bias[c]             float32: a multiply, then an add
    z          = y / (1 + exp(-y))                         float32 SiLU
    q          = clamp(roundf(z / out_scale), -128, 127)   ties away from zero, as C's roundf

Functions (the appendix uses all of them):

* :func:`conv1d_silu_int8`: the compiled kernel (``csrc/appendix_c/conv1d_silu_int8.cpp`` and
  ``.cu``), on the device of its inputs. It builds on first use into its own small extension,
  the CPU kernel always and the CUDA one where CUDA is, with its operator under
  ``torch.ops.quantgemm_appendix_c`` (``_build.load_appendix_c``).
* :func:`simulate_faithful`: numpy, the kernel's operations in the kernel's order; it matches the
  kernel bit for bit, the int8 output and the float32 SiLU output both.
* :func:`simulate_float`: the float "simulation" ("Mode 2") that appendix C examines (dequantize
  first, convolve in float, round to the int8 grid, SiLU, round again), and, through ``fixes``, the
  same with some of its differences from the kernel repaired.
* :func:`ideal`: float64 with no output rounding, the value every int8 output approximates.
* :func:`exp_portable`, :func:`exp_libm`, :func:`round_half_away`: the building blocks.
* :func:`make_inputs`, :func:`compare_int8`: seeded inputs with calibrated scales; disagreement counts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from typing import NamedTuple

import numpy as np
import torch

F32 = np.float32
MAX_WIDTH = 1024  # |acc| <= width * 128 * 128 must be exact in float32 (2^24)

# The constants of exp_portable, read from the same hex literals as csrc/conv1d_silu_int8.h.
_LOG2E = F32(float.fromhex("0x1.715476p+0"))
_LN2_HI = F32(float.fromhex("0x1.62e4p-1"))
_LN2_LO = F32(float.fromhex("0x1.7f7d1cp-20"))
_TAYLOR = [
    F32(float.fromhex(h))
    for h in (  # 1/7!, 1/6!, ..., 1/2!, 1, 1 for Horner's rule
        "0x1.a01a02p-13",
        "0x1.6c16c2p-10",
        "0x1.111112p-7",
        "0x1.555556p-5",
        "0x1.555556p-3",
        "0x1p-1",
        "0x1p+0",
        "0x1p+0",
    )
]

FIXES = ("round_once", "scales_after", "round_half_away", "kernel_silu")


class Conv1dInputs(NamedTuple):
    """The op's arguments, in the order every function here takes them: ``f(*inputs)``."""

    x: torch.Tensor  # int8 [batch, channels, time]
    w: torch.Tensor  # int8 [channels, width]
    x_scale: torch.Tensor  # float32 [1] (per tensor) or [channels]
    w_scale: torch.Tensor  # float32 [channels]
    bias: torch.Tensor | None  # float32 [channels]
    out_scale: float  # a float32 value held in a Python float


# ------------------------------------------------------------------------------ the compiled op
def _check_vec(t, name: str, channels: int, device, allow_one: bool, positive: bool) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise TypeError(f"{name} must be torch.float32, got {t.dtype}")
    sizes = f"{channels} (per channel) or 1 (per tensor)" if allow_one else f"{channels}"
    if t.dim() != 1 or not (t.shape[0] == channels or (allow_one and t.shape[0] == 1)):
        raise ValueError(f"{name} must be 1-D with {sizes} values, got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, but x is on {device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    if t.numel() and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or Inf")
    if positive and t.numel() and not bool((t > 0).all()):
        raise ValueError(f"{name} must be positive")


def load_kernels() -> bool:
    """Build this appendix's extension (first use after a source change: up to a minute) and load
    it; True when its CUDA kernel is built too. :func:`conv1d_silu_int8` calls it as well."""
    from .._build import load_appendix_c

    return load_appendix_c()["with_cuda"]


def conv1d_silu_int8(x, w, x_scale, w_scale, bias, out_scale, *, return_float=False, libm_exp=False):
    """Run the compiled kernel on the device of ``x``: int8 ``q [batch, channels, time]``.

    With ``return_float=True`` it returns ``(q, z)``, ``z`` the float32 SiLU output before
    requantization. ``libm_exp=True`` uses the platform's ``expf`` (glibc's on a CPU, CUDA's on a
    GPU) instead of the kernel's bit-portable exp: the results may then differ between devices.
    ``out_scale`` is rounded to float32 once, as the kernel receives it.
    """
    from .._build import load_appendix_c

    for t, name in ((x, "x"), (w, "w")):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.int8:
            raise TypeError(f"{name} must be torch.int8, got {t.dtype}")
    if x.dim() != 3:
        raise ValueError(f"x must be 3-D [batch, channels, time], got shape {tuple(x.shape)}")
    if w.dim() != 2 or w.shape[0] != x.shape[1]:
        raise ValueError(f"w must be [channels={x.shape[1]}, width], got shape {tuple(w.shape)}")
    if not 1 <= w.shape[1] <= MAX_WIDTH:
        raise ValueError(f"width must be in [1, {MAX_WIDTH}], got {w.shape[1]}")
    if x.device.type not in ("cpu", "cuda") or w.device != x.device:
        raise ValueError(f"x and w must be on one CPU or CUDA device, got {x.device} and {w.device}")
    if not (x.is_contiguous() and w.is_contiguous()):
        raise ValueError("x and w must be contiguous: call .contiguous()")
    C = x.shape[1]
    _check_vec(x_scale, "x_scale", C, x.device, allow_one=True, positive=True)
    _check_vec(w_scale, "w_scale", C, x.device, allow_one=False, positive=True)
    if bias is not None:
        _check_vec(bias, "bias", C, x.device, allow_one=False, positive=False)
    if isinstance(out_scale, torch.Tensor) or not isinstance(out_scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"out_scale must be a Python float, got {type(out_scale).__name__}")
    with np.errstate(over="ignore"):
        s = float(F32(out_scale))  # what the kernel receives: 1e-50 becomes 0, 1e39 becomes inf
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"out_scale must be a positive, finite float32, got {out_scale!r}")
    ext = load_appendix_c()
    if x.device.type == "cuda" and not ext["with_cuda"]:
        raise ValueError("x is on a CUDA device but the CUDA kernels are not built here")
    q, z = ext["ops"].conv1d_silu_int8(x, w, x_scale, w_scale, bias, s, bool(return_float), bool(libm_exp))
    return (q, z) if return_float else q


# ------------------------------------------------------------------------------ building blocks
def exp_portable(x) -> np.ndarray:
    """e^x in float32 exactly as the kernels compute it (``conv1d_silu::exp_portable``).

    n = floor(x log2(e) + 1/2), r = (x - n LN2_HI) - n LN2_LO, e^r by Horner's rule on the degree-7
    Taylor series, times 2^n built from its bits. Each numpy operation below is one correctly
    rounded float32 operation, the same ones the C++ and CUDA code perform, in the same order.
    """
    x = np.clip(np.asarray(x, dtype=F32), F32(-87), F32(88))  # keeps 2^n a normal float
    n = np.floor(x * _LOG2E + F32(0.5))
    r = (x - n * _LN2_HI) - n * _LN2_LO
    p = np.full_like(r, _TAYLOR[0])
    for c in _TAYLOR[1:]:
        p = p * r + c
    pow2 = ((n.astype(np.int32) + 127) << 23).view(F32)  # 2^n: exponent bits n + 127, mantissa 0
    return p * pow2


_libm_expf = None


def exp_libm(x) -> np.ndarray:
    """The C library's ``expf``, called once per element through ctypes (slow; for comparisons).

    It is the function the CPU kernel calls with ``libm_exp=True``: a simulation that calls the
    same function gets the same bits. Raises ``OSError`` where no C math library can be loaded.
    """
    global _libm_expf
    if _libm_expf is None:
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        lib.expf.restype, lib.expf.argtypes = ctypes.c_float, [ctypes.c_float]
        _libm_expf = lib.expf
    x = np.asarray(x, dtype=F32)
    out = np.fromiter((_libm_expf(v) for v in x.ravel().tolist()), dtype=F32, count=x.size)
    return out.reshape(x.shape)


def round_half_away(v) -> np.ndarray:
    """C's ``roundf`` on float32: to the nearest integer, halves away from zero, exactly.

    ``np.round`` sends halves to the even neighbour, and ``floor(v + 0.5)`` is wrong at
    0.49999997 (the sum rounds up to 1.0): split off the fraction instead, which is exact.
    """
    v = np.asarray(v, dtype=F32)
    t = np.trunc(v)
    frac = v - t  # exact: the fraction of a float32 is a float32
    return t + np.where(np.abs(frac) >= F32(0.5), np.sign(v), F32(0)).astype(F32)


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def _int_conv(x, w) -> np.ndarray:
    """acc[b,c,t] = sum_k w[c,k] x[b,c,t-(W-1)+k] in int32, with W-1 zeros padded before t = 0."""
    x = _np(x).astype(np.int32)
    w = _np(w).astype(np.int32)
    B, C, T = x.shape
    W = w.shape[1]
    xp = np.concatenate([np.zeros((B, C, W - 1), np.int32), x], axis=2)
    acc = np.zeros((B, C, T), np.int32)
    for k in range(W):
        acc += w[None, :, k, None] * xp[:, :, k : k + T]
    return acc


# ------------------------------------------------------------------------------ the simulations
def simulate_faithful(x, w, x_scale, w_scale, bias, out_scale, *, exp=exp_portable, return_float=False):
    """The kernel's arithmetic in numpy, operation for operation: equal to it bit for bit.

    Integer accumulation; the two scales multiplied once per channel in float32; one float32
    multiply and one add to dequantize; SiLU as y / (1 + exp(-y)); one division by out_scale;
    one rounding, halves away from zero. ``exp`` swaps the exponential (e.g. ``exp_libm`` to
    follow the kernel run with ``libm_exp=True``). Returns int8 ``q`` (and float32 ``z``).
    """
    C = _np(w).shape[0]
    acc = _int_conv(x, w)
    scale = (_np(x_scale).astype(F32) * _np(w_scale).astype(F32))[None, :, None]  # [1 or C] * [C]
    b = (_np(bias).astype(F32) if bias is not None else np.zeros(C, F32))[None, :, None]
    y = acc.astype(F32) * scale + b  # exact conversion (|acc| < 2^24), then a multiply, then an add
    z = y / (F32(1) + exp(-y))
    q = np.clip(round_half_away(z / F32(out_scale)), -128, 127).astype(np.int8)
    return (q, z) if return_float else q


def simulate_float(x, w, x_scale, w_scale, bias, out_scale, *, fixes=()):
    """The float "simulation" "Mode 2" of appendix C, with a chosen subset of its bugs fixed.

    With ``fixes=()`` this is Mode 2's code path, in float32:

    1. dequantize first: ``x * s_x`` and ``w * s_w`` elementwise, then ``F.conv1d`` in float;
    2. round the conv output to the int8 grid of ``out_scale`` (``torch.round``: halves to even);
    3. SiLU on that rounded value, as ``y * sigmoid(y)``;
    4. round again to the int8 grid.

    ``fixes`` (names in ``FIXES``) repairs one difference each: ``"round_once"`` drops step 2, so
    SiLU sees the unrounded value; ``"scales_after"`` accumulates integers and applies the scales
    once, as the kernel does; ``"round_half_away"`` uses roundf's ties; ``"kernel_silu"`` computes
    SiLU with the kernel's formula and exp. All four together give :func:`simulate_faithful`.
    """
    import torch.nn.functional as nnf

    unknown = set(fixes) - set(FIXES)
    if unknown:
        raise ValueError(f"unknown fixes {sorted(unknown)}; choose from {FIXES}")
    C, W = _np(w).shape
    sx = _np(x_scale).astype(F32)
    sw = _np(w_scale).astype(F32)
    b = _np(bias).astype(F32) if bias is not None else None
    if "scales_after" in fixes:
        y = _int_conv(x, w).astype(F32) * (sx * sw)[None, :, None]
        y = y + (b if b is not None else np.zeros(C, F32))[None, :, None]
    else:
        x_f = torch.from_numpy(_np(x).astype(F32) * sx[None, :, None])  # [1] or [C] broadcasts over channels
        w_f = torch.from_numpy(_np(w).astype(F32) * sw[:, None])
        y = nnf.conv1d(
            nnf.pad(x_f, (W - 1, 0)), w_f[:, None, :], None if b is None else torch.from_numpy(b), groups=C
        ).numpy()
    rnd = round_half_away if "round_half_away" in fixes else np.round  # np.round: ties to even, as torch.round
    s_out = F32(out_scale)
    if "round_once" not in fixes:
        y = np.clip(rnd(y / s_out), -128, 127).astype(F32) * s_out  # SiLU will see a grid value
    if "kernel_silu" in fixes:
        z = y / (F32(1) + exp_portable(-y))
    else:
        yt = torch.from_numpy(np.ascontiguousarray(y))
        z = (yt * torch.sigmoid(yt)).numpy()
    return np.clip(rnd(z / s_out), -128, 127).astype(np.int8)


def simulate_seed_mode2(x, w, x_scale, w_scale, bias, out_scale):
    """The "Mode 2" float simulation of appendix C: :func:`simulate_float` with no fixes."""
    return simulate_float(x, w, x_scale, w_scale, bias, out_scale, fixes=())


def ideal(x, w, x_scale, w_scale, bias) -> np.ndarray:
    """float64 SiLU(conv) of the same int8 inputs and scales, with no output rounding at all."""
    C = _np(w).shape[0]
    scale = _np(x_scale).astype(np.float64) * _np(w_scale).astype(np.float64)
    b = _np(bias).astype(np.float64) if bias is not None else np.zeros(C)
    y = _int_conv(x, w).astype(np.float64) * scale[None, :, None] + b[None, :, None]
    with np.errstate(over="ignore"):  # exp(-y) = inf for y < -709 gives y / inf = 0, as it should
        return y / (1.0 + np.exp(-y))


# ------------------------------------------------------------------------------ inputs and metrics
def make_inputs(
    batch: int = 2,
    channels: int = 64,
    time: int = 256,
    width: int = 4,
    seed: int = 0,
    *,
    x_scale_per_channel: bool = False,
    with_bias: bool = True,
) -> Conv1dInputs:
    """Seeded int8 inputs with the scales a calibration would give them (absmax / 127).

    Float activations (a different spread per channel) and weights are quantized symmetrically:
    x per tensor (or per channel), w per channel. The bias is float32. ``out_scale`` is calibrated
    on the float64 ideal output, so the int8 output uses its whole range.
    """
    rng = np.random.default_rng(seed)
    xf = rng.standard_normal((batch, channels, time)) * rng.uniform(0.5, 2.0, (1, channels, 1))
    wf = rng.standard_normal((channels, width)) * 0.5

    def absmax_scale(a, axis):
        s = (np.abs(a).max(axis=axis, initial=0.0) / 127.0).astype(F32)
        return np.where(s > 0, s, F32(1)).astype(F32)  # an all-zero (or empty) tensor gets scale 1

    sx = absmax_scale(xf, (0, 2)) if x_scale_per_channel else absmax_scale(xf.reshape(1, -1), 1)
    sw = absmax_scale(wf, 1)
    x = np.clip(np.round(xf / sx[None, :, None]), -127, 127).astype(np.int8)
    w = np.clip(np.round(wf / sw[:, None]), -127, 127).astype(np.int8)
    bias = (rng.standard_normal(channels) * 0.1).astype(F32) if with_bias else None
    z = ideal(x, w, sx, sw, bias)
    amax = float(np.abs(z).max()) if z.size else 0.0
    out_scale = float(F32(amax / 127.0)) if amax > 0 else 1.0
    return Conv1dInputs(
        torch.from_numpy(x),
        torch.from_numpy(w),
        torch.from_numpy(sx),
        torch.from_numpy(sw),
        None if bias is None else torch.from_numpy(bias),
        out_scale,
    )


def compare_int8(a, b) -> dict:
    """How two int8 outputs differ: how many values, and by how many quantization steps at most."""
    d = np.abs(_np(a).astype(np.int16) - _np(b).astype(np.int16))
    return {"n": int(d.size), "mismatches": int((d > 0).sum()), "max_steps": int(d.max()) if d.size else 0}


def same_bits(a, b) -> bool:
    """True when two float32 arrays are equal bit for bit (``==`` would call -0.0 and 0.0 equal)."""
    a, b = np.ascontiguousarray(_np(a), F32), np.ascontiguousarray(_np(b), F32)
    return a.shape == b.shape and bool((a.view(np.int32) == b.view(np.int32)).all())
