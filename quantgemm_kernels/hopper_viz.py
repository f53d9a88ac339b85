"""Models and pictures of chapter 6's tensor-core steps (``06_decode_tensor_cores/``).

Chapter 6 draws what the second step's ``ldmatrix`` delivers (:func:`ldmatrix_x4_a`,
:func:`draw_ldmatrix_x4`) and two things that the Hopper (wgmma) steps do and a reader cannot print:

* **The core-matrix layout of a stage** (:func:`operand_offset`, :func:`desc_address`,
  :func:`stage_coverage`, :func:`draw_core_matrix_layout`). ``wgmma.mma_async`` reads its operands
  from shared memory through a 64-bit descriptor (``smem_desc`` in ``wgmma.cuh``): a start address,
  a *leading* byte offset (LBO) and a *stride* byte offset (SBO). Without swizzling the operand is
  made of core matrices, 8 rows of 16 bytes stored as 128 contiguous bytes; LBO is the distance
  between the two core matrices of a row group along k (128 bytes here), SBO the distance between
  row groups of 8 rows (256 bytes). :func:`operand_offset` is the kernel's ``core_offset`` (how the
  producer and the activation quantizer write), :func:`desc_address` the descriptor's arithmetic
  (how the tensor cores read); the tests check that the two agree and that a stage's bytes are each
  written once.
* **The producer/consumer ring of ``wgmma_ws.cuh``** (:class:`MBarrier`, :func:`simulate_ws`,
  :func:`draw_pipeline_timeline`). A producer warpgroup and two consumer warpgroups pass stages
  through ``full`` and ``empty`` mbarriers and wait on a phase *parity*.
  :func:`simulate_ws` runs the kernel's loops, thread by thread, against a model of the mbarriers
  and the TMA engine, and reports the first read of a stage before its producer arrived, the first
  overwrite of a stage (or raw buffer) that someone still reads, or a deadlock.

Everything here is numpy and matplotlib: it runs without a GPU.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np

# ---------------------------------------------------------------------------------------------
# The core-matrix layout (wgmma.cuh)
# ---------------------------------------------------------------------------------------------

QK = 32  #: values (int8 bytes) per block: the wgmma's k
KB = 8  #: blocks per K step (a stage)
BM = 128  #: weight rows per CTA: the wgmma's N
BN = 128  #: tokens per CTA: 2 consumer warpgroups x the wgmma's M = 64
CORE_ROWS, CORE_ROW_BYTES = 8, 16  #: a core matrix: 8 rows of 16 bytes ...
CORE = CORE_ROWS * CORE_ROW_BYTES  #: ... stored as 128 contiguous bytes
LBO = CORE  #: the descriptor's leading byte offset: the next core matrix along k
SBO = 2 * CORE  #: the descriptor's stride byte offset: the next group of 8 rows
WD_T = 36  #: floats per lane column t of a block's weight scales (32 + 4 of padding)
WD_PITCH = 4 * WD_T  #: floats per block of weight scales

#: The fields of ``wgmma.cuh``'s ``Stage``, in order: (name, bytes). Every size is a multiple of 16,
#: so the struct has no padding between them.
STAGE_FIELDS = (
    ("a", KB * BN * QK),  # activation quants, per block BN / 8 row groups of 2 core matrices
    ("ad", KB * BN * 8),  # (d_a 2^64, c) per block and token, float2
    ("w", KB * BM * QK),  # weights as int8 (Q4_0: 16 (q - 8)), the layout of a
    ("wd", KB * WD_PITCH * 4),  # weight scales in wd_slot order, float
)


def stage_field_offsets() -> dict[str, tuple[int, int]]:
    """``{field: (first byte, bytes)}`` of a ``Stage`` (chapter 6)."""
    out, at = {}, 0
    for name, size in STAGE_FIELDS:
        out[name] = (at, size)
        at += size
    return out


STAGE_BYTES = sum(size for _, size in STAGE_FIELDS)  #: sizeof(Stage): 78336


def core_offset(r, h):
    """``wgmma.cuh``'s ``core_offset``: the byte of row ``r``, k half ``h`` (k 0..15 or 16..31) of a
    block's operand tile (chapter 6): row groups of 8 rows, each two core matrices."""
    return (r // CORE_ROWS) * SBO + h * LBO + (r % CORE_ROWS) * CORE_ROW_BYTES


def operand_offset(row, k):
    """The byte of int8 element ``(row, k)`` of one block's operand tile ([rows][32]) in shared
    memory, as the kernel writes it (chapter 6): ``core_offset(row, k // 16) + k % 16``.
    ``row`` and ``k`` may be numpy arrays."""
    return core_offset(row, k // CORE_ROW_BYTES) + k % CORE_ROW_BYTES


def smem_desc(addr: int, lbo: int = LBO, sbo: int = SBO) -> int:
    """``wgmma.cuh``'s ``smem_desc`` (chapter 6): the 64-bit descriptor of a no-swizzle operand at
    shared-memory address ``addr``: bits 0-13 the address, 16-29 LBO, 32-45 SBO, each in 16-byte
    units; the swizzle bits (62-63) stay 0."""
    if addr % 16 or lbo % 16 or sbo % 16:
        raise ValueError("a descriptor holds addresses and offsets in 16-byte units")
    return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32)


def desc_fields(desc: int) -> tuple[int, int, int]:
    """(start address, LBO, SBO) in bytes, read back from a descriptor (chapter 6)."""
    return (desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4


def desc_address(desc: int, row, k):
    """Where the tensor cores read int8 element ``(row, k)`` of a K-major operand without swizzle
    (chapter 6): core matrix ``(row // 8, k // 16)`` starts at ``start + (row // 8) SBO +
    (k // 16) LBO``; inside it, row ``row % 8`` is 16 contiguous bytes."""
    start, lbo, sbo = desc_fields(desc)
    return (
        start
        + (row // CORE_ROWS) * sbo
        + (k // CORE_ROW_BYTES) * lbo
        + (row % CORE_ROWS) * CORE_ROW_BYTES
        + k % CORE_ROW_BYTES
    )


# ---- The 128-byte swizzle (chapter 6's step 8). The TMA engine writes a tile of 128-byte rows (64
# fp16 values) so that 16-byte chunk c of row r lands in chunk c ^ (r % 8) of that row, in atoms of
# 8 rows (1024 bytes, aligned); the tensor cores apply the same XOR to every address they form from
# a descriptor of layout type 1, so they read what the TMA wrote.
SWIZZLE_ROW = 128  #: bytes of a swizzled row
SWIZZLE_ATOM = 8 * SWIZZLE_ROW  #: 8 rows: the pattern repeats every 1024 bytes


def swizzle128(addr):
    """The shared-memory byte that holds logical byte ``addr`` of a 1024-byte-aligned tile under the
    128-byte swizzle: address bits 4-6 XOR bits 7-9. ``addr`` may be a numpy array."""
    return addr ^ (((addr >> 7) & 7) << 4)


def swizzle128_desc(addr: int) -> int:
    """``12_wgmma_f16.cu``'s ``swizzle128_desc``: the descriptor of a K-major fp16 tile [rows][64]
    at ``addr`` with the 128-byte swizzle: layout type 1 in bits 62-63, SBO 1024 (the next 8 rows),
    LBO 16 (unused with this swizzle)."""
    if addr % 16:
        raise ValueError("a descriptor holds addresses in 16-byte units")
    return ((addr & 0x3FFFF) >> 4) | (1 << 16) | ((SWIZZLE_ATOM >> 4) << 32) | (1 << 62)


def tma_swizzled_offset(row, k):
    """Where the TMA's 128-byte swizzle puts fp16 element ``(row, k)`` (k < 64) of a tile: the
    logical byte ``128 row + 2 k``, swizzled."""
    return swizzle128(row * SWIZZLE_ROW + 2 * k)


def desc_address_swizzled(desc: int, row, kk, swizzled: bool = True):
    """Where the tensor cores read fp16 element ``(row, kk)`` (kk < 16) of a k16 step through a
    layout-type-1 descriptor: the logical address ``start + (row // 8) SBO + 128 (row % 8) + 2 kk``,
    then the swizzle (``swizzled=False``: without it, to show what it changes)."""
    if desc >> 62 != 1:
        raise ValueError("not a 128-byte-swizzle descriptor (layout type 1 in bits 62-63)")
    start, _, sbo = desc_fields(desc)
    logical = start + (row // 8) * sbo + (row % 8) * SWIZZLE_ROW + 2 * kk
    return swizzle128(logical) if swizzled else logical


def draw_swizzle128(step: int = 1, ax=None):
    """One 8-row atom of a swizzled tile: each of the 8 x 8 16-byte chunks labelled with the logical
    chunk it holds; the chunks k16 step ``step`` reads (logical chunks 2 step, 2 step + 1) shaded."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(5.2, 3.4))[1]
    rows = np.arange(8)[:, None]
    held = np.arange(8)[None, :] ^ rows  # physical chunk p of row r holds logical chunk p ^ r
    read = (held // 2) == step
    ax.imshow(np.where(read, 1.0, 0.15), cmap="Blues", vmin=0, vmax=1.3, aspect="auto")
    for r in range(8):
        for p in range(8):
            ax.text(p, r, str(held[r, p]), ha="center", va="center", fontsize=9, color="black")
    ax.set_xticks(range(8), [f"{16 * p}" for p in range(8)])
    ax.set_yticks(range(8))
    ax.set(
        xlabel="byte of the 128-byte row (16-byte chunks)",
        ylabel="row of the atom",
        title=f"logical chunk held in each place; shaded: k16 step {step} (start + {32 * step} bytes)",
    )
    ax.title.set_fontsize(9)
    return ax


def wd_slot(n):
    """``wgmma.cuh``'s ``wd_slot``: where weight row ``n``'s scale sits among a block's 144 floats."""
    return ((n % 8) // 2) * WD_T + (n // 8) * 2 + n % 2


def stage_coverage() -> tuple[np.ndarray, np.ndarray]:
    """How often each byte of a ``Stage`` is written by the kernels, and which are padding (chapter 6).

    Writes every element the kernels store into one K step: the activation quants and pairs (the
    quantizer's unit, one bulk copy), the weights (``store_block``: ``core_offset`` rows) and their
    scales (``wd_slot``). Returns ``(count, pad)``: ``count[i]`` the number of writes of byte ``i``,
    ``pad[i]`` True for the weight scales' padding floats, which nobody writes."""
    fo = stage_field_offsets()
    count = np.zeros(STAGE_BYTES, np.int64)
    b = np.arange(KB)[:, None, None]
    row = np.arange(BN)[None, :, None]
    k = np.arange(QK)[None, None, :]
    np.add.at(count, fo["a"][0] + b * BN * QK + operand_offset(row, k), 1)  # tokens x k
    row_w = np.arange(BM)[None, :, None]
    np.add.at(count, fo["w"][0] + b * BM * QK + operand_offset(row_w, k), 1)  # weight rows x k
    pair = fo["ad"][0] + (np.arange(KB)[:, None] * BN + np.arange(BN)[None, :]) * 8
    np.add.at(count, pair[..., None] + np.arange(8), 1)
    scale = fo["wd"][0] + (np.arange(KB)[:, None] * WD_PITCH + wd_slot(np.arange(BM))[None, :]) * 4
    np.add.at(count, scale[..., None] + np.arange(4), 1)
    pad = np.zeros(STAGE_BYTES, bool)
    for bb in range(KB):
        for t in range(4):
            first = fo["wd"][0] + (bb * WD_PITCH + t * WD_T + 32) * 4
            pad[first : first + 16] = True
    return count, pad


def wgmma_operands(stage_addr: int = 0, block: int = 0) -> dict[str, int]:
    """The descriptors the kernels give ``wgmma`` for block ``block`` of a stage at ``stage_addr``
    (chapter 6): ``"a0"``, ``"a1"`` (the 64 tokens of consumer warpgroup 0 or 1: ``&cur.a[b][64 wg
    QK]``) and ``"b"`` (the 128 weight rows: ``&cur.w[b][0]``)."""
    fo = stage_field_offsets()
    a = stage_addr + fo["a"][0] + block * BN * QK
    return {
        "a0": smem_desc(a),
        "a1": smem_desc(a + 64 * QK),
        "b": smem_desc(stage_addr + fo["w"][0] + block * BM * QK),
    }


def draw_core_matrix_layout(rows: int = 32, axes=None):
    """Draw one block's operand tile (``rows`` x 32 int8) as the kernel lays it out (chapter 6).

    Left: the tile as a matrix, each 8 x 16-byte core matrix in its colour, with its first byte.
    Right: the same bytes in shared-memory order, 128 bytes (one core matrix) per line, with the
    descriptor's LBO (next core matrix along k) and SBO (next 8 rows). Both panels are computed
    from :func:`operand_offset`; the colours of the right panel come from inverting it."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    if rows % CORE_ROWS:
        raise ValueError("rows must be a multiple of 8")
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [1, 2.4]})
    row, k = np.meshgrid(np.arange(rows), np.arange(QK), indexing="ij")
    core_id = 2 * (row // CORE_ROWS) + k // CORE_ROW_BYTES  # core matrix of each element
    n_core = int(core_id.max()) + 1
    cmap = ListedColormap(plt.get_cmap("tab20")(np.arange(n_core) % 20))
    ax = axes[0]
    ax.imshow(core_id, cmap=cmap, aspect="auto", interpolation="nearest", vmin=-0.5, vmax=n_core - 0.5)
    for g in range(rows // CORE_ROWS):
        for h in range(2):
            off = int(operand_offset(8 * g, 16 * h))
            ax.text(16 * h + 7.5, 8 * g + 3.5, f"+{off}", ha="center", va="center", fontsize=8)
    ax.set_xticks([7.5, 23.5])
    ax.set_xticklabels(["k 0-15", "k 16-31"])
    ax.set_yticks(range(0, rows, CORE_ROWS))
    ax.set_xlabel("k (byte of the row)")
    ax.set_ylabel("row (token or weight row)")
    ax.set_title("one block's operand: core matrices\n(number: its first byte in shared memory)", fontsize=9)

    mem = np.full(rows * QK, -1)
    mem[operand_offset(row, k).ravel()] = core_id.ravel()  # invert: which core matrix each byte holds
    lines = mem.reshape(-1, CORE)
    ax = axes[1]
    ax.imshow(lines, cmap=cmap, aspect="auto", interpolation="nearest", vmin=-0.5, vmax=n_core - 0.5)
    for x in range(CORE_ROW_BYTES, CORE, CORE_ROW_BYTES):
        ax.axvline(x - 0.5, color="white", lw=0.8)
    for i, c in enumerate(lines[:, 0]):
        g, h = divmod(int(c), 2)
        label = f"byte {CORE * i}: rows {8 * g}-{8 * g + 7}, k {16 * h}-{16 * h + 15}"
        ax.text(-2, i, label, ha="right", va="center", fontsize=7.5)
    arrow = {"arrowstyle": "->", "color": "black", "lw": 1.2}
    ax.annotate("", xy=(CORE + 1, 1), xytext=(CORE + 1, 0), arrowprops=arrow, annotation_clip=False)
    ax.text(CORE + 3, 0.5, f"LBO = {LBO} B:\nthe next k half", va="center", fontsize=8)
    arrow = dict(arrow, color="firebrick", connectionstyle="arc3,rad=-0.6")
    ax.annotate("", xy=(CORE + 1, 2), xytext=(CORE + 1, 0), arrowprops=arrow, annotation_clip=False)
    ax.text(CORE + 12, 2, f"SBO = {SBO} B:\nthe next 8 rows", va="center", fontsize=8, color="firebrick")
    ax.set_yticks([])
    ax.set_xticks([16 * r + 7.5 for r in range(CORE_ROWS)])
    ax.set_xticklabels([f"row {r}" for r in range(CORE_ROWS)], fontsize=7.5)
    ax.set_xlim(-0.5, CORE - 0.5)
    ax.set_xlabel("one 128-byte line: a core matrix, its 8 rows of 16 bytes in order")
    ax.set_title(f"the same {rows * QK} bytes in shared-memory order, one core matrix per line", fontsize=9)
    return axes


# ---------------------------------------------------------------------------------------------
# ldmatrix (the second step, mma_tile.cuh)
# ---------------------------------------------------------------------------------------------


def ldmatrix_x4_a() -> np.ndarray:
    """What one ``ldmatrix.x4`` at ``mma_tile.cuh``'s ``a_addr`` delivers (chapter 6, second step).

    Lane ``l`` gives the address of row ``l % 16``, byte ``16 (l // 16)`` of a 16-row block of int8
    weights: lanes 8i .. 8i + 7 the rows of matrix ``i`` (8 rows x 16 bytes). Lane ``l`` receives,
    in register ``i``, bytes ``4 (l % 4) ..`` of row ``l // 4`` of matrix ``i``. Returns ``got``
    [32 lanes, 4 registers, 2]: the (row, first k) each register holds, which the tests compare
    with the ``mma.m16n8k32`` fragment table (a0: row g, k 4t; a1: row g + 8; a2, a3: k + 16)."""
    addr = [(ln % 16, 16 * (ln // 16)) for ln in range(32)]  # (row, byte) whose address lane ln gives
    got = np.zeros((32, 4, 2), np.int64)
    for ln in range(32):
        for i in range(4):
            row, byte = addr[8 * i + ln // 4]
            got[ln, i] = (row, byte + 4 * (ln % 4))
    return got


def draw_ldmatrix_x4(ax=None):
    """Draw :func:`ldmatrix_x4_a` (chapter 6, second step): a 16 x 32-byte block of weights in
    shared memory, in 4-byte words; the colour says which register (a0..a3) a word lands in, the
    number which lane receives it, the left margin which lane gives each row's address."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8.5, 4.6))
    got = ldmatrix_x4_a()
    reg = np.zeros((16, 8), np.int64)
    lane_of = np.zeros((16, 8), np.int64)
    for ln in range(32):
        for i in range(4):
            row, k = got[ln, i]
            reg[row, k // 4] = i
            lane_of[row, k // 4] = ln
    colors = plt.get_cmap("Pastel1")
    ax.imshow(reg, cmap=colors, vmin=0, vmax=8, aspect="auto", interpolation="nearest")
    for row in range(16):
        for w in range(8):
            ax.text(w, row, f"{lane_of[row, w]}", ha="center", va="center", fontsize=7)
        ax.text(-0.7, row, f"lane {row}", ha="right", va="center", fontsize=7, color="dimgray")
        ax.text(7.7, row, f"lane {row + 16}", ha="left", va="center", fontsize=7, color="dimgray")
    ax.axhline(7.5, color="black", lw=1)
    ax.axvline(3.5, color="black", lw=1)
    for i, (r0, w0) in enumerate(((0, 0), (8, 0), (0, 4), (8, 4))):
        ax.text(w0 + 1.5, r0 + 3.5, f"a{i}", ha="center", va="center", fontsize=22, alpha=0.25)
    ax.set_xticks(range(8))
    ax.set_xticklabels([f"k {4 * w}-{4 * w + 3}" for w in range(8)], fontsize=7)
    ax.set_yticks([])
    ax.set_ylabel("weight row of the mma's 16", labelpad=44)
    ax.set_title(
        "one ldmatrix.x4: margins, the lane that gives each row's address (left: k 0-15, right: k 16-31);\n"
        "cells, the lane that receives each 4-byte word; colour, the register (a0 to a3) it lands in",
        fontsize=8.5,
    )
    return ax


# ---------------------------------------------------------------------------------------------
# mbarriers and the warp-specialized ring (wgmma_ws.cuh)
# ---------------------------------------------------------------------------------------------


class ModelError(RuntimeError):
    """A misuse of a model barrier (more arrivals than its count)."""


@dataclass
class MBarrier:
    """An mbarrier as ``wgmma.cuh`` uses it (chapter 6).

    ``bar_init(count)``: a phase completes when ``count`` arrivals are in and the bytes announced
    by ``arrive.expect_tx`` have all been delivered by copies (``complete_tx``); then the next phase
    begins with ``count`` arrivals to wait for again. ``mbarrier.try_wait.parity p`` tests whether
    the phase of parity ``p`` (the current or the one before it) has completed: it returns True
    exactly when the current phase's parity differs from ``p``. So a fresh barrier (phase 0) lets a
    wait for parity 1 pass at once and blocks a wait for parity 0 until its first phase completes.
    """

    name: str
    count: int
    completed: int = 0  #: phases completed; the current phase is number ``completed``
    pending: int = -1
    tx: int = 0
    history: list = field(default_factory=list)  #: (time, phases completed) after each completion

    def __post_init__(self):
        self.pending = self.count

    @property
    def parity(self) -> int:
        """The current phase's parity bit."""
        return self.completed & 1

    def arrive(self, t: float, expect_tx: int = 0) -> None:
        """``mbarrier.arrive`` (or ``arrive.expect_tx`` with ``expect_tx`` bytes to come)."""
        if self.pending == 0:
            raise ModelError(
                f"{self.name}: an arrival while its phase {self.completed} still waits for bytes, "
                f"beyond its count of {self.count}"
            )
        self.tx += expect_tx
        self.pending -= 1
        self._complete(t)

    def complete_tx(self, t: float, nbytes: int) -> None:
        """A copy's bytes landed (the TMA engine's ``complete_tx``)."""
        self.tx -= nbytes
        self._complete(t)

    def _complete(self, t: float) -> None:
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count
            self.history.append((t, self.completed))

    def try_wait(self, parity: int) -> bool:
        """``mbarrier.try_wait.parity``: True once the phase of parity ``parity`` has completed."""
        return self.parity != parity


@dataclass
class Trace:
    """What :func:`simulate_ws` saw (chapter 6): ``error`` is None when every step was produced and
    consumed without a race or a deadlock."""

    stages: int
    steps: int
    error: str | None = None
    work: list = field(default_factory=list)  #: (thread, what, step, stage, start, end)
    waits: list = field(default_factory=list)  #: (thread, barrier, parity, start, passed)
    barriers: dict = field(default_factory=dict)  #: name -> MBarrier (its history)
    end: float = 0.0


class _Race(Exception):
    pass


class _Buffers:
    """Per shared-memory buffer and row: the K step it holds (None: nothing yet), and how many
    threads (or copies) read and write it right now."""

    def __init__(self, rows: int):
        self.rows = rows
        self.content: dict[str, list] = {}
        self.readers: dict[str, list] = {}
        self.writers: dict[str, list] = {}

    def _get(self, buf):
        if buf not in self.content:
            self.content[buf] = [None] * self.rows
            self.readers[buf] = [0] * self.rows
            self.writers[buf] = [0] * self.rows
        return self.content[buf]

    def start_read(self, who, buf, rows, step):
        held = self._get(buf)
        for r in rows:
            if self.writers[buf][r]:
                raise _Race(f"{who} reads {buf} (step {step}) while row {r} of it is being written")
            if held[r] != step:
                has = "nothing" if held[r] is None else f"step {held[r]}"
                raise _Race(f"{who} reads {buf} for step {step}, but row {r} holds {has}")
        for r in rows:
            self.readers[buf][r] += 1

    def end_read(self, buf, rows):
        for r in rows:
            self.readers[buf][r] -= 1

    def start_write(self, who, buf, rows):
        self._get(buf)
        for r in rows:
            if self.readers[buf][r]:
                raise _Race(f"{who} overwrites row {r} of {buf} while it is still being read")
            if self.writers[buf][r]:
                raise _Race(f"{who} writes row {r} of {buf} while another write to it is under way")
        for r in rows:
            self.writers[buf][r] += 1

    def end_write(self, buf, rows, step):
        held = self._get(buf)
        for r in rows:
            self.writers[buf][r] -= 1
            held[r] = step


#: The times :func:`simulate_ws` gives each piece of work when neither ``durations`` nor a ``seed``
#: is given: consumers slower than the producer, as in the kernel (model units, not measured).
DURATIONS = {"raw_copy": 0.9, "act_copy": 0.6, "unpack": 1.0, "consume": 1.6}


def simulate_ws(
    steps: int = 6,
    stages: int = 2,
    producers: int = 4,
    consumers: int = 4,
    s_begin: int = 0,
    seed: int | None = None,
    durations: dict | None = None,
    full_parity=lambda rnd: rnd & 1,
    empty_parity=lambda rnd: (rnd - 1) & 1,
    producer_sync: bool = True,
) -> Trace:
    """Run ``wgmma_ws_kernel``'s producer and consumer loops (``wgmma_ws.cuh``) over ``steps`` K
    steps and ``stages`` stages, thread by thread, against :class:`MBarrier` models (chapter 6).

    Per stage ``i`` there are four barriers, as in the kernel: ``acts[i]`` and ``raw_in[i]`` (one
    arrival, the producer's ``expect_tx``, plus the bytes of a TMA copy), ``full[i]`` (one arrival
    per producer thread, after its row is unpacked) and ``empty[i]`` (one per consumer thread, after
    its last read). The producer's thread 0 copies the raw weights of step ``s + 1`` while step
    ``s`` is unpacked and, once ``empty`` allows, the activations of step ``s`` into the stage; every
    producer thread waits for ``raw_in``, unpacks its row into the stage, arrives on ``full`` and
    meets the others at a named barrier (``bar.sync 1``; ``producer_sync=False`` leaves it out).
    The consumers wait for ``full`` and ``acts``, read the stage and arrive on ``empty``. Step
    ``s`` uses stage ``(s - s_begin) % stages`` in round ``(s - s_begin) // stages``; the waits use
    ``full_parity(round)`` and, from round 1 on, ``empty_parity(round)`` (the kernel's: ``round & 1``
    and ``(round - 1) & 1``).

    Each piece of work takes a time: ``durations`` (keys ``raw_copy``, ``act_copy``, ``unpack``,
    ``consume``), or, with a ``seed``, random times (exponential, different for every piece), which
    try other interleavings. Returns a :class:`Trace` whose ``error`` names the first read of a
    buffer that does not hold its step yet, the first overwrite of a buffer someone still reads, or
    a deadlock."""
    rng = None if seed is None else np.random.default_rng(seed)
    dur = durations if durations is not None else (None if rng is not None else DURATIONS)

    def take(kind):
        return float(rng.exponential(1.0)) if dur is None else dur[kind]

    s_end = s_begin + steps
    bars = {}
    for i in range(stages):
        bars[f"acts[{i}]"] = MBarrier(f"acts[{i}]", 1)
        bars[f"raw_in[{i}]"] = MBarrier(f"raw_in[{i}]", 1)
        bars[f"full[{i}]"] = MBarrier(f"full[{i}]", producers)
        bars[f"empty[{i}]"] = MBarrier(f"empty[{i}]", consumers)
    trace = Trace(stages=stages, steps=steps, barriers=bars)
    bufs = _Buffers(producers)
    all_rows = range(producers)

    def stage_of(s):
        return (s - s_begin) % stages, (s - s_begin) // stages

    def copy_raw(s):  # producer thread 0: expect_tx, then the TMA box of the raw weights
        i, _ = stage_of(s)
        yield ("arrive", f"raw_in[{i}]", producers)
        yield ("tma", f"raw[{i}]", f"raw_in[{i}]", producers, take("raw_copy"), s, "raw copy")

    def producer(r):
        if r == 0:
            yield from copy_raw(s_begin)
        for s in range(s_begin, s_end):
            i, rnd = stage_of(s)
            if r == 0 and s + 1 < s_end:
                yield from copy_raw(s + 1)
            if s - s_begin >= stages:
                yield ("wait", f"empty[{i}]", empty_parity(rnd))
            if r == 0:
                yield ("arrive", f"acts[{i}]", 1)
                yield ("tma", f"stage[{i}].a", f"acts[{i}]", 1, take("act_copy"), s, "act copy")
            yield ("wait", f"raw_in[{i}]", rnd & 1)
            yield ("work", take("unpack"), "unpack", s, i, [(f"raw[{i}]", [r], s)], [(f"stage[{i}].w", [r])])
            yield ("arrive", f"full[{i}]", 0)
            if producer_sync:
                yield ("sync",)

    def consumer(c):
        for s in range(s_begin, s_end):
            i, rnd = stage_of(s)
            yield ("wait", f"full[{i}]", full_parity(rnd))
            yield ("wait", f"acts[{i}]", rnd & 1)
            reads = [(f"stage[{i}].w", list(all_rows), s), (f"stage[{i}].a", [0], s)]
            yield ("work", take("consume"), "wgmma + scale", s, i, reads, [])
            yield ("arrive", f"empty[{i}]", 0)

    threads = {f"producer {r}": producer(r) for r in range(producers)}
    threads.update({f"consumer {c}": consumer(c) for c in range(consumers)})
    order = itertools.count()
    queue = [(0.0, next(order), name) for name in threads]  # (time, tie-break, thread to resume)
    heapq.heapify(queue)
    parked: dict[str, tuple] = {}  # thread -> (barrier, parity, since)
    at_sync: list[str] = []
    done: set[str] = set()
    pending_ends: dict[int, tuple] = {}  # event id -> what finishes then
    now = 0.0

    def wake_waiters(t):
        for name, (bar, parity, since) in list(parked.items()):
            if bars[bar].try_wait(parity):
                del parked[name]
                trace.waits.append((name, bar, parity, since, t))
                heapq.heappush(queue, (t, next(order), name))

    try:
        while queue:
            now, eid, name = heapq.heappop(queue)
            if eid in pending_ends:  # the end of a piece of work or of a copy
                kind, payload = pending_ends.pop(eid)
                if kind == "tma":
                    buf, bar, nbytes, s = payload
                    bufs.end_write(buf, all_rows if buf.startswith("raw") else [0], s)
                    bars[bar].complete_tx(now, nbytes)
                    wake_waiters(now)
                    continue
                reads, writes, s = payload
                for buf, rows, _ in reads:
                    bufs.end_read(buf, rows)
                for buf, rows in writes:
                    bufs.end_write(buf, rows, s)
            gen = threads[name]
            while True:
                try:
                    op = next(gen)
                except StopIteration:
                    done.add(name)
                    break
                if op[0] == "arrive":
                    bars[op[1]].arrive(now, op[2])
                    wake_waiters(now)
                elif op[0] == "wait":
                    if bars[op[1]].try_wait(op[2]):
                        trace.waits.append((name, op[1], op[2], now, now))
                        continue
                    parked[name] = (op[1], op[2], now)
                    break
                elif op[0] == "tma":
                    _, buf, bar, nbytes, d, s, what = op
                    bufs.start_write("the TMA engine", buf, all_rows if buf.startswith("raw") else [0])
                    e = next(order)
                    pending_ends[e] = ("tma", (buf, bar, nbytes, s))
                    heapq.heappush(queue, (now + d, e, "TMA"))
                    trace.work.append(("TMA", what, s, int(buf[buf.index("[") + 1]), now, now + d))
                elif op[0] == "work":
                    _, d, what, s, i, reads, writes = op
                    for buf, rows, step in reads:
                        bufs.start_read(name, buf, rows, step)
                    for buf, rows in writes:
                        bufs.start_write(name, buf, rows)
                    e = next(order)
                    pending_ends[e] = ("work", (reads, writes, s))
                    heapq.heappush(queue, (now + d, e, name))
                    trace.work.append((name, what, s, i, now, now + d))
                    break
                elif op[0] == "sync":  # bar.sync 1, 128: the producer threads meet
                    at_sync.append(name)
                    if len(at_sync) == producers:
                        for other in at_sync:
                            if other != name:
                                heapq.heappush(queue, (now, next(order), other))
                        at_sync.clear()
                        continue
                    break
    except _Race as race:
        trace.error = f"race at t = {now:.2f}: {race}"
        return trace
    except ModelError as err:
        trace.error = f"at t = {now:.2f}: {err}"
        return trace
    trace.end = now
    stuck = [n for n in threads if n not in done]
    if stuck:
        what = "; ".join(
            f"{n} waits on {parked[n][0]} for parity {parked[n][1]} (its phase parity is {bars[parked[n][0]].parity})"
            if n in parked
            else f"{n} waits at the producers' named barrier"
            for n in stuck[:3]
        )
        trace.error = f"deadlock at t = {now:.2f}: {what}"
    return trace


def draw_pipeline_timeline(trace: Trace, axes=None):
    """Draw a :func:`simulate_ws` trace (chapter 6). Top: what the TMA engine (weights, activations),
    the producer and the consumers do over time, each box K step ``s`` in stage ``i``. Below: the
    parity bit of every stage's ``full`` and ``empty`` barrier over time, and under each the waits
    on it (a bar from where a wait began to where it passed, labelled with the parity it waited for;
    producer blue, consumers red)."""
    import matplotlib.pyplot as plt

    stages = trace.stages
    if axes is None:
        _, axes = plt.subplots(2, 1, figsize=(11, 7), sharex=True, gridspec_kw={"height_ratios": [1.1, 2]})
    colors = plt.get_cmap("tab10")
    workers = sorted({w[0] for w in trace.work if w[0] != "TMA"}, key=lambda n: (n.split()[0] != "producer", n))
    lanes = ["TMA: weights", "TMA: activations"] + workers
    ax = axes[0]
    for thread, what, s, i, t0, t1 in trace.work:
        lane = {"raw copy": "TMA: weights", "act copy": "TMA: activations"}.get(what, thread)
        y, h = lanes.index(lane), 0.7
        if lane.startswith("TMA"):  # copies of different stages may overlap in time: a sub-row per stage
            h = 0.7 / stages
            y += (i - (stages - 1) / 2) * h
        ax.barh(y, t1 - t0, left=t0, height=h, color=colors(s % 10), alpha=0.8 if what == "unpack" else 0.45)
        ax.barh(y, t1 - t0, left=t0, height=h, fill=False, edgecolor="black", lw=0.5)
        ax.text((t0 + t1) / 2, y, f"s{s}/{i}", ha="center", va="center", fontsize=7)
    names = {"producer": "producer warpgroup", "consumer": "consumer warpgroup"}
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(
        [names[n.split()[0]] + ("" if n.startswith("producer") else f" {n.split()[1]}") if " " in n and
         not n.startswith("TMA") else n for n in lanes], fontsize=8,
    )  # fmt: skip
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_title(f"{trace.steps} K steps through {stages} stages; a box is s<step>/<stage>", fontsize=9)
    ax = axes[1]
    bars = [f"full[{i}]" for i in range(stages)] + [f"empty[{i}]" for i in range(stages)]
    end = trace.end
    rows = len(bars)
    for y, name in enumerate(bars):
        base = (rows - 1 - y) * 1.6  # the first barrier on top
        bar = trace.barriers[name]
        ts, ps = [0.0], [0]
        for t, completed in bar.history:
            ts.append(t)
            ps.append(completed & 1)
        ts.append(end)
        ps.append(ps[-1])
        ax.step(ts, [base + 0.55 + 0.6 * p for p in ps], where="post", color="black", lw=1.2)
        for t, completed in bar.history:
            ax.text(t + 0.05, base + 1.2, f"phase {completed - 1} done", fontsize=6, color="dimgray")
        for thread, bname, parity, since, passed in trace.waits:
            if bname != name or thread not in ("producer 0", "consumer 0"):
                continue  # the other threads' waits on the same barrier pass at the same moment
            c = "tab:blue" if thread.startswith("producer") else "tab:red"
            ax.plot([since, passed], [base + 0.2] * 2, color=c, lw=2.5, solid_capstyle="butt")
            ax.plot([passed], [base + 0.2], marker="o", color=c, ms=3)
            ax.text(passed + 0.05, base + 0.05, f"wait p={parity}", fontsize=6, color=c, va="top")
    ax.set_yticks([(rows - 1 - y) * 1.6 + 0.85 for y in range(rows)])
    ax.set_yticklabels([f"{n}: parity 0 / 1" for n in bars], fontsize=8)
    ax.set_ylim(-0.5, rows * 1.6)
    ax.set_xlim(0, end * 1.02)
    ax.set_xlabel("time (model units); under each barrier its waits: blue the producer's, red the consumers'")
    return axes
