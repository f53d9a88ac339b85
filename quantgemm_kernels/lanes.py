"""Which lane reads which bytes: the memory side of the CUDA kernels of chapters 1, 3 and 4.

Three models, each written from the kernel's index arithmetic and launcher, and run on the CPU:

* **Global loads of one warp step** (:func:`warp_loads`, drawn by :func:`draw_lane_map`, counted by
  :func:`sector_table`): for one warp and one iteration of a kernel's main loop, every load
  instruction of the source in program order, with the byte range each of the 32 lanes reads from
  ``W`` and from ``A``. A load instruction's bytes arrive as 32-byte sectors (what L2 and DRAM move);
  the number of sectors it touches, against the fewest that could hold the bytes it asks for, is
  the coalescing of that instruction. Chapter 1: ``01_fp32/1_naive.cu``, ``01_fp32/2_tiled.cu``;
  chapter 3: ``03_w4a16/1_naive.cu``, ``2_tiled.cu``, ``3_decode.cu``; chapter 4: the five steps of
  ``04_w4a8/`` for Q4_0 and Q8_0 weights. The model is of the source's loads: the compiler may
  merge or split some (``tests/test_dp4a_loads.py`` counts the PTX loads of the DP4A step).
* **Grid and theoretical occupancy** (:func:`launch`, :func:`occupancy`, :func:`occupancy_table`):
  the grid each launcher computes, and how many CTAs fit on an SM of an H100 given the registers and
  shared memory that ptxas reports (``tools/resource_usage.py`` records them for sm_90a in
  ``bench_results/resource_usage/``). Theoretical: what the limits allow, not what a profiler
  measures while the kernel runs.
* **Shared-memory banks** (:func:`shared_requests`, :func:`wavefronts`, :func:`bank_table`): the
  shared-memory accesses of one K step of the tiled kernels, and the wavefronts each warp request
  takes with the tiles' padding and without it (32 banks of 4 bytes).

Addresses are byte offsets from the start of ``W`` or ``A``, whose base is taken to be 128-byte
aligned (torch's CUDA allocator returns 512-byte aligned blocks). Rows are ``K`` values long: a row of
``W`` is ``4 K`` bytes in float32 and ``K / 32`` blocks of 18 (Q4_0) or 34 (Q8_0) bytes, a row of
``A`` ``4 K`` bytes in float32 and ``K / 32`` Q8_1 blocks of 36 bytes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SECTOR, LINE = 32, 128  #: bytes of a sector (the unit L2 and DRAM move) and of an L1 cache line
WARP = 32
BLOCK_BYTES = {"q4_0": 18, "q8_0": 34, "q8_1": 36}  #: bytes per block of 32 values (formats.h)
QUANT_OFFSET = {"q4_0": 2, "q8_0": 2, "q8_1": 4}  #: where a block's quants start (after d, and s)
ROOT = Path(__file__).resolve().parent.parent
RESOURCES = ROOT / "bench_results" / "resource_usage"


@dataclass(frozen=True)
class _Model:
    file: str  #: the step file, relative to csrc/cuda/
    kind: str  #: "naive", "tiled", "tiled_q8_1", "naive_q8_1", "dp4a", "vec_dp4a", "decode"
    wfmt: str
    afmt: str
    warps: int  #: warps per CTA
    chapter: int


#: The kernels this module models: registry name -> how its loop reads memory.
MODELS = {
    "cuda_f32_f32_naive": _Model("01_fp32/1_naive.cu", "naive", "f32", "f32", 4, 1),
    "cuda_f32_f32_tiled": _Model("01_fp32/2_tiled.cu", "tiled", "f32", "f32", 32, 1),
    "cuda_q4_0_f32_naive": _Model("03_w4a16/1_naive.cu", "naive", "q4_0", "f32", 4, 3),
    "cuda_q4_0_f32_tiled": _Model("03_w4a16/2_tiled.cu", "tiled", "q4_0", "f32", 32, 3),
    "cuda_q4_0_f32_decode": _Model("03_w4a16/3_decode.cu", "decode", "q4_0", "f32", 4, 3),
    **{
        f"cuda_{w}_q8_1_{step}": _Model(f"04_w4a8/{n}_{step}.cu", kind, w, "q8_1", warps, 4)
        for w in ("q4_0", "q8_0")
        for n, step, kind, warps in (
            (1, "naive", "naive_q8_1", 4),
            (2, "tiled", "tiled_q8_1", 32),
            (3, "dp4a", "dp4a", 4),
            (4, "tiled_dp4a", "tiled_q8_1", 32),
            (5, "vec_dp4a", "vec_dp4a", 32),
        )
    },
}


@dataclass(frozen=True)
class Load:
    """One load instruction of a warp: ``width`` bytes per lane from row ``row[l]`` of ``operand``
    (``"W"`` or ``"A"``), ``offset[l]`` bytes into the row; ``row[l] = -1`` where lane ``l`` does not
    load (its guard is false)."""

    operand: str
    what: str
    width: int
    row: np.ndarray
    offset: np.ndarray
    pitch: int  #: bytes per row of the operand

    @property
    def active(self) -> np.ndarray:
        return self.row >= 0

    @property
    def address(self) -> np.ndarray:
        """Byte address of each active lane's first byte, from the operand's start."""
        return (self.row.astype(np.int64) * self.pitch + self.offset)[self.active]

    def bytes(self) -> np.ndarray:
        """The distinct bytes the instruction reads."""
        a = self.address
        return np.unique((a[:, None] + np.arange(self.width)[None, :]).ravel())

    @property
    def broadcast(self) -> bool:
        """Every active lane reads the same bytes."""
        return self.active.sum() > 1 and len(np.unique(self.address)) == 1

    def sectors(self) -> int:
        """32-byte sectors the instruction touches."""
        return len(np.unique(self.bytes() // SECTOR))

    def lines(self) -> int:
        """128-byte lines the instruction touches."""
        return len(np.unique(self.bytes() // LINE))

    def min_sectors(self) -> int:
        """The fewest sectors that could hold the bytes it reads: their count over 32, rounded up."""
        return math.ceil(len(self.bytes()) / SECTOR)


def _check_shape(M: int, N: int, K: int) -> None:
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if K % 32:
        raise ValueError(f"K must be a multiple of 32 (one block), got {K}")


def _model(kernel: str) -> _Model:
    if kernel not in MODELS:
        raise ValueError(f"no lane model for kernel {kernel!r}; modelled: {', '.join(MODELS)}")
    return MODELS[kernel]


def steps(kernel: str, K: int = 14336) -> int:
    """Iterations of the kernel's main loop along K (for the decode kernel: K steps of one warp)."""
    m = _model(kernel)
    nb = K // 32
    if m.kind == "naive" and m.wfmt == "f32":
        return K  # one value of k per iteration
    if m.kind == "vec_dp4a":
        return -(-nb // 4)  # BK = 4 blocks per K step
    if m.kind == "decode":
        total = -(-nb // 8)  # 8 blocks per warp step; warp w takes steps w, w + 4, ...
        return -(-total // m.warps)
    return nb  # one block (32 values) per iteration


def warp_loads(kernel: str, warp: int = 0, step: int = 0, M: int = 4096, N: int = 1, K: int = 14336) -> list[Load]:
    """The global loads of warp ``warp`` of the first CTA (``blockIdx = (0, 0)``) in iteration
    ``step`` of the main loop of ``kernel`` (a name of :data:`MODELS`), in the source's order.

    Naive kernels (128 threads, one output each): warp ``w``'s lanes own ``m = 32 w + l``, token
    ``n = 0``; ``step`` is ``k`` (float32) or the block ``kb``. Tiled kernels (32 x 32 threads): warp
    ``ty`` stages row ``ty`` of the activation and weight tiles; ``step`` is the K step (one block,
    four for ``vec_dp4a``). A load whose guard is false for the whole warp (an activation row past
    ``N``) is not issued and not listed. Decode: the launch for one token (R = 2 rows per CTA),
    ``step`` is the warp's ``step``-th step of 8 blocks (global step ``warp + 4 step``), both rows.
    """
    m = _model(kernel)
    _check_shape(M, N, K)
    if not (isinstance(warp, (int, np.integer)) and 0 <= warp < m.warps):
        raise ValueError(f"warp must be in 0..{m.warps - 1} for {kernel} ({m.warps} warps per CTA), got {warp!r}")
    n_steps = steps(kernel, K)
    if not (isinstance(step, (int, np.integer)) and 0 <= step < n_steps):
        raise ValueError(f"step must be in 0..{n_steps - 1} for {kernel} at K = {K}, got {step!r}")
    lane = np.arange(WARP)
    nb = K // 32
    wb = 4 if m.wfmt == "f32" else BLOCK_BYTES[m.wfmt]  # bytes per value (f32) or per block
    w_pitch = 4 * K if m.wfmt == "f32" else nb * wb
    a_pitch = 4 * K if m.afmt == "f32" else nb * BLOCK_BYTES["q8_1"]
    wq = QUANT_OFFSET.get(m.wfmt, 0)
    loads: list[Load] = []

    def add(operand, what, width, row, offset, mask=None):
        row = np.broadcast_to(np.asarray(row, dtype=np.int64), (WARP,)).copy()
        offset = np.broadcast_to(np.asarray(offset, dtype=np.int64), (WARP,)).copy()
        if mask is not None:
            row[~np.broadcast_to(mask, (WARP,))] = -1
        if (row >= 0).any():
            loads.append(Load(operand, what, width, row, offset, w_pitch if operand == "W" else a_pitch))

    if m.kind in ("naive", "naive_q8_1", "dp4a"):
        row_m = 32 * warp + lane
        ok = row_m < M  # threads past M return before the loop
        if m.kind == "naive" and m.wfmt == "f32":  # 01_fp32/1_naive.cu: A[n, k] * W[m, k]
            k = step
            add("A", "A[n, k]", 4, 0, 4 * k, ok)
            add("W", "W[m, k]", 4, row_m, 4 * k, ok)
        elif m.kind == "naive":  # 03_w4a16/1_naive.cu
            kb = step
            add("W", "scale d", 2, row_m, kb * wb, ok)
            for j in range(16):
                add("W", f"quant byte {j}", 1, row_m, kb * wb + wq + j, ok)
                add("A", f"A[n, 32 kb + {j}]", 4, 0, 4 * (32 * kb + j), ok)
                add("A", f"A[n, 32 kb + {j + 16}]", 4, 0, 4 * (32 * kb + j + 16), ok)
        elif m.kind == "naive_q8_1":  # 04_w4a8/1_naive.cu
            kb, ab = step, BLOCK_BYTES["q8_1"]
            for j in range(16):
                add("W", f"quant byte {j}", 1, row_m, kb * wb + wq + j, ok)  # WF::pair
                if m.wfmt == "q8_0":
                    add("W", f"quant byte {j + 16}", 1, row_m, kb * wb + wq + j + 16, ok)
                add("A", f"quant byte {j}", 1, 0, kb * ab + 4 + j, ok)
                add("A", f"quant byte {j + 16}", 1, 0, kb * ab + 4 + j + 16, ok)
            add("W", "scale d", 2, row_m, kb * wb, ok)
            add("A", "scale d", 2, 0, kb * ab, ok)
            add("A", "sum s", 2, 0, kb * ab + 2, ok)
        else:  # 04_w4a8/3_dp4a.cu
            kb, ab = step, BLOCK_BYTES["q8_1"]
            for w in range(16 if m.wfmt == "q8_0" else 8):  # load_int_b2: two 16-bit halves per word
                add("W", f"quant word {w // 2}, half {w % 2}", 2, row_m, kb * wb + wq + 2 * w, ok)
            for i in range(4):
                add("A", f"quant word {i}", 4, 0, kb * ab + 4 + 4 * i, ok)
                add("A", f"quant word {i + 4}", 4, 0, kb * ab + 4 + 4 * (i + 4), ok)
            add("W", "scale d", 2, row_m, kb * wb, ok)
            add("A", "scale d", 2, 0, kb * ab, ok)
            add("A", "sum s", 2, 0, kb * ab + 2, ok)
    elif m.kind in ("tiled", "tiled_q8_1", "vec_dp4a"):
        ty, tx = warp, lane
        a_ok, w_ok = ty < N, ty < M  # n0 = m0 = 0: tile row ty is a real row
        if m.kind == "tiled":  # 01_fp32/2_tiled.cu, 03_w4a16/2_tiled.cu
            k0 = 32 * step
            add("A", "A[n0 + ty, k0 + tx]", 4, ty, 4 * (k0 + tx), a_ok)
            if m.wfmt == "f32":
                add("W", "W[m0 + ty, k0 + tx]", 4, ty, 4 * (k0 + tx), w_ok)
            else:  # dequantize_q4_0(block, tx): quant byte tx % 16, then the block's scale
                add("W", "quant byte tx % 16", 1, ty, step * wb + wq + tx % 16, w_ok)
                add("W", "scale d", 2, ty, step * wb, w_ok)
        elif m.kind == "tiled_q8_1":  # 04_w4a8/2_tiled.cu and 4_tiled_dp4a.cu stage the same way
            kb, ab, qs_bytes = step, BLOCK_BYTES["q8_1"], 16 if m.wfmt == "q4_0" else 32
            add("A", "quant byte tx", 1, ty, kb * ab + 4 + tx, a_ok)
            add("W", "quant byte tx", 1, ty, kb * wb + wq + tx, w_ok & (tx < qs_bytes))
            add("A", "scale d", 2, ty, kb * ab, a_ok & (tx == 0))
            add("A", "sum s", 2, ty, kb * ab + 2, a_ok & (tx == 0))
            add("W", "scale d", 2, ty, kb * wb, w_ok & (tx == 0))
        else:  # 04_w4a8/5_vec_dp4a.cu: BK = 4 blocks per step, one word per lane
            kb, ab, qs_words = 4 * step, BLOCK_BYTES["q8_1"], 4 if m.wfmt == "q4_0" else 8
            b = kb + tx // 8
            add("A", "quant word tx % 8 of block kb + tx / 8", 4, ty, b * ab + 4 + 4 * (tx % 8), a_ok & (b < nb))
            b = kb + tx // qs_words
            w_lane = w_ok & (tx < 4 * qs_words) & (b < nb)
            for h in range(2):
                add("W", f"quant word, half {h}", 2, ty, b * wb + wq + 4 * (tx % qs_words) + 2 * h, w_lane)
            b = kb + tx
            add("A", "scale d of block kb + tx", 2, ty, b * ab, a_ok & (tx < 4) & (b < nb))
            add("A", "sum s of block kb + tx", 2, ty, b * ab + 2, a_ok & (tx < 4) & (b < nb))
            add("W", "scale d of block kb + tx", 2, ty, b * wb, w_ok & (tx < 4) & (b < nb))
    else:  # 03_w4a16/3_decode.cu, the launch for one token: R = 2 rows per CTA
        sub, word = lane // 4, lane % 4
        b = 8 * (warp + m.warps * step) + sub
        ok = b < nb
        for r in range(2):
            row = min(r, M - 1)  # CTA 0: rows 0 and 1 (a row past M reads row M - 1 again)
            for h in range(2):  # load_int_b2
                add("W", f"row {r}: quant word, half {h}", 2, row, b * wb + wq + 4 * word + 2 * h, ok)
            add("W", f"row {r}: scale d", 2, row, b * wb, ok)
        add("A", "float4 of values 4w..", 16, 0, 4 * (32 * b + 4 * word), ok)
        add("A", "float4 of values 4w + 16..", 16, 0, 4 * (32 * b + 4 * word + 16), ok)
    return loads


def sector_table(kernels, warp: int = 0, n_steps: int = 16, M: int = 4096, N: int = 1, K: int = 14336) -> list[dict]:
    """Per kernel and operand: load instructions of one warp step, and the mean sectors each touches
    against the mean minimum, over the first ``n_steps`` steps of warp ``warp`` (an 18-byte block
    meets a 32-byte sector boundary at a different place in each of 16 consecutive blocks)."""
    rows = []
    for kernel in kernels:
        counts = {op: [0, 0, 0, 0] for op in ("W", "A")}  # instructions, sectors, minimum, bytes
        used = min(n_steps, steps(kernel, K))
        for s in range(used):
            for ld in warp_loads(kernel, warp, s, M, N, K):
                c = counts[ld.operand]
                c[0] += 1
                c[1] += ld.sectors()
                c[2] += ld.min_sectors()
                c[3] += len(ld.bytes())
        for op, (n, sec, low, nbytes) in counts.items():
            rows.append(
                {
                    "kernel": kernel,
                    "operand": op,
                    "loads": n / used,
                    "bytes": nbytes / used,
                    "sectors_per_load": sec / n if n else 0.0,
                    "min_sectors_per_load": low / n if n else 0.0,
                }
            )
    return rows


def format_sector_table(rows: list[dict]) -> str:
    """:func:`sector_table` as text: one line per kernel and operand."""
    out = [
        f"{'kernel':26s} {'':2s} {'loads/step':>10s} {'bytes/step':>10s} {'sectors/load':>12s} {'minimum':>8s} {'ratio':>6s}"
    ]
    for r in rows:
        if not r["loads"]:
            out.append(f"{r['kernel']:26s} {r['operand']:2s} {'(none at this N)':>10s}")
            continue
        ratio = r["sectors_per_load"] / r["min_sectors_per_load"]
        out.append(
            f"{r['kernel']:26s} {r['operand']:2s} {r['loads']:10.0f} {r['bytes']:10.0f}"
            f" {r['sectors_per_load']:12.2f} {r['min_sectors_per_load']:8.2f} {ratio:6.1f}"
        )
    return "\n".join(out)


def draw_lane_map(kernel: str, warp: int = 0, step: int = 0, axes=None, M: int = 4096, N: int = 1, K: int = 14336):
    """Draw :func:`warp_loads`: for ``W`` (top) and ``A`` (bottom), the rows the warp touches
    (one band each) and the bytes each lane reads, coloured by lane (solid: the operand's first load
    instruction; faded: the later ones), scales grey, a broadcast (all lanes on the same bytes)
    black. Ticks on each band mark that row's 32-byte sectors (thin) and 128-byte lines (thick).
    Returns the two axes."""
    from .viz import _pyplot

    plt = _pyplot()
    m = _model(kernel)
    loads = warp_loads(kernel, warp, step, M, N, K)
    by_op = {op: [ld for ld in loads if ld.operand == op] for op in ("W", "A")}
    if axes is None:
        n_rows = [len(np.unique(np.concatenate([ld.row[ld.active] for ld in v]))) if v else 1 for v in by_op.values()]
        heights = [1.3 + 0.13 * r for r in n_rows]
        _, axes = plt.subplots(2, 1, figsize=(11, 0.6 + sum(heights)), height_ratios=heights, layout="constrained")
    cmap = plt.get_cmap("hsv")
    for ax, (op, lds) in zip(axes, by_op.items()):
        if not lds:
            ax.text(0.5, 0.5, f"this warp loads no {op} in this step (N = {N})", ha="center", va="center")
            ax.set(xticks=[], yticks=[])
            continue
        rows = np.unique(np.concatenate([ld.row[ld.active] for ld in lds]))
        y_of = {r: i for i, r in enumerate(rows)}
        lo = min(int(ld.offset[ld.active].min()) for ld in lds)
        hi = max(int(ld.offset[ld.active].max()) + ld.width for ld in lds)
        lo, hi = LINE * (lo // LINE), LINE * -(-hi // LINE)
        for k, ld in enumerate(lds):
            alpha = 1.0 if k == 0 else 0.35
            for lane in np.flatnonzero(ld.active):
                if "scale" in ld.what or "sum s" in ld.what:
                    color = "0.6"
                elif ld.broadcast:
                    color = "k"
                else:
                    color = cmap(lane / WARP)
                ax.barh(y_of[ld.row[lane]], ld.width, left=ld.offset[lane], height=0.8, color=color, alpha=alpha, lw=0)
        pitch = lds[0].pitch
        for r, y in y_of.items():
            first = -((r * pitch + lo) % SECTOR) % SECTOR  # first sector boundary of this row in the window
            for x in range(lo + first, hi + 1, SECTOR):
                thick = (r * pitch + x) % LINE == 0
                ax.vlines(x, y - 0.5, y + 0.5, color="k", lw=1.0 if thick else 0.3)
        first = lds[0]
        label = "W row m" if op == "W" else "A row n"
        ticks = list(y_of.values())[:: max(1, len(rows) // 8)]
        ax.set(
            xlim=(lo, hi),
            ylim=(-0.6, len(rows) - 0.4),
            yticks=ticks,
            yticklabels=[str(rows[t]) for t in ticks],
            ylabel=label,
            xlabel=f"{op}: byte offset in the row (ticks: 32-byte sectors, thick: 128-byte lines)",
        )
        ax.invert_yaxis()
        ax.set_title(
            f"{op}: {len(lds)} load instruction{'s' if len(lds) > 1 else ''} in this step; the first "
            f"({first.what}, {first.width} B a lane) "
            f"touches {first.sectors()} sectors, at least {first.min_sectors()} needed",
            fontsize=8,
        )
    axes[0].figure.suptitle(
        f"{kernel} ({m.file}): warp {warp}, step {step}, M = {M}, N = {N}, K = {K}; colour = lane 0..31",
        fontsize=9,
    )
    return axes


# ---------------------------------------------------------------------------------------------
# Grid and theoretical occupancy
# ---------------------------------------------------------------------------------------------
#: The limits of one H100 SM (compute capability 9.0) that decide how many CTAs it holds: the CUDA
#: occupancy calculator's figures. Shared memory: the largest carve-out, 228 KB per SM, of which a
#: CTA may use 227 KB; the runtime reserves 1 KB per CTA. Registers are allocated per warp in units
#: of 256, and warps in groups of 4 (one per SM sub-partition).
H100 = {
    "name": "H100 (sm_90)",
    "sms": 132,
    "regs_per_sm": 65536,
    "reg_unit": 256,
    "warp_alloc_granularity": 4,
    "smem_per_sm": 228 * 1024,
    "smem_per_cta": 227 * 1024,
    "smem_reserved_per_cta": 1024,
    "smem_unit": 128,
    "threads_per_sm": 2048,
    "ctas_per_sm": 32,
    "warps_per_sm": 64,
}


def launch(kernel: str, M: int = 4096, N: int = 1, K: int = 14336) -> list[dict]:
    """The launches the kernel's launcher makes for C [N, M] = A [N, K] W [M, K]^T: per launch the
    grid and block (x, y) and the kernel instantiation (its name as ptxas reports it, namespaces
    dropped). One launch, except the decode kernel's one per pass of up to 8 tokens."""
    m = _model(kernel)
    _check_shape(M, N, K)
    tmpl = "" if m.afmt == "f32" else f"<w_{m.wfmt}>"
    if m.kind in ("naive", "naive_q8_1", "dp4a"):  # block(128); grid(ceil(M / 128), min(N, 65535))
        wname = "" if m.wfmt == "f32" else f"{m.wfmt}_"  # f32_naive_kernel, q4_0_f32_naive_kernel
        name = {"naive": f"{wname}f32_naive_kernel", "naive_q8_1": "q8_1_naive_kernel", "dp4a": "q8_1_dp4a_kernel"}
        return [{"grid": (-(-M // 128), min(N, 65535)), "block": (128, 1), "kernel": name[m.kind] + tmpl}]
    if m.kind in ("tiled", "tiled_q8_1", "vec_dp4a"):  # block(32, 32); grid(ceil(M / 32), min(ceil(N / 32), 65535))
        step = m.file.split("/")[1][2:-3]  # "tiled", "tiled_dp4a", "vec_dp4a"
        wname = "" if m.wfmt == "f32" else f"{m.wfmt}_"
        name = f"{wname}f32_tiled_kernel" if m.kind == "tiled" else f"q8_1_{step}_kernel{tmpl}"
        return [{"grid": (-(-M // 32), min(-(-N // 32), 65535)), "block": (32, 32), "kernel": name}]
    out = []  # decode: passes of T <= 8 tokens; launch_tokens<T> picks R rows per CTA and U steps in flight
    for n0 in range(0, N, 8):
        T = min(8, N - n0)
        R = 2 if T == 1 else (4 if T <= 4 else 8)
        U = 1 if T == 1 else (2 if T <= 3 else 1)
        out.append({"grid": (-(-M // R), 1), "block": (128, 1), "kernel": f"q4_0_f32_decode_kernel<{R}, {U}, {T}>"})
    return out


def _short_name(demangled: str) -> str:
    """``void gpu::q8_1_tiled_kernel<gpu::w_q4_0>(block_q8_1 const*, ...)`` -> ``q8_1_tiled_kernel<w_q4_0>``."""
    s = demangled.replace("(anonymous namespace)::", "").replace("gpu::", "")
    s = s[5:] if s.startswith("void ") else s
    return s.split("(", 1)[0]


def load_resources(path=None) -> dict:
    """The record of ``tools/resource_usage.py``: ``path``, or the newest file for sm_90a under
    ``bench_results/resource_usage/``. Adds ``"by_kernel"``: short kernel name -> row."""
    if path is None:
        found = sorted(RESOURCES.glob("sm_90a-nvcc-*.json"))
        if not found:
            raise FileNotFoundError(f"no sm_90a-nvcc-*.json under {RESOURCES}: run tools/resource_usage.py")
        path = found[-1]
    rec = json.loads(Path(path).read_text())
    rec["by_kernel"] = {_short_name(r["kernel"]): r for r in rec["rows"]}
    rec["path"] = Path(path)
    return rec


def occupancy(threads: int, registers: int, smem_bytes: int, gpu: dict = H100) -> dict:
    """Theoretical occupancy of a kernel with ``threads`` per CTA, ``registers`` per thread and
    ``smem_bytes`` of shared memory per CTA on ``gpu``: CTAs per SM as each limit allows, the
    smallest of them, the limits that reach it, and the fraction of the SM's warp slots filled."""
    if not (1 <= threads <= 1024) or not (1 <= registers <= 255) or smem_bytes < 0:
        raise ValueError(f"need 1..1024 threads, 1..255 registers, smem >= 0; got {threads}, {registers}, {smem_bytes}")
    warps = -(-threads // WARP)
    regs_per_warp = gpu["reg_unit"] * -(-registers * WARP // gpu["reg_unit"])
    g = gpu["warp_alloc_granularity"]
    warps_by_regs = (gpu["regs_per_sm"] // regs_per_warp) // g * g
    smem = smem_bytes + gpu["smem_reserved_per_cta"]
    smem = gpu["smem_unit"] * -(-smem // gpu["smem_unit"])
    if smem_bytes > gpu["smem_per_cta"]:
        raise ValueError(f"{smem_bytes} bytes of shared memory exceed the {gpu['smem_per_cta']} a CTA may use")
    limits = {
        "threads": gpu["warps_per_sm"] // warps,
        "CTA slots": gpu["ctas_per_sm"],
        "registers": warps_by_regs // warps,
        "shared memory": gpu["smem_per_sm"] // smem,
    }
    ctas = min(limits.values())
    return {
        "ctas_per_sm": ctas,
        "limited_by": [k for k, v in limits.items() if v == ctas],
        "limits": limits,
        "warps_per_cta": warps,
        "occupancy": ctas * warps / gpu["warps_per_sm"],
    }


def occupancy_table(kernels, M: int = 4096, N: int = 1, K: int = 14336, record=None, gpu: dict = H100) -> list[dict]:
    """Per kernel (its first launch): grid, block, the compiler's registers and shared memory (from
    ``record``, :func:`load_resources`' default if None), :func:`occupancy`, the waves the grid
    makes on ``gpu`` (CTAs over CTAs per SM x SMs) and how many SMs get a CTA at all."""
    record = record if record is not None else load_resources()
    rows = []
    for kernel in kernels:
        ln = launch(kernel, M, N, K)[0]
        res = record["by_kernel"].get(ln["kernel"])
        if res is None:
            raise ValueError(f"{ln['kernel']} ({kernel}) is not in {record.get('path', 'the record')}")
        threads = ln["block"][0] * ln["block"][1]
        occ = occupancy(threads, res["registers"], res["smem_bytes"], gpu)
        ctas = ln["grid"][0] * ln["grid"][1]
        rows.append(
            {
                "kernel": kernel,
                "instance": ln["kernel"],
                "grid": ln["grid"],
                "block": ln["block"],
                "ctas": ctas,
                "registers": res["registers"],
                "smem_bytes": res["smem_bytes"],
                "spill_bytes": res["spill_store_bytes"] + res["spill_load_bytes"],
                **occ,
                "waves": ctas / (occ["ctas_per_sm"] * gpu["sms"]),
                "sms_busy": min(ctas, gpu["sms"]),
            }
        )
    return rows


def format_occupancy_table(rows: list[dict], gpu: dict = H100) -> str:
    """:func:`occupancy_table` as text."""
    out = [
        f"{'kernel':26s} {'grid':>10s} {'block':>7s} {'regs':>4s} {'smem':>6s} {'CTAs/SM':>7s} "
        f"{'limited by':22s} {'occupancy':>9s} {'waves':>6s} {'SMs busy':>8s}"
    ]
    for r in rows:
        grid, block = "x".join(map(str, r["grid"])), "x".join(map(str, r["block"]))
        out.append(
            f"{r['kernel']:26s} {grid:>10s} {block:>7s} {r['registers']:4d} {r['smem_bytes']:6d} {r['ctas_per_sm']:7d} "
            f"{', '.join(r['limited_by']):22s} {r['occupancy']:9.0%} {r['waves']:6.2f} {r['sms_busy']:>4d}/{gpu['sms']}"
        )
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Shared-memory banks
# ---------------------------------------------------------------------------------------------
BANKS, BANK_BYTES = 32, 4


def wavefronts(address, width: int) -> int:
    """Wavefronts (passes through the 32 banks of 4 bytes) one warp's shared-memory request takes:
    ``address`` the 32 lanes' byte addresses (-1: the lane does not take part), ``width`` the bytes
    each lane reads or writes (1, 2, 4, 8 or 16). The textbook model: lanes on the same 4-byte word
    share it (a broadcast), and the request takes as many wavefronts as the largest number of
    distinct words any one bank must deliver. The hardware serves 8- and 16-byte accesses a half or a
    quarter warp at a time, which gives the same count for the requests of these kernels except,
    possibly, a wide broadcast (all lanes on one address): a profiler may count those differently."""
    address = np.asarray(address, dtype=np.int64)
    if address.shape != (WARP,):
        raise ValueError(f"address must hold one entry per lane (32), got shape {address.shape}")
    if width not in (1, 2, 4, 8, 16):
        raise ValueError(f"width must be 1, 2, 4, 8 or 16 bytes, got {width}")
    a = address[address >= 0]
    if (a % width).any():
        raise ValueError(f"a {width}-byte access must be {width}-byte aligned")
    if not len(a):
        return 0
    words = np.unique((a[:, None] // BANK_BYTES + np.arange(max(1, width // BANK_BYTES))[None, :]).ravel())
    return int(np.bincount(words % BANKS, minlength=BANKS).max())


@dataclass(frozen=True)
class SharedRequest:
    """One shared-memory instruction of a warp: ``address[l]`` bytes into the array ``array``."""

    array: str
    kind: str  #: "store" or "load"
    width: int
    address: np.ndarray
    count: int = 1  #: how many times per K step the warp issues it (the inner loop's trip count)

    def wavefronts(self) -> int:
        return wavefronts(self.address, self.width)


#: The tiled kernels whose shared tiles are padded, and the padding :func:`shared_requests` removes.
PADDED = {
    "cuda_f32_f32_tiled": "As, Ws [32][32 + 1] floats",
    "cuda_q4_0_f32_tiled": "As, Ws [32][32 + 1] floats",
    **{f"cuda_{w}_q8_1_tiled": f"w_qs [32][{q} + 4] bytes" for w, q in (("q4_0", 16), ("q8_0", 32))},
    **{f"cuda_{w}_q8_1_tiled_dp4a": f"w_qs [32][{q} + 1] words" for w, q in (("q4_0", 4), ("q8_0", 8))},
    **{f"cuda_{w}_q8_1_vec_dp4a": f"w_qs [32][{q} + 1] 16-byte vectors" for w, q in (("q4_0", 4), ("q8_0", 8))},
}


def shared_requests(kernel: str, pad: bool = True, warp: int = 0, k: int = 0) -> list[SharedRequest]:
    """The shared-memory requests of warp ``warp`` (``ty``) in one K step of a tiled kernel, with the
    tile's padding (``pad=True``, as the code is) or without it: the stores that stage the tiles,
    then the inner loop's loads at iteration ``k`` (``count`` says how often the loop issues each
    such load per step; the loop's iterations differ only in the column, which moves every lane
    alike). Addresses are from each array's start."""
    m = _model(kernel)
    if kernel not in PADDED:
        raise ValueError(f"{kernel} has no padded shared tile; padded: {', '.join(PADDED)}")
    if not 0 <= warp < 32:
        raise ValueError(f"warp (ty) must be in 0..31, got {warp}")
    tx, ty = np.arange(WARP), warp
    one = np.zeros(WARP, np.int64)
    out = []
    if m.kind == "tiled":  # As[ty][tx], Ws[ty][tx] stores; As[ty][k] and Ws[tx][k] in the loop
        if not 0 <= k < 32:
            raise ValueError(f"k must be in 0..31, got {k}")
        p = 33 if pad else 32
        out += [SharedRequest(n, "store", 4, 4 * (ty * p + tx)) for n in ("As[ty][tx]", "Ws[ty][tx]")]
        if pad:
            out.append(SharedRequest("As[ty][k]", "load", 4, one + 4 * (ty * p + k), 32))
            out.append(SharedRequest("Ws[tx][k]", "load", 4, 4 * (tx * p + k), 32))
        else:
            # Rows of 32 floats start 16-byte aligned, and ptxas merges the loop's loads of four
            # consecutive k into one 16-byte load (LDS.128): 8 per K step instead of 32. Seen in
            # the unpadded build of chapter 1's kernel (tools/bank_conflicts: its SASS and Nsight
            # Compute's counts); with the padding the rows are only 4-byte aligned.
            k4 = k - k % 4
            out.append(SharedRequest("As[ty][k]", "load", 16, one + 4 * (ty * p + k4), 8))
            out.append(SharedRequest("Ws[tx][k]", "load", 16, 4 * (tx * p + k4), 8))
    elif m.kind == "tiled_q8_1" and m.file.endswith("2_tiled.cu"):
        qs = 16 if m.wfmt == "q4_0" else 32
        if not 0 <= k < 16:
            raise ValueError(f"k must be in 0..15 (the loop's j), got {k}")
        p = qs + 4 if pad else qs
        out.append(SharedRequest("a_qs[ty][tx]", "store", 1, ty * 32 + tx))
        out.append(SharedRequest("w_qs[ty][tx]", "store", 1, np.where(tx < qs, ty * p + tx, -1)))
        out += [SharedRequest(n, "store", 4, np.where(tx == 0, 4 * ty, -1)) for n in ("a_d", "a_s", "w_d")]
        out.append(SharedRequest("w_qs[tx][j]", "load", 1, tx * p + k, 16))
        if m.wfmt == "q8_0":
            out.append(SharedRequest("w_qs[tx][j + 16]", "load", 1, tx * p + k + 16, 16))
        out.append(SharedRequest("a_qs[ty][j]", "load", 1, one + ty * 32 + k, 16))
        out.append(SharedRequest("a_qs[ty][j + 16]", "load", 1, one + ty * 32 + k + 16, 16))
        out += [SharedRequest("w_d[tx]", "load", 4, 4 * tx), SharedRequest("a_d[ty]", "load", 4, one + 4 * ty)]
        out.append(SharedRequest("a_s[ty]", "load", 4, one + 4 * ty))
    elif m.kind == "tiled_q8_1":  # 4_tiled_dp4a.cu: word tiles
        qw = 4 if m.wfmt == "q4_0" else 8
        if not 0 <= k < 4:
            raise ValueError(f"k must be in 0..3 (the loop's i), got {k}")
        p = qw + 1 if pad else qw
        out.append(SharedRequest("a_qs[ty] byte tx", "store", 1, ty * 32 + tx))
        out.append(SharedRequest("w_qs[ty] byte tx", "store", 1, np.where(tx < 4 * qw, 4 * ty * p + tx, -1)))
        out += [SharedRequest(n, "store", 4, np.where(tx == 0, 4 * ty, -1)) for n in ("a_d", "a_s", "w_d")]
        out.append(SharedRequest("w_qs[tx][i]", "load", 4, 4 * (tx * p + k), 4))
        if m.wfmt == "q8_0":
            out.append(SharedRequest("w_qs[tx][i + 4]", "load", 4, 4 * (tx * p + k + 4), 4))
        out.append(SharedRequest("a_qs[ty][i]", "load", 4, one + 4 * (ty * 8 + k), 4))
        out.append(SharedRequest("a_qs[ty][i + 4]", "load", 4, one + 4 * (ty * 8 + k + 4), 4))
        out += [SharedRequest("w_d[tx]", "load", 4, 4 * tx), SharedRequest("a_d[ty]", "load", 4, one + 4 * ty)]
        out.append(SharedRequest("a_s[ty]", "load", 4, one + 4 * ty))
    else:  # 5_vec_dp4a.cu: int4 tiles, BK = 4 blocks per step
        wv = 1 if m.wfmt == "q4_0" else 2  # 16-byte vectors per weight block
        if not 0 <= k < 4:
            raise ValueError(f"k must be in 0..3 (the loop's bk), got {k}")
        p = 4 * wv + 1 if pad else 4 * wv
        out.append(SharedRequest("a_qs[ty] word tx", "store", 4, 16 * ty * 8 + 4 * tx))
        out.append(SharedRequest("w_qs[ty] word tx", "store", 4, np.where(tx < 16 * wv, 16 * ty * p + 4 * tx, -1)))
        out.append(SharedRequest("a_ds[ty][tx]", "store", 8, np.where(tx < 4, 8 * (4 * ty + tx), -1)))
        out.append(SharedRequest("w_d[tx][ty]", "store", 4, np.where(tx < 4, 4 * (32 * tx + ty), -1)))
        for v in range(2):
            out.append(SharedRequest(f"a_qs[ty][2 bk + {v}]", "load", 16, one + 16 * (ty * 8 + 2 * k + v), 4))
        for v in range(wv):
            out.append(SharedRequest(f"w_qs[tx][bk * {wv} + {v}]", "load", 16, 16 * (tx * p + wv * k + v), 4))
        out.append(SharedRequest("a_ds[ty][bk]", "load", 8, one + 8 * (4 * ty + k), 4))
        out.append(SharedRequest("w_d[bk][tx]", "load", 4, 4 * (32 * k + tx), 4))
    return out


def bank_table(kernel: str, warp: int = 0) -> list[dict]:
    """Per shared-memory request of one K step of ``kernel``: its bytes per lane, how many times per
    step the warp issues it and the wavefronts each takes (the mean over the inner loop's
    iterations), with the padding (``padded``) and without (``unpadded``). Without the padding
    the compiler may issue a request wider and fewer times (:func:`shared_requests`)."""
    rows = {}
    n_k = {"tiled": 32}.get(_model(kernel).kind, 16 if kernel.endswith("_q8_1_tiled") else 4)
    for k in range(n_k):
        for key, pad in (("padded", True), ("unpadded", False)):
            for r in shared_requests(kernel, pad, warp, k):
                row = rows.setdefault(r.array, {"request": r.array, "kind": r.kind})
                row[key] = {"width": r.width, "per_step": r.count}
                row.setdefault(key + "_wavefronts", []).append(r.wavefronts())
    out = []
    for row in rows.values():
        entry = {"request": row["request"], "kind": row["kind"]}
        for key in ("padded", "unpadded"):
            waves = row[key + "_wavefronts"]
            entry[key] = {**row[key], "wavefronts": sum(waves) / len(waves)}
        out.append(entry)
    return out


def bank_totals(kernel: str, warp: int = 0) -> dict[str, float]:
    """Shared-memory wavefronts per warp and K step of ``kernel`` (stores and loads), with the
    padding and without: the bank model's counts, comparable with Nsight Compute's
    ``l1tex__data_pipe_lsu_wavefronts_mem_shared`` per warp and K step."""
    rows = bank_table(kernel, warp)
    return {key: sum(r[key]["per_step"] * r[key]["wavefronts"] for r in rows) for key in ("padded", "unpadded")}


def format_bank_table(kernel: str, warp: int = 0) -> str:
    """:func:`bank_table` as text (bytes per lane x requests per K step, wavefronts per request),
    with the totals per K step."""
    rows = bank_table(kernel, warp)
    out = [f"{kernel}, warp ty = {warp}: wavefronts per request (32 banks x 4 bytes); padded: {PADDED[kernel]}"]
    out.append(f"{'request':22s} {'':5s} {'padded: B x n':>14s} {'waves':>6s} {'unpadded: B x n':>16s} {'waves':>6s}")
    for r in rows:
        p, u = r["padded"], r["unpadded"]
        out.append(
            f"{r['request']:22s} {r['kind']:5s} {p['width']:>7d} x {p['per_step']:<4d} {p['wavefronts']:6.1f}"
            f" {u['width']:>9d} x {u['per_step']:<4d} {u['wavefronts']:6.1f}"
        )
    tot = bank_totals(kernel, warp)
    out.append(f"{'wavefronts per K step':22s} {'':5s} {'':>14s} {tot['padded']:6.0f} {'':>16s} {tot['unpadded']:6.0f}")
    return "\n".join(out)
