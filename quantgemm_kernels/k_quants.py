"""Chapter 8's helpers for the K-quant super-blocks: where each bit of Q4_K's 12 packed scale bytes
goes, a drawing of those bytes, and the bits per value of a format by field.

``viz.draw_block_layout`` draws the 32-value blocks byte by byte; a super-block's interesting part
is below the byte: Q4_K packs eight 6-bit scales and eight 6-bit mins into 12 bytes (ggml's
``get_scale_min_k4``, ``formats.q4_k_scale_min``). :func:`q4_k_scale_bits` says, for every bit of
those bytes, which field and which bit of it it holds; :func:`draw_q4_k_scales` draws that map,
with the bits of one block's bytes written in.
"""

from __future__ import annotations

import numpy as np

from . import formats as F

#: colours of the two kinds of 6-bit field (scales: blues, mins: greens), lighter for higher index
_SC_COLORS = ["#08519c", "#2171b5", "#4292c6", "#6baed6", "#9ecae1", "#c6dbef", "#deebf7", "#f7fbff"]
_M_COLORS = ["#006d2c", "#238b45", "#41ab5d", "#74c476", "#a1d99b", "#c7e9c0", "#e5f5e0", "#f7fcf5"]


def q4_k_scale_bits() -> list[list[tuple[str, int, int]]]:
    """For byte ``i`` (0..11) and bit ``b`` (0 = least significant) of a Q4_K block's ``scales``,
    ``map[i][b] = (field, j, k)``: the bit is bit ``k`` of ``sc[j]`` (``field == "sc"``) or of
    ``m[j]`` (``"m"``), j = 0..7 the sub-block, k = 0..5. ggml's packing (``get_scale_min_k4``):

    * bytes 0-3: bits 0-5 are ``sc[i]``, bits 6-7 the top two bits (4, 5) of ``sc[i + 4]``;
    * bytes 4-7: bits 0-5 are ``m[i - 4]``, bits 6-7 the top two bits of ``m[i]``;
    * bytes 8-11: bits 0-3 the low four bits of ``sc[i - 4]``, bits 4-7 those of ``m[i - 4]``.
    """
    out = []
    for i in range(F.K_SCALE_SIZE):
        row = []
        for b in range(8):
            if i < 4:
                row.append(("sc", i, b) if b < 6 else ("sc", i + 4, b - 2))
            elif i < 8:
                row.append(("m", i - 4, b) if b < 6 else ("m", i, b - 2))
            else:
                row.append(("sc", i - 4, b) if b < 4 else ("m", i - 4, b - 4))
        out.append(row)
    return out


def decode_q4_k_scales_by_map(scales) -> tuple[np.ndarray, np.ndarray]:
    """The eight scales and mins of 12 ``scales`` bytes, assembled bit by bit from
    :func:`q4_k_scale_bits` (a second reading of the packing, independent of ``q4_k_scale_min``'s
    shifts and masks)."""
    q = np.asarray(scales, np.uint8).reshape(F.K_SCALE_SIZE)
    got = {"sc": [0] * 8, "m": [0] * 8}
    for i, row in enumerate(q4_k_scale_bits()):
        for b, (name, j, k) in enumerate(row):
            got[name][j] |= ((int(q[i]) >> b) & 1) << k
    return np.array(got["sc"], np.uint8), np.array(got["m"], np.uint8)


def bits_by_field(fmt: str) -> dict[str, float]:
    """Bits per value that each field of a ``fmt`` block costs (from its dtype, the spec):
    ``{"qs": 4.0, "d": 0.5}`` for Q4_0. They add up to ``formats.bits_per_weight(fmt)``."""
    spec = F.spec(fmt)
    return {n: spec.dtype.fields[n][0].itemsize * 8 / spec.block_size for n in spec.dtype.names}


def draw_q4_k_scales(scales, ax=None, title: str | None = None):
    """Draw the 12 ``scales`` bytes of one Q4_K block bit by bit (chapter 8).

    One row per byte, bit 7 on the left as a byte is written; each bit is coloured by the field it
    belongs to (blues: the scales ``sc[j]``, greens: the mins ``m[j]``), labelled with the field and
    the bit of it (``sc5.4``: bit 4 of ``sc[5]``), and shows its value. On the right, each byte in
    hex; below, the eight scales and mins they decode to. Returns the Figure.
    """
    from matplotlib.patches import Rectangle

    import matplotlib.pyplot as plt

    q = np.asarray(scales, np.uint8).reshape(-1)
    if q.size != F.K_SCALE_SIZE:
        raise ValueError(f"scales must be the {F.K_SCALE_SIZE} bytes of one Q4_K block, got {q.size}")
    sc, m = F.q4_k_scale_min(q)
    bits = q4_k_scale_bits()
    if ax is None:
        fig, ax = plt.subplots(figsize=(9.5, 6.2))
    else:
        fig = ax.figure
    for i in range(F.K_SCALE_SIZE):
        y = F.K_SCALE_SIZE - 1 - i
        for b in range(8):
            x = 7 - b  # bit 7 on the left
            name, j, k = bits[i][b]
            color = (_SC_COLORS if name == "sc" else _M_COLORS)[j]
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=color, edgecolor="black", lw=0.6))
            dark = j < 4
            ax.text(
                x + 0.5, y + 0.68, f"{name}{j}.{k}", ha="center", va="center", fontsize=7,
                color="white" if dark else "black",
            )  # fmt: skip
            ax.text(
                x + 0.5, y + 0.3, str((int(q[i]) >> b) & 1), ha="center", va="center", fontsize=9,
                fontweight="bold", color="white" if dark else "black",
            )  # fmt: skip
        ax.text(-0.2, y + 0.5, f"byte {i}", ha="right", va="center", fontsize=8)
        ax.text(8.2, y + 0.5, f"0x{int(q[i]):02x}", ha="left", va="center", fontsize=8, family="monospace")
    for y in (4, 8):  # the three groups of four bytes
        ax.plot([-1.6, 9.4], [y, y], color="black", lw=1.6)
    notes = [
        (10, "bytes 0-3: sc[0..3] (bits 0-5),\nbits 4-5 of sc[4..7] (bits 6-7)"),
        (6, "bytes 4-7: m[0..3] (bits 0-5),\nbits 4-5 of m[4..7] (bits 6-7)"),
        (2, "bytes 8-11: bits 0-3 of sc[4..7] (low nibble),\nbits 0-3 of m[4..7] (high nibble)"),
    ]
    for y, text in notes:
        ax.text(9.6, y, text, ha="left", va="center", fontsize=8)
    for b in range(8):
        ax.text(7 - b + 0.5, F.K_SCALE_SIZE + 0.25, f"bit {b}", ha="center", va="bottom", fontsize=7, color="dimgray")
    ax.text(
        0, -0.5, "sc = " + " ".join(f"{int(v):2d}" for v in sc) + "\nm  = " + " ".join(f"{int(v):2d}" for v in m),
        ha="left", va="top", fontsize=9, family="monospace",
    )  # fmt: skip
    ax.set_xlim(-1.8, 15.5)
    ax.set_ylim(-1.8, F.K_SCALE_SIZE + 0.8)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.set_title(title or "Q4_K: eight 6-bit scales and eight 6-bit mins in 12 bytes", fontsize=10, loc="left")
    fig.tight_layout()
    return fig
