"""The Triton kernel of Appendix D (imported only by ``fused_quant.quant_slide_triton``).

This module imports triton at the top, which is why nothing imports it at package import time:
the package and its CPU path work without triton. The spec is ``fused_quant.quant_slide_reference``.
"""

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _round_half_even(v, PORTABLE: tl.constexpr):
    """rint: round to nearest, ties to even (what torch.round does)."""
    if PORTABLE:
        # The Triton interpreter (TRITON_INTERPRET=1) cannot call libdevice. v - f is exact for
        # |v| < 2**23, and nothing here is fused into an FMA with the product that made v.
        f = tl.floor(v)
        d = v - f
        odd = (f - 2.0 * tl.floor(f * 0.5)) == 1.0
        return f + tl.where((d > 0.5) | ((d == 0.5) & odd), 1.0, 0.0)
    else:
        return libdevice.rint(v)  # one cvt.rni instruction


@triton.jit
def quant_slide_kernel(
    x_ptr,  # [M, K] fp32/fp16/bf16, rows stride_x apart, columns contiguous
    out_ptr,  # [M_pad, n_out32] int32: the int8/fp8 output viewed as one int32 per window
    scale_ptr,  # [M_pad] float32
    M,
    K,
    stride_x,
    n_windows,  # windows holding data: num_groups * NUM_WINDOWS
    n_out32,  # int32 words per output row: K_out_pad / 4 (>= n_windows)
    L: tl.constexpr,
    NUM_WINDOWS: tl.constexpr,
    IS_FP8: tl.constexpr,
    QMAX: tl.constexpr,
    MIN_SCALE: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_OUT: tl.constexpr,
    PORTABLE_RINT: tl.constexpr,
):
    # One program per output row, padding rows (row >= M) included: those write zeros and
    # scale 1.0, so the wrapper never has to zero-fill the output first.
    row = tl.program_id(0)
    live_row = row < M
    x_row = x_ptr + row.to(tl.int64) * stride_x
    out_row = out_ptr + row.to(tl.int64) * n_out32

    # ---- Pass 1: absmax of the row. The scale depends on every value of the row, so no output
    # can be written before the whole row has been read once.
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        v = tl.load(x_row + offs, mask=(offs < K) & live_row, other=0.0).to(tl.float32)
        acc = tl.maximum(acc, tl.abs(v))
    amax = tl.max(acc, axis=0)
    # Correctly rounded divisions (plain `/` may compile to an approximate division), so the
    # scale and its inverse are the reference's to the bit. inv_scale comes from the stored
    # scale, so q * scale is what the GEMM's epilogue will reconstruct.
    scale = tl.maximum(tl.math.div_rn(amax, QMAX), MIN_SCALE)
    scale = tl.where(live_row, scale, 1.0)
    inv_scale = tl.math.div_rn(1.0, scale)
    tl.store(scale_ptr + row, scale)

    # ---- Pass 2, output-oriented: each lane owns one output window (= one int32 word), works
    # out which 4 inputs it needs, quantizes them and packs them. The second read of the row is
    # served by L1/L2: the row was just read in pass 1.
    for o0 in range(0, n_out32, BLOCK_OUT):
        o = o0 + tl.arange(0, BLOCK_OUT)  # window index within the row
        g = o // NUM_WINDOWS  # group
        w = o % NUM_WINDOWS  # window within the group
        src = g * L + 2 * w  # first input column of the window
        live = (o < n_windows) & live_row  # alignment padding and padding rows read nothing
        word = tl.zeros([BLOCK_OUT], dtype=tl.int32)
        for j in tl.static_range(4):
            col = src + j
            v = tl.load(x_row + col, mask=live & (col < K), other=0.0).to(tl.float32)  # zero past K
            v = v * inv_scale
            if IS_FP8:
                # The cast rounds to nearest even (cvt.rn.satfinite on sm_89+); bitcast to its byte.
                q = tl.clamp(v, -QMAX, QMAX).to(tl.float8e4nv)
                byte = q.to(tl.uint8, bitcast=True).to(tl.int32)
            else:
                q = tl.clamp(_round_half_even(v, PORTABLE_RINT), -QMAX, QMAX)
                byte = q.to(tl.int32) & 0xFF  # two's-complement byte of the int8 value
            word = word | (byte << (8 * j))  # little-endian: value j is byte j of the word
        tl.store(out_row + o, word, mask=o < n_out32)
