"""llama.cpp's block formats in numpy: the layouts and the reference quantizers. This is the spec.

Chapter 2 introduces every function here. The C++ (``csrc/cpu/quantize.cpp``) and CUDA
(``csrc/cuda/quantize.cu``) quantizers must give the same bytes; the tests also check these
bytes against llama.cpp's own code (the ``gguf`` package and ggml through ``ggml-python``).

A format is data: one :class:`Format` in :data:`SPECS` holds its block size, its byte layout
(a numpy structured dtype, the mirror of the C struct in ``csrc/formats.h``), its reference
quantizer and how its stored quants become values. The C++ side lists the same formats once, in
``csrc/formats.def``; a test checks that the two tables agree. This module needs numpy only.

A block holds ``block_size`` consecutive values of a row (32 for the formats so far):

=======  =====  ==========================  ========================================
format   bytes  fields                      value j
=======  =====  ==========================  ========================================
Q4_0     18     d: fp16, qs: 16 x uint8     (nibble j - 8) * d   (j and j+16 share a byte)
Q4_1     20     d, m: fp16, qs: 16 x uint8  nibble j * d + m     (j and j+16 share a byte)
Q8_0     34     d: fp16, qs: 32 x int8      qs[j] * d
Q8_1     36     d: fp16, s: fp16, qs: 32    qs[j] * d;  s = d*sum(qs)  or  sum(x)
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
    subtracted from them (8 for Q4_0's unsigned nibbles), ``d`` and ``m`` are the fp16 fields of
    those names. ``header`` lists the fp16 fields at the start
    of a block (checked for inf/NaN by ``api.validate_blocks``), ``scale_div`` how d is made from
    the block's largest magnitude (for the fp16 overflow warning).
    """

    name: str
    block_size: int  #: values per block
    dtype: np.dtype  #: one block's bytes as a numpy structured dtype
    quantize: Callable[..., np.ndarray] = field(repr=False)  #: float32 [rows, K] -> uint8 rows
    quants: Callable[[np.ndarray], np.ndarray] = field(repr=False)  #: blocks -> [..., block_size] ints
    offset: int = 0
    min_field: str | None = None  #: "m" where a block also stores an additive min (Q4_1)
    header: tuple = ("d",)
    scale_div: float = 127.0
    role: str = "weights"  #: "weights" (stored in a model), "activations" (made at run time), or both
    ggml_type: str = ""  #: llama.cpp's name, ``GGML_TYPE_*``
    doc: str = ""

    @property
    def block_bytes(self) -> int:
        return self.dtype.itemsize

    @property
    def bits_per_weight(self) -> float:
        return self.block_bytes * 8 / self.block_size

    @property
    def quants_offset(self) -> int:
        """Byte offset of the quants inside a block (2 for Q4_0 and Q8_0, 4 for Q8_1)."""
        return self.dtype.fields["qs"][1]

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
            scale_div=15.0,
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
    )
}
FORMATS = tuple(SPECS)  #: the names, in table order
#: The formats of chapters 2-6 (Q4_0 and Q8_0 weights, Q8_1 activations); chapter 7 adds Q4_1.
BASIC_FORMATS = ("q4_0", "q8_0", "q8_1")
BLOCK_DTYPES: dict[str, np.dtype] = {n: f.dtype for n, f in SPECS.items()}
BLOCK_BYTES: dict[str, int] = {n: f.block_bytes for n, f in SPECS.items()}  # 18, 34, 36


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
    """The integer quants ``[rows, K]`` as stored (Q4_0: the raw nibbles 0..15, not minus 8)."""
    b = as_blocks(q, fmt)
    return spec(fmt).quants(b).reshape(q.shape[0], -1).astype(np.int32)


def dequantize(q: np.ndarray, fmt: str) -> np.ndarray:
    """Reference dequantizer: uint8 blocks -> float32 ``[rows, K]`` (ggml's dequantize_row_*)."""
    f = spec(fmt)
    b = as_blocks(q, f)
    d = b["d"].astype(np.float32)[..., None]
    vals = (f.quants(b).astype(np.int32) - f.offset).astype(np.float32) * d
    if f.min_field:  # q * d, rounded to float32, then + m (dequantize_row_q4_1, no fused multiply-add)
        vals = vals + b[f.min_field].astype(np.float32)[..., None]
    return vals.reshape(q.shape[0], -1)
