"""llama.cpp's block formats in numpy: the layouts and the reference quantizers. This is the spec.

Chapter 2 introduces every function here. The C++ (``csrc/cpu/quantize.cpp``) and CUDA
(``csrc/cuda/quantize.cu``) quantizers must give the same bytes; the tests also check these
bytes against llama.cpp's own code (the ``gguf`` package and ggml through ``ggml-python``).

A format is data: one :class:`Format` in :data:`SPECS` holds its block size, its byte layout
(a numpy structured dtype, the mirror of the C struct in ``csrc/formats.h``), its reference
quantizer and how its stored quants become values. The C++ side lists the same formats once, in
``csrc/formats.def``; a test checks that the two tables agree. This module needs numpy only.

A block holds ``block_size`` consecutive values of a row: 32 for the formats of chapters 2-7, 256 for
the K-quants of chapter 8 (a super-block of 8 or 16 sub-blocks, each with its own small integer
scale, scaled in turn by the block's fp16 ``d``: scales of scales):

=======  =====  ==========================  ========================================
format   bytes  fields                      value j
=======  =====  ==========================  ========================================
Q4_0     18     d: fp16, qs: 16 x uint8     (nibble j - 8) * d   (j and j+16 share a byte)
Q4_1     20     d, m: fp16, qs: 16 x uint8  nibble j * d + m     (j and j+16 share a byte)
Q8_0     34     d: fp16, qs: 32 x int8      qs[j] * d
Q8_1     36     d: fp16, s: fp16, qs: 32    qs[j] * d;  s = d*sum(qs)  or  sum(x)
Q4_K     144    d, dmin: fp16, scales: 12,  d*sc[s] * nibble j - dmin*m[s]  (s = j // 32; sc, m:
                qs: 128 x uint8             6 bits each, packed in scales; see q4_k_scale_min)
Q6_K     210    ql: 128, qh: 64, scales:    d*scales[j // 16] * (q6 j - 32)  (q6 = 4 low bits in
                16 x int8, d: fp16          ql, 2 high bits in qh; see _q6_k_quants)
Q8_K     292    d: float32, qs: 256 x int8, qs[j] * d;  bsums[i] = sum of qs[16i : 16i+16]
                bsums: 16 x int16
=======  =====  ==========================  ========================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

#: Values per block of Q4_0, Q8_0 and Q8_1 (ggml's QK4_0 = QK8_0 = QK8_1 = 32). Code that works for
#: any format asks the format instead: ``SPECS[fmt].block_size`` or :func:`block_size`.
QK = 32

# The block layouts, numpy mirrors of the C structs in csrc/formats.h (packed, little-endian).
_Q4_0 = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])
_Q4_1 = np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", (QK // 2,))])
_Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", (QK,))])
_Q8_1 = np.dtype([("d", "<f2"), ("s", "<f2"), ("qs", "i1", (QK,))])

#: Values per super-block of the K-quants (ggml's QK_K).
QK_K = 256
K_SCALE_SIZE = 12  #: bytes of Q4_K's packed 6-bit scales and mins
_Q4_K = np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", (K_SCALE_SIZE,)), ("qs", "u1", (QK_K // 2,))])
_Q6_K = np.dtype(
    [("ql", "u1", (QK_K // 2,)), ("qh", "u1", (QK_K // 4,)), ("scales", "i1", (QK_K // 16,)), ("d", "<f2")]
)
_Q8_K = np.dtype([("d", "<f4"), ("qs", "i1", (QK_K,)), ("bsums", "<i2", (QK_K // 16,))])

#: The two meanings llama.cpp gives the ``s`` field of a Q8_1 block.
#: ``"d_sum_q"``: s = d * sum(q), quantize_row_q8_1_ref (CPU backend); our default, because it is
#: llama.cpp's reference quantizer (byte-checkable against ggml) and makes the W4A8 compensation
#: exact up to the fp16 rounding of s: the integer GEMM then equals the product of the two
#: dequantized matrices to NMSE ~5e-7 at K = 4096 (with "sum_x", ~4e-4: chapter 2 measures both).
#: ``"sum_x"``: s = sum(x) of the unquantized floats, as ggml-cuda's quantize_q8_1 stores it.
Q8_1_SUM_MODES = ("d_sum_q", "sum_x")


def bits_per_weight(fmt: str) -> float:
    """Storage cost per value: 4.5 for Q4_0, 8.5 for Q8_0, 9.0 for Q8_1."""
    return spec(fmt).bits_per_weight


def roundf(x: np.ndarray) -> np.ndarray:
    """C's ``roundf``: round half away from zero (numpy's ``round`` rounds half to even).

    Computed in float64, where ``|x| + 0.5`` is exact for every float32 ``x``.
    """
    x64 = np.asarray(x, dtype=np.float64)
    return (np.sign(x64) * np.floor(np.abs(x64) + 0.5)).astype(np.float32)


def _inverse_scale(d: np.ndarray) -> np.ndarray:
    """1/d, and 0 where d is 0. Also 0 where 1/d overflows (max |x| < 3.7e-37): llama.cpp's C code
    then casts inf to an integer, which is undefined behaviour; we quantize such a block as zeros,
    which is what it dequantizes to in llama.cpp as well (its fp16 d is 0)."""
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    inv[~np.isfinite(inv)] = 0
    return inv


def _blocks(x: np.ndarray, block_size: int = QK) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"x must be float32, got {x.dtype}")
    if x.ndim != 2 or x.shape[1] == 0 or x.shape[1] % block_size:
        raise ValueError(f"x must be [rows, K] with K a positive multiple of {block_size}, got shape {x.shape}")
    return x.reshape(-1, block_size)


def butterfly_sum32(v: np.ndarray) -> np.ndarray:
    """Sum each row of 32 float32 values in a warp's butterfly order (ggml-cuda warp_reduce_sum)."""
    v = np.array(v, dtype=np.float32)
    lanes = np.arange(QK)
    for off in (16, 8, 4, 2, 1):
        v = v + v[..., lanes ^ off]
    return v[..., 0]


def quantize_q4_0(x: np.ndarray) -> np.ndarray:
    """llama.cpp ``quantize_row_q4_0_ref``: d = max / -8 from the signed value of largest |x|."""
    xb = _blocks(x)
    imax = np.abs(xb).argmax(axis=1)  # first index of the largest magnitude, as the C loop's `<`
    vmax = xb[np.arange(len(xb)), imax]
    # In C, max starts at +0.0 and only changes on a strictly larger |x|: a block of zeros keeps
    # +0.0 even if it holds -0.0, so d = +0.0 / -8 = -0.0 (fp16 bits 0x8000). gguf's argmax takes
    # the first element's sign instead; llama.cpp's C code is the reference, so we follow it.
    vmax = np.where(np.abs(vmax) == 0, np.float32(0), vmax).astype(np.float32)
    d = vmax / np.float32(-8)
    inv_d = _inverse_scale(d)
    # x*id rounded to float32, then + 8.5 rounded again, then truncated (the C cast), clamp to 15
    v = (xb * inv_d[:, None]).astype(np.float32) + np.float32(8.5)
    q = np.minimum(np.trunc(v), 15).astype(np.uint8)
    out = np.empty(len(xb), _Q4_0)
    out["d"] = d.astype(np.float16)
    out["qs"] = q[:, : QK // 2] | (q[:, QK // 2 :] << 4)
    return out.view(np.uint8).reshape(x.shape[0], -1)


def quantize_q4_1(x: np.ndarray) -> np.ndarray:
    """llama.cpp ``quantize_row_q4_1_ref``: m = min, d = (max - min) / 15, q = trunc((x - m) / d + 0.5).

    The C loop keeps the first of equal extremes (``v < min``, ``v > max``); argmin/argmax do too,
    which decides the sign of a zero min (its fp16 bits). ``(x - min) * id`` is rounded to float32
    before ``+ 0.5`` is added (no fused multiply-add), as gguf-py computes it."""
    xb = _blocks(x)
    rows = np.arange(len(xb))
    vmin = xb[rows, xb.argmin(axis=1)]
    vmax = xb[rows, xb.argmax(axis=1)]
    d = ((vmax - vmin).astype(np.float32) / np.float32(15)).astype(np.float32)
    inv_d = _inverse_scale(d)
    v = ((xb - vmin[:, None]).astype(np.float32) * inv_d[:, None]).astype(np.float32) + np.float32(0.5)
    q = np.minimum(np.trunc(v), 15).astype(np.uint8)
    out = np.empty(len(xb), _Q4_1)
    out["d"] = d.astype(np.float16)
    out["m"] = vmin.astype(np.float16)
    out["qs"] = q[:, : QK // 2] | (q[:, QK // 2 :] << 4)
    return out.view(np.uint8).reshape(x.shape[0], -1)


def quantize_q8_0(x: np.ndarray) -> np.ndarray:
    """llama.cpp ``quantize_row_q8_0_ref``: d = amax / 127, q = roundf(x * (1/d))."""
    xb = _blocks(x)
    d = np.abs(xb).max(axis=1) / np.float32(127)
    inv_d = _inverse_scale(d)
    out = np.empty(len(xb), _Q8_0)
    out["d"] = d.astype(np.float16)
    out["qs"] = roundf(xb * inv_d[:, None]).astype(np.int8)
    return out.view(np.uint8).reshape(x.shape[0], -1)


def quantize_q8_1(x: np.ndarray, q8_1_sum: str = "d_sum_q") -> np.ndarray:
    """Q8_1 as llama.cpp makes it: ``quantize_row_q8_1_ref`` (``"d_sum_q"``) or ggml-cuda's
    ``quantize_q8_1`` (``"sum_x"``, which also divides by d instead of multiplying by 1/d)."""
    if q8_1_sum not in Q8_1_SUM_MODES:
        raise ValueError(f"q8_1_sum must be one of {Q8_1_SUM_MODES}, got {q8_1_sum!r}")
    xb = _blocks(x)
    amax = np.abs(xb).max(axis=1)
    d = amax / np.float32(127)
    out = np.empty(len(xb), _Q8_1)
    out["d"] = d.astype(np.float16)
    if q8_1_sum == "d_sum_q":
        inv_d = _inverse_scale(d)
        q = roundf(xb * inv_d[:, None]).astype(np.int8)
        s = q.astype(np.int32).sum(axis=1).astype(np.float32) * d
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(amax[:, None] == 0, 0, roundf(xb / d[:, None])).astype(np.int8)
        s = butterfly_sum32(xb)
    out["qs"] = q
    out["s"] = s.astype(np.float16)
    return out.view(np.uint8).reshape(x.shape[0], -1)


# ---------------------------------------------------------------------------------------------
# K-quants (chapter 8): super-blocks of 256 values.
#
# The reference quantizers below follow ggml-quants.c (ggml 0.25.3, the llama-cpp-python 0.3.36
# sdist; the same functions in ggml-python 0.0.45's ggml 0.15.3) operation by operation, in
# float32: quantize_row_q4_K_ref with make_qkx2_quants, quantize_row_q6_K_ref with
# make_qx_quants, quantize_row_q8_K_ref, and nearest_int. Those C functions search for scales
# with float loops (sums over 32 or 16 values, errors compared with `<`), so a different order of
# additions, a fused multiply-add or numpy's pairwise summation could pick another scale and
# change bytes. Every sum here is therefore a Python loop over the values in the C loop's order,
# vectorised across sub-blocks only, and every product is rounded to float32 on its own (ggml
# builds this file without FMA contraction: tests/test_formats.py checks the bytes against it).
# ---------------------------------------------------------------------------------------------

_F32 = np.float32
GROUP_MAX_EPS = _F32(1e-15)  #: ggml-quants.c: below this, a Q6_K sub-block counts as all zero


def nearest_int(f: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int``: ``f + 12582912.f`` rounded to float32, then the low 23 bits of the sum
    minus 2^22. Round half to even for |f| < 2^22; for larger, inf or NaN arguments (which ggml's
    assert excludes, but release builds compute anyway) the same bits as the C code."""
    with np.errstate(invalid="ignore", over="ignore"):
        v = (np.asarray(f, _F32) + _F32(12582912.0)).astype(_F32)
    return (v.view(np.int32) & 0x007FFFFF) - 0x00400000


def _kblocks(x: np.ndarray) -> np.ndarray:
    return _blocks(x, QK_K)


def _make_qkx2_quants(x, weights, nmax: int, rmin: float, rdelta: float, nstep: int):
    """ggml's ``make_qkx2_quants`` (use_mad = false) on every row of ``x [B, n]`` at once: an
    asymmetric fit ``x ~ scale * L - the_min`` with L in 0..nmax, searched over nstep + 1 trial
    scales by weighted least squares. Returns ``(scale [B], the_min [B], L [B, n] uint8)``."""
    B, n = x.shape
    with np.errstate(all="ignore"):
        mn, mx = x[:, 0].copy(), x[:, 0].copy()
        sum_w = weights[:, 0].copy()
        sum_x = (sum_w * x[:, 0]).astype(_F32)
        for i in range(1, n):
            xi, wi = x[:, i], weights[:, i]
            mn = np.where(xi < mn, xi, mn)
            mx = np.where(xi > mx, xi, mx)
            sum_w = (sum_w + wi).astype(_F32)
            sum_x = (sum_x + wi * xi).astype(_F32)
        mn = np.where(mn > 0, _F32(0), mn).astype(_F32)
        flat = mx == mn
        iscale = (_F32(nmax) / (mx - mn)).astype(_F32)
        scale = (_F32(1) / iscale).astype(_F32)
        L = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
        Lf = L.astype(_F32)
        best_error = np.zeros(B, _F32)
        for i in range(n):
            diff = ((scale * Lf[:, i]).astype(_F32) + mn - x[:, i]).astype(_F32)
            best_error = (best_error + weights[:, i] * (diff * diff)).astype(_F32)
        for step in range(nstep + 1):
            # min is the best fit's so far (ggml updates it in the loop): max - min changes with it
            iscale = (((_F32(rmin) + _F32(rdelta) * _F32(step)) + _F32(nmax)) / (mx - mn)).astype(_F32)
            Laux = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
            La = Laux.astype(_F32)
            sum_l = np.zeros(B, _F32)
            sum_l2 = np.zeros(B, _F32)
            sum_xl = np.zeros(B, _F32)
            for i in range(n):
                wl = (weights[:, i] * La[:, i]).astype(_F32)
                sum_l = (sum_l + wl).astype(_F32)
                sum_l2 = (sum_l2 + wl * La[:, i]).astype(_F32)
                sum_xl = (sum_xl + wl * x[:, i]).astype(_F32)
            D = ((sum_w * sum_l2).astype(_F32) - (sum_l * sum_l).astype(_F32)).astype(_F32)
            this_scale = (((sum_w * sum_xl).astype(_F32) - (sum_x * sum_l).astype(_F32)) / D).astype(_F32)
            this_min = (((sum_l2 * sum_x).astype(_F32) - (sum_l * sum_xl).astype(_F32)) / D).astype(_F32)
            pos = this_min > 0
            this_min = np.where(pos, _F32(0), this_min).astype(_F32)
            this_scale = np.where(pos, (sum_xl / sum_l2).astype(_F32), this_scale).astype(_F32)
            cur_error = np.zeros(B, _F32)
            for i in range(n):
                diff = ((this_scale * La[:, i]).astype(_F32) + this_min - x[:, i]).astype(_F32)
                cur_error = (cur_error + weights[:, i] * (diff * diff)).astype(_F32)
            take = (D > 0) & (cur_error < best_error) & ~flat
            L = np.where(take[:, None], Laux, L)
            best_error = np.where(take, cur_error, best_error)
            scale = np.where(take, this_scale, scale)
            mn = np.where(take, this_min, mn)
        L = np.where(flat[:, None], 0, L)
        scale = np.where(flat, _F32(0), scale).astype(_F32)
    return scale, (-mn).astype(_F32), L.astype(np.uint8)


def _pack_q4_k_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and eight 6-bit mins ``[nb, 8]`` -> the 12 bytes of Q4_K's ``scales``:
    bytes 0-3 hold scale j (low 6 bits) and the top 2 bits of scale j+4; bytes 4-7 the same for
    the mins; bytes 8-11 the low 4 bits of scale j+4 (low nibble) and of min j+4 (high nibble)."""
    ls, lm = ls.astype(np.uint8), lm.astype(np.uint8)
    out = np.empty((len(ls), K_SCALE_SIZE), np.uint8)
    out[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    out[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    return out


def q4_k_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and eight 6-bit mins of Q4_K blocks, from their 12 ``scales`` bytes
    ``[..., 12]`` (ggml's ``get_scale_min_k4``): two ``[..., 8]`` uint8 arrays."""
    q = np.asarray(scales, np.uint8)
    sc = np.concatenate([q[..., 0:4] & 63, (q[..., 8:12] & 0xF) | ((q[..., 0:4] >> 6) << 4)], axis=-1)
    m = np.concatenate([q[..., 4:8] & 63, (q[..., 8:12] >> 4) | ((q[..., 4:8] >> 6) << 4)], axis=-1)
    return sc, m


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """llama.cpp ``quantize_row_q4_K_ref``: each sub-block of 32 gets a scale and a min from
    ``make_qkx2_quants`` (weights ``sqrt(mean(x^2)) + |x|``, 21 trial scales); the eight scales and
    eight mins are quantized to 6 bits against the largest of each (``d = max_scale / 63``,
    ``dmin = max_min / 63``, both fp16), and the quants are recomputed with the stored scales:
    ``q = nearest_int((x + dmin*m) / (d*sc))``, clamped to 0..15."""
    xb = _kblocks(x)
    nb = len(xb)
    xs = xb.reshape(nb * 8, 32)
    with np.errstate(all="ignore"):
        sum_x2 = np.zeros(nb * 8, _F32)
        for i in range(32):
            sum_x2 = (sum_x2 + xs[:, i] * xs[:, i]).astype(_F32)
        av_x = np.sqrt((sum_x2 / _F32(32)).astype(_F32)).astype(_F32)
        weights = (av_x[:, None] + np.abs(xs)).astype(_F32)
    scales, mins, L = _make_qkx2_quants(xs, weights, 15, -1.0, 0.1, 20)
    scales, mins, L = scales.reshape(nb, 8), mins.reshape(nb, 8), L.reshape(nb, 8, 32)
    max_scale, max_min = np.zeros(nb, _F32), np.zeros(nb, _F32)
    for j in range(8):  # the first strictly larger one, as the C loop
        max_scale = np.where(scales[:, j] > max_scale, scales[:, j], max_scale)
        max_min = np.where(mins[:, j] > max_min, mins[:, j], max_min)
    with np.errstate(all="ignore"):
        inv_scale = np.where(max_scale > 0, _F32(63) / max_scale, _F32(0)).astype(_F32)
        inv_min = np.where(max_min > 0, _F32(63) / max_min, _F32(0)).astype(_F32)
        # uint8_t ls = nearest_int(...): the int is cut to its low byte, then MIN(63, ls)
        ls = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63)
        lm = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63)
    out = np.empty(nb, _Q4_K)
    out["d"] = (max_scale / _F32(63)).astype(_F32).astype(np.float16)
    out["dmin"] = (max_min / _F32(63)).astype(_F32).astype(np.float16)
    out["scales"] = _pack_q4_k_scales(ls, lm)
    sc, m = q4_k_scale_min(out["scales"])  # read back, as the C code does
    with np.errstate(all="ignore"):
        d = (out["d"].astype(_F32)[:, None] * sc.astype(_F32)).astype(_F32)
        dm = (out["dmin"].astype(_F32)[:, None] * m.astype(_F32)).astype(_F32)
        q = np.clip(
            nearest_int(((xb.reshape(nb, 8, 32) + dm[..., None]).astype(_F32) / d[..., None]).astype(_F32)), 0, 15
        )
    L = np.where((d == 0)[..., None], L, q).astype(np.uint8)  # `if (!d) continue;` keeps the search's L
    L = L.reshape(nb, 4, 2, 32)  # 64 values per 32 bytes: sub-block 2k in the low nibbles, 2k+1 high
    out["qs"] = (L[:, :, 0] | (L[:, :, 1] << 4)).reshape(nb, QK_K // 2)
    return out.view(np.uint8).reshape(x.shape[0], -1)


def _make_qx_quants(x, nmax: int):
    """ggml's ``make_qx_quants`` with rmse_type = 1 and no importance weights (weights x^2), on
    every row of ``x [B, n]``: a symmetric fit ``x ~ scale * (L - nmax)`` searched over 19 trial
    scales. Returns ``(scale [B], L [B, n] in 0..2*nmax-1)``."""
    B, n = x.shape
    with np.errstate(all="ignore"):
        amax, vmax = np.zeros(B, _F32), np.zeros(B, _F32)
        for i in range(n):
            ax = np.abs(x[:, i])
            bigger = ax > amax
            amax = np.where(bigger, ax, amax)
            vmax = np.where(bigger, x[:, i], vmax)
        zero = amax < GROUP_MAX_EPS
        w = (x * x).astype(_F32)

        def fit(iscale):
            lq = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
            lf = lq.astype(_F32)
            sumlx, suml2 = np.zeros(B, _F32), np.zeros(B, _F32)
            for i in range(n):
                sumlx = (sumlx + (w[:, i] * x[:, i]).astype(_F32) * lf[:, i]).astype(_F32)
                suml2 = (suml2 + (w[:, i] * lf[:, i]).astype(_F32) * lf[:, i]).astype(_F32)
            return lq, sumlx, suml2

        lq, sumlx, suml2 = fit((_F32(-nmax) / vmax).astype(_F32))
        L = lq + nmax
        scale = np.where(suml2 != 0, (sumlx / suml2).astype(_F32), _F32(0)).astype(_F32)
        best = (scale * sumlx).astype(_F32)
        for step in range(-9, 10):
            if step == 0:
                continue
            lq, sumlx, suml2 = fit((-(_F32(nmax) + _F32(0.1) * _F32(step)) / vmax).astype(_F32))
            take = (suml2 > 0) & ((sumlx * sumlx).astype(_F32) > (best * suml2).astype(_F32))
            L = np.where(take[:, None], lq + nmax, L)
            scale = np.where(take, (sumlx / suml2).astype(_F32), scale).astype(_F32)
            best = np.where(take, (scale * sumlx).astype(_F32), best).astype(_F32)
        L = np.where(zero[:, None], 0, L)
        scale = np.where(zero, _F32(0), scale).astype(_F32)
    return scale, L


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """llama.cpp ``quantize_row_q6_K_ref``: a scale per sub-block of 16 from ``make_qx_quants``
    (nmax 32); the 16 scales become int8 against the one of largest magnitude
    (``iscale = -128 / max_scale``, ``d = 1 / iscale`` in fp16, ``scales = MIN(127,
    nearest_int(iscale * scale))``), then ``q = nearest_int(x / (d * scales)) + 32`` in 0..63. A
    block whose scales are all below 1e-15 is all zero bytes."""
    xb = _kblocks(x)
    nb = len(xb)
    scales, L = _make_qx_quants(xb.reshape(nb * 16, 16), 32)
    scales, L = scales.reshape(nb, 16), L.reshape(nb, 16, 16)
    max_scale, max_abs = np.zeros(nb, _F32), np.zeros(nb, _F32)
    for ib in range(16):
        a = np.abs(scales[:, ib])
        bigger = a > max_abs
        max_abs = np.where(bigger, a, max_abs)
        max_scale = np.where(bigger, scales[:, ib], max_scale)
    zero = max_abs < GROUP_MAX_EPS
    with np.errstate(all="ignore"):
        iscale = (_F32(-128) / max_scale).astype(_F32)
        d16 = (_F32(1) / iscale).astype(_F32).astype(np.float16)
        sc = np.minimum(127, nearest_int(iscale[:, None] * scales)).astype(np.int8)  # int -> int8_t
        d = (d16.astype(_F32)[:, None] * sc.astype(_F32)).astype(_F32)
        q = np.clip(nearest_int((xb.reshape(nb, 16, 16) / d[..., None]).astype(_F32)), -32, 31) + 32
    L = np.where((d == 0)[..., None], L, q).reshape(nb, 2, 4, 32)  # [half, quarter, l]: value 128h + 32k + l
    out = np.zeros(nb, _Q6_K)
    ql = np.concatenate(
        [(L[:, :, 0] & 0xF) | ((L[:, :, 2] & 0xF) << 4), (L[:, :, 1] & 0xF) | ((L[:, :, 3] & 0xF) << 4)], axis=2
    )
    qh = (L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) | ((L[:, :, 3] >> 4) << 6)
    out["ql"] = ql.reshape(nb, QK_K // 2).astype(np.uint8)
    out["qh"] = qh.reshape(nb, QK_K // 4).astype(np.uint8)
    out["scales"] = sc
    out["d"] = d16
    out[zero] = np.zeros(1, _Q6_K)  # memset(&y[i], 0, ...): d = +0 too
    return out.view(np.uint8).reshape(x.shape[0], -1)


def quantize_q8_k(x: np.ndarray) -> np.ndarray:
    """llama.cpp ``quantize_row_q8_K_ref``: d = max / -127 in float32 (``max`` the signed value of
    largest magnitude, the first on ties), ``q = MIN(127, nearest_int((-127 / max) * x))``, and
    ``bsums[i]`` the sum of the 16 quants ``16i .. 16i+15``. A block of zeros gets d = 0 and zero
    quants; ggml leaves its bsums unwritten there (tests pass it zeroed memory), we write zeros."""
    xb = _kblocks(x)
    nb = len(xb)
    amax, vmax = np.zeros(nb, _F32), np.zeros(nb, _F32)
    for j in range(QK_K):
        ax = np.abs(xb[:, j])
        bigger = ax > amax
        amax = np.where(bigger, ax, amax)
        vmax = np.where(bigger, xb[:, j], vmax)
    with np.errstate(all="ignore"):
        iscale = (_F32(-127) / vmax).astype(_F32)
        q = np.minimum(127, nearest_int((iscale[:, None] * xb).astype(_F32))).astype(np.int8)  # int -> int8_t
        d = (_F32(1) / iscale).astype(_F32)
    zero = amax == 0
    q[zero] = 0
    out = np.empty(nb, _Q8_K)
    out["d"] = np.where(zero, _F32(0), d)
    out["qs"] = q
    out["bsums"] = q.reshape(nb, 16, 16).astype(np.int32).sum(axis=2).astype(np.int16)
    return out.view(np.uint8).reshape(x.shape[0], -1)


def _q4_k_quants(b: np.ndarray) -> np.ndarray:
    qs = b["qs"].reshape(*b.shape, 4, 1, 32)  # 32 bytes hold sub-blocks 2k (low nibbles) and 2k+1 (high)
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-2).reshape(*b.shape, QK_K)


def _q6_k_quants(b: np.ndarray) -> np.ndarray:
    """The 6-bit quants 0..63 of Q6_K blocks in value order (value = d * scale * (q - 32))."""
    ql = b["ql"].reshape(*b.shape, 2, 64)
    qh = b["qh"].reshape(*b.shape, 2, 1, 32)
    low = np.concatenate([ql[..., 0:32] & 0xF, ql[..., 32:64] & 0xF, ql[..., 0:32] >> 4, ql[..., 32:64] >> 4], axis=-1)
    high = (qh >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)) & 3  # [..., 2, 4, 32]
    return (low.reshape(*b.shape, 2, 4, 32) | (high << 4)).reshape(*b.shape, QK_K)


def _dequantize_q4_k(b: np.ndarray) -> np.ndarray:
    """ggml ``dequantize_row_q4_K``: ``(d * sc) * q - dmin * m`` per sub-block of 32, in float32."""
    sc, m = q4_k_scale_min(b["scales"])
    d = (b["d"].astype(_F32)[..., None] * sc.astype(_F32)).astype(_F32)
    dm = (b["dmin"].astype(_F32)[..., None] * m.astype(_F32)).astype(_F32)
    q = _q4_k_quants(b).reshape(*b.shape, 8, 32).astype(_F32)
    return ((d[..., None] * q).astype(_F32) - dm[..., None]).astype(_F32).reshape(*b.shape, QK_K)


def _dequantize_q6_k(b: np.ndarray) -> np.ndarray:
    """ggml ``dequantize_row_q6_K``: ``(d * scale) * (q - 32)`` per sub-block of 16, in float32."""
    d = (b["d"].astype(_F32)[..., None] * b["scales"].astype(_F32)).astype(_F32)
    q = (_q6_k_quants(b).astype(np.int32) - 32).reshape(*b.shape, 16, 16).astype(_F32)
    return (d[..., None] * q).astype(_F32).reshape(*b.shape, QK_K)


def _q4_0_quants(b: np.ndarray) -> np.ndarray:
    qs = b["qs"]
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # elements j and j+16 share byte j


def _signed_quants(b: np.ndarray) -> np.ndarray:
    return b["qs"]


@dataclass(frozen=True)
class Format:
    """One block format as data: everything generic code needs to know about it.

    A value is ``(quant - offset) * d``, plus ``m`` for formats with a min field (Q4_1:
    ``q * d + m``): ``quants`` gives the stored integers of each block, ``offset`` what is
    subtracted from them (8 for Q4_0's unsigned nibbles), ``d`` and ``m`` are the fields of
    those names. Formats whose values need more than that (the K-quants' per-sub-block scales)
    give their own ``dequantize_blocks`` (structured blocks -> float32 ``[..., block_size]``).
    ``header`` lists the float scale fields (fp16, or Q8_K's float32 d) that
    ``api.validate_blocks`` checks for inf/NaN, wherever they sit in the block, ``scale_div`` how
    the largest fp16 scale is made from the block's largest magnitude (for the fp16 overflow
    warning; inf where no scale is fp16; None where no single division says it, the K-quants'
    searched scales and Q4_1's min: ``api.quantize`` then looks for inf in the stored fields). ``cuda``: whether CUDA quantizers and dequantizers exist.
    """

    name: str
    block_size: int  #: values per block
    dtype: np.dtype  #: one block's bytes as a numpy structured dtype
    quantize: Callable[..., np.ndarray] = field(repr=False)  #: float32 [rows, K] -> uint8 rows
    quants: Callable[[np.ndarray], np.ndarray] = field(repr=False)  #: blocks -> [..., block_size] ints
    offset: int = 0
    min_field: str | None = None  #: "m" where a block also stores an additive min (Q4_1)
    header: tuple = ("d",)
    scale_div: float | None = 127.0
    role: str = "weights"  #: "weights" (stored in a model), "activations" (made at run time), or both
    ggml_type: str = ""  #: llama.cpp's name, ``GGML_TYPE_*``
    doc: str = ""
    #: structured blocks -> float32 values ``[..., block_size]``; None: the generic formula above
    dequantize_blocks: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)
    cuda: bool = True  #: CUDA quantizer/dequantizer exist (csrc/formats.def: QG_FORMAT, not QG_FORMAT_CPU_ONLY)

    @property
    def block_bytes(self) -> int:
        return self.dtype.itemsize

    @property
    def bits_per_weight(self) -> float:
        return self.block_bytes * 8 / self.block_size

    @property
    def quants_offset(self) -> int:
        """Byte offset of the quants inside a block (2 for Q4_0 and Q8_0, 4 for Q8_1; Q6_K: its ``ql``)."""
        return self.dtype.fields["qs" if "qs" in self.dtype.names else "ql"][1]

    def row_bytes(self, K: int) -> int:
        """Bytes of one row of K values; K must be a positive multiple of the block size."""
        if K <= 0 or K % self.block_size:
            raise ValueError(f"{self.name}: K ({K}) must be a positive multiple of {self.block_size}, the block size")
        return K // self.block_size * self.block_bytes

    def k_of(self, row_bytes: int) -> int:
        """K of a row of ``row_bytes`` bytes of this format."""
        if row_bytes <= 0 or row_bytes % self.block_bytes:
            raise ValueError(
                f"a row of {row_bytes} bytes is not a whole number of {self.name} blocks ({self.block_bytes} B each)"
            )
        return row_bytes // self.block_bytes * self.block_size


#: Every format the package knows, by name. Add a format here (and one row in csrc/formats.def).
SPECS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "q4_0",
            QK,
            _Q4_0,
            quantize_q4_0,
            _q4_0_quants,
            offset=8,
            scale_div=8.0,
            role="weights",
            ggml_type="GGML_TYPE_Q4_0",
            doc="4-bit weights, one fp16 scale per 32; value = (nibble - 8) * d",
        ),
        Format(
            "q4_1",
            QK,
            _Q4_1,
            quantize_q4_1,
            _q4_0_quants,
            min_field="m",
            header=("d", "m"),
            scale_div=None,  # m = min overflows fp16 from |min| > 65504, long before d = (max - min) / 15
            role="weights",
            ggml_type="GGML_TYPE_Q4_1",
            doc="4-bit weights with a scale and a min per 32; value = nibble * d + m",
        ),
        Format(
            "q8_0",
            QK,
            _Q8_0,
            quantize_q8_0,
            _signed_quants,
            role="weights and activations",
            ggml_type="GGML_TYPE_Q8_0",
            doc="8-bit, one fp16 scale per 32; value = q * d",
        ),
        Format(
            "q8_1",
            QK,
            _Q8_1,
            quantize_q8_1,
            _signed_quants,
            header=("d", "s"),
            role="activations",
            ggml_type="GGML_TYPE_Q8_1",
            doc="8-bit activations with a per-block sum s next to d",
        ),
        Format(
            "q4_k",
            QK_K,
            _Q4_K,
            quantize_q4_k,
            _q4_k_quants,
            header=("d", "dmin"),
            scale_div=None,  # d and dmin come from a search: no closed form in max |x|
            role="weights",
            ggml_type="GGML_TYPE_Q4_K",
            doc="4-bit weights in super-blocks of 256: 6-bit scale and min per 32, fp16 d and dmin",
            dequantize_blocks=_dequantize_q4_k,
            cuda=False,
        ),
        Format(
            "q6_k",
            QK_K,
            _Q6_K,
            quantize_q6_k,
            _q6_k_quants,
            offset=32,
            header=("d",),
            scale_div=None,  # d from a search (about max |x| / 4000): no closed form
            role="weights",
            ggml_type="GGML_TYPE_Q6_K",
            doc="6-bit weights in super-blocks of 256: int8 scale per 16, fp16 d",
            dequantize_blocks=_dequantize_q6_k,
            cuda=False,
        ),
        Format(
            "q8_k",
            QK_K,
            _Q8_K,
            quantize_q8_k,
            _signed_quants,
            header=("d",),
            scale_div=float("inf"),  # d is float32: no fp16 overflow
            role="activations",
            ggml_type="GGML_TYPE_Q8_K",
            doc="8-bit activations of the K-quant CPU kernels: float32 d per 256, sums of 16 quants",
            cuda=False,
        ),
    )
}
FORMATS = tuple(SPECS)  #: the names, in table order
#: The formats of chapters 2-6 (Q4_0 and Q8_0 weights, Q8_1 activations); chapter 7 adds Q4_1.
BASIC_FORMATS = ("q4_0", "q8_0", "q8_1")
BLOCK_DTYPES: dict[str, np.dtype] = {n: f.dtype for n, f in SPECS.items()}
BLOCK_BYTES: dict[str, int] = {n: f.block_bytes for n, f in SPECS.items()}  # 18, 20, 34, 36, 144, 210, 292
#: The K-quants of chapter 8 (super-blocks of 256): Q4_K and Q6_K weights, Q8_K activations.
K_FORMATS = ("q4_k", "q6_k", "q8_k")


def spec(fmt) -> Format:
    """The :class:`Format` named ``fmt`` (or ``fmt`` itself); a clear error for an unknown name."""
    if isinstance(fmt, Format):
        return fmt
    if fmt not in SPECS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {FORMATS}")
    return SPECS[fmt]


def block_size(fmt: str) -> int:
    return spec(fmt).block_size


def row_bytes(fmt: str, K: int) -> int:
    """Bytes of one ``fmt`` row of K values (K a positive multiple of the block size)."""
    return spec(fmt).row_bytes(K)


def quantize(x: np.ndarray, fmt: str, q8_1_sum: str = "d_sum_q") -> np.ndarray:
    """Reference quantizer: float32 ``[rows, K]`` -> uint8 ``[rows, K/block_size * block_bytes]``."""
    f = spec(fmt)
    return f.quantize(x, q8_1_sum) if f.name == "q8_1" else f.quantize(x)


def as_blocks(q: np.ndarray, fmt: str) -> np.ndarray:
    """View uint8 rows ``[rows, nb * block_bytes]`` as structured blocks ``[rows, nb]``."""
    f = spec(fmt)
    q = np.ascontiguousarray(q, dtype=np.uint8)
    if q.ndim != 2 or q.shape[1] % f.block_bytes:
        raise ValueError(f"{f.name} rows must be [rows, K/{f.block_size}*{f.block_bytes}] bytes, got shape {q.shape}")
    return q.view(f.dtype)


def unpack_quants(q: np.ndarray, fmt: str) -> np.ndarray:
    """The integer quants ``[rows, K]`` as stored (Q4_0: the raw nibbles 0..15, not minus 8; Q6_K: 0..63)."""
    b = as_blocks(q, fmt)
    return spec(fmt).quants(b).reshape(q.shape[0], -1).astype(np.int32)


def dequantize(q: np.ndarray, fmt: str) -> np.ndarray:
    """Reference dequantizer: uint8 blocks -> float32 ``[rows, K]`` (ggml's dequantize_row_*)."""
    f = spec(fmt)
    b = as_blocks(q, f)
    if f.dequantize_blocks is not None:
        return f.dequantize_blocks(b).reshape(q.shape[0], -1)
    d = b["d"].astype(np.float32)[..., None]
    vals = (f.quants(b).astype(np.int32) - f.offset).astype(np.float32) * d
    if f.min_field:  # q * d, rounded to float32, then + m (dequantize_row_q4_1, no fused multiply-add)
        vals = vals + b[f.min_field].astype(np.float32)[..., None]
    return vals.reshape(q.shape[0], -1)
